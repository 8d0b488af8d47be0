// The plan's role inputs (issue 46): what the generator and the serving engine write into a
// program (token ids, masks, positions, the cache branch flag, an encoder's output, the
// export's past keys and values) must be something they can write, in the dtype and rank
// the plan declares. A model file can declare any dtype for its graph inputs; a plan whose
// mask is bf16 still runs (the mask is written as bf16 ones and zeros), one whose token ids
// are bf16 cannot, and is refused here, when the plan is opened or written, instead of at
// the first step.
#include "plan/PlanFile.h"

#include <string>
#include <string_view>

namespace dsrt {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

enum class Role { None, TokenIds, Mask, Positions, CacheBranch, EncoderStates, Past, Present };

struct RoleRule {
  Role role = Role::None;
  const char *what = "";
};

class RoleChecker {
public:
  RoleChecker(const std::string &name, const dsp::Plan &plan, const dsp::ModelInfo &model)
      : name_(name), plan_(plan), model_(model) {}

  Status run() {
    const auto *programs = plan_.programs();
    const auto *tensors = plan_.tensors();
    if (!programs || !tensors)
      return Status::ok();
    for (const dsp::Program *program : *programs) {
      std::string where = "program '" + str(program->name()) + "'";
      if (program->inputs())
        for (int32_t index : *program->inputs())
          DSRT_RETURN_IF_ERROR(check(where, "input", *tensors->Get(index)));
      if (program->outputs())
        for (int32_t index : *program->outputs())
          DSRT_RETURN_IF_ERROR(check(where, "output", *tensors->Get(index)));
    }
    return Status::ok();
  }

private:
  RoleRule roleOf(const std::string &tensor, bool input) const {
    auto is = [&](const flatbuffers::String *name) {
      return name && name->size() > 0 && tensor == name->string_view();
    };
    if (input) {
      if (is(model_.input_ids()) || is(model_.encode_input_ids()))
        return {Role::TokenIds, "the token ids"};
      if (is(model_.attention_mask()) || is(model_.encode_attention_mask()) ||
          is(model_.cross_mask()))
        return {Role::Mask, "a padding mask"};
      if (is(model_.position_ids()))
        return {Role::Positions, "the positions"};
      if (is(model_.cross_states()))
        return {Role::EncoderStates, "the encoder's output"};
      if (tensor == "use_cache_branch")  // optimum's merged decoders
        return {Role::CacheBranch, "the cache branch flag"};
    }
    if (model_.kv_pairs())
      for (const dsp::KvPair *pair : *model_.kv_pairs()) {
        if (input && is(pair->past()))
          return {Role::Past, "a past key or value"};
        if (!input && is(pair->present()))
          return {Role::Present, "a present key or value"};
      }
    return {};
  }

  Status check(const std::string &where, const char *direction, const dsp::Tensor &tensor) {
    std::string tensorName = str(tensor.name());
    RoleRule rule = roleOf(tensorName, std::string_view(direction) == "input");
    if (rule.role == Role::None)
      return Status::ok();
    DType dtype = planDType(tensor.dtype());
    size_t rank = tensor.shape() ? tensor.shape()->size() : 0;
    std::string at = name_ + ": " + where + " " + direction + " '" + tensorName + "' (" +
                     rule.what + ")";
    auto needRank = [&](size_t expected, const char *layout) {
      if (rank == expected)
        return Status::ok();
      return Status::error(at + " has rank " + std::to_string(rank) + "; the runtime writes " +
                           layout);
    };
    switch (rule.role) {
    case Role::TokenIds: {
      int64_t vocab = model_.vocab_size();
      uint64_t largest = vocab > 0 ? static_cast<uint64_t>(vocab - 1) : 0;
      if (!isInteger(dtype) || exactIntegerLimit(dtype) < largest)
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             "; token ids need an integer dtype that holds the vocabulary's " +
                             std::to_string(vocab) + " ids (int64 or int32)");
      return needRank(2, "[batch, tokens]");
    }
    case Role::Mask:
      // Exports write masks as int64, int32, bool or float: any dtype that holds 0 and 1.
      if (exactIntegerLimit(dtype) == 0)
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             "; a mask needs an integer, bool or float dtype");
      return needRank(2, "[batch, length]");
    case Role::Positions: {
      int64_t maxSeq = plan_.limits() ? plan_.limits()->max_seq_len() : 0;
      uint64_t largest = maxSeq > 0 ? static_cast<uint64_t>(maxSeq) : 0;
      if (dtype == DType::Bool || exactIntegerLimit(dtype) < largest)
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             ", which cannot hold every position below the plan's max_seq_len "
                             "of " + std::to_string(maxSeq) + " exactly");
      return needRank(2, "[batch, tokens]");
    }
    case Role::CacheBranch:
      if (dtype != DType::Bool && !isInteger(dtype))
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             "; the flag needs a bool or integer dtype");
      if (tensor.shape())
        for (const dsp::Dim *dim : *tensor.shape())
          if (dim->size() > 1)
            return Status::error(at + " has a dimension of " + std::to_string(dim->size()) +
                                 "; the flag is one value");
      return Status::ok();
    case Role::EncoderStates:
      if (!isFloat(dtype))
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             "; the encoder's output is a float tensor");
      return needRank(3, "[batch, length, hidden]");
    case Role::Past:
    case Role::Present:
      if (!isFloat(dtype))
        return Status::error(at + " is declared " + dtypeName(dtype) +
                             "; keys and values are float tensors");
      DSRT_RETURN_IF_ERROR(needRank(4, "[batch, heads, length, head_dim]"));
      return checkPairDtypes(at, tensorName, dtype);
    case Role::None: break;
    }
    return Status::ok();
  }

  // A present output becomes the next step's past input byte for byte.
  Status checkPairDtypes(const std::string &at, const std::string &tensorName, DType dtype) {
    for (const dsp::KvPair *pair : *model_.kv_pairs()) {
      bool past = str(pair->past()) == tensorName, present = str(pair->present()) == tensorName;
      if (!past && !present)
        continue;
      const std::string other = past ? str(pair->present()) : str(pair->past());
      for (const dsp::Tensor *candidate : *plan_.tensors())
        if (str(candidate->name()) == other && planDType(candidate->dtype()) != dtype)
          return Status::error(at + " is " + dtypeName(dtype) + " but its pair '" + other +
                               "' is " + dtypeName(planDType(candidate->dtype())) +
                               "; a present output becomes the next step's past input");
    }
    return Status::ok();
  }

  const std::string &name_;
  const dsp::Plan &plan_;
  const dsp::ModelInfo &model_;
};

} // namespace

Status verifyRoleInputs(const std::string &name, const dsp::Plan &plan) {
  const dsp::ModelInfo *model = plan.model();
  // Only what the generator drives: an encoder's inputs are the caller's to write.
  if (!model || !model->kind() ||
      (model->kind()->string_view() != "decoder" &&
       model->kind()->string_view() != "encoder-decoder"))
    return Status::ok();
  return RoleChecker(name, plan, *model).run();
}

} // namespace dsrt
