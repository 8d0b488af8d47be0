// Checks of dsrt/dsrt.hpp beyond what examples/generate uses, on a compiled plan:
// finish reasons, a callback that stops its sequence, an exception thrown by the callback
// reaching the caller, the tokenizer's encode/decode round trip (when the plan has one), and
// the serving engine's wrapper: streamed tokens equal to each request alone, the repetition,
// presence and frequency penalties against the same rule applied here to the prefill
// program's logits, a refused request that leaves the engine serving.
#include <dsrt/dsrt.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {
int failures = 0;

void expect(bool ok, const std::string &what) {
  std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
  failures += ok ? 0 : 1;
}

struct CallbackError {
  size_t sequence;
};

// The prefill program's last logits for `ids` (one sequence).
std::vector<float> lastLogits(dsrt::Session &session, const std::vector<int64_t> &ids) {
  const std::vector<int64_t> shape = {1, static_cast<int64_t>(ids.size())};
  std::vector<int64_t> mask(ids.size(), 1), positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    positions[i] = static_cast<int64_t>(i);
  session.setInput("prefill", 0, DSRT_I64, shape, ids.data());
  session.setInput("prefill", 1, DSRT_I64, shape, mask.data());
  session.setInput("prefill", 2, DSRT_I64, shape, positions.data());
  session.run("prefill");
  dsrt_tensor logits = session.output("prefill", 0);
  const int64_t vocab = logits.shape[logits.rank - 1];
  // [1, positions, vocab], or [1, 1, vocab] where the plan keeps the last position only.
  const int64_t rows = logits.rank >= 2 ? logits.shape[logits.rank - 2] : 1;
  const float *last = static_cast<const float *>(logits.data) + (rows - 1) * vocab;
  return std::vector<float>(last, last + vocab);
}

// vLLM's rule, written here independently of the library: the repetition penalty on every
// token of the prompt and the output, then presence and frequency on the output's.
size_t penalisedArgmax(std::vector<float> logits, const std::vector<int64_t> &prompt,
                       const std::vector<int64_t> &output, float repetition, float presence,
                       float frequency) {
  std::map<int64_t, int> counts;
  for (int64_t token : output)
    ++counts[token];
  std::vector<int64_t> seen(prompt);
  seen.insert(seen.end(), output.begin(), output.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int64_t token : seen)
    logits[token] = logits[token] > 0 ? logits[token] / repetition : logits[token] * repetition;
  for (const auto &entry : counts)
    logits[entry.first] -= presence + frequency * entry.second;
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: dsrt_wrapper_check PLAN\n";
    return 2;
  }
  try {
    dsrt::Plan plan(argv[1]);
    dsrt::Session session(plan);
    const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {8}};

    dsrt::GenerateOptions options;
    options.maxNewTokens = 4;
    options.ignoreEos = true;
    dsrt::Generation all = session.generateDetailed(prompts, options);
    expect(all.count() == 2, "two sequences");
    for (size_t s = 0; s < all.count(); ++s)
      expect(all.tokens(s).size() == 4 && all.finishReason(s) == DSRT_FINISH_LENGTH,
             "sequence " + std::to_string(s) + ": 4 tokens, finish reason length");

    // Stopping sequence 1 after its first token leaves sequence 0 alone.
    options.onToken = [](size_t sequence, int64_t) { return sequence == 1; };
    dsrt::Generation stopped = session.generateDetailed(prompts, options);
    expect(stopped.tokens(0) == all.tokens(0) &&
               stopped.finishReason(0) == DSRT_FINISH_LENGTH,
           "sequence 0 unaffected by sequence 1's stop");
    expect(stopped.tokens(1) == std::vector<int64_t>{all.tokens(1)[0]} &&
               stopped.finishReason(1) == DSRT_FINISH_CALLBACK,
           "sequence 1 stopped by the callback after one token");

    // The callback's own exception type arrives, not dsrt::Error, and the session is
    // still usable afterwards.
    options.onToken = [](size_t sequence, int64_t) -> bool { throw CallbackError{sequence}; };
    bool caught = false;
    try {
      session.generate(prompts, options);
    } catch (const CallbackError &) {
      caught = true;
    }
    expect(caught, "an exception thrown by the callback is rethrown by generate");
    options.onToken = nullptr;
    expect(session.generate(prompts, options) == all.sequences(),
           "the session generates the same after the exception");

    // An error of the library arrives as dsrt::Error with the status.
    dsrt::GenerateOptions tooLong;
    tooLong.maxNewTokens = 1 << 20;
    try {
      session.generate(prompts, tooLong);
      expect(false, "max_new_tokens over max_seq_len throws");
    } catch (const dsrt::Error &e) {
      expect(e.status() == DSRT_INVALID_ARGUMENT && !e.message().empty(),
             std::string("max_new_tokens over max_seq_len throws: ") + e.what());
    }

    // The serving engine through the wrapper, on its own thread.
    {
      dsrt::Engine engine(plan);
      std::mutex mutex;
      std::condition_variable finished;
      std::map<int64_t, std::vector<int64_t>> streamed;
      std::map<int64_t, dsrt_request_state> states;
      std::map<int64_t, int64_t> cached;  // asked at each request's last callback
      engine.setCallback([&](int64_t request, int64_t token, dsrt_request_state state,
                             const dsrt_token_logprobs *) {
        const int64_t cachedTokens = token < 0 ? engine.cachedTokens(request) : -1;
        std::lock_guard<std::mutex> lock(mutex);
        if (token >= 0) {
          streamed[request].push_back(token);
        } else {
          states[request] = state;
          cached[request] = cachedTokens;
        }
        finished.notify_all();
      });
      engine.start();
      auto waitFor = [&](int64_t request) {
        std::unique_lock<std::mutex> lock(mutex);
        return finished.wait_for(lock, std::chrono::seconds(60),
                                 [&] { return states.count(request) > 0; });
      };
      dsrt::RequestOptions greedy;
      greedy.maxNewTokens = 4;
      greedy.ignoreEos = true;
      std::vector<int64_t> ids;
      for (const std::vector<int64_t> &prompt : prompts)
        ids.push_back(engine.addRequest(prompt, greedy));
      for (size_t s = 0; s < prompts.size(); ++s)
        expect(waitFor(ids[s]) && states[ids[s]] == DSRT_REQUEST_LENGTH &&
                   streamed[ids[s]] == all.tokens(s),
               "engine request " + std::to_string(s) + ": its streamed tokens are its alone");

      // One prompt of two 16-token blocks and a token, twice: the second request's 32
      // tokens come from the prefix cache (the engine's default blocks of 16).
      std::vector<int64_t> longPrompt(33);
      for (size_t i = 0; i < longPrompt.size(); ++i)
        longPrompt[i] = 100 + static_cast<int64_t>(i);
      const int64_t computed = engine.addRequest(longPrompt, greedy);
      expect(waitFor(computed), "the long prompt's first request finishes");
      const int64_t hit = engine.addRequest(longPrompt, greedy);
      const bool hitFinished = waitFor(hit);  // before the message below reads `cached`
      expect(hitFinished && cached[computed] == 0 && cached[hit] == 32 &&
                 streamed[hit] == streamed[computed],
             "cachedTokens at the last callback: 0, then 32 (" +
                 std::to_string(cached[computed]) + ", " + std::to_string(cached[hit]) + ")");

      dsrt::RequestOptions penalised = greedy;
      penalised.maxNewTokens = 8;
      penalised.repetitionPenalty = 1.8f;
      penalised.presencePenalty = 1.5f;
      penalised.frequencyPenalty = 1.0f;
      const std::vector<int64_t> prompt = {5, 6, 7, 5, 6};
      const int64_t id = engine.addRequest(prompt, penalised);
      expect(waitFor(id) && streamed[id].size() == 8, "a penalised request: 8 tokens");
      bool agrees = true, penaltiesMatter = false;
      std::vector<int64_t> output;
      for (int64_t token : streamed[id]) {
        std::vector<int64_t> context(prompt);
        context.insert(context.end(), output.begin(), output.end());
        const std::vector<float> logits = lastLogits(session, context);
        const size_t want = penalisedArgmax(logits, prompt, output, 1.8f, 1.5f, 1.0f);
        penaltiesMatter |= want != static_cast<size_t>(
                                       std::max_element(logits.begin(), logits.end()) -
                                       logits.begin());
        agrees &= static_cast<size_t>(token) == want;
        output.push_back(token);
      }
      expect(agrees, "the penalised tokens are the argmax of the penalised prefill logits");
      expect(penaltiesMatter, "the penalties changed at least one greedy choice");

      dsrt::RequestOptions bad = greedy;
      bad.frequencyPenalty = 3.0f;
      try {
        engine.addRequest(prompt, bad);
        expect(false, "a frequency penalty of 3 is refused");
      } catch (const dsrt::Error &e) {
        expect(e.status() == DSRT_INVALID_ARGUMENT &&
                   e.message().find("frequency_penalty") != std::string::npos,
               std::string("a frequency penalty of 3 is refused: ") + e.what());
      }
      const int64_t after = engine.addRequest(prompts[0], greedy);
      expect(waitFor(after) && streamed[after] == all.tokens(0),
             "the engine serves on after the refusal");
      engine.stop();
      const dsrt_engine_stats stats = engine.stats();
      expect(stats.running == 0 && stats.used_blocks >= 0, "no request left running");
    }

    try {
      dsrt::Tokenizer tokenizer = dsrt::Tokenizer::fromPlan(plan);
      const std::string text = "Hello world, 123";
      std::vector<int64_t> ids = tokenizer.encode(text);
      expect(!ids.empty() && tokenizer.decode(ids) == text,
             "tokenizer: '" + tokenizer.decode(ids) + "' round-trips");
    } catch (const dsrt::Error &e) {
      expect(e.status() == DSRT_INVALID_ARGUMENT,
             std::string("the plan has no tokenizer: ") + e.what());
    }
  } catch (const dsrt::Error &e) {
    std::cerr << "unexpected dsrt::Error: " << e.what() << "\n";
    return 1;
  }
  return failures ? 1 : 0;
}
