// dsrun: runs a plan on the CPU or a GPU through libdsrt's C API. Inputs come from
// TensorProto .pb files (the ONNX node-test layout) or from token ids on the command line;
// outputs are printed, written as .pb, or compared with expected .pb files.
#include "common/CommandLine.h"
#include "common/CpuThreads.h"
#include "dsrun/Generation.h"
#include "dsrt/dsrt.h"
#include "io/TensorProto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace {

using dsrun::check;
using dsrun::die;
using dsrun::kSamplingFlags;
using dsrun::printGeneration;
using dsrun::Stream;
using dsrun::streamToken;
using dsrun::withModelDefaults;

struct Options {
  std::string plan, program = "forward", inputDir, outputDir, expectDir;
  std::vector<std::string> inputFiles;
  std::vector<int64_t> tokens;
  int rank = 0;
  std::string ranks;  // "", "inprocess" or "mpi"
  dsrt_device device = DSRT_DEVICE_CPU;
  double rtol = 1e-4, atol = 1e-5;
  bool quiet = false;
  bool strict = false;  // --strict: dsrt_session_set_strict
  bool stats = false;   // --stats: dsrt_session_stats after the run
  // Generation (any of these selects it).
  std::vector<std::string> prompts;                 // text, through the plan's tokenizer
  std::vector<std::vector<int64_t>> promptIds;
  bool generate = false;
  dsrt_generate_options sampling{};
  std::vector<int64_t> stops;
  // --generation-config: "auto" starts from the model's defaults (generation_config.json),
  // "none" from dsrt_generate_options_init's; the flags given override either.
  std::string generationConfig = "auto";
  std::vector<std::string> samplingGiven;  // the generation flags on the command line
  // Rank 0 alone has the requests (dsrt_generate_lead): "", "lead" or "follow".
  std::string role;
  std::string requestsFile;  // --requests: more requests, one per line ("-": stdin)
  bool quietGiven = false;   // --quiet on the command line
  bool printFollowed = false;  // a rank given --follow prints the tokens, unless --quiet
};

bool parseIdList(const std::string &text, std::vector<int64_t> &ids) {
  ids.clear();
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    char *end = nullptr;
    long long id = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      return false;
    ids.push_back(id);
  }
  return true;
}

std::vector<int64_t> parseIds(const std::string &text) {
  std::vector<int64_t> ids;
  if (!parseIdList(text, ids))
    die("'" + text + "' is not a comma-separated list of token ids");
  return ids;
}

// Where each GPU library was found, or every place it was looked for.
void listDevices() {
  int count = dsrt_cuda_device_count();
  fmt::print("cuda devices: {}", count);
  if (count == 0)
    fmt::print(" ({})", dsrt_last_error());
  fmt::print("\n");
  for (const char *library : {"libcuda", "cublasLt", "nccl"}) {
    const char *path = dsrt_gpu_library(library);
    fmt::print("{}: {}\n", library, path ? path : dsrt_last_error());
  }
}

Options parse(int argc, char **argv) {
  Options options;
  dsrt_generate_options_init(&options.sampling);
  std::vector<std::string> plans, promptIds;
  std::string device, tokens;
  bool listDevicesGiven = false, lead = false, follow = false, ignoreEos = false;
  std::string earlyStopping = "false";
  using Sign = dstools::CommandLine::Sign;
  dstools::CommandLine commandLine(
      "dsrun",
      {"dsrun PLAN [--input-dir DIR | --tokens 1,2,3] [OPTIONS]",
       "dsrun PLAN --prompt TEXT... | --prompt-ids 1,2,3... [OPTIONS]",
       "mpirun -np N dsrun PLAN --requests FILE [OPTIONS]", "dsrun --list-devices"},
      "Runs a plan on the CPU or a GPU through libdsrt's C API. Inputs come from TensorProto "
      ".pb files (the ONNX node-test layout) or token ids; outputs are printed, written as "
      ".pb, or compared with expected ones. With prompts, generates: a batch of prompts, "
      "left-padded (docs/transformer-ops.md).");
  commandLine.arguments("PLAN", plans, "the plan file (.dsp)");
  commandLine.text("--device", device, "NAME",
                   "where the plan runs: cpu (default), cuda (without a usable GPU, falls back "
                   "to the CPU and says so once on stderr) or cpu-reference (the CPU's "
                   "reference kernels, the oracle of the fast ones)");
  commandLine.text("--program", options.program, "NAME", "the program to run (default forward)");
  commandLine.integer("--rank", options.rank, "R", "the tensor-parallel rank to run (default 0)",
                      0);
  commandLine.choice("--ranks", options.ranks, {"inprocess", "mpi"}, "inprocess|mpi",
                     "all tensor-parallel ranks of the plan: threads of this process "
                     "(inprocess), or MPI processes (mpi; the default under mpirun)");
  commandLine.texts("--input", options.inputFiles, "FILE.pb",
                    "a TensorProto; bound by its name, else in order (repeatable)");
  commandLine.text("--input-dir", options.inputDir, "DIR",
                   "input_0.pb, input_1.pb, ... (the ONNX node-test layout)");
  commandLine.text("--tokens", tokens, "1,2,3",
                   "a batch of one: input_ids = the ids; attention_mask = ones and "
                   "position_ids = 0..n-1 when the program has them");
  commandLine.text("--output-dir", options.outputDir, "DIR",
                   "write output_0.pb, output_1.pb, ...");
  commandLine.text("--expect-dir", options.expectDir, "DIR",
                   "compare each output with output_N.pb there: |a - e| <= atol + rtol*|e| "
                   "(exact for integers and bools); exit 1 on a mismatch");
  commandLine.number("--rtol", options.rtol, "X", "relative tolerance of --expect-dir (1e-4)",
                     Sign::NonNegative);
  commandLine.number("--atol", options.atol, "Y", "absolute tolerance of --expect-dir (1e-5)",
                     Sign::NonNegative);
  commandLine.flag("--quiet", options.quiet, "print no outputs");
  commandLine.flag("--strict", options.strict,
                   "strict device mode: a step through the host fallback or a decode without "
                   "its CUDA graph is an error (also DSRT_STRICT_DEVICE=1)");
  commandLine.flag("--stats", options.stats,
                   "print the session's counters after the run (kernel launches, fallback "
                   "steps, graph captures and replays, bytes up and down)");
  int32_t threads = 0;
  dstools::addThreadsOption(commandLine, threads);
  commandLine.flag("--list-devices", listDevicesGiven,
                   "print 'cuda devices: N', with the reason when N is 0, then the path of "
                   "libcuda, cublasLt and nccl, or 'not found (tried: ...)'");

  commandLine.group("Generation");
  commandLine.texts("--prompt", options.prompts, "TEXT",
                    "a prompt as text, encoded by the tokenizer embedded in the plan; prints "
                    "text (repeatable: a batch)");
  commandLine.texts("--prompt-ids", promptIds, "1,2,3",
                    "a prompt as token ids; prints 'sequence N: ids...' and the finish reason "
                    "(repeatable: a batch)");
  commandLine.integer("--max-new-tokens", options.sampling.max_new_tokens, "N",
                      "tokens to generate at most (default: the model's, else 32)");
  commandLine.number("--temperature", options.sampling.temperature, "T",
                     "sampling temperature (default: the model's, else 0: greedy)");
  commandLine.integer("--top-k", options.sampling.top_k, "K",
                      "sample among the K likeliest tokens (default: the model's, else 0: no limit)");
  commandLine.number("--top-p", options.sampling.top_p, "P",
                     "sample within the top-p probability mass (default: the model's, else 1)");
  commandLine.integer("--seed", options.sampling.seed, "S", "the sampler's seed");
  commandLine.integers("--stop", options.stops, "ID",
                       "also stop at this token (repeatable; the plan's EOS tokens stop too)");
  commandLine.flag("--ignore-eos", ignoreEos, "the plan's EOS tokens do not stop generation");
  commandLine.integer("--num-beams", options.sampling.num_beams, "K",
                      "beam search over K sequences per prompt, as transformers' num_beams "
                      "(default: the model's, else 1: none; each prompt takes K of the plan's "
                      "max_batch)", 1, 256);
  commandLine.number("--length-penalty", options.sampling.length_penalty, "L",
                     "beam search's score: summed log-probability / length ** L (default: the "
                     "model's, else 1)");
  commandLine.choice("--early-stopping", earlyStopping, {"false", "true", "never"}, "WHEN",
                     "when beam search stops (transformers' early_stopping; default: the "
                     "model's, else false)");
  commandLine.number("--repetition-penalty", options.sampling.repetition_penalty, "P",
                     "transformers' repetition_penalty: the sequence's tokens' logits / P "
                     "(x P when negative; default: the model's, else 1: none)");
  commandLine.integer("--no-repeat-ngram-size", options.sampling.no_repeat_ngram_size, "N",
                      "no N-gram of the sequence twice (default: the model's, else 0: none)", 0);
  commandLine.integer("--min-new-tokens", options.sampling.min_new_tokens, "N",
                      "no stop token before N new tokens (default: the model's, else 0)", 0);
  commandLine.integer("--forced-bos", options.sampling.forced_bos_token_id, "ID",
                      "the first token after a one-token start (BART's forced_bos_token_id)");
  commandLine.integer("--forced-eos", options.sampling.forced_eos_token_id, "ID",
                      "the last of --max-new-tokens (transformers' forced_eos_token_id)");
  commandLine.choice("--generation-config", options.generationConfig, {"auto", "none"}, "FROM",
                     "auto (default): what these flags leave out is the model's "
                     "(generation_config.json, read as transformers' generate reads it: "
                     "beams, sampling, processors, lengths); none: dsrun's own defaults");

  commandLine.group("Rank 0 alone has the requests (MPI ranks, docs/reliability.md)");
  commandLine.flag("--lead", lead,
                   "rank 0 generates the request of the command line, then those of "
                   "--requests, and the other ranks follow; each request's output begins with "
                   "'request K:'. Other ranks given --lead follow quietly (their prompts "
                   "unused), so one command line serves every rank");
  commandLine.flag("--follow", follow,
                   "a rank other than 0 generates rank 0's requests until it finishes, and "
                   "prints each one's tokens as ids, as rank 0's --prompt-ids (--quiet: "
                   "nothing); prompts and sampling options come from rank 0");
  commandLine.text("--requests", options.requestsFile, "FILE",
                   "one request per line, after the command line's: its prompts' "
                   "comma-separated token ids, prompts separated by spaces ('#' lines and "
                   "empty ones skipped); '-' reads stdin, which mpirun gives rank 0; implies "
                   "--lead");
  commandLine.notes("For example:\n"
                    "  mpirun -np 1 dsrun tp.dsp --lead --prompt-ids 1,2,3 [--requests FILE] "
                    "...\n"
                    "       : -np 1 dsrun tp.dsp --follow\n"
                    "  mpirun -np 2 dsrun tp.dsp --requests FILE [--max-new-tokens N] ...\n");
  commandLine.parse(argc, argv);
  dstools::applyThreadsOption(commandLine, threads);
  for (const char *flag : kSamplingFlags)
    if (commandLine.given(flag))
      options.samplingGiven.push_back(flag);

  if (listDevicesGiven) {
    listDevices();
    std::exit(0);
  }
  if (!device.empty() && dsrt_device_from_name(device.c_str(), &options.device) != DSRT_OK)
    commandLine.usageError(std::string("--device: ") + dsrt_last_error());
  if (!tokens.empty())
    options.tokens = parseIds(tokens);
  for (const std::string &ids : promptIds)
    options.promptIds.push_back(parseIds(ids));
  options.sampling.ignore_eos = ignoreEos ? 1 : 0;
  options.sampling.early_stopping = earlyStopping == "true" ? 1 : earlyStopping == "never" ? 2 : 0;
  options.quietGiven = options.quiet;
  if (lead && follow)
    commandLine.usageError("give --lead (rank 0) or --follow (the other ranks), not both");
  options.role = lead ? "lead" : follow ? "follow" : "";
  options.plan = commandLine.single(plans, "plan");
  bool prompted = !options.prompts.empty() || !options.promptIds.empty();
  options.generate = prompted || !options.role.empty() || !options.requestsFile.empty();
  if (options.role == "follow" && (prompted || !options.requestsFile.empty()))
    commandLine.usageError("--follow takes its requests from rank 0: give the prompts and "
                           "--requests to rank 0's --lead");
  if (options.role == "lead" && !prompted && options.requestsFile.empty())
    commandLine.usageError("--lead needs a request: --prompt, --prompt-ids or --requests");
  if (!options.prompts.empty() && !options.promptIds.empty())
    commandLine.usageError("give prompts as text (--prompt) or as ids (--prompt-ids), not both");
  // Under mpirun every process is a rank.
  if (options.ranks.empty() && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")))
    options.ranks = "mpi";
  return options;
}

std::vector<dsrt::io::NamedTensor> loadInputs(const Options &options) {
  std::vector<std::string> files = options.inputFiles;
  if (!options.inputDir.empty())
    for (int i = 0;; ++i) {
      std::string path = options.inputDir + "/input_" + std::to_string(i) + ".pb";
      if (!std::filesystem::exists(path))
        break;
      files.push_back(path);
    }
  std::vector<dsrt::io::NamedTensor> inputs;
  for (const std::string &file : files) {
    dsrt::io::NamedTensor tensor;
    dsrt::Status status = dsrt::io::readTensorProto(file, tensor);
    if (!status.isOk())
      die(status.message());
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

double valueAt(const dsrt::TensorRef &t, int64_t i) {
  const uint8_t *p = static_cast<const uint8_t *>(t.data);
  auto get = [&](auto v) {
    std::memcpy(&v, p + i * sizeof v, sizeof v);
    return static_cast<double>(v);
  };
  switch (t.dtype) {
  case dsrt::DType::F32: return get(float());
  case dsrt::DType::F64: return get(double());
  case dsrt::DType::F16: { uint16_t b; std::memcpy(&b, p + 2 * i, 2); return dsrt::halfToFloat(b); }
  case dsrt::DType::BF16: { uint16_t b; std::memcpy(&b, p + 2 * i, 2); return dsrt::bfloat16ToFloat(b); }
  case dsrt::DType::I64: return get(int64_t());
  case dsrt::DType::I32: return get(int32_t());
  case dsrt::DType::I16: return get(int16_t());
  case dsrt::DType::I8: return get(int8_t());
  case dsrt::DType::U8: case dsrt::DType::Bool: return get(uint8_t());
  case dsrt::DType::U16: return get(uint16_t());
  case dsrt::DType::U32: return get(uint32_t());
  case dsrt::DType::U64: return get(uint64_t());
  default: return 0;
  }
}

void print(const std::string &name, const dsrt::TensorRef &t) {
  std::cout << name << ": " << dsrt::dtypeName(t.dtype) << " " << dsrt::shapeString(t.shape);
  int64_t n = t.elements();
  std::cout << " [";
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i)
    std::cout << (i ? ", " : "") << valueAt(t, i);
  std::cout << (n > 8 ? ", ...]" : "]") << "\n";
}

// Returns whether `actual` matches `expected` within the tolerances.
bool compare(const std::string &name, const dsrt::TensorRef &actual,
             const dsrt::TensorRef &expected, const Options &options) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    std::cout << name << ": MISMATCH: got " << dsrt::dtypeName(actual.dtype) << " "
              << dsrt::shapeString(actual.shape) << ", expected "
              << dsrt::dtypeName(expected.dtype) << " " << dsrt::shapeString(expected.shape)
              << "\n";
    return false;
  }
  bool exact = !dsrt::isFloat(actual.dtype);
  double worst = 0, worstAllowed = 0;
  int64_t bad = 0, firstBad = -1;
  for (int64_t i = 0; i < actual.elements(); ++i) {
    double a = valueAt(actual, i), e = valueAt(expected, i);
    // NaNs and infinities of one sign agree (a masked score is -inf on both sides).
    if ((std::isnan(a) && std::isnan(e)) || (std::isinf(e) && a == e))
      continue;
    double diff = std::fabs(a - e), allowed = exact ? 0 : options.atol + options.rtol * std::fabs(e);
    if (!(diff <= allowed) || (std::isinf(e) && a != e)) {
      if (firstBad < 0)
        firstBad = i;
      ++bad;
    }
    if (diff > worst || std::isnan(diff)) {
      worst = diff;
      worstAllowed = allowed;
    }
  }
  std::cout << name << ": " << (bad ? "MISMATCH" : "ok") << " (max abs diff " << worst;
  if (bad)
    std::cout << ", " << bad << " elements out of tolerance, first at " << firstBad
              << ": got " << valueAt(actual, firstBad) << ", expected "
              << valueAt(expected, firstBad) << ", allowed " << worstAllowed;
  std::cout << ")\n";
  return bad == 0;
}

} // namespace

// One rank's session, or an in-process group of every rank, behind one interface.
struct Runner {
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;
  bool printer = true;  // rank 0 prints; other MPI ranks stay quiet
  bool lead = false;    // rank 0 sends each request to ranks that follow it
  // An encoder-decoder (text2text: T5, BART) answers its prompt rather than continuing it,
  // so its text is printed without the prompt before it.
  bool textToText = false;

  dsrt_status setInput(const char *program, size_t index, dsrt_dtype dtype,
                       const int64_t *shape, size_t rank, const void *data) {
    return group ? dsrt_group_set_input(group, program, index, dtype, shape, rank, data)
                 : dsrt_session_set_input(session, program, index, dtype, shape, rank, data);
  }
  dsrt_status run(const char *program) {
    return group ? dsrt_group_run(group, program) : dsrt_session_run(session, program);
  }
  dsrt_status output(const char *program, size_t index, dsrt_tensor *out) {
    return group ? dsrt_group_get_output(group, program, index, out)
                 : dsrt_session_get_output(session, program, index, out);
  }
  dsrt_status generate(size_t count, const int64_t *const *prompts, const size_t *lengths,
                       const dsrt_generate_options *options, dsrt_generation **out) {
    return group  ? dsrt_group_generate(group, count, prompts, lengths, options, out)
           : lead ? dsrt_generate_lead(session, count, prompts, lengths, options, out)
                  : dsrt_generate(session, count, prompts, lengths, options, out);
  }
  dsrt_status setStrict() {
    return group ? dsrt_group_set_strict(group, 1) : dsrt_session_set_strict(session, 1);
  }
  // The counters, summed over the ranks of an in-process group.
  void printStats() {
    dsrt_stats stats;
    dsrt_status status = group ? dsrt_group_stats(group, &stats) : dsrt_session_stats(session, &stats);
    if (status != DSRT_OK) {
      fmt::print(stderr, "dsrun: error: stats: {}\n", dsrt_last_error());
      return;
    }
    std::cout << fmt::format("stats:\n"
                             "  kernel launches {}\n"
                             "  fallback steps {}\n"
                             "  graph captures {}\n"
                             "  graph replays {}\n"
                             "  bytes uploaded {}\n"
                             "  bytes downloaded {}\n",
                             stats.kernel_launches, stats.fallback_steps, stats.graph_captures,
                             stats.graph_replays, stats.bytes_uploaded, stats.bytes_downloaded);
  }
  Runner() = default;
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;
  ~Runner() {
    dsrt_group_destroy(group);
    dsrt_session_destroy(session);
  }
};

// Prints one generation: as text where the prompts were text (after the stream of a lone
// prompt, only its line's end), else each sequence's ids and finish reason.
// One request: `prompts` as ids, `texts` where they came as text.
void generateAndPrint(const Options &options, Runner &runner,
                      const std::vector<std::vector<int64_t>> &prompts,
                      const dsrt_tokenizer *tokenizer, const std::vector<std::string> &texts) {
  std::vector<const int64_t *> pointers;
  std::vector<size_t> lengths;
  for (const auto &prompt : prompts) {
    pointers.push_back(prompt.data());
    lengths.push_back(prompt.size());
  }
  dsrt_generate_options sampling = options.sampling;
  sampling.stop_tokens = options.stops.data();
  sampling.stop_token_count = options.stops.size();
  Stream stream;
  if (runner.printer && tokenizer && texts.size() == 1) {
    stream.tokenizer = tokenizer;
    sampling.on_token = streamToken;
    sampling.user_data = &stream;
    if (!runner.textToText)
      std::cout << texts[0] << std::flush;
  }
  dsrt_generation *generation = nullptr;
  check(runner.generate(prompts.size(), pointers.data(), lengths.data(), &sampling, &generation),
        "generation failed");
  if (runner.printer)
    printGeneration(generation, tokenizer, texts, stream.tokenizer ? &stream : nullptr,
                    !runner.textToText);
  dsrt_generation_free(generation);
}

// Rank 0's requests, the command line's and then those of --requests, for ranks that follow.
void leadRequests(const Options &options, Runner &runner,
                  const std::vector<std::vector<int64_t>> &prompts,
                  const dsrt_tokenizer *tokenizer) {
  size_t request = 0;
  auto lead = [&](const std::vector<std::vector<int64_t>> &batch,
                  const std::vector<std::string> &texts) {
    std::cout << "request " << request++ << ":\n";
    generateAndPrint(options, runner, batch, tokenizer, texts);
  };
  // The followers wait for a request or the end: tell them before stopping.
  auto finishAndDie = [&](const std::string &message) {
    if (runner.session)
      dsrt_generate_finish(runner.session);
    die(message);
  };
  if (!prompts.empty())
    lead(prompts, options.prompts);
  if (!options.requestsFile.empty()) {
    std::ifstream file;
    std::istream *in = &std::cin;
    if (options.requestsFile != "-") {
      file.open(options.requestsFile);
      if (!file)
        finishAndDie("cannot read the requests in '" + options.requestsFile + "'");
      in = &file;
    }
    std::string line;
    for (size_t number = 1; std::getline(*in, line); ++number) {
      std::stringstream words(line);
      std::string word;
      std::vector<std::vector<int64_t>> batch;
      while (words >> word && word[0] != '#') {
        batch.emplace_back();
        if (!parseIdList(word, batch.back()))
          finishAndDie(options.requestsFile + ":" + std::to_string(number) + ": '" + word +
                       "' is not a comma-separated list of token ids");
      }
      if (!batch.empty())
        lead(batch, {});
    }
  }
  if (runner.session)
    check(dsrt_generate_finish(runner.session), "cannot tell the other ranks to finish");
}

// A rank other than 0: rank 0's requests, until it finishes.
void followRequests(Runner &runner, bool print) {
  for (size_t request = 0;; ++request) {
    dsrt_generation *generation = nullptr;
    dsrt_status status = dsrt_generate_follow(runner.session, &generation);
    if (status == DSRT_LEADER_FINISHED)
      return;
    check(status, "generation failed");
    if (print) {
      std::cout << "request " << request << ":\n";
      printGeneration(generation, nullptr, {}, nullptr, true);
    }
    dsrt_generation_free(generation);
  }
}

int runGeneration(Options &options, dsrt_plan *plan, Runner &runner) {
  if (options.role == "follow") {
    followRequests(runner, options.printFollowed);
    return 0;
  }
  dsrt_tokenizer *tokenizer = nullptr;
  std::vector<std::vector<int64_t>> prompts = options.promptIds;
  if (!options.prompts.empty()) {
    check(dsrt_tokenizer_from_plan(plan, &tokenizer), "--prompt needs a tokenizer");
    for (const std::string &text : options.prompts) {
      int64_t *ids = nullptr;
      size_t count = 0;
      check(dsrt_tokenizer_encode(tokenizer, text.data(), text.size(), 1, &ids, &count),
            "cannot encode the prompt");
      prompts.emplace_back(ids, ids + count);
      dsrt_free(ids);
    }
  }
  if (options.role == "lead")
    leadRequests(options, runner, prompts, tokenizer);
  else
    generateAndPrint(options, runner, prompts, tokenizer, options.prompts);
  dsrt_tokenizer_free(tokenizer);
  return 0;
}

int main(int argc, char **argv) {
  Options options = parse(argc, argv);
  dsrt_plan *plan = nullptr;
  check(dsrt_plan_open(options.plan.c_str(), &plan), "cannot open the plan");
  if (options.generate)
    options.sampling = withModelDefaults(plan, options.generationConfig == "auto",
                                         options.sampling, options.samplingGiven);
  Runner runner;
  size_t encodeInputs = 0;
  runner.textToText = dsrt_plan_io_count(plan, "encode", 0, &encodeInputs) == DSRT_OK;
  int planRanks = dsrt_plan_rank_count(plan);
  if (options.ranks == "inprocess") {
    check(dsrt_group_create(plan, options.device, &runner.group), "cannot create the ranks");
  } else if (options.ranks == "mpi") {
    check(dsrt_session_create_mpi(plan, options.device, &runner.session),
          "cannot create this MPI rank's session");
    runner.printer = dsrt_session_rank(runner.session) == 0;
  } else {
    if (planRanks > 1)
      die("the plan has " + std::to_string(planRanks) + " tensor-parallel ranks: run them "
          "together with --ranks inprocess, or mpirun -np " + std::to_string(planRanks) +
          " dsrun ...");
    check(dsrt_session_create(plan, options.rank, options.device, &runner.session),
          "cannot create a session");
  }
  // --lead or --requests on every rank: rank 0 leads and the others follow, so that one
  // command line serves every rank (and mpirun gives stdin to rank 0 alone).
  bool printFollowed = options.role == "follow" && !options.quietGiven;
  if (!runner.printer && (options.role == "lead" || !options.requestsFile.empty()))
    options.role = "follow";
  else if (options.role.empty() && !options.requestsFile.empty())
    options.role = "lead";
  if (options.role == "follow" && runner.group)
    die("--follow is for MPI ranks other than 0; --ranks inprocess runs every rank of a "
        "request itself");
  if (options.role == "follow" && runner.printer) {
    // The ranks that follow would wait for rank 0's requests forever.
    if (runner.session)
      dsrt_generate_finish(runner.session);
    die("--follow on rank 0: rank 0 leads (--lead, --requests) and the other ranks follow");
  }
  options.printFollowed = printFollowed;
  runner.lead = options.role == "lead";
  if (!runner.printer)
    options.quiet = true;
  if (options.strict)
    check(runner.setStrict(), "--strict");
  if (options.generate) {
    int code = runGeneration(options, plan, runner);
    if (options.stats && runner.printer)
      runner.printStats();
    dsrt_plan_close(plan);
    return code;
  }
  const char *program = options.program.c_str();
  size_t inputCount = 0, outputCount = 0;
  check(dsrt_plan_io_count(plan, program, 0, &inputCount), "program");
  check(dsrt_plan_io_count(plan, program, 1, &outputCount), "program");

  std::vector<std::string> inputNames;
  std::vector<dsrt::DType> inputDtypes;
  for (size_t i = 0; i < inputCount; ++i) {
    dsrt_tensor info;
    check(dsrt_plan_io_info(plan, program, 0, i, &info), "input");
    inputNames.push_back(info.name);
    inputDtypes.push_back(static_cast<dsrt::DType>(info.dtype));
  }
  auto indexOf = [&](const std::string &name) -> long {
    auto it = std::find(inputNames.begin(), inputNames.end(), name);
    return it == inputNames.end() ? -1 : it - inputNames.begin();
  };

  std::vector<dsrt::io::NamedTensor> inputs = loadInputs(options);
  if (!options.tokens.empty()) {
    int64_t n = options.tokens.size();
    // In the dtype the plan declares (int64 in most exports; int32 ids, bool or float
    // masks in some).
    auto add = [&](const std::string &name, auto fill) {
      long index = indexOf(name);
      dsrt::DType dtype = index >= 0 ? inputDtypes[index] : dsrt::DType::I64;
      std::vector<int64_t> values(n);
      for (int64_t i = 0; i < n; ++i)
        values[i] = fill(i);
      dsrt::io::NamedTensor t{name, dsrt::OwnedTensor(dtype, {1, n})};
      size_t bad = dsrt::encodeExactIntegers(values.data(), values.size(), dtype,
                                             t.tensor.storage.data());
      if (bad != values.size())
        die("input '" + name + "' is declared " + dsrt::dtypeName(dtype) +
            ", which cannot hold the value " + std::to_string(values[bad]) + " exactly");
      inputs.push_back(std::move(t));
    };
    add("input_ids", [&](int64_t i) { return options.tokens[i]; });
    if (indexOf("attention_mask") >= 0)
      add("attention_mask", [](int64_t) { return int64_t(1); });
    if (indexOf("position_ids") >= 0)
      add("position_ids", [](int64_t i) { return i; });
  }
  std::vector<bool> bound(inputCount, false);
  for (size_t k = 0; k < inputs.size(); ++k) {
    long index = indexOf(inputs[k].name);
    if (index < 0 && inputs[k].name.empty() && k < inputCount)
      index = static_cast<long>(k);
    if (index < 0)
      die("the program '" + options.program + "' has no input named '" + inputs[k].name + "'");
    const dsrt::OwnedTensor &t = inputs[k].tensor;
    check(runner.setInput(program, index, static_cast<dsrt_dtype>(t.dtype),
                                 t.shape.data(), t.shape.size(), t.storage.data()),
          "input '" + inputNames[index] + "'");
    bound[index] = true;
  }
  for (size_t i = 0; i < inputCount; ++i)
    if (!bound[i])
      die("no value for input '" + inputNames[i] + "'");

  check(runner.run(program), "run failed");

  bool allMatch = true;
  for (size_t o = 0; o < outputCount; ++o) {
    dsrt_tensor out;
    check(runner.output(program, o, &out), "output");
    dsrt::TensorRef ref{static_cast<dsrt::DType>(out.dtype),
                        dsrt::Shape(out.shape, out.shape + out.rank), const_cast<void *>(out.data)};
    if (!options.quiet && options.expectDir.empty())
      print(out.name, ref);
    if (!options.outputDir.empty()) {
      dsrt::Status status = dsrt::io::writeTensorProto(
          options.outputDir + "/output_" + std::to_string(o) + ".pb", out.name, ref);
      if (!status.isOk())
        die(status.message());
    }
    if (!options.expectDir.empty()) {
      dsrt::io::NamedTensor expected;
      dsrt::Status status = dsrt::io::readTensorProto(
          options.expectDir + "/output_" + std::to_string(o) + ".pb", expected);
      if (!status.isOk())
        die(status.message());
      allMatch &= compare(out.name, ref, expected.tensor.ref(), options);
    }
  }
  if (options.stats && runner.printer)
    runner.printStats();
  dsrt_plan_close(plan);  // the runner's sessions keep what they use of it
  return allMatch ? 0 : 1;
}
