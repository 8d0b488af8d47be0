// The C API over PlanFile and Session (include/dsrt/dsrt.h).
#include "dsrt/dsrt.h"

#include "Status.h"
#include "session/Session.h"
#include "core/LibraryLoader.h"
#include "cuda/CudaDriver.h"
#include "generate/Generator.h"
#include "ops/Ops.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/FastKernels.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <utility>

#include "PlanHandle.h"     // struct dsrt_plan
#include "SessionHandle.h"  // struct dsrt_session, dsrt_generation


namespace {

dsrt_status fromStatus(const dsrt::Status &status, dsrt_status code) {
  return status.isOk() ? DSRT_OK : dsrt::fail(code, status.message());
}

dsrt_status nullArgument(const char *what) {
  return dsrt::fail(DSRT_INVALID_ARGUMENT, std::string(what) + " is null");
}

const dsp::Program *findProgram(const dsp::Plan &plan, const char *name) {
  if (!plan.programs() || !name)
    return nullptr;
  for (const dsp::Program *program : *plan.programs())
    if (program->name() && program->name()->str() == name)
      return program;
  return nullptr;
}

// The number of CUDA devices; with none, the reason becomes this thread's last error.
int cudaDeviceCount() {
  std::string whyNot;
  int count = dsrt::cuda::availableDeviceCount(&whyNot);
  if (count <= 0) {
    dsrt::fail(DSRT_UNSUPPORTED, whyNot.empty() ? "no CUDA device" : whyNot);
    return 0;
  }
  return count;
}

} // namespace

namespace dsrt {

dsrt_status toGenerateOptions(const dsrt_generate_options *options, GenerateOptions &out) {
  if (!options)
    return nullArgument("options");
  if (options->struct_size != sizeof(dsrt_generate_options))
    return fail(DSRT_INVALID_ARGUMENT,
                "options.struct_size does not match this library's dsrt_generate_options; "
                "call dsrt_generate_options_init first");
  if (options->stop_token_count && !options->stop_tokens)
    return nullArgument("options.stop_tokens");
  out.maxNewTokens = options->max_new_tokens;
  out.temperature = options->temperature;
  out.topK = options->top_k;
  out.topP = options->top_p;
  out.seed = options->seed;
  out.stopTokens.assign(options->stop_tokens, options->stop_tokens + options->stop_token_count);
  out.ignoreEos = options->ignore_eos != 0;
  out.numBeams = options->num_beams;
  out.lengthPenalty = options->length_penalty;
  if (options->early_stopping < 0 || options->early_stopping > 2)
    return fail(DSRT_INVALID_ARGUMENT, "options.early_stopping must be 0 (transformers' "
                "default), 1 (true) or 2 (\"never\"), not " +
                std::to_string(options->early_stopping));
  out.earlyStopping = static_cast<GenerateOptions::EarlyStopping>(options->early_stopping);
  out.repetitionPenalty = options->repetition_penalty;
  out.noRepeatNgramSize = options->no_repeat_ngram_size;
  out.minNewTokens = options->min_new_tokens;
  out.forcedBosToken = options->forced_bos_token_id;
  out.forcedEosToken = options->forced_eos_token_id;
  if (options->on_token) {
    dsrt_token_callback callback = options->on_token;
    void *user = options->user_data;
    out.onToken = [callback, user](size_t sequence, int64_t token) {
      return callback(user, sequence, token) != 0;
    };
  }
  return DSRT_OK;
}

dsrt_status toPrompts(size_t count, const int64_t *const *prompts, const size_t *lengths,
                      std::vector<std::vector<int64_t>> &out) {
  if (count && (!prompts || !lengths))
    return nullArgument(!prompts ? "prompts" : "lengths");
  out.assign(count, {});
  for (size_t i = 0; i < count; ++i) {
    if (lengths[i] && !prompts[i])
      return nullArgument("a prompt");
    out[i].assign(prompts[i], prompts[i] + lengths[i]);
  }
  return DSRT_OK;
}

} // namespace dsrt

extern "C" {

dsrt_status dsrt_plan_open(const char *path, dsrt_plan **out) {
  if (!path || !out)
    return nullArgument(!path ? "path" : "out");
  std::unique_ptr<dsrt::PlanFile> file;
  dsrt::Status status = dsrt::PlanFile::open(path, file);
  if (!status.isOk())
    return dsrt::fail(DSRT_CORRUPT_PLAN, status.message());
  auto plan = std::make_unique<dsrt_plan>();
  plan->file = std::move(file);
  if (const auto *tensors = plan->file->plan().tensors()) {
    for (const dsp::Tensor *tensor : *tensors) {
      std::vector<int64_t> shape;
      if (tensor->shape())
        for (const dsp::Dim *dim : *tensor->shape())
          shape.push_back(dim->size());
      plan->shapes.push_back(std::move(shape));
    }
  }
  *out = plan.release();
  return DSRT_OK;
}

void dsrt_plan_close(dsrt_plan *plan) { delete plan; }

int dsrt_plan_rank_count(const dsrt_plan *plan) { return plan ? plan->file->rankCount() : 0; }

dsrt_status dsrt_plan_program_weight_bytes(const dsrt_plan *plan, int rank, const char *program,
                                           uint64_t *bytes) {
  if (!plan || !program || !bytes)
    return nullArgument(!plan ? "plan" : !program ? "program" : "bytes");
  uint64_t total = 0;
  dsrt::Status status = dsrt::programWeightBytes(plan->file->plan(), rank, program, total);
  if (!status.isOk())
    return dsrt::fail(DSRT_INVALID_ARGUMENT, status.message());
  *bytes = total;
  return DSRT_OK;
}

dsrt_status dsrt_plan_io_count(const dsrt_plan *plan, const char *program, int is_output,
                               size_t *count) {
  if (!plan || !count)
    return nullArgument(!plan ? "plan" : "count");
  const dsp::Program *found = findProgram(plan->file->plan(), program);
  if (!found)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      std::string("the plan has no program '") + (program ? program : "") + "'");
  auto *list = is_output ? found->outputs() : found->inputs();
  *count = list ? list->size() : 0;
  return DSRT_OK;
}

dsrt_status dsrt_plan_io_info(const dsrt_plan *plan, const char *program, int is_output,
                              size_t index, dsrt_tensor *info) {
  size_t count;
  if (dsrt_status status = dsrt_plan_io_count(plan, program, is_output, &count))
    return status;
  if (!info)
    return nullArgument("info");
  if (index >= count)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "index " + std::to_string(index) +
                                                 " is out of range (" + std::to_string(count) +
                                                 ")");
  const dsp::Plan &header = plan->file->plan();
  const dsp::Program *found = findProgram(header, program);
  int tensorIndex = (is_output ? found->outputs() : found->inputs())->Get(index);
  const dsp::Tensor *tensor = header.tensors()->Get(tensorIndex);
  info->name = tensor->name() ? tensor->name()->c_str() : "";
  info->dtype = static_cast<dsrt_dtype>(tensor->dtype());
  info->rank = tensor->shape() ? tensor->shape()->size() : 0;
  info->shape = plan->shapes[tensorIndex].data();
  info->data = nullptr;
  return DSRT_OK;
}

dsrt_status dsrt_device_from_name(const char *name, dsrt_device *out) {
  if (!name || !out)
    return nullArgument(!name ? "name" : "out");
  for (dsrt_device device : {DSRT_DEVICE_CPU, DSRT_DEVICE_CUDA, DSRT_DEVICE_CPU_REFERENCE})
    if (std::string(name) == dsrt_device_to_name(device)) {
      *out = device;
      return DSRT_OK;
    }
  return dsrt::fail(DSRT_INVALID_ARGUMENT, std::string("the device is 'cpu', 'cuda' or "
                                                       "'cpu-reference', not '") + name + "'");
}

const char *dsrt_device_to_name(dsrt_device device) {
  switch (device) {
  case DSRT_DEVICE_CPU: return "cpu";
  case DSRT_DEVICE_CUDA: return "cuda";
  case DSRT_DEVICE_CPU_REFERENCE: return "cpu-reference";
  }
  return "unknown";
}

dsrt_status dsrt_session_create(dsrt_plan *plan, int rank, dsrt_device device,
                                dsrt_session **out) {
  if (!plan || !out)
    return nullArgument(!plan ? "plan" : "out");
  if (!dsrt::knownDevice(device))
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "unknown device " + std::to_string(device));
  std::unique_ptr<dsrt::Session> session;
  dsrt::Status status = dsrt::createSession(plan->file, rank, dsrt::deviceKind(device), nullptr, session);
  if (!status.isOk())
    return dsrt::fail(status.message().find("rank") != std::string::npos &&
                              status.message().find("does not exist") != std::string::npos
                          ? DSRT_INVALID_ARGUMENT
                          : DSRT_CORRUPT_PLAN,
                      status.message());
  *out = new (std::nothrow) dsrt_session{nullptr, std::move(session), {}, device, rank};
  return *out ? DSRT_OK : dsrt::fail(DSRT_OUT_OF_MEMORY, "out of memory");
}

void dsrt_session_destroy(dsrt_session *session) { delete session; }

dsrt_status dsrt_session_set_input(dsrt_session *session, const char *program, size_t index,
                                   dsrt_dtype dtype, const int64_t *shape, size_t rank,
                                   const void *data) {
  if (!session || !program)
    return nullArgument(!session ? "session" : "program");
  if ((rank && !shape))
    return nullArgument("shape");
  dsrt::TensorRef value{static_cast<dsrt::DType>(dtype), dsrt::Shape(shape, shape + rank),
                        const_cast<void *>(data)};
  if (value.elements() < 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "the shape has a negative dimension");
  if (value.elements() > 0 && !data)
    return nullArgument("data");
  return fromStatus(session->session->setInput(program, index, value), DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_session_run(dsrt_session *session, const char *program) {
  if (!session || !program)
    return nullArgument(!session ? "session" : "program");
  return fromStatus(session->session->run(program), DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_session_get_output(dsrt_session *session, const char *program, size_t index,
                                    dsrt_tensor *out) {
  if (!session || !program || !out)
    return nullArgument(!session ? "session" : !program ? "program" : "out");
  dsrt::TensorRef tensor;
  if (dsrt_status status = fromStatus(session->session->output(program, index, tensor),
                                      DSRT_INVALID_ARGUMENT))
    return status;
  session->outputShape = tensor.shape;
  const dsp::Program *found = session->session->program(program);
  const dsp::Tensor *desc =
      session->session->plan().plan().tensors()->Get(found->outputs()->Get(index));
  out->name = desc->name() ? desc->name()->c_str() : "";
  out->dtype = static_cast<dsrt_dtype>(tensor.dtype);
  out->rank = tensor.shape.size();
  out->shape = session->outputShape.data();
  out->data = tensor.data;
  return DSRT_OK;
}

int dsrt_cuda_device_count(void) { return cudaDeviceCount(); }

const char *dsrt_cpu_kernels(void) {
  static const std::string described = [] {
    __builtin_cpu_init();
    std::string cpu = "cpu";
    const std::pair<const char *, bool> features[] = {
        {"avx2", __builtin_cpu_supports("avx2")},
        {"avx512f", __builtin_cpu_supports("avx512f")},
        {"avx512bw", __builtin_cpu_supports("avx512bw")},
        {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
        {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
        {"amx-bf16", __builtin_cpu_supports("amx-bf16")},
        {"amx-int8", __builtin_cpu_supports("amx-int8")}};
    for (const auto &[name, present] : features)
      if (present)
        cpu += std::string(" ") + name;
    return cpu + "; kernels: " + dsrt::ops::fast::linearKernelsDescription() +
           "; prompt attention: " + dsrt::ops::attention::tiledAttentionDescription();
  }();
  return described.c_str();
}

dsrt_status dsrt_set_cpu_threads(int threads) {
  if (threads < 0 || threads > 4096)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "the CPU threads must be 0 (the CPUs this process "
                                             "may run on) to 4096, not " +
                                                 std::to_string(threads));
  dsrt::ops::setThreadCount(threads);
  return DSRT_OK;
}

int dsrt_cpu_threads(void) { return dsrt::ops::parallelThreads(); }

const char *dsrt_gpu_library(const char *name) {
  if (!name) {
    nullArgument("name");
    return nullptr;
  }
  std::string which = name;
  dsrt::LibrarySpec spec;
  if (which == "libcuda")
    spec = dsrt::cudaDriverLibrary();
  else if (which == "cublasLt")
    spec = dsrt::cublasLtLibrary();
  else if (which == "nccl")
    spec = dsrt::ncclLibrary();
  else {
    dsrt::fail(DSRT_INVALID_ARGUMENT,
               "'" + which + "' is not a GPU library: libcuda, cublasLt or nccl");
    return nullptr;
  }
  // The same search the backend makes; an opened library stays open (as the backend's do).
  dsrt::LoadedLibrary found = dsrt::findLibrary(spec);
  if (!found.handle) {
    dsrt::fail(DSRT_UNSUPPORTED, found.notFound());
    return nullptr;
  }
  static std::mutex mutex;
  static std::set<std::string> paths;
  std::lock_guard<std::mutex> lock(mutex);
  return paths.insert(found.describe()).first->c_str();
}

dsrt_status dsrt_session_memory(const dsrt_session *session, dsrt_memory *out) {
  if (!session || !out)
    return nullArgument(!session ? "session" : "out");
  dsrt::SessionMemory memory = session->session->memory();
  out->weights = memory.weights;
  out->arena = memory.arena;
  out->kv_cache = memory.kvCache;
  out->other = memory.other;
  return DSRT_OK;
}

dsrt_status dsrt_session_set_strict(dsrt_session *session, int strict) {
  if (!session)
    return nullArgument("session");
  if (strict && session->requested == DSRT_DEVICE_CUDA &&
      session->session->device() != dsrt::DeviceKind::Cuda)
    return dsrt::fail(DSRT_UNSUPPORTED, "strict device mode: the session asked for CUDA "
                                        "runs on the CPU (no usable CUDA device)");
  session->session->setStrict(strict != 0);
  return DSRT_OK;
}

dsrt_status dsrt_session_stats(const dsrt_session *session, dsrt_stats *out) {
  if (!session || !out)
    return nullArgument(!session ? "session" : "out");
  dsrt::SessionStats stats = session->session->stats();
  out->kernel_launches = stats.kernelLaunches;
  out->fallback_steps = stats.fallbackSteps;
  out->graph_captures = stats.graphCaptures;
  out->graph_replays = stats.graphReplays;
  out->bytes_uploaded = stats.bytesUploaded;
  out->bytes_downloaded = stats.bytesDownloaded;
  return DSRT_OK;
}

const char *dsrt_session_device_name(const dsrt_session *session) {
  if (!session)
    return nullptr;
  // Interned: a process sees a handful of device names, and an interned one outlives every
  // session that returned it, without a field in the session handle.
  static std::mutex mutex;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(session->session->deviceName()).first->c_str();
}

dsrt_status dsrt_session_copy_bandwidth(dsrt_session *session, uint64_t bytes,
                                        double *bytes_per_second) {
  if (!session || !bytes_per_second)
    return nullArgument(!session ? "session" : "bytes_per_second");
  if (bytes == 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "the copy measuring bandwidth needs bytes > 0");
  return fromStatus(session->session->measureCopyBandwidth(bytes, *bytes_per_second),
                    DSRT_DEVICE_ERROR);
}

void dsrt_free(void *pointer) { std::free(pointer); }

void dsrt_generate_options_init(dsrt_generate_options *options) {
  if (!options)
    return;
  *options = dsrt_generate_options{};
  options->struct_size = sizeof(dsrt_generate_options);
  options->max_new_tokens = 32;
  options->top_p = 1.0f;
  options->num_beams = 1;
  options->length_penalty = 1.0f;
  options->repetition_penalty = 1.0f;
  options->forced_bos_token_id = -1;
  options->forced_eos_token_id = -1;
}

dsrt_status dsrt_generate_options_from_plan(const dsrt_plan *plan,
                                            dsrt_generate_options *options) {
  if (!plan || !options)
    return nullArgument(!plan ? "plan" : "options");
  dsrt_generate_options_init(options);
  const dsp::Plan &header = plan->file->plan();
  const auto *json = header.generation_config_json();
  if (!json || json->size() == 0)
    return DSRT_OK;
  const bool encoderDecoder =
      header.model() && header.model()->kind() && header.model()->kind()->str() == "encoder-decoder";
  dsrt::GenerateOptions model;
  model.maxNewTokens = options->max_new_tokens;
  model.topP = options->top_p;
  dsrt::Status status = dsrt::modelGenerateDefaults(
      std::string_view(reinterpret_cast<const char *>(json->data()), json->size()),
      encoderDecoder, model);
  if (!status.isOk())
    return dsrt::fail(DSRT_INVALID_ARGUMENT, plan->file->path() + ": " + status.message());
  options->max_new_tokens = static_cast<int32_t>(std::min<int64_t>(model.maxNewTokens, INT32_MAX));
  options->temperature = model.temperature;
  options->top_k = static_cast<int32_t>(std::min<int64_t>(model.topK, INT32_MAX));
  options->top_p = model.topP;
  options->num_beams = static_cast<int32_t>(std::min<int64_t>(model.numBeams, INT32_MAX));
  options->length_penalty = model.lengthPenalty;
  options->early_stopping = static_cast<int32_t>(model.earlyStopping);
  options->repetition_penalty = model.repetitionPenalty;
  options->no_repeat_ngram_size =
      static_cast<int32_t>(std::min<int64_t>(model.noRepeatNgramSize, INT32_MAX));
  options->min_new_tokens = static_cast<int32_t>(std::min<int64_t>(model.minNewTokens, INT32_MAX));
  options->forced_bos_token_id = model.forcedBosToken;
  options->forced_eos_token_id = model.forcedEosToken;
  return DSRT_OK;
}

dsrt_status dsrt_generate(dsrt_session *session, size_t count, const int64_t *const *prompts,
                          const size_t *lengths, const dsrt_generate_options *options,
                          dsrt_generation **out) {
  if (!session || !out)
    return nullArgument(!session ? "session" : "out");
  std::vector<std::vector<int64_t>> batch;
  dsrt::GenerateOptions cpp;
  if (dsrt_status status = dsrt::toPrompts(count, prompts, lengths, batch))
    return status;
  if (dsrt_status status = dsrt::toGenerateOptions(options, cpp))
    return status;
  cpp.group = session->collectives.get();  // an MPI rank's group: the distributed argmax
  auto generation = std::make_unique<dsrt_generation>();
  if (dsrt_status status = fromStatus(
          dsrt::generate(*session->session, batch, cpp, generation->sequences),
          DSRT_INVALID_ARGUMENT))
    return status;
  *out = generation.release();
  return DSRT_OK;
}

size_t dsrt_generation_count(const dsrt_generation *generation) {
  return generation ? generation->sequences.size() : 0;
}

dsrt_status dsrt_generation_tokens(const dsrt_generation *generation, size_t index,
                                   const int64_t **tokens, size_t *count,
                                   dsrt_finish_reason *reason) {
  if (!generation || !tokens || !count)
    return nullArgument(!generation ? "generation" : !tokens ? "tokens" : "count");
  if (index >= generation->sequences.size())
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "sequence " + std::to_string(index) + " does not exist; there are " +
                          std::to_string(generation->sequences.size()));
  const dsrt::GeneratedSequence &sequence = generation->sequences[index];
  *tokens = sequence.tokens.data();
  *count = sequence.tokens.size();
  if (reason)
    *reason = static_cast<dsrt_finish_reason>(sequence.reason);
  return DSRT_OK;
}

void dsrt_generation_free(dsrt_generation *generation) { delete generation; }

} // extern "C"
