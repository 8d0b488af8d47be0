// dseval: how far a plan's outputs are from a reference plan's, over a set of prompts.
// Made for reduced-precision plans (docs/int8.md): the candidate is an int8 or fp16 plan,
// the reference the fp32 plan of the same model. For each prompt both plans run the same
// program on the same inputs and the next-token logits (the last prompt position) are
// compared: top-1 agreement, max and mean absolute error, and the reference's largest
// |logit| for scale; optionally also those of N decode steps, both plans fed the
// reference's argmax. An encoder (no logits) compares its first output at every position.
//
// The reference always runs on the CPU backend's reference kernels (cpu-reference), the
// oracle of every other kernel; the candidate on the CPU's fast kernels (the default), on a
// GPU with --device cuda, or on the reference kernels too. The same plan as candidate and
// reference compares the fast kernels with the reference ones.
//
// Exit status: 0 when every bound given holds, 1 when one is violated (each violation is
// said on stderr), 2 for usage errors and plans or prompts that cannot be evaluated.
#include "common/CommandLine.h"
#include "dsrt/dsrt.hpp"
#include "plan/PlanFile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string &message) { dstools::fail("dseval", message, 2); }

struct Options {
  std::string candidate, reference, prompts;
  bool json = false, inprocess = false;
  dsrt_device device = DSRT_DEVICE_CPU;  // the candidate's
  int64_t decodeSteps = 0;
  // NaN: no bound.
  double minTop1 = std::nan(""), maxAbsError = std::nan(""), maxMeanAbsError = std::nan("");
};

Options parseOptions(int argc, char **argv) {
  Options options;
  std::vector<std::string> plans;
  std::string device, ranks;
  int64_t decodeSteps = 0;
  using Sign = dstools::CommandLine::Sign;
  dstools::CommandLine commandLine(
      "dseval", {"dseval CANDIDATE --reference REF --prompts FILE [OPTIONS]"},
      "Runs both plans for each prompt of FILE (one per line: comma-separated token ids; '#' "
      "starts a comment) and compares the candidate's next-token logits (last prompt "
      "position) with the reference's; for an encoder without logits, its first output at "
      "every position (top-1 is then n/a). The reference runs on the CPU's reference "
      "kernels.");
  commandLine.arguments("CANDIDATE", plans, "the plan to evaluate (.dsp)");
  commandLine.text("--reference", options.reference, "REF", "the reference plan (.dsp)");
  commandLine.text("--prompts", options.prompts, "FILE", "the prompts, one per line");
  commandLine.flag("--json", options.json, "print the summary as one JSON object");
  commandLine.number("--min-top1", options.minTop1, "F",
                     "fail (exit 1) when fewer than F of the prompts (and decode steps) agree "
                     "on argmax",
                     Sign::NonNegative);
  commandLine.number("--max-abs-error", options.maxAbsError, "F",
                     "fail when any compared value differs by more than F", Sign::NonNegative);
  commandLine.number("--max-mean-abs-error", options.maxMeanAbsError, "F",
                     "fail when the mean absolute difference is more than F",
                     Sign::NonNegative);
  commandLine.choice("--ranks", ranks, {"inprocess"}, "inprocess",
                     "run a tensor-parallel plan's ranks as threads of this process (MPI ranks "
                     "are not supported by dseval)");
  commandLine.integer("--decode-steps", decodeSteps, "N",
                      "also compare N decode steps after each prompt (the 'decode' program on "
                      "the session's KV cache; a plan without one runs the whole sequence "
                      "again), each fed the reference's argmax so both plans see the same "
                      "tokens; the bounds and top-1 then cover every compared row",
                      0);
  commandLine.text("--device", device, "NAME",
                   "where the candidate runs: cpu (default: the fast CPU kernels; the plan "
                   "itself as --reference compares them with the reference kernels), cuda (a "
                   "GPU; without one, libdsrt falls back to the CPU and says so) or "
                   "cpu-reference");
  commandLine.notes("Exit status: 0 bounds hold, 1 a bound is violated, 2 usage, plan or "
                    "prompt errors.\n");
  commandLine.parse(argc, argv);
  if (commandLine.given("--min-top1") && options.minTop1 > 1)
    commandLine.usageError("--min-top1 is a fraction of the prompts, at most 1");
  if (!device.empty() && dsrt_device_from_name(device.c_str(), &options.device) != DSRT_OK)
    commandLine.usageError(std::string("--device: ") + dsrt_last_error());
  options.inprocess = !ranks.empty();
  options.decodeSteps = decodeSteps;
  options.candidate = commandLine.single(plans, "candidate plan");
  if (options.reference.empty())
    commandLine.usageError("no reference plan given (--reference)");
  if (options.prompts.empty())
    commandLine.usageError("no prompt file given (--prompts)");
  return options;
}

struct Prompt {
  int line = 0;
  std::vector<int64_t> ids;
};

std::vector<Prompt> readPrompts(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    fail("cannot read the prompt file '" + path + "'");
  std::vector<Prompt> prompts;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    text = text.substr(0, text.find('#'));
    auto space = [](unsigned char c) { return std::isspace(c) != 0; };
    text.erase(std::remove_if(text.begin(), text.end(), space), text.end());
    if (text.empty())
      continue;
    Prompt prompt;
    prompt.line = line;
    std::stringstream list(text);
    std::string item;
    while (std::getline(list, item, ',')) {
      char *end = nullptr;
      long long id = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || id < 0)
        fail(path + ":" + std::to_string(line) + ": '" + text +
             "' is not a comma-separated list of non-negative token ids");
      prompt.ids.push_back(id);
    }
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty())
    fail("the prompt file '" + path + "' has no prompts");
  return prompts;
}

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

// One program of a plan: its inputs and outputs, and the output dseval compares.
struct ProgramIo {
  std::string name;
  std::vector<dsrt_tensor> inputs, outputs;
  int compared = -1;
};

// One plan: what the evaluation needs to know about it, and its session(s).
class EvalPlan {
public:
  EvalPlan(const std::string &role, const std::string &path, bool inprocess, dsrt_device device)
      : role_(role), path_(path) {
    // The header through the runtime's own loader, for the model's roles (the C API does
    // not expose them); the sessions through the public API.
    std::unique_ptr<dsrt::PlanFile> file;
    dsrt::Status status = dsrt::PlanFile::open(path, file);
    if (!status.isOk())
      fail("cannot open the " + role + " plan: " + status.message());
    const dsp::Plan &plan = file->plan();
    const dsp::ModelInfo *model = plan.model();
    kind_ = model ? str(model->kind()) : std::string();
    vocab_ = model ? model->vocab_size() : 0;
    maxSeqLen_ = plan.limits() ? plan.limits()->max_seq_len() : 0;
    if (model) {
      inputIds_ = str(model->input_ids());
      attentionMask_ = str(model->attention_mask());
      positionIds_ = str(model->position_ids());
      logits_ = str(model->logits());
      if (model->kv_pairs())
        for (const dsp::KvPair *pair : *model->kv_pairs())
          pastNames_.push_back(str(pair->past()));
    }
    if (plan.options())
      dtype_ = str(plan.options()->dtype());
    bool hasPrefill = false, hasDecode = false, hasForward = false;
    if (plan.programs())
      for (const dsp::Program *p : *plan.programs()) {
        hasPrefill |= str(p->name()) == "prefill";
        hasDecode |= str(p->name()) == "decode";
        hasForward |= str(p->name()) == "forward";
      }
    if (!hasPrefill && !hasForward)
      fail("the " + role + " plan '" + path + "' has neither a 'prefill' nor a 'forward' program");
    if (inputIds_.empty())
      inputIds_ = "input_ids";

    try {
      plan_ = std::make_unique<dsrt::Plan>(path);
      int ranks = plan_->rankCount();
      if (ranks > 1) {
        if (!inprocess)
          fail("the " + role + " plan '" + path + "' has " + std::to_string(ranks) +
               " tensor-parallel ranks: give --ranks inprocess to run them as threads");
        dsrt_group *group = nullptr;
        dsrt::detail::check(dsrt_group_create(plan_->get(), device, &group));
        group_.reset(group);
        // The group API does not say where its ranks ended up (a fallback says so on stderr).
        deviceName_ = device == DSRT_DEVICE_CUDA ? "cuda requested (in-process ranks)"
                                                 : dsrt_device_to_name(device);
      } else {
        session_ = std::make_unique<dsrt::Session>(*plan_, 0, device);
        const char *name = dsrt_session_device_name(session_->get());
        deviceName_ = name ? name : "";
      }
      // prefill, where there is one, is the program generation starts with; forward with an
      // empty past computes the same logits. decode continues from prefill's KV cache; plans
      // without it (the generic path) recompute the whole sequence for every step.
      first_ = describe(hasPrefill && kind_ == "decoder" ? "prefill" : "forward");
      if (hasPrefill && hasDecode && kind_ == "decoder")
        decode_ = describe("decode");
    } catch (const dsrt::Error &error) {
      fail("the " + role + " plan '" + path + "': " + error.message());
    }
  }

  bool hasLogits() const { return kind_ == "decoder"; }
  bool hasDecode() const { return !decode_.name.empty(); }
  const std::string &kind() const { return kind_; }
  const std::string &program() const { return first_.name; }
  const std::string &dtype() const { return dtype_; }
  std::string comparedName() const { return first_.outputs[first_.compared].name; }
  int64_t vocab() const { return vocab_; }
  int64_t maxSeqLen() const { return maxSeqLen_; }
  const std::string &deviceName() const { return deviceName_; }

  // Runs the first program (prefill or forward) on one prompt, a batch of one; returns the
  // compared output as f32 with its shape.
  std::vector<float> runPrompt(const Prompt &prompt, std::vector<int64_t> &shape) {
    return run(first_, prompt, prompt.ids, static_cast<int64_t>(prompt.ids.size()), shape);
  }

  // One step after runPrompt and the earlier steps: the logits after `sequence` (the prompt
  // and the tokens fed since). With a decode program, the last token alone through the
  // session's KV cache; without one, the whole sequence again through the first program.
  std::vector<float> runStep(const Prompt &prompt, const std::vector<int64_t> &sequence,
                             std::vector<int64_t> &shape) {
    const int64_t total = static_cast<int64_t>(sequence.size());
    if (hasDecode())
      return run(decode_, prompt, {sequence.back()}, total, shape);
    return run(first_, prompt, sequence, total, shape);
  }

private:
  ProgramIo describe(const std::string &name) {
    ProgramIo io;
    io.name = name;
    io.inputs = plan_->inputs(name);
    io.outputs = plan_->outputs(name);
    for (size_t o = 0; o < io.outputs.size(); ++o)
      if (kind_ == "decoder" ? io.outputs[o].name == logits_ : o == 0)
        io.compared = static_cast<int>(o);
    if (io.compared < 0)
      fail("the " + role_ + " plan's program '" + name + "' has no output '" + logits_ + "'");
    return io;
  }

  // `ids` are the new tokens, the last ids.size() of `total` (every earlier one is in the
  // KV cache).
  std::vector<float> run(const ProgramIo &program, const Prompt &prompt,
                         const std::vector<int64_t> &ids, int64_t total,
                         std::vector<int64_t> &shape) {
    try {
      for (size_t i = 0; i < program.inputs.size(); ++i)
        setInput(program, i, ids, total);
      const char *name = program.name.c_str();
      dsrt::detail::check(group_ ? dsrt_group_run(group_.get(), name)
                                 : dsrt_session_run(session_->get(), name));
      dsrt_tensor out;
      dsrt::detail::check(
          group_ ? dsrt_group_get_output(group_.get(), name, program.compared, &out)
                 : dsrt_session_get_output(session_->get(), name, program.compared, &out));
      shape.assign(out.shape, out.shape + out.rank);
      dsrt::DType dtype = static_cast<dsrt::DType>(out.dtype);
      if (!dsrt::isFloat(dtype))
        fail("the " + role_ + " plan's output '" + std::string(out.name) + "' is " +
             dsrt::dtypeName(dtype) + ", not floating-point");
      std::vector<float> values(static_cast<size_t>(dsrt::elementCount(shape)));
      dsrt::convertFloats(dtype, out.data, dsrt::DType::F32, values.data(),
                          static_cast<int64_t>(values.size()));
      return values;
    } catch (const dsrt::Error &error) {
      fail("the " + role_ + " plan '" + path_ + "', program '" + program.name +
           "', prompt at line " + std::to_string(prompt.line) + ": " + error.message());
    }
  }

  void setInput(const ProgramIo &program, size_t index, const std::vector<int64_t> &ids,
                int64_t total) {
    const dsrt_tensor &info = program.inputs[index];
    const int64_t fresh = static_cast<int64_t>(ids.size());
    std::string name = info.name;
    std::vector<int64_t> values, shape = {1, fresh};
    bool isPast = std::find(pastNames_.begin(), pastNames_.end(), name) != pastNames_.end();
    if (name == inputIds_) {
      values = ids;
    } else if (name == attentionMask_) {
      values.assign(total, 1);
      shape = {1, total};
    } else if (name == positionIds_) {
      for (int64_t i = total - fresh; i < total; ++i)
        values.push_back(i);
    } else if (name == "token_type_ids") {  // BERT: one segment
      values.assign(fresh, 0);
    } else if (name == "use_cache_branch") {  // Optimum's merged decoder: no past yet
      values = {0};
      shape.assign(info.rank, 1);
    } else if (isPast && info.rank == 4) {
      // [batch, kv_heads, past, head_dim] with no past: an empty tensor.
      shape = {1, info.shape[1], 0, info.shape[3]};
      if (shape[1] < 0 || shape[3] < 0)
        fail("the " + role_ + " plan's past input '" + name + "' has dynamic heads or head size");
      setRaw(program, index, info.dtype, shape, nullptr);
      return;
    } else {
      fail("the " + role_ + " plan's program '" + program.name + "' has an input '" + name +
           "' dseval cannot fill (it knows input ids, attention mask, position ids, "
           "token_type_ids and past keys/values)");
    }
    dsrt::DType dtype = static_cast<dsrt::DType>(info.dtype);
    std::vector<uint8_t> bytes(values.size() * std::max<size_t>(dsrt::dtypeSize(dtype), 1));
    for (size_t i = 0; i < values.size(); ++i) {
      switch (dtype) {
      case dsrt::DType::I64: std::memcpy(&bytes[i * 8], &values[i], 8); break;
      case dsrt::DType::I32: {
        int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(&bytes[i * 4], &v, 4);
        break;
      }
      case dsrt::DType::Bool:
      case dsrt::DType::U8: bytes[i] = values[i] != 0; break;
      case dsrt::DType::F32: {
        float v = static_cast<float>(values[i]);
        std::memcpy(&bytes[i * 4], &v, 4);
        break;
      }
      default:
        fail("the " + role_ + " plan's input '" + name + "' is " + dsrt::dtypeName(dtype) +
             ", which dseval does not fill");
      }
    }
    setRaw(program, index, info.dtype, shape, bytes.data());
  }

  void setRaw(const ProgramIo &program, size_t index, dsrt_dtype dtype,
              const std::vector<int64_t> &shape, const void *data) {
    static const float none = 0;  // the API wants a pointer even for an empty tensor
    if (!data)
      data = &none;
    const char *name = program.name.c_str();
    dsrt::detail::check(
        group_ ? dsrt_group_set_input(group_.get(), name, index, dtype, shape.data(),
                                      shape.size(), data)
               : dsrt_session_set_input(session_->get(), name, index, dtype, shape.data(),
                                        shape.size(), data));
  }

  struct GroupDeleter {
    void operator()(dsrt_group *g) const noexcept { dsrt_group_destroy(g); }
  };

  std::string role_, path_, kind_, dtype_, deviceName_;
  std::string inputIds_, attentionMask_, positionIds_, logits_;
  std::vector<std::string> pastNames_;
  int64_t vocab_ = 0, maxSeqLen_ = 0;
  std::unique_ptr<dsrt::Plan> plan_;
  std::unique_ptr<dsrt::Session> session_;
  std::unique_ptr<dsrt_group, GroupDeleter> group_;
  ProgramIo first_, decode_;
};

// torch.argmax: the first maximum.
size_t argmax(const float *values, size_t count) {
  size_t best = 0;
  for (size_t i = 1; i < count; ++i)
    if (values[i] > values[best])
      best = i;
  return best;
}

std::string number(double value) {
  if (std::isnan(value))
    return "nan";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string jsonNumber(double value) { return std::isfinite(value) ? number(value) : "null"; }

} // namespace

int main(int argc, char **argv) {
  Options options = parseOptions(argc, argv);
  std::vector<Prompt> prompts = readPrompts(options.prompts);
  EvalPlan candidate("candidate", options.candidate, options.inprocess, options.device);
  EvalPlan reference("reference", options.reference, options.inprocess,
                     DSRT_DEVICE_CPU_REFERENCE);

  if (candidate.kind() != reference.kind())
    fail("the candidate is a '" + candidate.kind() + "' plan and the reference a '" +
         reference.kind() + "' one: not the same model");
  if (candidate.hasLogits() && candidate.vocab() != reference.vocab())
    fail("the candidate's vocabulary has " + std::to_string(candidate.vocab()) +
         " tokens and the reference's " + std::to_string(reference.vocab()) +
         ": not the same model");
  const bool logits = candidate.hasLogits();
  if (!logits && !std::isnan(options.minTop1))
    fail("--min-top1 does not apply: the plans have no logits (they compare '" +
         candidate.comparedName() + "', an encoder output)");
  if (options.decodeSteps > 0 && !logits)
    fail("--decode-steps needs decoders: the plans have no logits (they compare '" +
         candidate.comparedName() + "', an encoder output)");
  for (const Prompt &prompt : prompts) {
    int64_t n = static_cast<int64_t>(prompt.ids.size()) + options.decodeSteps;
    for (const EvalPlan *plan : {&candidate, &reference}) {
      if (plan->maxSeqLen() > 0 && n > plan->maxSeqLen())
        fail("the prompt at line " + std::to_string(prompt.line) + " has " +
             std::to_string(prompt.ids.size()) + " tokens" +
             (options.decodeSteps > 0 ? " + " + std::to_string(options.decodeSteps) +
                                            " decode steps"
                                      : std::string()) +
             ", more than the max_seq_len of " + std::to_string(plan->maxSeqLen()) + " of " +
             (plan == &candidate ? options.candidate : options.reference));
      if (logits)
        for (int64_t id : prompt.ids)
          if (id >= plan->vocab())
            fail("the prompt at line " + std::to_string(prompt.line) + " has token id " +
                 std::to_string(id) + ", outside the vocabulary of " +
                 std::to_string(plan->vocab()));
    }
  }

  // Every compared row: the prompt's next-token logits, then those of each decode step (or
  // an encoder's output at every position, one row per prompt).
  size_t rows = 0, agree = 0;
  // Rows whose argmax differs (prompt line, decode step: 0 = the prompt's next token), with
  // the reference's margin between its own top logit and the one the candidate chose: a
  // flip is expected where that margin is within the error.
  struct Disagreement {
    int line;
    int64_t step;
    double margin;
  };
  std::vector<Disagreement> disagreements;
  int64_t comparedValues = 0;
  double maxAbs = 0, sumAbs = 0, referenceMaxAbs = 0;
  int worstLine = 0;
  int64_t worstStep = 0;
  bool nan = false;
  // Compares one output of both plans; returns the reference's argmax of the last row.
  auto compare = [&](const Prompt &prompt, int64_t step, const std::vector<float> &c,
                     const std::vector<int64_t> &candidateShape, const std::vector<float> &r,
                     const std::vector<int64_t> &referenceShape) -> int64_t {
    // Logits: the last position's rows (a decode step has one position, a recomputing plan
    // the whole sequence), which must be as wide; an encoder's outputs must match whole.
    const bool sameShape = logits ? !candidateShape.empty() && !referenceShape.empty() &&
                                        candidateShape.back() == referenceShape.back() &&
                                        candidateShape.front() == referenceShape.front()
                                  : candidateShape == referenceShape;
    if (!sameShape)
      fail("prompt at line " + std::to_string(prompt.line) + ": the candidate's '" +
           candidate.comparedName() + "' is " + dsrt::shapeString(candidateShape) +
           " and the reference's '" + reference.comparedName() + "' " +
           dsrt::shapeString(referenceShape) + ": the plans do not have the same outputs");
    size_t candidateBegin = 0, referenceBegin = 0, count = c.size();
    size_t referenceTop = 0;
    ++rows;
    if (logits) {
      // The last position's row: the logits of the next token.
      count = static_cast<size_t>(candidateShape.back());
      if (count == 0 || c.size() < count || r.size() < count)
        fail("the logits are " + dsrt::shapeString(candidateShape) + ", with no vocabulary axis");
      candidateBegin = c.size() - count;
      referenceBegin = r.size() - count;
      size_t candidateTop = argmax(&c[candidateBegin], count);
      referenceTop = argmax(&r[referenceBegin], count);
      if (candidateTop == referenceTop)
        ++agree;
      else
        disagreements.push_back({prompt.line, step,
                                 static_cast<double>(r[referenceBegin + referenceTop]) -
                                     r[referenceBegin + candidateTop]});
    }
    for (size_t k = 0; k < count; ++k) {
      const float cv = c[candidateBegin + k], rv = r[referenceBegin + k];
      double diff = std::fabs(static_cast<double>(cv) - rv);
      if (std::isnan(diff)) {
        nan = true;
        continue;
      }
      if (diff > maxAbs) {
        maxAbs = diff;
        worstLine = prompt.line;
        worstStep = step;
      }
      sumAbs += diff;
      referenceMaxAbs = std::max(referenceMaxAbs, std::fabs(static_cast<double>(rv)));
    }
    comparedValues += static_cast<int64_t>(count);
    return static_cast<int64_t>(referenceTop);
  };
  for (const Prompt &prompt : prompts) {
    std::vector<int64_t> candidateShape, referenceShape;
    std::vector<float> c = candidate.runPrompt(prompt, candidateShape);
    std::vector<float> r = reference.runPrompt(prompt, referenceShape);
    // Teacher-forced with the reference's choice, so both plans see the same sequence.
    std::vector<int64_t> sequence = prompt.ids;
    sequence.push_back(compare(prompt, 0, c, candidateShape, r, referenceShape));
    for (int64_t step = 1; step <= options.decodeSteps; ++step) {
      c = candidate.runStep(prompt, sequence, candidateShape);
      r = reference.runStep(prompt, sequence, referenceShape);
      sequence.push_back(compare(prompt, step, c, candidateShape, r, referenceShape));
    }
  }
  double meanAbs = comparedValues ? sumAbs / comparedValues : 0;
  if (nan)
    maxAbs = meanAbs = std::nan("");
  double top1 = logits ? static_cast<double>(agree) / rows : std::nan("");

  std::string what = logits
                         ? "next-token logits ('" + candidate.comparedName() + "', last position)"
                         : "'" + candidate.comparedName() + "' at every position";
  if (options.decodeSteps > 0)
    what += " after each prompt and " + std::to_string(options.decodeSteps) +
            " decode steps (fed the reference's argmax)";
  if (options.json) {
    std::cout << "{\"candidate\": " << jsonString(options.candidate)
              << ", \"reference\": " << jsonString(options.reference)
              << ", \"candidate_dtype\": " << jsonString(candidate.dtype())
              << ", \"reference_dtype\": " << jsonString(reference.dtype())
              << ", \"program\": " << jsonString(candidate.program())
              << ", \"candidate_device\": " << jsonString(candidate.deviceName())
              << ", \"reference_device\": " << jsonString(reference.deviceName())
              << ", \"compared\": " << jsonString(candidate.comparedName())
              << ", \"prompts\": " << prompts.size()
              << ", \"decode_steps\": " << options.decodeSteps << ", \"rows\": " << rows
              << ", \"values\": " << comparedValues
              << ", \"top1_agree\": " << (logits ? std::to_string(agree) : "null")
              << ", \"top1\": " << jsonNumber(top1) << ", \"max_abs_error\": " << jsonNumber(maxAbs)
              << ", \"mean_abs_error\": " << jsonNumber(meanAbs)
              << ", \"reference_max_abs\": " << jsonNumber(referenceMaxAbs)
              << ", \"nan\": " << (nan ? "true" : "false") << ", \"disagreements\": [";
    for (size_t i = 0; i < disagreements.size(); ++i)
      std::cout << (i ? ", " : "") << "{\"line\": " << disagreements[i].line
                << ", \"step\": " << disagreements[i].step
                << ", \"reference_margin\": " << jsonNumber(disagreements[i].margin) << "}";
    std::cout << "]}\n";
  } else {
    std::cout << "dseval: " << options.candidate << " (" << candidate.dtype() << ", on "
              << candidate.deviceName() << ") against " << options.reference << " ("
              << reference.dtype() << ", on " << reference.deviceName() << "), program '" << candidate.program() << "'"
              << (options.decodeSteps > 0 ? " then 'decode'" : "") << "\n";
    std::cout << "compared: " << what << ", " << prompts.size() << " prompts, " << rows
              << " rows, " << comparedValues << " values\n";
    if (logits) {
      std::cout << "top-1 agreement: " << agree << "/" << rows << " = " << number(top1) << "\n";
      if (!disagreements.empty()) {
        std::cout << "top-1 disagreements (prompt line"
                  << (options.decodeSteps > 0 ? "/decode step" : "")
                  << ": reference logit margin):";
        for (const Disagreement &d : disagreements) {
          std::cout << " " << d.line;
          if (options.decodeSteps > 0)
            std::cout << "/" << d.step;
          std::cout << ": " << number(d.margin);
        }
        std::cout << "\n";
      }
    } else {
      std::cout << "top-1 agreement: n/a (no logits)\n";
    }
    std::cout << "max abs error: " << number(maxAbs);
    if (worstLine > 0 && !nan) {
      std::cout << " (prompt at line " << worstLine;
      if (worstStep > 0)
        std::cout << ", decode step " << worstStep;
      std::cout << ")";
    }
    std::cout << "\nmean abs error: " << number(meanAbs) << "\n";
    std::cout << "reference max |value|: " << number(referenceMaxAbs) << "\n";
    if (nan)
      std::cout << "the candidate or the reference produced NaN\n";
  }

  // A NaN error fails every error bound: !(x <= bound).
  bool ok = true;
  auto violated = [&](const std::string &message) {
    std::cerr << "dseval: bound violated: " << message << "\n";
    ok = false;
  };
  if (!std::isnan(options.minTop1) && !(top1 >= options.minTop1))
    violated("top-1 agreement " + number(top1) + " (" + std::to_string(agree) + "/" +
             std::to_string(rows) + ") is below --min-top1 " + number(options.minTop1));
  if (!std::isnan(options.maxAbsError) && !(maxAbs <= options.maxAbsError))
    violated("max abs error " + number(maxAbs) + " is above --max-abs-error " +
             number(options.maxAbsError));
  if (!std::isnan(options.maxMeanAbsError) && !(meanAbs <= options.maxMeanAbsError))
    violated("mean abs error " + number(meanAbs) + " is above --max-mean-abs-error " +
             number(options.maxMeanAbsError));
  return ok ? 0 : 1;
}
