// dsrt._dsrt: libdsrt's C API (dsrt.h) for Python. The Python modules beside it (dsrt/*.py)
// build the user's API on these thin classes: plans, tokenizers and sessions here, the
// serving engine in engine.cpp. The GIL is released around every call that runs the model
// or waits.
#include "binding.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>

namespace nb = nanobind;
using namespace nb::literals;
using namespace dsrt_python;

namespace dsrt_python {
namespace {

struct Tokenizer {
  dsrt_tokenizer *handle = nullptr;
  ~Tokenizer() { dsrt_tokenizer_free(handle); }

  std::vector<int64_t> encode(const std::string &text, bool addSpecial) const {
    int64_t *ids = nullptr;
    size_t count = 0;
    {
      nb::gil_scoped_release release;
      check(dsrt_tokenizer_encode(handle, text.data(), text.size(), addSpecial ? 1 : 0, &ids,
                                  &count));
    }
    std::vector<int64_t> result(ids, ids + count);
    dsrt_free(ids);
    return result;
  }
  // Bytes, not str: a piece of a byte-level token may end inside a UTF-8 character.
  nb::bytes decodeBytes(const std::vector<int64_t> &ids, bool skipSpecial) const {
    char *text = nullptr;
    check(dsrt_tokenizer_decode(handle, ids.data(), ids.size(), skipSpecial ? 1 : 0, &text));
    nb::bytes result(text, std::strlen(text));
    dsrt_free(text);
    return result;
  }
};

dsrt_dtype dtypeOf(const nb::dlpack::dtype &dtype) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dtype.code);
  switch (dtype.bits) {
  case 8:
    return code == Code::Int ? DSRT_I8 : code == Code::UInt ? DSRT_U8
                                     : code == Code::Bool   ? DSRT_BOOL
                                                            : DSRT_UNDEFINED;
  case 16:
    return code == Code::Float ? DSRT_F16 : code == Code::Bfloat ? DSRT_BF16
                                        : code == Code::Int      ? DSRT_I16
                                        : code == Code::UInt     ? DSRT_U16
                                                                 : DSRT_UNDEFINED;
  case 32:
    return code == Code::Float ? DSRT_F32 : code == Code::Int ? DSRT_I32
                                        : code == Code::UInt  ? DSRT_U32
                                                              : DSRT_UNDEFINED;
  case 64:
    return code == Code::Float ? DSRT_F64 : code == Code::Int ? DSRT_I64
                                        : code == Code::UInt  ? DSRT_U64
                                                              : DSRT_UNDEFINED;
  default:
    return DSRT_UNDEFINED;
  }
}

size_t dtypeBytes(dsrt_dtype dtype) {
  switch (dtype) {
  case DSRT_F64: case DSRT_I64: case DSRT_U64: return 8;
  case DSRT_F32: case DSRT_I32: case DSRT_U32: return 4;
  case DSRT_F16: case DSRT_BF16: case DSRT_I16: case DSRT_U16: return 2;
  default: return 1;
  }
}

// A one-rank session, or every rank of a TP plan on threads of this process (a group):
// outputs are rank 0's.
struct Session {
  std::shared_ptr<Plan> plan;
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;

  Session(std::shared_ptr<Plan> planIn, const std::string &device) : plan(std::move(planIn)) {
    const dsrt_device kind = deviceFromName(device);
    nb::gil_scoped_release release;
    if (dsrt_plan_rank_count(plan->handle) > 1)
      check(dsrt_group_create(plan->handle, kind, &group));
    else
      check(dsrt_session_create(plan->handle, 0, kind, &session));
  }
  ~Session() {
    dsrt_group_destroy(group);
    dsrt_session_destroy(session);
  }

  void setInput(const std::string &program, size_t index,
                nb::ndarray<nb::c_contig, nb::device::cpu> array) {
    const dsrt_dtype dtype = dtypeOf(array.dtype());
    if (dtype == DSRT_UNDEFINED)
      throw DsrtError("DSRT_INVALID_ARGUMENT: input " + std::to_string(index) + " of " +
                      program + " has an element type the plan format has not");
    std::vector<int64_t> shape(array.ndim());
    for (size_t i = 0; i < array.ndim(); ++i)
      shape[i] = static_cast<int64_t>(array.shape(i));
    if (group)
      check(dsrt_group_set_input(group, program.c_str(), index, dtype, shape.data(),
                                 shape.size(), array.data()));
    else
      check(dsrt_session_set_input(session, program.c_str(), index, dtype, shape.data(),
                                   shape.size(), array.data()));
  }
  void run(const std::string &program) {
    nb::gil_scoped_release release;
    check(group ? dsrt_group_run(group, program.c_str())
                : dsrt_session_run(session, program.c_str()));
  }
  // dsrt_generate over the prompts (a static batch: docs/transformer-ops.md,
  // "Generation"): each prompt's new tokens and finish reason ("length", "stop").
  std::vector<std::pair<std::vector<int64_t>, std::string>> generate(
      const std::vector<std::vector<int64_t>> &prompts, int32_t maxNewTokens,
      float temperature, int32_t topK, float topP, uint64_t seed,
      const std::vector<int64_t> &stopTokens, bool ignoreEos, int32_t numBeams,
      float lengthPenalty, int32_t earlyStopping, float repetitionPenalty,
      int32_t noRepeatNgramSize, int32_t minNewTokens, int64_t forcedBos, int64_t forcedEos) {
    dsrt_generate_options options;
    dsrt_generate_options_init(&options);
    options.max_new_tokens = maxNewTokens;
    options.temperature = temperature;
    options.top_k = topK;
    options.top_p = topP;
    options.seed = seed;
    options.stop_tokens = stopTokens.empty() ? nullptr : stopTokens.data();
    options.stop_token_count = stopTokens.size();
    options.ignore_eos = ignoreEos ? 1 : 0;
    options.num_beams = numBeams;
    options.length_penalty = lengthPenalty;
    options.early_stopping = earlyStopping;
    options.repetition_penalty = repetitionPenalty;
    options.no_repeat_ngram_size = noRepeatNgramSize;
    options.min_new_tokens = minNewTokens;
    options.forced_bos_token_id = forcedBos;
    options.forced_eos_token_id = forcedEos;
    std::vector<const int64_t *> pointers;
    std::vector<size_t> lengths;
    for (const auto &prompt : prompts) {
      pointers.push_back(prompt.data());
      lengths.push_back(prompt.size());
    }
    dsrt_generation *generation = nullptr;
    {
      nb::gil_scoped_release release;
      check(group ? dsrt_group_generate(group, prompts.size(), pointers.data(), lengths.data(),
                                        &options, &generation)
                  : dsrt_generate(session, prompts.size(), pointers.data(), lengths.data(),
                                  &options, &generation));
    }
    std::vector<std::pair<std::vector<int64_t>, std::string>> out;
    for (size_t i = 0; i < dsrt_generation_count(generation); ++i) {
      const int64_t *tokens = nullptr;
      size_t count = 0;
      dsrt_finish_reason reason = DSRT_FINISH_LENGTH;
      dsrt_generation_tokens(generation, i, &tokens, &count, &reason);
      out.emplace_back(std::vector<int64_t>(tokens, tokens + count),
                       reason == DSRT_FINISH_STOP ? "stop" : "length");
    }
    dsrt_generation_free(generation);
    return out;
  }
  // (bytes, dtype, shape): numpy builds the array on the Python side (dsrt/session.py).
  std::tuple<nb::bytes, int, std::vector<int64_t>> output(const std::string &program,
                                                          size_t index) {
    dsrt_tensor tensor{};
    check(group ? dsrt_group_get_output(group, program.c_str(), index, &tensor)
                : dsrt_session_get_output(session, program.c_str(), index, &tensor));
    std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.rank);
    size_t elements = 1;
    for (int64_t size : shape)
      elements *= static_cast<size_t>(size);
    return {nb::bytes(static_cast<const char *>(tensor.data), elements * dtypeBytes(tensor.dtype)),
            static_cast<int>(tensor.dtype), shape};
  }
};

} // namespace
} // namespace dsrt_python

NB_MODULE(_dsrt, m) {
  m.doc() = "libdsrt's C API; use the dsrt package's classes (LLM, Tokenizer, Session).";
  nb::exception<DsrtError>(m, "Error", PyExc_RuntimeError);
  m.def("version", [] { return std::string(dsrt_version()); });
  m.def("set_cpu_threads", [](int threads) { check(dsrt_set_cpu_threads(threads)); },
        "threads"_a);
  m.def("cpu_threads", [] { return dsrt_cpu_threads(); });

  nb::class_<Plan>(m, "Plan")
      .def("__init__", [](Plan *self, const std::string &path) { new (self) Plan(path); },
           "path"_a)
      .def_ro("path", &Plan::path)
      .def_prop_ro("rank_count", [](const Plan &p) { return dsrt_plan_rank_count(p.handle); })
      .def_prop_ro("limits", &Plan::limits)
      .def("tokenizer_json", &Plan::tokenizerJson)
      .def("generation_config_json", &Plan::generationConfigJson)
      .def("generate_defaults", &Plan::generateDefaults, "model"_a)
      .def("vocabulary", &Plan::vocabulary)
      .def_prop_ro("model_name",
                   [](const Plan &p) { return std::string(dsrt_plan_model_name(p.handle)); })
      .def("chat_templates", &Plan::chatTemplates)
      .def("special_token", &Plan::specialToken, "name"_a)
      .def("io", &Plan::io, "program"_a, "outputs"_a);

  nb::class_<Tokenizer>(m, "Tokenizer")
      .def_static(
          "from_plan",
          [](const Plan &plan) {
            auto tokenizer = std::make_unique<Tokenizer>();
            check(dsrt_tokenizer_from_plan(plan.handle, &tokenizer->handle));
            return tokenizer.release();
          },
          "plan"_a, nb::rv_policy::take_ownership)
      .def_static(
          "from_file",
          [](const std::string &path) {
            auto tokenizer = std::make_unique<Tokenizer>();
            check(dsrt_tokenizer_from_file(path.c_str(), &tokenizer->handle));
            return tokenizer.release();
          },
          "path"_a, nb::rv_policy::take_ownership)
      .def("encode", &Tokenizer::encode, "text"_a, "add_special"_a)
      .def("decode_bytes", &Tokenizer::decodeBytes, "ids"_a, "skip_special"_a);

  nb::class_<Session>(m, "Session")
      .def(nb::init<std::shared_ptr<Plan>, const std::string &>(), "plan"_a, "device"_a)
      .def("set_input", &Session::setInput, "program"_a, "index"_a, "array"_a)
      .def("run", &Session::run, "program"_a)
      .def("generate", &Session::generate, "prompts"_a, "max_new_tokens"_a,
           "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a, "stop_tokens"_a, "ignore_eos"_a,
           "num_beams"_a, "length_penalty"_a, "early_stopping"_a, "repetition_penalty"_a,
           "no_repeat_ngram_size"_a, "min_new_tokens"_a, "forced_bos_token_id"_a,
           "forced_eos_token_id"_a)
      .def("output", &Session::output, "program"_a, "index"_a);

  bindEngine(m);
}
