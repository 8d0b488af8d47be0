// dsp-roofline: the performance model of a plan on the CUDA backend (RooflineModel.h;
// bench/roofline/README.md). Prints, per program, the stream operations one run issues,
// the bytes it reads and the time that predicts on an H100 and an H200. Reads the plan
// only: no GPU, no session.
#include "RooflineModel.h"
#include "common/CommandLine.h"

#include <fmt/format.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace dsrt::roofline;

[[noreturn]] void die(const std::string &message) { dstools::fail("dsp-roofline", message, 1); }

std::string withCommas(uint64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

void printTime(const char *device, double gigabytesPerSecond, const ProgramCost &cost,
               double launchSeconds) {
  double bytesPerSecond = gigabytesPerSecond * 1e9;
  double reading = static_cast<double>(cost.totalBytes()) / bytesPerSecond;
  double launching = static_cast<double>(cost.streamOps()) * launchSeconds;
  std::printf("  %s (%.0f GB/s): %.2f us = %.2f us reading + %.2f us launching\n", device,
              gigabytesPerSecond, predictedSeconds(cost, bytesPerSecond, launchSeconds) * 1e6,
              reading * 1e6, launching * 1e6);
}

void printProgram(const ProgramCost &cost, const Workload &workload, double launchSeconds,
                  double givenGigabytesPerSecond) {
  std::printf("\nprogram \"%s\": %zu steps, %" PRId64 " new token(s) per sequence\n",
              cost.name.c_str(), cost.steps.size(), cost.newTokens);
  std::printf("  placement: %zu on the host, %zu on the device (%zu views launch nothing), "
              "%zu through the fallback\n",
              cost.host, cost.device, cost.sharedViews, cost.fallback);
  std::printf("  launches: %" PRIu64 " = %" PRIu64 " kernels + %" PRIu64 " cuBLASLt + %" PRIu64
              " device copies + %" PRIu64 " collectives%s\n",
              cost.streamOps(), cost.kernels, cost.gemms, cost.copies, cost.collectives,
              cost.branchEstimated ? " (an If: its larger branch)" : "");
  if (cost.layers)
    std::printf("  launches per layer: %.2f over %zu layers\n",
                static_cast<double>(cost.streamOps()) / static_cast<double>(cost.layers),
                cost.layers);
  std::printf("  launches by op:");
  const char *separator = " ";
  for (const auto &[op, count] : cost.launchesByOp) {
    std::printf("%s%s %" PRIu64, separator, op.c_str(), count);
    separator = ", ";
  }
  std::printf("\n  weight bytes: %" PRIu64 "\n", cost.weightBytes);
  std::printf("  kv bytes: %" PRIu64 " (context %" PRId64 ", batch %" PRId64 ")\n", cost.kvBytes,
              workload.context, workload.batch);
  std::printf("  total bytes: %" PRIu64 " (%s)\n", cost.totalBytes(),
              withCommas(cost.totalBytes()).c_str());
  if (cost.fallback)
    std::printf("  note: %zu step(s) run through the host fallback, whose copies and host "
                "work the model leaves out\n",
                cost.fallback);
  printTime("H100 SXM", kH100BytesPerSecond / 1e9, cost, launchSeconds);
  printTime("H200", kH200BytesPerSecond / 1e9, cost, launchSeconds);
  if (givenGigabytesPerSecond > 0)
    printTime("given", givenGigabytesPerSecond, cost, launchSeconds);
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> plans;
  Workload workload;
  int32_t rank = 0;
  double launchMicroseconds = kAssumedLaunchMicroseconds, bandwidth = 0;
  dstools::CommandLine commandLine(
      "dsp-roofline", {"dsp-roofline PLAN [--rank R] [--context L] [--batch B] [OPTIONS]"},
      "Per program of PLAN: the launches one run issues on the CUDA backend (predicted from "
      "the plan's steps), the weight and KV-cache bytes it reads, and the predicted time = "
      "bytes / bandwidth + launches x launch cost on an H100 SXM (3350 GB/s) and an H200 "
      "(4800 GB/s).");
  commandLine.arguments("PLAN", plans, "the plan file (.dsp)");
  commandLine.integer("--rank", rank, "R",
                      "the tensor-parallel rank whose weights and KV heads count (default 0)", 0);
  commandLine.integer("--context", workload.context, "L",
                      "positions the attention reads from the KV cache; also the prompt length "
                      "of prefill and forward (default: max_seq_len)",
                      0);
  commandLine.integer("--batch", workload.batch, "B", "sequences per step (default 1)", 1);
  commandLine.number("--launch-us", launchMicroseconds, "X",
                     fmt::format("the cost of one launch in a CUDA graph, in microseconds "
                                 "(default {:.1f}, assumed until a GPU measures it)",
                                 kAssumedLaunchMicroseconds),
                     dstools::CommandLine::Sign::NonNegative);
  commandLine.number("--bandwidth", bandwidth, "GBPS",
                     "also predict at this bandwidth (e.g. dsbench's measured copy bandwidth), "
                     "in GB/s",
                     dstools::CommandLine::Sign::Positive);
  commandLine.parse(argc, argv);
  const std::string &path = commandLine.single(plans, "plan");
  workload.rank = rank;
  const bool contextGiven = commandLine.given("--context");
  const bool launchMeasured = commandLine.given("--launch-us");

  std::unique_ptr<dsrt::PlanFile> file;
  dsrt::Status status = dsrt::PlanFile::open(path, file);
  if (!status.isOk())
    die(status.message());
  const dsp::Plan &plan = file->plan();
  if (workload.rank >= file->rankCount())
    die(path + ": rank " + std::to_string(workload.rank) + " is outside the plan: it has " +
        std::to_string(file->rankCount()) + " rank(s)");
  const int64_t maxSeq = plan.limits() ? plan.limits()->max_seq_len() : 0;
  if (!contextGiven)
    workload.context = maxSeq;

  std::vector<KvLayer> cache;
  status = kvCacheLayers(plan, workload.rank, cache);
  if (!status.isOk())
    die(path + ": " + status.message());
  // Every program is modelled before anything is printed, so that an error (a workload
  // outside the plan's limits) is the only output.
  std::vector<ProgramCost> costs;
  for (uint32_t p = 0; plan.programs() && p < plan.programs()->size(); ++p) {
    const dsp::Program &program = *plan.programs()->Get(p);
    if (!program.name() || program.name()->size() == 0)
      continue;  // an If's branch: counted with its If
    costs.emplace_back();
    status = modelProgram(plan, program.name()->str(), workload, costs.back());
    if (!status.isOk())
      die(path + ": " + status.message());
  }
  std::printf("plan: %s (model %s, dtype %s, %d rank(s))\n", path.c_str(),
              plan.model_name() ? plan.model_name()->c_str() : "",
              plan.options() && plan.options()->dtype() ? plan.options()->dtype()->c_str() : "?",
              file->rankCount());
  std::printf("workload: rank %d, batch %" PRId64 ", context %" PRId64
              " (limits: max_batch %" PRId64 ", max_seq_len %" PRId64 ")\n",
              workload.rank, workload.batch, workload.context,
              plan.limits() ? plan.limits()->max_batch() : 0, maxSeq);
  std::string cacheType = cache.empty() ? "f32" : cache.front().dtype;
  for (const KvLayer &layer : cache)
    if (cacheType != layer.dtype)
      cacheType = "mixed";
  std::printf("kv cache: %zu layers, %" PRIu64 " bytes per position per sequence (%s keys and "
              "values, this rank's heads)\n",
              cache.size(), kvBytesPerPosition(cache), cacheType.c_str());
  std::printf("launch cost: %.2f us per launch (%s)\n", launchMicroseconds,
              launchMeasured ? "given" : "assumed: not measured on a GPU yet");
  for (const ProgramCost &cost : costs)
    printProgram(cost, workload, launchMicroseconds * 1e-6, bandwidth);
  return 0;
}
