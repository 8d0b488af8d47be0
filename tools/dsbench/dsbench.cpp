// dsbench: latency and bandwidth of a plan's prefill and decode programs through libdsrt's
// C API, on the CPU or a GPU. Decode is bound by reading the weights once per step, so the
// headline is the achieved weight bandwidth next to the copy bandwidth the same session
// measures on its device: how close to the roofline a step gets.
#include "Serve.h"
#include "common/CommandLine.h"
#include "common/CpuThreads.h"
#include "dsrt/dsrt.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace dsbench {

void die(const std::string &message) { dstools::fail("dsbench", message, 2); }

void check(dsrt_status status, const std::string &what) {
  if (status != DSRT_OK)
    die(what + ": " + dsrt_last_error());
}

} // namespace dsbench

namespace {

struct Options {
  std::string plan;
  dsrt_device device = DSRT_DEVICE_CPU;
  bool inProcessRanks = false;
  int batch = 1, promptLength = 32, newTokens = 32, warmup = 2, iterations = 5;
  uint64_t copyBytes = 0;  // 0: 1 GiB on a GPU, 256 MiB on the CPU
  bool json = false;
  bool strict = false;  // --strict: dsrt_session_set_strict
  bool stats = false;   // --stats: the counters in the table (always in --json)
};

using dsbench::check;
using dsbench::die;

Options parse(int argc, char **argv) {
  Options options;
  std::vector<std::string> plans;
  std::string device, ranks;
  dstools::CommandLine commandLine(
      "dsbench",
      {"dsbench PLAN [--device NAME] [--batch B] [--new-tokens N] [OPTIONS]",
       "dsbench serve PLAN [OPTIONS]   (the serving engine under load)"},
      "Latency and bandwidth of a plan's prefill and decode programs. Each of W + I "
      "iterations runs `prefill` on a B x P prompt of random token ids (fixed seed) and then "
      "N steps of `decode`, each timed alone; the first W are discarded. Weight bandwidth = "
      "the weight bytes one decode step reads (the largest rank's; not the embedding tables, "
      "of which a step reads a row per token) / the average decode step; its fraction is of "
      "the copy bandwidth (bytes read + written per second) measured in this process.");
  commandLine.arguments("PLAN", plans, "the plan file (.dsp)");
  commandLine.text("--device", device, "NAME",
                   "where the plan runs: cpu (default), cuda or cpu-reference");
  commandLine.integer("--batch", options.batch, "B", "sequences per step (default 1)", 1,
                      1000000);
  commandLine.integer("--prompt-len", options.promptLength, "P",
                      "prompt tokens per sequence (default 32)", 1, 1000000);
  commandLine.integer("--new-tokens", options.newTokens, "N", "decode steps (default 32)", 1,
                      1000000);
  commandLine.integer("--warmup", options.warmup, "W",
                      "iterations run first and discarded (default 2)", 0, 1000000);
  commandLine.integer("--iterations", options.iterations, "I",
                      "iterations measured (default 5)", 1, 1000000);
  commandLine.choice("--ranks", ranks, {"inprocess"}, "inprocess",
                     "every tensor-parallel rank as a thread of this process");
  commandLine.integer("--copy-bytes", options.copyBytes, "BYTES",
                      "bytes the copy-bandwidth probe moves (default 1 GiB on a GPU, 256 MiB "
                      "on the CPU)");
  commandLine.flag("--strict", options.strict,
                   "strict device mode: a step through the host fallback or a decode without "
                   "its CUDA graph is an error (also DSRT_STRICT_DEVICE=1)");
  commandLine.flag("--stats", options.stats,
                   "the session's counters after the benchmark (kernel launches, fallback "
                   "steps, graph captures and replays, bytes up and down; summed over the "
                   "ranks); --json always has them under \"stats\"");
  commandLine.flag("--json", options.json, "one JSON object on stdout instead of the table");
  int32_t threads = 0;
  dstools::addThreadsOption(commandLine, threads);
  commandLine.notes("Peak resident memory: the process's (VmHWM) after the runs, before the "
                    "bandwidth probe allocates its buffers.");
  commandLine.parse(argc, argv);
  dstools::applyThreadsOption(commandLine, threads);
  if (commandLine.given("--copy-bytes") && options.copyBytes == 0)
    commandLine.usageError("--copy-bytes must be an integer of at least 1, not '0'");
  if (!device.empty() && dsrt_device_from_name(device.c_str(), &options.device) != DSRT_OK)
    commandLine.usageError(std::string("--device: ") + dsrt_last_error());
  options.inProcessRanks = !ranks.empty();
  options.plan = commandLine.single(plans, "plan");
  return options;
}

// One rank's session, or an in-process group of every rank, behind one interface.
struct Runner {
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;

  dsrt_status setInput(const char *program, size_t index, const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &data) {
    return group ? dsrt_group_set_input(group, program, index, DSRT_I64, shape.data(),
                                        shape.size(), data.data())
                 : dsrt_session_set_input(session, program, index, DSRT_I64, shape.data(),
                                          shape.size(), data.data());
  }
  dsrt_status run(const char *program) {
    return group ? dsrt_group_run(group, program) : dsrt_session_run(session, program);
  }
  Runner() = default;
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;
  ~Runner() {
    dsrt_group_destroy(group);
    dsrt_session_destroy(session);
  }
};

// Where `prefill`/`decode` take each role; -1 when the program lacks the input.
struct Inputs {
  long ids = -1, mask = -1, positions = -1;
  size_t count = 0;
};

Inputs findInputs(dsrt_plan *plan, const char *program) {
  Inputs inputs;
  check(dsrt_plan_io_count(plan, program, 0, &inputs.count),
        std::string("dsbench needs the '") + program +
            "' program of a decoder whose attention dsc recognised");
  for (size_t i = 0; i < inputs.count; ++i) {
    dsrt_tensor info;
    check(dsrt_plan_io_info(plan, program, 0, i, &info), "input");
    std::string name = info.name;
    if (name == "input_ids") inputs.ids = static_cast<long>(i);
    else if (name == "attention_mask") inputs.mask = static_cast<long>(i);
    else if (name == "position_ids") inputs.positions = static_cast<long>(i);
    else die(std::string("the '") + program + "' program has an input dsbench cannot fill: '" +
             name + "'");
  }
  if (inputs.ids < 0 || inputs.mask < 0)
    die(std::string("the '") + program + "' program has no input_ids or attention_mask");
  return inputs;
}

int64_t vocabularySize(dsrt_plan *plan) {
  dsrt_tensor logits;
  check(dsrt_plan_io_info(plan, "prefill", 1, 0, &logits), "the prefill program's logits");
  if (logits.rank == 0 || logits.shape[logits.rank - 1] <= 0)
    die("the prefill program's logits have no static vocabulary dimension");
  return logits.shape[logits.rank - 1];
}

// Sets one program's inputs for `batch` rows of `newTokens` tokens after `past` cached ones.
void setInputs(Runner &runner, const char *program, const Inputs &inputs, int batch,
               int past, int newTokens, std::mt19937_64 &random, int64_t vocabulary) {
  std::uniform_int_distribution<int64_t> token(0, vocabulary - 1);
  std::vector<int64_t> ids(static_cast<size_t>(batch) * newTokens);
  for (int64_t &id : ids)
    id = token(random);
  check(runner.setInput(program, inputs.ids, {batch, newTokens}, ids), "input_ids");
  std::vector<int64_t> mask(static_cast<size_t>(batch) * (past + newTokens), 1);
  check(runner.setInput(program, inputs.mask, {batch, past + newTokens}, mask),
        "attention_mask");
  if (inputs.positions >= 0) {
    std::vector<int64_t> positions(ids.size());
    for (size_t i = 0; i < positions.size(); ++i)
      positions[i] = past + static_cast<int64_t>(i % newTokens);
    check(runner.setInput(program, inputs.positions, {batch, newTokens}, positions),
          "position_ids");
  }
}

double millisecondsOf(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

// The nearest-rank percentile of sorted samples.
double percentile(const std::vector<double> &sorted, double fraction) {
  size_t rank = static_cast<size_t>(std::ceil(fraction * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

double average(const std::vector<double> &samples) {
  double sum = 0;
  for (double sample : samples)
    sum += sample;
  return sum / static_cast<double>(samples.size());
}

// Memory of every rank. A group keeps its sessions to itself, so each rank gets a session
// of its own, one at a time, after the group is gone; null entries where that fails.
nlohmann::json rankMemory(dsrt_plan *plan, dsrt_device device, Runner &runner,
                          uint64_t &weightBytes) {
  nlohmann::json ranks = nlohmann::json::array();
  auto describe = [](const dsrt_memory &memory) {
    return nlohmann::json{{"weights", memory.weights},
                          {"arena", memory.arena},
                          {"kv_cache", memory.kv_cache},
                          {"other", memory.other},
                          {"total", memory.weights + memory.arena + memory.kv_cache +
                                        memory.other}};
  };
  if (runner.session) {
    dsrt_memory memory;
    check(dsrt_session_memory(runner.session, &memory), "session memory");
    weightBytes = memory.weights;
    ranks.push_back(describe(memory));
    return ranks;
  }
  weightBytes = 0;
  for (int rank = 0; rank < dsrt_plan_rank_count(plan); ++rank) {
    dsrt_session *session = nullptr;
    dsrt_memory memory;
    if (dsrt_session_create(plan, rank, device, &session) == DSRT_OK &&
        dsrt_session_memory(session, &memory) == DSRT_OK) {
      weightBytes = std::max(weightBytes, memory.weights);
      ranks.push_back(describe(memory));
    } else {
      ranks.push_back(nullptr);
    }
    dsrt_session_destroy(session);
  }
  return ranks;
}

std::string human(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.2f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

void printTable(const nlohmann::json &result) {
  auto line = [](const std::string &name, const std::string &value) {
    std::printf("  %-34s %s\n", name.c_str(), value.c_str());
  };
  auto ms = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f ms", value);
    return std::string(text);
  };
  const nlohmann::json &decode = result["decode_ms"];
  std::printf("dsbench %s on %s (%d rank%s)\n", result["plan"].get<std::string>().c_str(),
              result["device_name"].get<std::string>().c_str(), result["ranks"].get<int>(),
              result["ranks"].get<int>() == 1 ? "" : "s");
  std::printf("  batch %d, prompt %d tokens, %d new tokens, %d warmup + %d iterations\n",
              result["batch"].get<int>(), result["prompt_len"].get<int>(),
              result["new_tokens"].get<int>(), result["warmup"].get<int>(),
              result["iterations"].get<int>());
  if (result.contains("cpu_kernels"))
    line("cpu kernels", result["cpu_kernels"].get<std::string>());
  if (result.contains("cpu_threads"))
    line("cpu threads", std::to_string(result["cpu_threads"].get<int>()));
  line("load (open + session, weights up)", ms(result["load_ms"].get<double>()));
  line("prefill avg / P50", ms(result["prefill_ms"]["avg"].get<double>()) + " / " +
                                ms(result["prefill_ms"]["p50"].get<double>()));
  line("decode step avg", ms(decode["avg"].get<double>()));
  line("decode step P50 / P90 / P95",
       ms(decode["p50"].get<double>()) + " / " + ms(decode["p90"].get<double>()) + " / " +
           ms(decode["p95"].get<double>()));
  line("decode step P99 / P99.9",
       ms(decode["p99"].get<double>()) + " / " + ms(decode["p999"].get<double>()));
  char text[96];
  std::snprintf(text, sizeof text, "%.1f", result["tokens_per_second"].get<double>());
  line("tokens/s (batch / avg step)", text);
  line("weight bytes per rank", human(result["weight_bytes_per_rank"].get<double>()));
  line("weight bytes a decode step reads", human(result["decode_weight_bytes"].get<double>()));
  std::snprintf(text, sizeof text, "%.2f GB/s, %.1f%% of copy %.2f GB/s",
                result["weight_bandwidth_bytes_per_s"].get<double>() / 1e9,
                100 * result["bandwidth_fraction"].get<double>(),
                result["copy_bandwidth_bytes_per_s"].get<double>() / 1e9);
  line("achieved weight bandwidth", text);
  line("peak resident memory", human(result["peak_resident_bytes"].get<double>()) +
                                   " (the process, before the bandwidth probe)");
  const nlohmann::json &memory = result["memory_per_rank"];
  for (size_t rank = 0; rank < memory.size(); ++rank) {
    std::string name = "memory rank " + std::to_string(rank);
    if (memory[rank].is_null()) {
      line(name, "(unavailable)");
      continue;
    }
    line(name, human(memory[rank]["total"].get<double>()) + " (weights " +
                   human(memory[rank]["weights"].get<double>()) + ", arena " +
                   human(memory[rank]["arena"].get<double>()) + ", kv " +
                   human(memory[rank]["kv_cache"].get<double>()) + ", other " +
                   human(memory[rank]["other"].get<double>()) + ")");
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::string(argv[1]) == "serve")
    return dsbench::runServe(argc - 1, argv + 1);
  Options options = parse(argc, argv);
  using Clock = std::chrono::steady_clock;

  Runner runner;
  dsrt_plan *plan = nullptr;
  Clock::time_point loadStart = Clock::now();
  check(dsrt_plan_open(options.plan.c_str(), &plan), "cannot open the plan");
  int planRanks = dsrt_plan_rank_count(plan);
  if (options.inProcessRanks) {
    check(dsrt_group_create(plan, options.device, &runner.group), "cannot create the ranks");
  } else {
    if (planRanks > 1)
      die("the plan has " + std::to_string(planRanks) +
          " tensor-parallel ranks: bench them with --ranks inprocess");
    check(dsrt_session_create(plan, 0, options.device, &runner.session),
          "cannot create a session");
  }
  double loadMs = millisecondsOf(Clock::now() - loadStart);
  if (options.strict)
    check(runner.group ? dsrt_group_set_strict(runner.group, 1)
                       : dsrt_session_set_strict(runner.session, 1),
          "--strict");

  Inputs prefill = findInputs(plan, "prefill"), decode = findInputs(plan, "decode");
  int64_t vocabulary = vocabularySize(plan);
  std::mt19937_64 random(20240601);

  std::vector<double> prefillMs, decodeMs;
  for (int iteration = 0; iteration < options.warmup + options.iterations; ++iteration) {
    bool measured = iteration >= options.warmup;
    setInputs(runner, "prefill", prefill, options.batch, 0, options.promptLength, random,
              vocabulary);
    Clock::time_point start = Clock::now();
    check(runner.run("prefill"), "prefill failed");
    if (measured)
      prefillMs.push_back(millisecondsOf(Clock::now() - start));
    for (int step = 0; step < options.newTokens; ++step) {
      setInputs(runner, "decode", decode, options.batch, options.promptLength + step, 1, random,
                vocabulary);
      start = Clock::now();
      check(runner.run("decode"), "decode step " + std::to_string(step) + " failed");
      if (measured)
        decodeMs.push_back(millisecondsOf(Clock::now() - start));
    }
  }

  // The process's peak resident memory so far (Linux's VmHWM): the plan, its sessions and
  // the benchmark's runs, before the bandwidth probe's buffers below add to it. 0 where
  // /proc is not there.
  uint64_t peakResidentBytes = 0;
  {
    std::ifstream status("/proc/self/status");
    for (std::string entry; std::getline(status, entry);)
      if (entry.rfind("VmHWM:", 0) == 0)
        peakResidentBytes = std::strtoull(entry.c_str() + 6, nullptr, 10) * 1024;  // kB
  }
  // The counters of the benchmark's runs (the bandwidth measurement below not included).
  dsrt_stats stats;
  check(runner.group ? dsrt_group_stats(runner.group, &stats)
                     : dsrt_session_stats(runner.session, &stats),
        "session stats");
  nlohmann::json statsJson = {{"kernel_launches", stats.kernel_launches},
                              {"fallback_steps", stats.fallback_steps},
                              {"graph_captures", stats.graph_captures},
                              {"graph_replays", stats.graph_replays},
                              {"bytes_uploaded", stats.bytes_uploaded},
                              {"bytes_downloaded", stats.bytes_downloaded}};

  // The bandwidth roofline, measured by a session on the same device in this process; the
  // default size is for the device the session is on (a CUDA session may have fallen back).
  auto copyBytesFor = [&](const std::string &deviceName) {
    if (options.copyBytes)
      return options.copyBytes;
    return deviceName.rfind("cuda", 0) == 0 ? uint64_t(1) << 30 : uint64_t(256) << 20;
  };
  uint64_t copyBytes = 0;
  std::string deviceName;
  double copyBandwidth = 0;
  uint64_t weightBytes = 0;
  nlohmann::json memory;
  if (runner.session) {
    deviceName = dsrt_session_device_name(runner.session);
    copyBytes = copyBytesFor(deviceName);
    check(dsrt_session_copy_bandwidth(runner.session, copyBytes, &copyBandwidth),
          "measuring the copy bandwidth");
    memory = rankMemory(plan, options.device, runner, weightBytes);
  } else {
    dsrt_group_destroy(runner.group);
    runner.group = nullptr;
    memory = rankMemory(plan, options.device, runner, weightBytes);
    dsrt_session *probe = nullptr;
    check(dsrt_session_create(plan, 0, options.device, &probe),
          "a session measuring the copy bandwidth");
    deviceName = dsrt_session_device_name(probe);
    copyBytes = copyBytesFor(deviceName);
    dsrt_status status = dsrt_session_copy_bandwidth(probe, copyBytes, &copyBandwidth);
    dsrt_session_destroy(probe);
    check(status, "measuring the copy bandwidth");
  }
  // What a decode step must read: the roofline's numerator. The whole section would count
  // the embedding tables, which a step reads a row of per token.
  uint64_t decodeWeightBytes = 0;
  for (int rank = 0; rank < planRanks; ++rank) {
    uint64_t bytes = 0;
    check(dsrt_plan_program_weight_bytes(plan, rank, "decode", &bytes),
          "the decode program's weight bytes");
    decodeWeightBytes = std::max(decodeWeightBytes, bytes);
  }
  dsrt_plan_close(plan);

  std::vector<double> sortedPrefill = prefillMs, sortedDecode = decodeMs;
  std::sort(sortedPrefill.begin(), sortedPrefill.end());
  std::sort(sortedDecode.begin(), sortedDecode.end());
  double stepMs = average(decodeMs);
  double weightBandwidth =
      stepMs > 0 ? static_cast<double>(decodeWeightBytes) / (stepMs / 1e3) : 0;
  nlohmann::json result = {
      {"plan", options.plan},
      {"device", dsrt_device_to_name(options.device)},  // as asked for
      {"device_name", deviceName},
      {"cpu_kernels", dsrt_cpu_kernels()},
      {"cpu_threads", dsrt_cpu_threads()},  // the CPU's features and the kernels chosen
      {"ranks", options.inProcessRanks ? planRanks : 1},
      {"batch", options.batch},
      {"prompt_len", options.promptLength},
      {"new_tokens", options.newTokens},
      {"warmup", options.warmup},
      {"iterations", options.iterations},
      {"load_ms", loadMs},
      {"prefill_ms", {{"avg", average(prefillMs)}, {"p50", percentile(sortedPrefill, 0.5)}}},
      {"decode_ms",
       {{"samples", decodeMs.size()},
        {"avg", stepMs},
        {"p50", percentile(sortedDecode, 0.50)},
        {"p90", percentile(sortedDecode, 0.90)},
        {"p95", percentile(sortedDecode, 0.95)},
        {"p99", percentile(sortedDecode, 0.99)},
        {"p999", percentile(sortedDecode, 0.999)}}},
      {"tokens_per_second", stepMs > 0 ? options.batch / (stepMs / 1e3) : 0.0},
      {"weight_bytes_per_rank", weightBytes},
      {"decode_weight_bytes", decodeWeightBytes},
      {"weight_bandwidth_bytes_per_s", weightBandwidth},
      {"copy_bytes", copyBytes},
      {"copy_bandwidth_bytes_per_s", copyBandwidth},
      {"bandwidth_fraction", copyBandwidth > 0 ? weightBandwidth / copyBandwidth : 0.0},
      {"memory_per_rank", memory},
      {"peak_resident_bytes", peakResidentBytes},
      {"stats", statsJson}};
  if (options.json) {
    std::cout << result.dump(2) << "\n";
  } else {
    printTable(result);
    if (options.stats)
      std::printf("stats:\n  kernel launches %llu\n  fallback steps %llu\n"
                  "  graph captures %llu\n  graph replays %llu\n  bytes uploaded %llu\n"
                  "  bytes downloaded %llu\n",
                  static_cast<unsigned long long>(stats.kernel_launches),
                  static_cast<unsigned long long>(stats.fallback_steps),
                  static_cast<unsigned long long>(stats.graph_captures),
                  static_cast<unsigned long long>(stats.graph_replays),
                  static_cast<unsigned long long>(stats.bytes_uploaded),
                  static_cast<unsigned long long>(stats.bytes_downloaded));
  }
  return 0;
}
