// generate_cpp: the C++ wrapper (dsrt/dsrt.hpp) version of `generate`, for a batch.
//
//   generate_cpp PLAN (--prompt TEXT | --ids 1,2,3)... [--max-new-tokens N] [--ignore-eos]
//
// Streams every token as "[sequence] id" (and its text when the plan has a tokenizer), then
// prints "generated ids [i]: ..." per prompt, like `generate`. Exits 1 when libdsrt throws
// dsrt::Error, or when the streamed tokens are not the returned ones.
#include <dsrt/dsrt.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int64_t> parseIds(const std::string &list) {
  std::vector<int64_t> ids;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    ids.push_back(std::stoll(item, &used));
    if (used != item.size())
      throw std::invalid_argument("not an integer: " + item);
  }
  if (ids.empty())
    throw std::invalid_argument("no ids");
  return ids;
}

std::string join(const std::vector<int64_t> &ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

int usage() {
  std::cerr << "usage: generate_cpp PLAN (--prompt TEXT | --ids 1,2,3)... "
               "[--max-new-tokens N] [--ignore-eos]\n";
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath;
  std::vector<std::pair<bool, std::string>> promptArgs; // (is text, value)
  dsrt::GenerateOptions options;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--ignore-eos") {
        options.ignoreEos = true;
      } else if ((arg == "--ids" || arg == "--prompt" || arg == "--max-new-tokens") &&
                 i + 1 < argc) {
        std::string value = argv[++i];
        if (arg == "--max-new-tokens")
          options.maxNewTokens = std::stoi(value);
        else
          promptArgs.emplace_back(arg == "--prompt", value);
      } else if (arg[0] != '-' && planPath.empty()) {
        planPath = arg;
      } else {
        return usage();
      }
    }
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return usage();
  }
  if (planPath.empty() || promptArgs.empty())
    return usage();

  try {
    dsrt::Plan plan(planPath);
    std::unique_ptr<dsrt::Tokenizer> tokenizer;
    try {
      tokenizer.reset(new dsrt::Tokenizer(dsrt::Tokenizer::fromPlan(plan)));
    } catch (const dsrt::Error &e) {
      if (e.status() != DSRT_INVALID_ARGUMENT) // the plan has no tokenizer
        throw;
    }
    std::vector<std::vector<int64_t>> prompts;
    for (const auto &p : promptArgs) {
      if (!p.first) {
        prompts.push_back(parseIds(p.second));
      } else if (tokenizer) {
        prompts.push_back(tokenizer->encode(p.second, /*addSpecial=*/true));
      } else {
        std::cerr << "error: " << planPath << " has no tokenizer; give the prompt as --ids\n";
        return 2;
      }
      std::cout << "prompt ids [" << prompts.size() - 1 << "]: " << join(prompts.back())
                << "\n";
    }

    dsrt::Session session(plan);
    std::vector<std::vector<int64_t>> streamed(prompts.size());
    options.onToken = [&](size_t sequence, int64_t token) {
      streamed.at(sequence).push_back(token);
      std::cout << "[" << sequence << "] " << token;
      if (tokenizer)
        std::cout << " '" << tokenizer->decode({token}) << "'";
      std::cout << std::endl;
      return false;
    };
    std::vector<std::vector<int64_t>> generated = session.generate(prompts, options);

    int rc = 0;
    for (size_t s = 0; s < generated.size(); ++s) {
      std::cout << "generated ids [" << s << "]: " << join(generated[s]) << "\n";
      if (tokenizer)
        std::cout << "text [" << s << "]: " << tokenizer->decode(generated[s], true) << "\n";
      if (generated[s] != streamed[s]) {
        std::cerr << "error: sequence " << s << " streamed " << join(streamed[s])
                  << " but returned " << join(generated[s]) << "\n";
        rc = 1;
      }
    }
    return rc;
  } catch (const dsrt::Error &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
