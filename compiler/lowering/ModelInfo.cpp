#include "compiler/lowering/ModelInfo.h"

#include "compiler/lowering/ChatTemplates.h"

#include "mlir/IR/Diagnostics.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace mlir;

namespace dsc {
namespace {

const dsp::ProgramT *findProgram(const dsp::PlanT &plan, llvm::StringRef name) {
  for (const auto &program : plan.programs)
    if (program->name == name)
      return program.get();
  return nullptr;
}

// The name of the first tensor in `indices` whose name is one of `candidates`.
std::string findTensor(const dsp::PlanT &plan, const std::vector<int32_t> &indices,
                       std::initializer_list<llvm::StringRef> candidates) {
  for (llvm::StringRef candidate : candidates)
    for (int32_t index : indices)
      if (plan.tensors[index]->name == candidate)
        return candidate.str();
  return "";
}

// "past_key_values.3.key" -> "present.3.key", as the HuggingFace and Optimum exports name
// them.
std::string presentNameOf(llvm::StringRef past) {
  if (!past.consume_front("past_key_values."))
    return "";
  return "present." + past.str();
}

// The file's JSON, or null when it does not exist; malformed JSON is an error.
FailureOr<std::optional<llvm::json::Value>> readJson(const std::string &path, Location loc) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return std::optional<llvm::json::Value>();
  llvm::Expected<llvm::json::Value> value = llvm::json::parse((*buffer)->getBuffer());
  if (!value) {
    std::string message = llvm::toString(value.takeError());
    return emitError(loc) << path << ": not valid JSON: " << message;
  }
  return std::optional<llvm::json::Value>(std::move(*value));
}

// Reads bos/eos/pad token ids; eos_token_id may be one id or a list.
LogicalResult readSpecialTokens(const llvm::json::Value &json, const std::string &path,
                                Location loc, dsp::ModelInfoT &info) {
  const llvm::json::Object *object = json.getAsObject();
  if (!object)
    return emitError(loc) << path << ": expected a JSON object";
  if (std::optional<int64_t> bos = object->getInteger("bos_token_id"))
    info.bos_token_id = *bos;
  if (std::optional<int64_t> pad = object->getInteger("pad_token_id"))
    info.pad_token_id = *pad;
  if (std::optional<int64_t> start = object->getInteger("decoder_start_token_id"))
    info.decoder_start_token_id = *start;
  if (const llvm::json::Value *eos = object->get("eos_token_id")) {
    if (std::optional<int64_t> id = eos->getAsInteger()) {
      info.eos_token_ids = {*id};
    } else if (const llvm::json::Array *ids = eos->getAsArray()) {
      info.eos_token_ids.clear();
      for (const llvm::json::Value &id : *ids) {
        if (!id.getAsInteger())
          return emitError(loc) << path << ": eos_token_id must hold integers";
        info.eos_token_ids.push_back(*id.getAsInteger());
      }
    } else if (eos->kind() != llvm::json::Value::Null) {
      return emitError(loc) << path << ": eos_token_id must be an integer or a list";
    }
  }
  return success();
}

// The positions a model was built for; more tokens index past a learned position table.
LogicalResult checkPositions(const llvm::json::Value &json, const std::string &path,
                             int64_t maxSeqLen, Location loc) {
  const llvm::json::Object *object = json.getAsObject();
  if (!object)
    return success();
  std::optional<int64_t> positions = object->getInteger("max_position_embeddings");
  if (!positions)
    positions = object->getInteger("n_positions");
  if (!positions || maxSeqLen <= *positions)
    return success();
  std::string type = object->getString("model_type").value_or("").str();
  bool learned = type == "gpt2" || type == "opt" || type == "gpt_neo" || type == "bert" ||
                 type == "roberta";
  InFlightDiagnostic diagnostic = learned ? emitError(loc) : emitWarning(loc);
  diagnostic << "--max-seq-len " << maxSeqLen << " is more than the " << *positions
             << " positions of this model (" << path << ")";
  if (learned)
    return diagnostic << "; its position table has no more rows";
  diagnostic << "; it was not trained for longer sequences";
  return success();
}

bool isInteger(dsp::DType dtype) {
  return dtype == dsp::DType::i64 || dtype == dsp::DType::i32;
}

bool isFloating(dsp::DType dtype) {
  return dtype == dsp::DType::f32 || dtype == dsp::DType::f16 || dtype == dsp::DType::bf16;
}

// Whether two dimensions are the same one: the same symbol, or the same static size.
bool sameDim(const dsp::DimT &a, const dsp::DimT &b) {
  if (a.size >= 0 || b.size >= 0)
    return a.size == b.size;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

// Whether `program` uses tensor `index` as token ids: the indices of an embedding lookup
// (a Gather along axis 0 or tfm.embedding), directly or through views and casts.
bool readAsTokenIds(const dsp::ProgramT &program, int32_t index) {
  llvm::SmallVector<int32_t> work = {index};
  llvm::DenseSet<int32_t> seen;
  while (!work.empty()) {
    int32_t value = work.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    for (const auto &step : program.steps) {
      llvm::StringRef op = step->op;
      for (auto [position, input] : llvm::enumerate(step->inputs)) {
        if (input != value)
          continue;
        if ((op == "tfm.embedding" && position == 0) || (op == "Gather" && position == 1))
          return true;
        if (llvm::is_contained({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Cast",
                                "Identity"},
                               op) &&
            position == 0 && !step->outputs.empty())
          work.push_back(step->outputs[0]);
      }
    }
  }
  return false;
}

// An encoder-decoder's roles follow from shapes and use, not from names: exporters and
// users name them differently (optimum: input_ids, encoder_hidden_states,
// encoder_attention_mask; a torch.onnx.export of the decoder with transformers' argument
// names: decoder_input_ids, encoder_hidden_states, attention_mask).
LogicalResult describeEncoderDecoder(const dsp::PlanT &plan, const dsp::ProgramT &encode,
                                     const dsp::ProgramT &decoder, Location loc,
                                     dsp::ModelInfoT &info) {
  auto tensor = [&](int32_t index) -> const dsp::TensorT & { return *plan.tensors[index]; };
  auto isPast = [&](int32_t index) { return !presentNameOf(tensor(index).name).empty(); };
  for (int32_t output : encode.outputs)
    if (isFloating(tensor(output).dtype) && tensor(output).shape.size() == 3) {
      info.encode_output = tensor(output).name;
      break;
    }
  if (info.encode_output.empty())
    return emitError(loc) << "the encoder has no floating-point [batch, sequence, hidden] "
                             "output for the decoder to read";
  for (int32_t input : encode.inputs) {
    const dsp::TensorT &t = tensor(input);
    if (!isInteger(t.dtype) || t.shape.size() != 2)
      return emitError(loc) << "the encoder's input '" << t.name
                            << "' is not [batch, sequence] token ids or a padding mask";
    (readAsTokenIds(encode, input) ? info.encode_input_ids : info.encode_attention_mask) =
        t.name;
  }
  if (info.encode_input_ids.empty())
    return emitError(loc) << "no input of the encoder is read as token ids (by an embedding "
                             "lookup)";

  const dsp::TensorT *states = nullptr;
  for (int32_t input : decoder.inputs)
    if (isFloating(tensor(input).dtype) && tensor(input).shape.size() == 3 && !isPast(input)) {
      states = &tensor(input);
      info.cross_states = states->name;
    }
  // The importer chose the decoder because it has such an input.
  if (!states)
    return emitError(loc) << "the decoder takes no [batch, sequence, hidden] encoder output";
  for (int32_t output : encode.outputs)
    if (tensor(output).name == info.encode_output &&
        !sameDim(*tensor(output).shape[2], *states->shape[2]))
      return emitError(loc) << "the encoder's output '" << info.encode_output
                            << "' and the decoder's input '" << states->name
                            << "' differ in their hidden size: are they the same model's?";
  for (int32_t input : decoder.inputs) {
    const dsp::TensorT &t = tensor(input);
    if (!isInteger(t.dtype) || t.shape.size() != 2 || isPast(input))
      continue;
    // The padding mask of the encoder's tokens is as long as its hidden states.
    bool encoderLength = sameDim(*t.shape[1], *states->shape[1]) &&
                         !readAsTokenIds(decoder, input);
    std::string &role = encoderLength ? info.cross_mask : info.input_ids;
    if (!role.empty())
      return emitError(loc) << "the decoder's inputs '" << role << "' and '" << t.name
                            << "' both look like its "
                            << (encoderLength ? "encoder padding mask" : "token ids");
    role = t.name;
  }
  if (info.input_ids.empty())
    return emitError(loc) << "the decoder has no [batch, sequence] token ids input";
  if (!info.encode_attention_mask.empty() && info.cross_mask.empty())
    return emitError(loc) << "the encoder takes a padding mask ('"
                          << info.encode_attention_mask
                          << "') but the decoder does not: its cross-attention would read "
                             "the padding";
  return success();
}

} // namespace

LogicalResult describeModel(dsp::PlanT &plan, const std::string &modelDirectory,
                            int64_t maxSeqLen, Location loc) {
  auto info = std::make_unique<dsp::ModelInfoT>();
  const dsp::ProgramT *program = findProgram(plan, "forward");
  if (!program)
    program = findProgram(plan, "prefill");
  if (program) {
    info->input_ids = findTensor(plan, program->inputs, {"input_ids"});
    info->attention_mask = findTensor(plan, program->inputs, {"attention_mask"});
    info->position_ids = findTensor(plan, program->inputs, {"position_ids"});
    // An export that computes its positions takes none, and one of the ids alone no mask;
    // its session programs take both.
    if (const dsp::ProgramT *prefill = findProgram(plan, "prefill")) {
      if (info->position_ids.empty())
        info->position_ids = findTensor(plan, prefill->inputs, {"position_ids"});
      if (info->attention_mask.empty())
        info->attention_mask = findTensor(plan, prefill->inputs, {"attention_mask"});
    }
    info->logits = findTensor(plan, program->outputs, {"logits"});
    if (!info->logits.empty()) {
      for (int32_t index : program->outputs)
        if (plan.tensors[index]->name == info->logits && !plan.tensors[index]->shape.empty())
          info->vocab_size = plan.tensors[index]->shape.back()->size;
    }
    const dsp::ProgramT *encode = findProgram(plan, "encode");
    if (encode) {
      info->input_ids.clear();
      info->attention_mask.clear();
      info->position_ids.clear();
      if (failed(describeEncoderDecoder(plan, *encode, *program, loc, *info)))
        return failure();
      // The session programs (dsc-derive-cache-programs) take the decoder's own padding
      // mask and positions beside what the export takes.
      if (const dsp::ProgramT *prefill = findProgram(plan, "prefill"))
        for (int32_t input : prefill->inputs) {
          const dsp::TensorT &t = *plan.tensors[input];
          if (!isInteger(t.dtype) || t.shape.size() != 2 || t.name == info->input_ids ||
              t.name == info->cross_mask)
            continue;
          (t.name == "position_ids" ? info->position_ids : info->attention_mask) = t.name;
        }
      if (info->logits.empty() || info->vocab_size <= 0)
        return emitError(loc) << "the decoder has no logits output [batch, sequence, vocab]";
    }
    info->kind = encode ? "encoder-decoder"
                 : !info->input_ids.empty() && !info->logits.empty() && info->vocab_size > 0
                     ? "decoder"
                 : !info->input_ids.empty() ? "encoder"
                                            : "";
    if (findProgram(plan, "forward") == program) {
      for (int32_t input : program->inputs) {
        std::string present = presentNameOf(plan.tensors[input]->name);
        if (present.empty())
          continue;
        if (findTensor(plan, program->outputs, {present}).empty())
          return emitError(loc) << "past input '" << plan.tensors[input]->name
                                << "' has no present output '" << present << "'";
        auto pair = std::make_unique<dsp::KvPairT>();
        pair->past = plan.tensors[input]->name;
        pair->present = present;
        info->kv_pairs.push_back(std::move(pair));
      }
    }
  }

  if (!modelDirectory.empty()) {
    // ONNX Runtime GenAI's builder writes genai_config.json instead of transformers' files
    // (docs/ortgenai.md): its "model" object holds the same token ids.
    llvm::SmallString<256> genai(modelDirectory);
    llvm::sys::path::append(genai, "genai_config.json");
    FailureOr<std::optional<llvm::json::Value>> genaiJson = readJson(genai.str().str(), loc);
    if (failed(genaiJson))
      return failure();
    if (*genaiJson)
      if (const llvm::json::Object *top = (*genaiJson)->getAsObject())
        if (const llvm::json::Value *model = top->get("model"))
          if (failed(readSpecialTokens(*model, genai.str().str(), loc, *info)))
            return failure();
    // generation_config.json's tokens override config.json's, as in transformers.
    for (const char *name : {"config.json", "generation_config.json"}) {
      llvm::SmallString<256> path(modelDirectory);
      llvm::sys::path::append(path, name);
      FailureOr<std::optional<llvm::json::Value>> json = readJson(path.str().str(), loc);
      if (failed(json))
        return failure();
      if (*json && failed(readSpecialTokens(**json, path.str().str(), loc, *info)))
        return failure();
      if (*json && llvm::StringRef(name) == "generation_config.json" &&
          (*json)->getAsObject()) {
        auto buffer = llvm::MemoryBuffer::getFile(path);
        llvm::StringRef bytes = (*buffer)->getBuffer();
        plan.generation_config_json.assign(bytes.bytes_begin(), bytes.bytes_end());
      }
      if (*json && llvm::StringRef(name) == "config.json" &&
          failed(checkPositions(**json, path.str().str(), maxSeqLen, loc)))
        return failure();
    }
    llvm::SmallString<256> path(modelDirectory);
    llvm::sys::path::append(path, "tokenizer.json");
    FailureOr<std::optional<llvm::json::Value>> tokenizer = readJson(path.str().str(), loc);
    if (failed(tokenizer))
      return failure();
    if (*tokenizer) {
      auto buffer = llvm::MemoryBuffer::getFile(path);
      llvm::StringRef bytes = (*buffer)->getBuffer();
      plan.tokenizer_json.assign(bytes.bytes_begin(), bytes.bytes_end());
    }
    if (failed(readChatTemplates(plan, modelDirectory, loc)))
      return failure();
  }
  plan.model = std::move(info);
  return success();
}

namespace {
// config.json beside the model as a JSON object; none when it is missing or not an object
// (describeModel reports a malformed one).
std::optional<llvm::json::Object> configObject(const std::string &modelDirectory,
                                               llvm::StringRef file = "config.json") {
  llvm::SmallString<256> path(modelDirectory);
  llvm::sys::path::append(path, file);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return std::nullopt;
  llvm::Expected<llvm::json::Value> json = llvm::json::parse((*buffer)->getBuffer());
  if (!json) {
    llvm::consumeError(json.takeError());
    return std::nullopt;
  }
  if (llvm::json::Object *object = json->getAsObject())
    return std::move(*object);
  return std::nullopt;
}
} // namespace

std::optional<int64_t> configuredPositions(const std::string &modelDirectory) {
  std::optional<llvm::json::Object> object = configObject(modelDirectory);
  if (!object) {
    // ONNX Runtime GenAI's builder: genai_config.json's model.context_length.
    std::optional<llvm::json::Object> genai = configObject(modelDirectory, "genai_config.json");
    const llvm::json::Object *model = genai ? genai->getObject("model") : nullptr;
    std::optional<int64_t> length = model ? model->getInteger("context_length") : std::nullopt;
    return length && *length > 0 ? length : std::nullopt;
  }
  // The names families give their length: most, GPT-2 (and n_ctx), MPT, ChatGLM/Qwen-1.
  for (const char *key : {"max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                          "seq_length", "max_sequence_length"})
    if (std::optional<int64_t> positions = object->getInteger(key))
      return *positions > 0 ? positions : std::nullopt;
  return std::nullopt;
}

std::optional<double> configuredNormEpsilon(const std::string &modelDirectory) {
  std::optional<llvm::json::Object> object = configObject(modelDirectory);
  if (!object)
    return std::nullopt;
  // The names families give it: Llama and most (rms_norm_eps), BERT and GPT-NeoX
  // (layer_norm_eps), GPT-2 and Falcon (layer_norm_epsilon), Cohere, StableLM.
  for (const char *key : {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
                          "norm_epsilon", "rms_norm_epsilon"})
    if (std::optional<double> epsilon = object->getNumber(key))
      return *epsilon > 0 && std::isfinite(*epsilon) ? epsilon : std::nullopt;
  return std::nullopt;
}

void describeVocabularyShards(dsp::PlanT &plan, llvm::ArrayRef<int64_t> vocabSizes) {
  if (!plan.model)
    return;
  for (const char *name : {"prefill_greedy", "decode_greedy"}) {
    const dsp::ProgramT *program = findProgram(plan, name);
    if (!program || findTensor(plan, program->outputs, {"local_logits"}).empty())
      return;
  }
  plan.model->local_logits = "local_logits";
  int64_t offset = 0;
  for (int64_t size : vocabSizes) {
    plan.model->rank_vocab_offsets.push_back(offset);
    plan.model->rank_vocab_sizes.push_back(size);
    offset += size;
  }
}

} // namespace dsc
