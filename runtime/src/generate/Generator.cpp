#include "generate/Generator.h"
#include "generate/GenerateRun.h"
#include "generate/RequestAgreement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

namespace dsrt {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

std::string dimSymbol(const dsp::Tensor &tensor, uint32_t dim) {
  if (!tensor.shape() || dim >= tensor.shape()->size())
    return "";
  return str(tensor.shape()->Get(dim)->symbol());
}

Shape shapeOf(const dsp::Tensor &tensor) {
  Shape shape;
  if (tensor.shape())
    for (const dsp::Dim *dim : *tensor.shape())
      shape.push_back(dim->size());
  return shape;
}

// A role input's values (token ids, a mask, positions, the cache branch flag) in the dtype
// the plan declares for it: exports write masks as int64, int32, bool or float and ids as
// int64 or int32. A value the dtype cannot hold exactly is an error that names the input;
// the bytes are always exactly as many as the declared dtype needs.
Status encodeRoleInput(const std::string &name, const std::vector<int64_t> &values,
                       DType dtype, std::vector<uint8_t> &bytes) {
  if (exactIntegerLimit(dtype) == 0)
    return Status::error("input '" + name + "' is declared " + dtypeName(dtype) +
                         ", which cannot hold the integers the generator writes there");
  bytes.assign(values.size() * dtypeSize(dtype), 0);
  size_t bad = encodeExactIntegers(values.data(), values.size(), dtype, bytes.data());
  if (bad != values.size())
    return Status::error("input '" + name + "' is declared " + dtypeName(dtype) +
                         ", which cannot hold its value " + std::to_string(values[bad]) +
                         " exactly");
  return Status::ok();
}

} // namespace

namespace generation {

Status Run::chooseMode() {
  model_ = plan_.model();
  encoderDecoder_ = model_ && str(model_->kind()) == "encoder-decoder";
  if (!model_ || (str(model_->kind()) != "decoder" && !encoderDecoder_))
    return Status::error("the plan has no decoder to generate with (its model kind is '" +
                         (model_ ? str(model_->kind()) : std::string()) +
                         "'; generation needs input_ids in and logits out)");
  if (encoderDecoder_ && !session_.program("encode"))
    return Status::error("the plan is an encoder-decoder without an 'encode' program");
  vocab_ = model_->vocab_size();
  if (session_.program("prefill") && session_.program("decode") && session_.hasKvCache())
    mode_ = Mode::SessionCache;
  else if (model_->kv_pairs() && model_->kv_pairs()->size() > 0)
    mode_ = Mode::ForwardWithPairs;
  else
    mode_ = Mode::Recompute;
  logitsWidth_ = vocab_;
  // Tests and curious users can see which path ran.
  if (const char *trace = std::getenv("DSRT_TRACE_GENERATE"); trace && *trace && *trace != '0')
    std::fprintf(stderr, "dsrt: generate: %s%s\n",
                 mode_ == Mode::SessionCache       ? "the session's KV cache (prefill, decode)"
                 : mode_ == Mode::ForwardWithPairs ? "the export's past/present pairs (forward)"
                                                   : "recomputing every token (forward)",
                 encoderDecoder_ ? ", after encode" : "");
  // Beam search reads whole rows (each token's log-probability), not a few candidates. So do
  // the logits processors, or under a distributed argmax each rank's shard of the rows.
  if (options_.numBeams > 1)
    return Status::ok();
  DSRT_RETURN_IF_ERROR(chooseGreedyShard());
  if (options_.processesLogits())
    return Status::ok();
  if (!greedyShard_ && options_.temperature == 0)
    candidates_ = 1;
  else if (!greedyShard_ && options_.topK > 0)
    candidates_ = std::min(options_.topK, logitsWidth_);
  return Status::ok();
}

Status Run::chooseGreedyShard() {
  ops::Collectives *group = options_.group;
  if (!group || group->size() < 2 || options_.temperature != 0 || mode_ != Mode::SessionCache ||
      !session_.program("prefill_greedy") || !session_.program("decode_greedy") ||
      !model_->local_logits() || !model_->rank_vocab_offsets() || !model_->rank_vocab_sizes())
    return Status::ok();
  const auto &offsets = *model_->rank_vocab_offsets();
  const auto &sizes = *model_->rank_vocab_sizes();
  int rank = group->rank();
  if (offsets.size() != static_cast<size_t>(group->size()) || sizes.size() != offsets.size())
    return Status::error("the plan's vocabulary shards are for " +
                         std::to_string(offsets.size()) + " ranks, not the group's " +
                         std::to_string(group->size()));
  int64_t offset = offsets.Get(rank), size = sizes.Get(rank);
  // The packed key holds the global index in 32 bits.
  if (offset < 0 || size < 1 || offset + size > vocab_ || vocab_ > 0xFFFFFFFFll)
    return Status::error("rank " + std::to_string(rank) + "'s vocabulary shard [" +
                         std::to_string(offset) + ", +" + std::to_string(size) +
                         ") is not within the vocabulary of " + std::to_string(vocab_));
  greedyShard_ = true;
  vocabOffset_ = offset;
  logitsWidth_ = size;
  // Tests and curious users can see which path ran.
  if (const char *trace = std::getenv("DSRT_TRACE_GENERATE"); trace && *trace && *trace != '0')
    std::fprintf(stderr,
                 "dsrt: generate: rank %d: greedy by distributed argmax over %d vocabulary "
                 "shards (prefill_greedy, decode_greedy; shard [%lld, +%lld))\n",
                 rank, group->size(), static_cast<long long>(offset),
                 static_cast<long long>(size));
  return Status::ok();
}

Status Run::bindProgram(const char *name, const std::string &logitsName,
                        std::vector<Binding> &bindings, int &logitsOutput) {
  const dsp::Program *program = session_.program(name);
  if (!program)
    return Status::error(std::string("the plan has no program '") + name + "'");
  const auto &tensors = *plan_.tensors();
  bindings.clear();
  size_t inputs = program->inputs() ? program->inputs()->size() : 0;
  for (size_t i = 0; i < inputs; ++i) {
    const dsp::Tensor &tensor = *tensors.Get(program->inputs()->Get(i));
    Binding binding;
    binding.index = i;
    binding.name = str(tensor.name());
    binding.dtype = planDType(tensor.dtype());
    binding.staticShape = shapeOf(tensor);
    std::string tensorName = str(tensor.name());
    if (encoderDecoder_ && tensorName == str(model_->cross_states())) {
      binding.role = Binding::Role::CrossStates;
      encoderLengthSymbol_ = dimSymbol(tensor, 1);
    } else if (encoderDecoder_ && tensorName == str(model_->cross_mask()))
      binding.role = Binding::Role::CrossMask;
    else if (tensorName == str(model_->input_ids()))
      binding.role = Binding::Role::InputIds;
    else if (tensorName == str(model_->attention_mask()))
      binding.role = Binding::Role::AttentionMask;
    else if (tensorName == str(model_->position_ids()))
      binding.role = Binding::Role::PositionIds;
    else if (tensorName == "use_cache_branch")  // Optimum's merged decoders
      binding.role = Binding::Role::UseCacheBranch;
    else if (model_->kv_pairs()) {
      for (const dsp::KvPair *pair : *model_->kv_pairs()) {
        if (str(pair->past()) != tensorName)
          continue;
        binding.role = Binding::Role::Past;
        binding.lengthSymbol = dimSymbol(tensor, 2);
        size_t outputs = program->outputs() ? program->outputs()->size() : 0;
        for (size_t o = 0; o < outputs; ++o)
          if (str(tensors.Get(program->outputs()->Get(o))->name()) == str(pair->present()))
            binding.presentOutput = static_cast<int>(o);
      }
    }
    if (binding.role == Binding::Role::Unknown)
      return Status::error("program '" + std::string(name) + "' input '" + tensorName +
                           "' has no role the generator knows (input ids, attention mask, "
                           "position ids or a past key/value)");
    if (binding.role == Binding::Role::Past &&
        (binding.presentOutput < 0 || binding.staticShape.size() != 4))
      return Status::error("past input '" + tensorName +
                           "' is not [batch, heads, past, head_dim] with a present output");
    bindings.push_back(binding);
  }
  for (Binding &binding : bindings)
    binding.crossAttention = binding.role == Binding::Role::Past &&
                             !encoderLengthSymbol_.empty() &&
                             binding.lengthSymbol == encoderLengthSymbol_;
  logitsOutput = -1;
  size_t outputs = program->outputs() ? program->outputs()->size() : 0;
  for (size_t o = 0; o < outputs; ++o)
    if (str(tensors.Get(program->outputs()->Get(o))->name()) == logitsName)
      logitsOutput = static_cast<int>(o);
  if (logitsOutput < 0)
    return Status::error("program '" + std::string(name) + "' has no output '" + logitsName +
                         "'");
  return Status::ok();
}

Status Run::checkLimits() {
  batch_ = static_cast<int64_t>(prompts_.size());
  if (batch_ == 0)
    return Status::error("no prompts to generate for");
  if (options_.maxNewTokens < 0)
    return Status::error("max_new_tokens must not be negative");
  if (options_.temperature < 0 || !(options_.topP > 0 && options_.topP <= 1) ||
      options_.topK < 0)
    return Status::error("sampling needs temperature >= 0, 0 < top_p <= 1 and top_k >= 0");
  const dsp::Limits *limits = plan_.limits();
  int64_t maxBatch = limits ? limits->max_batch() : 0;
  int64_t maxSeq = limits ? limits->max_seq_len() : 0;
  if (options_.numBeams > 1 && options_.temperature != 0)
    return Status::error("beam search (num_beams " + std::to_string(options_.numBeams) +
                         ") keeps the likeliest sequences: it needs temperature 0");
  if (!std::isfinite(options_.lengthPenalty))
    return Status::error("length_penalty must be finite");
  if (!(options_.repetitionPenalty > 0) || !std::isfinite(options_.repetitionPenalty))
    return Status::error("repetition_penalty must be a finite number above 0");
  if (options_.noRepeatNgramSize < 0 || options_.minNewTokens < 0)
    return Status::error("no_repeat_ngram_size and min_new_tokens must not be negative");
  for (int64_t forced : {options_.forcedBosToken, options_.forcedEosToken})
    if (forced >= vocab_)
      return Status::error("a forced token " + std::to_string(forced) +
                           " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  if (batch_ > maxBatch && options_.numBeams > 1)
    return Status::error("a batch of " + std::to_string(batch_ / options_.numBeams) +
                         " prompts of " + std::to_string(options_.numBeams) + " beams is " +
                         std::to_string(batch_) + " sequences, more than the plan's max_batch "
                         "of " + std::to_string(maxBatch) + "; compile with a larger "
                         "--max-batch");
  if (batch_ > maxBatch)
    return Status::error("a batch of " + std::to_string(batch_) +
                         " prompts is more than the plan's max_batch of " +
                         std::to_string(maxBatch) + "; compile with a larger --max-batch");
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const std::vector<int64_t> &prompt = prompts_[p];
    if (prompt.empty())
      return Status::error("prompt " + std::to_string(p) + " is empty");
    for (int64_t id : prompt)
      if (id < 0 || id >= vocab_)
        return Status::error("prompt " + std::to_string(p) + " has token id " +
                             std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(vocab_) + ")");
    longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(prompt.size()));
  }
  if (encoderDecoder_)
    return checkEncoderDecoderLimits(maxSeq);
  // Left padding puts every prompt at the longest one's length.
  if (longest_ + options_.maxNewTokens > maxSeq)
    return Status::error("prompt length " + std::to_string(longest_) + " + max_new_tokens " +
                         std::to_string(options_.maxNewTokens) + " = " +
                         std::to_string(longest_ + options_.maxNewTokens) +
                         " tokens is more than the plan's max_seq_len of " +
                         std::to_string(maxSeq) + "; compile with a larger --max-seq-len");
  return Status::ok();
}

Status Run::checkEncoderDecoderLimits(int64_t maxSeq) {
  if (longest_ > maxSeq)
    return Status::error("a prompt of " + std::to_string(longest_) +
                         " tokens is more than the plan's max_seq_len of " +
                         std::to_string(maxSeq) + "; compile with a larger --max-seq-len");
  // The decoder starts from one token.
  if (1 + options_.maxNewTokens > maxSeq)
    return Status::error("max_new_tokens " + std::to_string(options_.maxNewTokens) +
                         " + the decoder's start token is more than the plan's max_seq_len "
                         "of " +
                         std::to_string(maxSeq) + "; compile with a larger --max-seq-len");
  int64_t start = model_->decoder_start_token_id();
  if (start < 0 || start >= vocab_)
    return Status::error("the plan's decoder_start_token_id " + std::to_string(start) +
                         " is not in the vocabulary [0, " + std::to_string(vocab_) +
                         "); it comes from config.json beside the model");
  return Status::ok();
}

Status Run::runEncoder() {
  const dsp::Program *program = session_.program("encode");
  const auto &tensors = *plan_.tensors();
  size_t inputs = program->inputs() ? program->inputs()->size() : 0;
  bool masked = false;
  // Right padding, as the T5 and BART tokenizers pad: learned positions (BART) count from
  // the first token, and the padding is masked out.
  int64_t pad = model_->pad_token_id() >= 0 && model_->pad_token_id() < vocab_
                    ? model_->pad_token_id()
                    : 0;
  std::vector<int64_t> ids, mask;
  for (const auto &prompt : prompts_)
    for (int64_t t = 0; t < longest_; ++t) {
      bool real = t < static_cast<int64_t>(prompt.size());
      ids.push_back(real ? prompt[t] : pad);
      mask.push_back(real ? 1 : 0);
    }
  for (size_t i = 0; i < inputs; ++i) {
    const dsp::Tensor &tensor = *tensors.Get(program->inputs()->Get(i));
    std::string name = str(tensor.name());
    const std::vector<int64_t> *values = nullptr;
    if (name == str(model_->encode_input_ids())) {
      values = &ids;
    } else if (name == str(model_->encode_attention_mask())) {
      values = &mask;
      masked = true;
    } else {
      return Status::error("program 'encode' input '" + name +
                           "' is neither the token ids nor the padding mask");
    }
    DType dtype = planDType(tensor.dtype());
    std::vector<uint8_t> bytes;
    DSRT_RETURN_IF_ERROR(encodeRoleInput(name, *values, dtype, bytes));
    DSRT_RETURN_IF_ERROR(
        session_.setInput("encode", i, TensorRef{dtype, {batch_, longest_}, bytes.data()}));
  }
  for (const auto &prompt : prompts_)
    if (!masked && static_cast<int64_t>(prompt.size()) != longest_)
      return Status::error("the encoder takes no padding mask, so prompts of different "
                           "lengths cannot share a batch: generate them separately");
  DSRT_RETURN_IF_ERROR(session_.run("encode"));
  size_t outputs = program->outputs() ? program->outputs()->size() : 0;
  for (size_t o = 0; o < outputs; ++o) {
    if (str(tensors.Get(program->outputs()->Get(o))->name()) != str(model_->encode_output()))
      continue;
    TensorRef states;
    DSRT_RETURN_IF_ERROR(session_.output("encode", o, states));
    if (states.shape.size() != 3 || states.shape[0] != batch_ || states.shape[1] != longest_)
      return Status::error("the encoder's output is " + shapeString(states.shape) + ", not [" +
                           std::to_string(batch_) + ", " + std::to_string(longest_) +
                           ", hidden]");
    const auto *bytes = static_cast<const uint8_t *>(states.data);
    encoderStatesBytes_.assign(bytes, bytes + states.bytes());
    encoderStates_ = TensorRef{states.dtype, states.shape, encoderStatesBytes_.data()};
    encoderMask_ = std::move(mask);
    return Status::ok();
  }
  return Status::error("program 'encode' has no output '" + str(model_->encode_output()) + "'");
}

// Runs `program` on `fresh` new tokens per row (`ids`, [batch, fresh]) and returns each
// row's logits at its last position.
Status Run::runStep(const char *programName, const std::vector<Binding> &bindings,
                    int logitsOutput, const std::vector<int64_t> &ids, int64_t fresh,
                    StepLogits &lastLogits) {
  int64_t total = static_cast<int64_t>(mask_[0].size());
  for (const Binding &binding : bindings) {
    std::vector<int64_t> values;
    Shape shape;
    switch (binding.role) {
    case Binding::Role::InputIds:
      values = ids;
      shape = {batch_, fresh};
      break;
    case Binding::Role::AttentionMask:
      for (const auto &row : mask_)
        values.insert(values.end(), row.begin(), row.end());
      shape = {batch_, total};
      break;
    case Binding::Role::PositionIds:
      for (const auto &row : positions_)
        values.insert(values.end(), row.end() - fresh, row.end());
      shape = {batch_, fresh};
      break;
    case Binding::Role::UseCacheBranch:
      // The cached branch once there is a past to attend to.
      values = {total > fresh ? 1 : 0};
      shape = binding.staticShape;
      for (int64_t &dim : shape)
        dim = 1;
      break;
    case Binding::Role::CrossStates:
      DSRT_RETURN_IF_ERROR(session_.setInput(programName, binding.index, encoderStates_));
      continue;
    case Binding::Role::CrossMask:
      values = encoderMask_;
      shape = {batch_, encoderStates_.shape[1]};
      break;
    case Binding::Role::Past: {
      size_t slot = &binding - bindings.data();
      TensorRef past{binding.dtype, pastShapes_[slot], pastValues_[slot].data()};
      DSRT_RETURN_IF_ERROR(session_.setInput(programName, binding.index, past));
      continue;
    }
    case Binding::Role::Unknown: break;
    }
    std::vector<uint8_t> bytes;
    DSRT_RETURN_IF_ERROR(encodeRoleInput(binding.name, values, binding.dtype, bytes));
    DSRT_RETURN_IF_ERROR(
        session_.setInput(programName, binding.index, TensorRef{binding.dtype, shape, bytes.data()}));
  }
  DSRT_RETURN_IF_ERROR(session_.run(programName));
  if (candidates_ > 0) {
    DSRT_RETURN_IF_ERROR(session_.topLogits(programName, static_cast<size_t>(logitsOutput),
                                            candidates_, lastLogits.values, lastLogits.ids));
    bool shaped = lastLogits.values.size() == static_cast<size_t>(batch_) &&
                  lastLogits.ids.size() == static_cast<size_t>(batch_);
    for (int64_t b = 0; shaped && b < batch_; ++b) {
      shaped = lastLogits.values[b].size() == static_cast<size_t>(candidates_) &&
               lastLogits.ids[b].size() == static_cast<size_t>(candidates_);
      for (int64_t id : lastLogits.ids[b])
        shaped = shaped && id >= 0 && id < logitsWidth_;
    }
    if (!shaped)
      return Status::error("the largest " + std::to_string(candidates_) + " logits of " +
                           programName + " are not " + std::to_string(batch_) +
                           " rows of indices within " + std::to_string(logitsWidth_));
  } else {
    TensorRef logits;
    DSRT_RETURN_IF_ERROR(session_.output(programName, logitsOutput, logits));
    if (logits.shape.empty() || logits.shape[0] != batch_ ||
        logits.shape.back() != logitsWidth_ || !isFloat(logits.dtype))
      return Status::error("logits are " + shapeString(logits.shape) + ", not [" +
                           std::to_string(batch_) + ", ..., " + std::to_string(logitsWidth_) +
                           "]");
    int64_t perRow = logits.elements() / batch_;
    lastLogits.full.assign(batch_, std::vector<float>(logitsWidth_));
    for (int64_t b = 0; b < batch_; ++b) {
      const uint8_t *row = static_cast<const uint8_t *>(logits.data) +
                           (b * perRow + perRow - logitsWidth_) * dtypeSize(logits.dtype);
      convertFloats(logits.dtype, row, DType::F32, lastLogits.full[b].data(), logitsWidth_);
    }
  }
  // The present keys and values become the next step's past.
  for (size_t slot = 0; slot < bindings.size(); ++slot) {
    if (bindings[slot].role != Binding::Role::Past ||
        (bindings[slot].crossAttention && total > fresh))
      continue;
    TensorRef present;
    DSRT_RETURN_IF_ERROR(session_.output(programName, bindings[slot].presentOutput, present));
    // The next step reads these bytes as the past input's dtype.
    if (present.dtype != bindings[slot].dtype)
      return Status::error("present output " + std::to_string(bindings[slot].presentOutput) +
                           " of '" + programName + "' is " + dtypeName(present.dtype) +
                           ", but its past input '" + bindings[slot].name + "' is " +
                           dtypeName(bindings[slot].dtype));
    const auto *bytes = static_cast<const uint8_t *>(present.data);
    pastValues_[slot].assign(bytes, bytes + present.bytes());
    pastShapes_[slot] = present.shape;
  }
  return Status::ok();
}

Status Run::execute(std::vector<GeneratedSequence> &out) {
  StepLogits logits;
  DSRT_RETURN_IF_ERROR(start(logits));
  return options_.numBeams > 1 ? beamLoop(out, logits) : sampleLoop(out, logits);
}

Status Run::start(StepLogits &logits) {
  DSRT_RETURN_IF_ERROR(chooseMode());
  DSRT_RETURN_IF_ERROR(checkLimits());
  // Beam search moves the session's KV rows: a backend that cannot is refused before
  // anything runs (reordering no rows asks it).
  if (options_.numBeams > 1 && mode_ == Mode::SessionCache)
    DSRT_RETURN_IF_ERROR(session_.reorderKvRows({}, 0));
  const char *first = greedyShard_                  ? "prefill_greedy"
                      : mode_ == Mode::SessionCache ? "prefill"
                                                    : "forward";
  next_ = greedyShard_                  ? "decode_greedy"
          : mode_ == Mode::SessionCache ? "decode"
                                        : "forward";
  std::string logitsName = greedyShard_ ? str(model_->local_logits()) : str(model_->logits());
  DSRT_RETURN_IF_ERROR(bindProgram(first, logitsName, firstBindings_, firstLogits_));
  DSRT_RETURN_IF_ERROR(bindProgram(next_, logitsName, nextBindings_, nextLogits_));
  // Without a mask the program would attend the shorter prompts' padding.
  bool masked = std::any_of(firstBindings_.begin(), firstBindings_.end(), [](const Binding &b) {
    return b.role == Binding::Role::AttentionMask;
  });
  for (const auto &prompt : prompts_)
    if (!masked && !encoderDecoder_ && static_cast<int64_t>(prompt.size()) != longest_)
      return Status::error(std::string("program '") + first +
                           "' takes no attention_mask, so prompts of different lengths "
                           "cannot share a batch (they would attend each other's padding): "
                           "generate them separately, or in batches of equal lengths");

  stops_ = options_.stopTokens;
  if (!options_.ignoreEos && model_->eos_token_ids())
    stops_.insert(stops_.end(), model_->eos_token_ids()->begin(), model_->eos_token_ids()->end());
  padToken_ = model_->pad_token_id() >= 0 && model_->pad_token_id() < vocab_
                  ? model_->pad_token_id()
                  : 0;

  // Left padding, as transformers' generate: padding is masked out and does not count as a
  // position, so each row sees what it would see alone.
  mask_.assign(batch_, {});
  positions_.assign(batch_, {});
  tokens_.assign(batch_, {});
  std::vector<int64_t> ids;
  int64_t fresh = longest_;
  if (encoderDecoder_) {
    DSRT_RETURN_IF_ERROR(runEncoder());
    // Every row of the decoder starts from the same one token: nothing to pad.
    fresh = 1;
    for (int64_t b = 0; b < batch_; ++b) {
      mask_[b] = {1};
      positions_[b] = {0};
      tokens_[b] = {model_->decoder_start_token_id()};
      ids.push_back(model_->decoder_start_token_id());
    }
  } else {
    for (int64_t b = 0; b < batch_; ++b) {
      int64_t padding = longest_ - static_cast<int64_t>(prompts_[b].size());
      for (int64_t t = 0; t < longest_; ++t) {
        bool real = t >= padding;
        mask_[b].push_back(real ? 1 : 0);
        positions_[b].push_back(real ? t - padding : 1);
        tokens_[b].push_back(real ? prompts_[b][t - padding] : padToken_);
      }
      ids.insert(ids.end(), tokens_[b].begin(), tokens_[b].end());
    }
  }

  if (mode_ == Mode::ForwardWithPairs) {
    pastValues_.assign(firstBindings_.size(), {});
    pastShapes_.assign(firstBindings_.size(), {});
    for (size_t slot = 0; slot < firstBindings_.size(); ++slot) {
      const Binding &binding = firstBindings_[slot];
      if (binding.role != Binding::Role::Past)
        continue;
      // The cross-attention's pairs are as long as the encoder's output from the start (the
      // first step computes them and ignores these zeros); the self-attention's are empty.
      int64_t length = binding.crossAttention ? encoderStates_.shape[1] : 0;
      pastShapes_[slot] = {batch_, binding.staticShape[1], length, binding.staticShape[3]};
      if (pastShapes_[slot][1] < 0 || pastShapes_[slot][3] < 0)
        return Status::error("past input " + std::to_string(binding.index) +
                             " has no static head count and head size");
      pastValues_[slot].assign(static_cast<size_t>(batch_ * pastShapes_[slot][1] * length *
                                                   pastShapes_[slot][3]) *
                                   dtypeSize(binding.dtype),
                               0);
    }
  }
  return runStep(first, firstBindings_, firstLogits_, ids, fresh, logits);
}

std::vector<int64_t> Run::history(int64_t row) const {
  std::vector<int64_t> tokens;
  for (size_t t = 0; t < tokens_[row].size(); ++t)
    if (mask_[row][t])
      tokens.push_back(tokens_[row][t]);
  return tokens;
}

Status Run::advance(const std::vector<int64_t> &chosen, StepLogits &logits) {
  for (int64_t b = 0; b < batch_; ++b) {
    mask_[b].push_back(1);
    positions_[b].push_back(positions_[b].back() + 1);
    tokens_[b].push_back(chosen[b]);
  }
  if (mode_ != Mode::Recompute)
    return runStep(next_, nextBindings_, nextLogits_, chosen, 1, logits);
  std::vector<int64_t> ids;
  for (const auto &row : tokens_)
    ids.insert(ids.end(), row.begin(), row.end());
  return runStep(next_, nextBindings_, nextLogits_, ids, static_cast<int64_t>(tokens_[0].size()),
                 logits);
}

Status Run::sampleLoop(std::vector<GeneratedSequence> &out, StepLogits &logits) {
  out.assign(batch_, {});
  std::vector<bool> done(batch_, options_.maxNewTokens == 0);
  std::vector<uint64_t> rng(batch_);
  for (int64_t b = 0; b < batch_; ++b)
    rng[b] = options_.seed + static_cast<uint64_t>(b);
  for (int64_t step = 0; step < options_.maxNewTokens; ++step) {
    std::vector<int64_t> chosen(batch_, padToken_);
    // Every rank takes part in the all-reduce for every row, finished or not, so that the
    // ranks' calls match.
    // The rows, or under a distributed argmax each rank's shard of them (from vocabOffset_,
    // 0 otherwise), processed before any token is chosen.
    if (options_.processesLogits())
      for (int64_t b = 0; b < batch_; ++b)
        if (!done[b])
          processLogits(options_, history(b), static_cast<int64_t>(out[b].tokens.size()),
                        stops_, logits.full[b].data(), vocabOffset_, logitsWidth_);
    std::vector<int64_t> greedy;
    if (greedyShard_)
      DSRT_RETURN_IF_ERROR(
          distributedArgmax(*options_.group, logits.full, vocabOffset_, greedy));
    // A callback may run on one rank only (rank 0's, which reports the tokens): a sequence
    // any rank's callback stops stops on every rank, so that they run the same steps.
    std::vector<uint64_t> callbackStops(batch_, 0);
    std::vector<bool> ranThisStep(batch_, false);
    for (int64_t b = 0; b < batch_; ++b) {
      if (done[b])
        continue;
      ranThisStep[b] = true;
      int64_t token =
          greedyShard_ ? greedy[b]
          : candidates_ > 0
              ? sampleFromCandidates(logits.values[b].data(), logits.ids[b].data(),
                                     logits.values[b].size(), options_, rng[b])
              : sampleToken(logits.full[b], options_, rng[b]);
      chosen[b] = token;
      out[b].tokens.push_back(token);
      if (std::find(stops_.begin(), stops_.end(), token) != stops_.end()) {
        done[b] = true;
        out[b].reason = FinishReason::Stop;
      }
      if (options_.onToken && options_.onToken(static_cast<size_t>(b), token))
        callbackStops[b] = 1;
    }
    if (shareStops_)
      DSRT_RETURN_IF_ERROR(options_.group->allReduceMax(callbackStops.data(), batch_));
    bool anyRunning = false;
    for (int64_t b = 0; b < batch_; ++b) {
      if (!ranThisStep[b])
        continue;
      if (callbackStops[b] && !done[b]) {
        done[b] = true;
        out[b].reason = FinishReason::Callback;
      }
      if (static_cast<int64_t>(out[b].tokens.size()) == options_.maxNewTokens)
        done[b] = true;
      anyRunning |= !done[b];
    }
    if (!anyRunning)
      break;
    // Finished rows keep running (the batch moves together) on padding they never read.
    DSRT_RETURN_IF_ERROR(advance(chosen, logits));
  }
  return Status::ok();
}

} // namespace generation

Status generate(Session &session, const std::vector<std::vector<int64_t>> &prompts,
                const GenerateOptions &options, std::vector<GeneratedSequence> &out) {
  bool anyCallback = false;
  if (options.group && options.group->size() > 1) {
    Status agreed = checkRanksAgree(*options.group, prompts, options, anyCallback);
    if (!agreed.isOk())
      return Status::error("generate: " + agreed.message());
  }
  if (options.numBeams < 1 || options.numBeams > kMaxBeams)
    return Status::error("generate: num_beams must be in [1, " + std::to_string(kMaxBeams) +
                         "], not " + std::to_string(options.numBeams));
  // Beam search runs numBeams rows of each prompt.
  std::vector<std::vector<int64_t>> rows;
  if (options.numBeams > 1)
    for (const auto &prompt : prompts)
      rows.insert(rows.end(), static_cast<size_t>(options.numBeams), prompt);
  generation::Run run(session, options.numBeams > 1 ? rows : prompts, options, anyCallback);
  std::vector<GeneratedSequence> result;
  Status status = run.execute(result);
  if (!status.isOk())
    return Status::error("generate: " + status.message());
  out = std::move(result);
  return Status::ok();
}

} // namespace dsrt
