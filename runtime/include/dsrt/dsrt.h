/* libdsrt: the runtime of dsc plans. C API.
 *
 * Every function that can fail returns a dsrt_status; on failure the message of the last
 * error on the calling thread is available from dsrt_last_error(). A failed call leaves
 * its objects usable. The runtime links none of LLVM, MLIR, ONNX or protobuf.
 *
 *   dsrt_plan *plan;      dsrt_plan_open("model.dsp", &plan);
 *   dsrt_session *s;      dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &s);
 *   dsrt_session_set_input(s, "forward", 0, DSRT_I64, shape, 2, ids);
 *   dsrt_session_run(s, "forward");
 *   dsrt_tensor logits;   dsrt_session_get_output(s, "forward", 0, &logits);
 */
#ifndef DSRT_DSRT_H
#define DSRT_DSRT_H

#include <stddef.h>
#include <stdint.h>

/* Set by the library's own build to export the API; empty for its users. */
#ifndef DSRT_API
#define DSRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsrt_status {
  DSRT_OK = 0,
  DSRT_INVALID_ARGUMENT = 1, /* a null pointer, an unknown name, a shape that does not fit */
  DSRT_CORRUPT_PLAN = 2,     /* the plan file fails verification */
  DSRT_UNSUPPORTED = 3,      /* a plan feature or device this build cannot run */
  DSRT_OUT_OF_MEMORY = 4,
  DSRT_DEVICE_ERROR = 5,
  DSRT_INTERNAL = 6,
  DSRT_LEADER_FINISHED = 7   /* not a failure: dsrt_generate_follow's rank 0 called
                                dsrt_generate_finish, there are no more requests */
} dsrt_status;

/* The plan file's element types (schemas/plan.fbs). */
typedef enum dsrt_dtype {
  DSRT_UNDEFINED = 0, DSRT_F32 = 1, DSRT_F16 = 2, DSRT_BF16 = 3, DSRT_F64 = 4, DSRT_I64 = 5,
  DSRT_I32 = 6, DSRT_I16 = 7, DSRT_I8 = 8, DSRT_U8 = 9, DSRT_BOOL = 10, DSRT_U16 = 11,
  DSRT_U32 = 12, DSRT_U64 = 13
} dsrt_dtype;

/* DSRT_DEVICE_CPU runs the CPU backend's fast kernels (AVX2, oneDNN's sgemm where libdnnl is
 * found; weights kept in their stored dtype); DSRT_DEVICE_CPU_REFERENCE runs its reference
 * kernels, the oracle the fast ones are tested against (weights widened to fp32). */
typedef enum dsrt_device {
  DSRT_DEVICE_CPU = 0,
  DSRT_DEVICE_CUDA = 1,
  DSRT_DEVICE_CPU_REFERENCE = 2
} dsrt_device;
/* "cpu", "cuda" or "cpu-reference" as a device (what the tools' --device takes); an unknown
 * name is DSRT_INVALID_ARGUMENT with a message listing the names. */
DSRT_API dsrt_status dsrt_device_from_name(const char *name, dsrt_device *out);
/* The name dsrt_device_from_name takes for `device`; "unknown" for another value. */
DSRT_API const char *dsrt_device_to_name(dsrt_device device);

/* A tensor the runtime owns (outputs); valid until the next run of the session. */
typedef struct dsrt_tensor {
  const char *name;
  dsrt_dtype dtype;
  size_t rank;
  const int64_t *shape;
  const void *data;
} dsrt_tensor;

typedef struct dsrt_plan dsrt_plan;
typedef struct dsrt_session dsrt_session;

/* "major.minor.patch" of this library. */
DSRT_API const char *dsrt_version(void);
/* The plan-file format version this library reads. */
DSRT_API unsigned dsrt_plan_format_version(void);
/* A short name of a status ("DSRT_CORRUPT_PLAN"), for logs. */
DSRT_API const char *dsrt_status_name(dsrt_status status);
/* The message of the last failed call on this thread, or "" if none failed. */
DSRT_API const char *dsrt_last_error(void);

/* Opens and verifies a plan (the header completely; a rank's weights when a session maps
 * them). */
DSRT_API dsrt_status dsrt_plan_open(const char *path, dsrt_plan **out);
DSRT_API void dsrt_plan_close(dsrt_plan *plan);
/* Tensor-parallel ranks the plan was compiled for. */
DSRT_API int dsrt_plan_rank_count(const dsrt_plan *plan);
/* The plan's compile-time limits (dsc --max-batch, --max-seq-len); either pointer may be NULL. */
DSRT_API dsrt_status dsrt_plan_limits(const dsrt_plan *plan, int64_t *max_batch,
                                      int64_t *max_seq_len);
/* Inputs and outputs of a program: count, then name/dtype/rank of each. Dynamic dimensions
 * of an input have shape -1 in `*shape_out`, which stays valid as long as the plan. */
DSRT_API dsrt_status dsrt_plan_io_count(const dsrt_plan *plan, const char *program,
                                        int is_output, size_t *count);
DSRT_API dsrt_status dsrt_plan_io_info(const dsrt_plan *plan, const char *program,
                                       int is_output, size_t index, dsrt_tensor *info);

/* A session runs the plan for one rank on one device. */
DSRT_API dsrt_status dsrt_session_create(dsrt_plan *plan, int rank, dsrt_device device,
                                         dsrt_session **out);
DSRT_API void dsrt_session_destroy(dsrt_session *session);
/* Copies `data` in as input `index` of `program`. */
DSRT_API dsrt_status dsrt_session_set_input(dsrt_session *session, const char *program,
                                            size_t index, dsrt_dtype dtype,
                                            const int64_t *shape, size_t rank,
                                            const void *data);
DSRT_API dsrt_status dsrt_session_run(dsrt_session *session, const char *program);
DSRT_API dsrt_status dsrt_session_get_output(dsrt_session *session, const char *program,
                                             size_t index, dsrt_tensor *out);

/* ---- Devices, memory and bandwidth (dsbench; docs/cuda-backend.md). ---- */

/* CUDA GPUs this process can use: 0 without a driver or a GPU, and then dsrt_last_error()
 * says why (the CPU is then the only device; a DSRT_DEVICE_CUDA session falls back to it). */
DSRT_API int dsrt_cuda_device_count(void);

/* Where this process finds a GPU library that libdsrt opens with dlopen: `name` is "libcuda",
 * "cublasLt" or "nccl". Returns the library loaded (the soname or path that was opened, and
 * the file it resolved to), or NULL with dsrt_last_error() = "not found (tried: ...)", every
 * place in the search order (docs/cuda-backend.md, "Finding the libraries"). The string
 * lives as long as the process. */
DSRT_API const char *dsrt_gpu_library(const char *name);

/* What the CPU backend runs on this machine (docs/cpu-backend.md): the instruction-set
 * features the kernels dispatch on, then the linear kernels chosen and the prompts'
 * attention, e.g. "cpu avx2 avx512f avx512bw avx512vnni avx512bf16 amx-bf16 amx-int8;
 * kernels: onednn sgemm + ... + avx512; prompt attention: tiled; amx-bf16 tiles for bf16
 * caches". The same binary chooses at run time; DSRT_CPU_ISA, DSRT_INT4_ACTIVATIONS,
 * DSRT_PREFILL_GEMM and DSRT_AMX_ATTENTION change the choice. The string lives as long as
 * the process. */
DSRT_API const char *dsrt_cpu_kernels(void);

/* The threads the CPU kernels run on, shared by every session and engine of the process.
 * 0 (the default) is DSRT_NUM_THREADS where that is set, else the CPUs this process may run
 * on: its affinity mask (taskset, a container's cpuset), bounded by its cgroup's CPU quota (a
 * container's --cpus, a Kubernetes limit), not the machine's count, since more threads than
 * CPUs spin against each other. Takes effect at the next kernel; threads must be 0 to 4096.
 * dsrt_cpu_threads() is the count in effect. */
DSRT_API dsrt_status dsrt_set_cpu_threads(int threads);
DSRT_API int dsrt_cpu_threads(void);

/* Bytes of `rank`'s weights one run of `program` reads whole: each weight its steps take,
 * once; embedding tables count for nothing (a step reads only its ids' rows). Over the
 * memory bandwidth, the least time a weight-bound step (batch-1 decode) can take. */
DSRT_API dsrt_status dsrt_plan_program_weight_bytes(const dsrt_plan *plan, int rank,
                                                    const char *program, uint64_t *bytes);

/* Bytes a session holds on its device. */
typedef struct dsrt_memory {
  uint64_t weights;   /* this rank's weights as the device holds them */
  uint64_t arena;     /* activations */
  uint64_t kv_cache;  /* keys and values of the prefill/decode programs */
  uint64_t other;     /* kernels, workspaces, staging, widened weight copies */
} dsrt_memory;

DSRT_API dsrt_status dsrt_session_memory(const dsrt_session *session, dsrt_memory *out);
/* "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3)"; owned by the library, valid at least as long
 * as the session. A DSRT_DEVICE_CUDA session that fell back to the CPU says "cpu". NULL for a
 * null session. */
DSRT_API const char *dsrt_session_device_name(const dsrt_session *session);
/* The session device's memory bandwidth, measured by copying `bytes` within its memory:
 * bytes read plus bytes written per second (the roofline for weight-bound decode). */
DSRT_API dsrt_status dsrt_session_copy_bandwidth(dsrt_session *session, uint64_t bytes,
                                                 double *bytes_per_second);

/* Strict device mode (docs/cuda-backend.md): nonzero makes every later run of a CUDA
 * session fail, with a message naming the step (its index, op and source location), where
 * a step would run through the host fallback, a decode program's CUDA graph cannot be
 * captured, or decode would run eagerly where a graph was expected. DSRT_STRICT_DEVICE=1
 * turns it on for every session the process creates. A DSRT_DEVICE_CPU session ignores it;
 * a DSRT_DEVICE_CUDA session that fell back to the CPU returns DSRT_UNSUPPORTED. */
DSRT_API dsrt_status dsrt_session_set_strict(dsrt_session *session, int strict);

/* What a session has done on its device since it was created. All zeros on the CPU. */
typedef struct dsrt_stats {
  uint64_t kernel_launches;   /* kernels and GEMMs launched eagerly (not inside a graph) */
  uint64_t fallback_steps;    /* step runs through the host fallback */
  uint64_t graph_captures;    /* CUDA graphs captured */
  uint64_t graph_replays;     /* CUDA graphs launched */
  uint64_t bytes_uploaded;    /* host to device, the weights' upload included */
  uint64_t bytes_downloaded;  /* device to host */
} dsrt_stats;

DSRT_API dsrt_status dsrt_session_stats(const dsrt_session *session, dsrt_stats *out);

/* ---- Tensor-parallel ranks (plans compiled with --tp N). ---- */

/* A session for this MPI process's rank of the plan (MPI_COMM_WORLD; MPI is initialised if
 * the caller has not). The process count must equal the plan's rank count. With
 * DSRT_DEVICE_CUDA the device collectives run on NCCL (libnccl opened at run time, DSRT_NCCL
 * overrides its path); without NCCL or a GPU of its own for every rank they are staged
 * through host memory over MPI, and rank 0 says so once on stderr. Collective: every rank
 * calls it. */
DSRT_API dsrt_status dsrt_session_create_mpi(dsrt_plan *plan, dsrt_device device,
                                             dsrt_session **out);
/* The rank a session runs: its MPI rank for dsrt_session_create_mpi, else the rank given to
 * dsrt_session_create. -1 for a null session. */
DSRT_API int dsrt_session_rank(const dsrt_session *session);

/* All ranks of a plan in this process, one thread each, joined by an in-process
 * communicator: TP plans on one CPU or one GPU. Inputs are given once (every rank gets
 * them); outputs and generated tokens are rank 0's (every rank has the same). */
typedef struct dsrt_group dsrt_group;
DSRT_API dsrt_status dsrt_group_create(dsrt_plan *plan, dsrt_device device, dsrt_group **out);
DSRT_API void dsrt_group_destroy(dsrt_group *group);
DSRT_API dsrt_status dsrt_group_set_input(dsrt_group *group, const char *program, size_t index,
                                          dsrt_dtype dtype, const int64_t *shape, size_t rank,
                                          const void *data);
DSRT_API dsrt_status dsrt_group_run(dsrt_group *group, const char *program);
DSRT_API dsrt_status dsrt_group_get_output(dsrt_group *group, const char *program,
                                           size_t index, dsrt_tensor *out);
/* dsrt_session_set_strict for every rank. */
DSRT_API dsrt_status dsrt_group_set_strict(dsrt_group *group, int strict);
/* The ranks' dsrt_session_stats, summed. */
DSRT_API dsrt_status dsrt_group_stats(const dsrt_group *group, dsrt_stats *out);

/* Memory the library allocated for the caller (token ids, text). */
DSRT_API void dsrt_free(void *pointer);

/* ---- Tokenizer (HuggingFace tokenizer.json: byte-level BPE, SentencePiece-style BPE with
 * byte fallback). ---- */
typedef struct dsrt_tokenizer dsrt_tokenizer;

/* The tokenizer embedded in the plan; DSRT_INVALID_ARGUMENT when the plan has none. */
DSRT_API dsrt_status dsrt_tokenizer_from_plan(const dsrt_plan *plan, dsrt_tokenizer **out);
/* The plan's tokenizer.json as dsc embedded it (for a grammar library's token table), valid
 * as long as the plan; DSRT_INVALID_ARGUMENT when the plan has none. */
DSRT_API dsrt_status dsrt_plan_tokenizer_json(const dsrt_plan *plan, const char **json,
                                              size_t *size);
/* The model's generation_config.json as dsc embedded it (its sampling defaults), valid as
 * long as the plan; *size 0 (and *json NULL) when the model had none. */
DSRT_API dsrt_status dsrt_plan_generation_config(const dsrt_plan *plan, const char **json,
                                                 size_t *size);
DSRT_API dsrt_status dsrt_tokenizer_from_file(const char *path, dsrt_tokenizer **out);
DSRT_API void dsrt_tokenizer_free(dsrt_tokenizer *tokenizer);
/* Encodes `length` bytes of UTF-8 text; `*ids` (`*count` of them) is freed with dsrt_free.
 * `add_special` adds the tokens the tokenizer's post-processor adds (BOS for Llama). */
DSRT_API dsrt_status dsrt_tokenizer_encode(const dsrt_tokenizer *tokenizer, const char *text,
                                           size_t length, int add_special, int64_t **ids,
                                           size_t *count);
/* Decodes ids to a NUL-terminated UTF-8 string freed with dsrt_free. */
DSRT_API dsrt_status dsrt_tokenizer_decode(const dsrt_tokenizer *tokenizer, const int64_t *ids,
                                           size_t count, int skip_special, char **text);

/* The chat templates dsc found beside the model (tokenizer_config.json, chat_template.jinja),
 * as Jinja source for the caller to render (the Python package does, with jinja2): `*count`
 * of them; template `index`'s name ("default" for the one used without a name) and source
 * stay valid as long as the plan. */
DSRT_API dsrt_status dsrt_plan_chat_template_count(const dsrt_plan *plan, size_t *count);
DSRT_API dsrt_status dsrt_plan_chat_template(const dsrt_plan *plan, size_t index,
                                             const char **name, const char **source);
/* A special token's text by the name templates use ("bos_token", "eos_token", "unk_token",
 * "pad_token", ...), or NULL in `*content` when the tokenizer has none. */
DSRT_API dsrt_status dsrt_plan_special_token(const dsrt_plan *plan, const char *name,
                                             const char **content);
/* The model's name as dsc recorded it (the ONNX file's graph or file name). */
DSRT_API const char *dsrt_plan_model_name(const dsrt_plan *plan);
/* The model's vocabulary size (its logits' width) and its EOS tokens (`*eos_tokens`, valid as
 * long as the plan; none: count 0), which a grammar's token masks need; DSRT_INVALID_ARGUMENT
 * when the plan describes no language model. */
DSRT_API dsrt_status dsrt_plan_vocabulary(const dsrt_plan *plan, int64_t *vocab_size,
                                          const int64_t **eos_tokens, size_t *eos_count);

/* ---- Generation (docs/transformer-ops.md). ---- */

/* Called for every new token of every sequence, in order. Return nonzero to stop that
 * sequence after this token. Under MPI a sequence that any rank's callback stops stops on
 * every rank, so one rank (the one that reports the tokens) may have a callback alone. */
typedef int (*dsrt_token_callback)(void *user_data, size_t sequence, int64_t token);

typedef struct dsrt_generate_options {
  size_t struct_size;            /* sizeof(dsrt_generate_options); set by _init */
  int32_t max_new_tokens;        /* default 32 */
  float temperature;             /* 0: greedy (default) */
  int32_t top_k;                 /* 0: no limit */
  float top_p;                   /* 1: no limit */
  uint64_t seed;
  const int64_t *stop_tokens;    /* in addition to the plan's EOS tokens */
  size_t stop_token_count;
  int ignore_eos;                /* nonzero: the plan's EOS tokens do not stop */
  dsrt_token_callback on_token;  /* may be NULL */
  void *user_data;
  /* Beam search, transformers' generate(num_beams=, length_penalty=, early_stopping=):
   * num_beams > 1 (at most 256; temperature 0) keeps that many sequences per prompt and
   * returns each prompt's best finished one, scored by summed log-probability over
   * (length ** length_penalty). early_stopping: 0 transformers' default (stop once no running
   * beam can beat the worst of num_beams finished ones), 1 once num_beams are finished,
   * 2 "never" (judged at the longest length). Each prompt takes num_beams of the plan's
   * max_batch rows. The callback sees the returned tokens once they are known and cannot
   * stop them. CPU sessions only. */
  int32_t num_beams;             /* default 1: greedy or sampled, no beams */
  float length_penalty;          /* default 1 */
  int32_t early_stopping;        /* default 0 */
  /* transformers' logits processors, on the logits before sampling (on the log-probabilities
   * in beam search), in its order; each off at its default. */
  float repetition_penalty;      /* default 1; a sequence's tokens' logits / it (x it if < 0) */
  int32_t no_repeat_ngram_size;  /* default 0; no n-gram of the sequence twice */
  int32_t min_new_tokens;        /* default 0; no stop token before this many */
  int64_t forced_bos_token_id;   /* default -1; the first token after a one-token start */
  int64_t forced_eos_token_id;   /* default -1; the last of max_new_tokens */
} dsrt_generate_options;

typedef enum dsrt_finish_reason {
  DSRT_FINISH_LENGTH = 0,   /* max_new_tokens reached */
  DSRT_FINISH_STOP = 1,     /* a stop or EOS token was generated (it is included) */
  DSRT_FINISH_CALLBACK = 2  /* the callback asked to stop */
} dsrt_finish_reason;

typedef struct dsrt_generation dsrt_generation;

DSRT_API void dsrt_generate_options_init(dsrt_generate_options *options);
/* As dsrt_generate_options_init, then the model's own defaults: its generation_config.json as
 * dsc embedded it, read as transformers' generate() reads it (greedy unless do_sample, which
 * takes temperature, top_k (50 if not set) and top_p; num_beams, length_penalty,
 * early_stopping; repetition_penalty, no_repeat_ngram_size, min_new_tokens (or an
 * encoder-decoder's min_length - 1), forced BOS/EOS; max_new_tokens (or an encoder-decoder's
 * max_length - 1)). DSRT_INVALID_ARGUMENT names a value of the wrong type or range, or beam
 * sampling, which dsrt does not do; a plan without a generation config gets _init's. */
DSRT_API dsrt_status dsrt_generate_options_from_plan(const dsrt_plan *plan,
                                                     dsrt_generate_options *options);
/* Generates for `count` prompts (prompt i: lengths[i] token ids at prompts[i]) as one batch.
 * Checks every limit (batch, prompt + max_new_tokens against the plan's max_seq_len, token
 * ids against the vocabulary) before running anything. On an MPI session every rank calls
 * it with the same prompts and options, or every rank fails with an error naming what
 * differs; where rank 0 alone has the request, see dsrt_generate_lead. */
DSRT_API dsrt_status dsrt_generate(dsrt_session *session, size_t count,
                                   const int64_t *const *prompts, const size_t *lengths,
                                   const dsrt_generate_options *options,
                                   dsrt_generation **out);
/* As dsrt_generate, on every rank of an in-process group (the callback sees rank 0's). */
DSRT_API dsrt_status dsrt_group_generate(dsrt_group *group, size_t count,
                                         const int64_t *const *prompts, const size_t *lengths,
                                         const dsrt_generate_options *options,
                                         dsrt_generation **out);

/* Rank 0 alone drives the generation of an MPI session's ranks (a server, which reads each
 * request on rank 0): rank 0 calls dsrt_generate_lead with the request, every other rank
 * loops on dsrt_generate_follow, which waits for rank 0's next request and runs it, until
 * rank 0 calls dsrt_generate_finish:
 *
 *   if (dsrt_session_rank(s) == 0) {
 *     while (next_request(&request))   dsrt_generate_lead(s, ..., &options, &generation);
 *     dsrt_generate_finish(s);
 *   } else {
 *     while (dsrt_generate_follow(s, NULL) != DSRT_LEADER_FINISHED) {}
 *   }
 *
 * A request that fails (a token id outside the vocabulary, too many tokens, a null prompt)
 * fails on every rank with rank 0's status and message, and every rank stays ready for the
 * next one. All three are collective over the session's ranks; on a session of one rank
 * (dsrt_session_create, or a plan of one rank) lead is dsrt_generate and finish does
 * nothing. Lead on a rank other than 0, and follow on rank 0, are DSRT_INVALID_ARGUMENT. */

/* On rank 0: sends the request (prompts, max_new_tokens, temperature, top_k, top_p, seed,
 * stop tokens, ignore_eos) to the other ranks, then generates as dsrt_generate. The token
 * callback runs on rank 0 only; a sequence it stops stops on every rank. */
DSRT_API dsrt_status dsrt_generate_lead(dsrt_session *session, size_t count,
                                        const int64_t *const *prompts, const size_t *lengths,
                                        const dsrt_generate_options *options,
                                        dsrt_generation **out);
/* On every rank but 0: waits for rank 0's next dsrt_generate_lead and generates the same
 * tokens (`*out`, as dsrt_generate's; `out` may be NULL), or fails as rank 0's request
 * does. Returns DSRT_LEADER_FINISHED, with `*out` NULL, once rank 0 calls
 * dsrt_generate_finish. A follower waits for the next request as long as it takes:
 * DSRT_COLLECTIVE_TIMEOUT (docs/reliability.md) bounds the generation's collectives only. */
DSRT_API dsrt_status dsrt_generate_follow(dsrt_session *session, dsrt_generation **out);
/* On rank 0: tells the followers there are no more requests (their dsrt_generate_follow
 * returns DSRT_LEADER_FINISHED). Rank 0 may lead again to ranks that follow again. */
DSRT_API dsrt_status dsrt_generate_finish(dsrt_session *session);

DSRT_API size_t dsrt_generation_count(const dsrt_generation *generation);
/* The new tokens of sequence `index` (the prompt not included). */
DSRT_API dsrt_status dsrt_generation_tokens(const dsrt_generation *generation, size_t index,
                                            const int64_t **tokens, size_t *count,
                                            dsrt_finish_reason *reason);
DSRT_API void dsrt_generation_free(dsrt_generation *generation);

/* ---- The serving engine (docs/serving.md): continuous batching over a paged KV cache. ----
 *
 * Requests are added and cancelled at any time, from any thread; each step (called by the
 * caller, or by the engine's own thread after dsrt_engine_start) computes decode tokens
 * first, then prompt chunks, under a token budget, one token per row of the plan's decode
 * program. Tokens arrive through a callback or dsrt_engine_poll. A TP plan runs its ranks on
 * threads of this process (or one per MPI process: dsrt_engine_create_mpi). On the CPU
 * backends and on CUDA, where a --serving plan's paged attention kernels run its steps
 * (docs/serving.md). */
typedef struct dsrt_engine dsrt_engine;

typedef struct dsrt_engine_options {
  size_t struct_size;            /* sizeof(dsrt_engine_options); set by _init */
  dsrt_device device;            /* default DSRT_DEVICE_CPU */
  int32_t block_size;            /* positions per KV block; default 16 */
  uint64_t kv_cache_bytes;       /* KV budget over every layer; 0 (default): max_seq_len
                                    positions for each of the plan's max_batch or
                                    max_tokens_per_step rows (the larger), at most 1/4 of RAM;
                                    on CUDA at most 0.9 of the GPU memory the weights leave
                                    free */
  int32_t max_tokens_per_step;   /* 0 (default): the rows of the plan's step program (dsc
                                    --serving: 256, or --max-tokens-per-step), else its
                                    max_batch */
  int32_t max_running;           /* sequences holding KV at once; 0: max_tokens_per_step */
  int prefix_caching;            /* share full prompt blocks by hash; default 1 */
  int batch_invariant;           /* 1 (default): a request's tokens do not depend on what else
                                    a step computes: on the CPU every row gets the
                                    arithmetic of a row alone, bit for bit with integer
                                    weights, within f32 rounding with f32 and half weights
                                    (docs/serving.md, "Batch invariance"); 0: long steps of
                                    half and quantized plans take faster bf16 arithmetic,
                                    and int8 and int4 steps of few rows their dot kernels'
                                    own f32 order (one request 10-20% faster); 2: f32 and
                                    half weights too, bit for bit (each row summed as a row
                                    alone: steps of 16 rows and more up to 2x slower in
                                    their float linears) */
  dsrt_dtype kv_cache_dtype;     /* DSRT_UNDEFINED (default): the plan's (f16 for half and
                                    quantized plans, else f32); DSRT_I8: int8 with an f32
                                    scale per 32 values (llama.cpp's q8_0 cache), about half
                                    an f16 cache's bytes per position; CPU devices only */
  float kv_cache_memory_fraction; /* 0 (default): kv_cache_bytes decides. In (0, 1]: the KV
                                    budget is this fraction of the free memory, instead of
                                    kv_cache_bytes, which must then be 0: on the CPU the
                                    host's when the engine is created (the kernel's
                                    MemAvailable), on CUDA each GPU's once the weights are
                                    on it (cuMemGetInfo). It fills what was the struct's tail padding:
                                    the size is unchanged, and a caller built before it,
                                    whose dsrt_engine_options_init zeroed it, keeps the
                                    default. */
  int32_t speculative_tokens;    /* 0 (default): off. 1 to 16: speculative decoding by prompt
                                    lookup (vLLM's "ngram"): each decode token also computes
                                    up to this many drafts, the tokens that followed the
                                    latest earlier occurrence of its sequence's last n
                                    tokens; each row is drawn as without drafts (greedy or
                                    from the request's seed, penalties applied) and a draft
                                    counts where the draw is the draft, so every request's
                                    output is what it is without. From the step's spare budget only. CPU devices
                                    only. These four fields made the struct larger: a
                                    caller built before them is refused by struct_size. */
  int32_t prompt_lookup_max;     /* the n-grams looked up, longest first: default 3 */
  int32_t prompt_lookup_min;     /* ... down to: default 1 */
  int32_t speculative_max_batch; /* drafts only in steps of at most this many decode
                                    sequences: default 8 (more make a CPU step bound by its
                                    multiply-adds, where a rejected draft costs a row) */
} dsrt_engine_options;

/* Structured output: the tokens a request may draw next, as a grammar allows them (the
 * Python package's llguidance matchers). Called on the engine's stepping thread before each
 * of the request's draws, outside the engine's lock, with the tokens the request has
 * generated so far; `allowed` holds `words` = ceil(vocab / 32) words, every bit set on
 * entry: clear bit t % 32 of word t / 32 to keep token t out of the draw. Returns 0, or
 * nonzero to end the request as cancelled (DSRT_REQUEST_CANCELLED). A draw that the mask
 * leaves no token for ends the request the same way; min_tokens gives way to the mask. It must not call the engine. No call comes for a request after
 * dsrt_engine_cancel(request) has returned or after its last callback; such a request takes
 * no speculative drafts. The log-probabilities stay the model's. */
typedef int (*dsrt_token_mask_fn)(void *user_data, int64_t request, const int64_t *generated,
                                  size_t count, uint32_t *allowed, size_t words);

typedef struct dsrt_request_options {
  size_t struct_size;            /* sizeof(dsrt_request_options); set by _init */
  int32_t max_new_tokens;        /* default 16 */
  float temperature;             /* 0: greedy (default) */
  int32_t top_k;                 /* 0: no limit */
  float top_p;                   /* 1: no limit */
  uint64_t seed;                 /* the request's own stream: independent of the batch */
  const int64_t *stop_tokens;    /* in addition to the plan's EOS tokens */
  size_t stop_token_count;
  int ignore_eos;
  int32_t logprobs;              /* -1 (default): none; 0: each token's own log-probability;
                                    k <= 20: and the k likeliest tokens' (the callback's) */
  float min_p;                   /* 0 (default): none; else after top-p, tokens below min_p
                                    times the likeliest one's probability are dropped */
  /* vLLM's penalties, on the logits before temperature and truncation (greedy too); the
   * log-probabilities stay the model's. */
  float repetition_penalty;      /* 1 (default): none; a prompt or output token's logit is
                                    divided by it when positive, multiplied when negative */
  float presence_penalty;        /* 0 (default), [-2, 2]: minus it once for a token the
                                    output holds (OpenAI's) */
  float frequency_penalty;       /* 0 (default), [-2, 2]: minus it per time the output holds
                                    the token (OpenAI's) */
  int32_t prompt_logprobs;       /* -1 (default): none; k in [0, 20]: each prompt token after
                                    the first, with its log-probability given the tokens
                                    before it (and the k likeliest), as DSRT_REQUEST_PROMPT
                                    callbacks before the first generated token (vLLM's
                                    prompt_logprobs, OpenAI's echo). Such a request takes no
                                    prefix-cache hits: it computes its whole prompt. */
  /* OpenAI's logit_bias: logit_bias_values[i] (in [-100, 100]) is added to token
   * logit_bias_tokens[i]'s logit before the penalties; -100 bans it. */
  const int64_t *logit_bias_tokens;
  const float *logit_bias_values;
  size_t logit_bias_count;
  int32_t min_tokens;            /* 0 (default); vLLM's: until this many tokens are generated,
                                    the EOS and stop tokens cannot be drawn */
  dsrt_token_mask_fn token_mask; /* NULL (default): every token may be drawn. These two
                                    fields made the struct larger: a caller built before them
                                    is refused by struct_size. */
  void *token_mask_user_data;
  int32_t priority;              /* 0 (default); vLLM's: lower values are admitted first and
                                    preempted last, equal ones first come, first served */
} dsrt_request_options;

typedef enum dsrt_request_state {
  DSRT_REQUEST_PROMPT = -2,    /* the callback's token is a prompt token (prompt_logprobs) */
  DSRT_REQUEST_RUNNING = -1,
  DSRT_REQUEST_LENGTH = 0,     /* max_new_tokens reached */
  DSRT_REQUEST_STOP = 1,       /* a stop or EOS token (included) */
  DSRT_REQUEST_CANCELLED = 3   /* dsrt_engine_cancel, or its step failed (see the message) */
} dsrt_request_state;

/* A token's log-probability: log-softmax of the model's raw logits (before temperature and
 * top-k/top-p, as OpenAI and vLLM report them), and the likeliest tokens', likeliest first.
 * Valid during the callback only. */
typedef struct dsrt_token_logprobs {
  float logprob;
  size_t top_count;
  const int64_t *top_tokens;
  const float *top_logprobs;
} dsrt_token_logprobs;

/* Each new token of a request, then token -1 with its final state; before them, with
 * prompt_logprobs, each prompt token after the first with state DSRT_REQUEST_PROMPT.
 * `logprobs` is NULL unless the request asked for them (and for token -1). Runs on the stepping thread; it may call
 * dsrt_engine_add_request and dsrt_engine_cancel. A request cancelled by
 * dsrt_engine_cancel gets no call. */
typedef void (*dsrt_engine_callback)(void *user_data, int64_t request, int64_t token,
                                     dsrt_request_state state,
                                     const dsrt_token_logprobs *logprobs);

typedef struct dsrt_engine_stats {
  int64_t running, waiting, peak_running;
  int64_t used_blocks, total_blocks, peak_used_blocks, block_size, max_tokens_per_step;
  uint64_t bytes_per_block;      /* KV bytes of one block over every layer (per rank) */
  uint64_t prefix_hits, prefix_misses, preemptions;
  uint64_t steps, prompt_tokens, generated_tokens;
} dsrt_engine_stats;

DSRT_API void dsrt_engine_options_init(dsrt_engine_options *options);
DSRT_API void dsrt_request_options_init(dsrt_request_options *options);
/* options may be NULL (the defaults). */
DSRT_API dsrt_status dsrt_engine_create(dsrt_plan *plan, const dsrt_engine_options *options,
                                        dsrt_engine **out);
/* Tensor parallelism over MPI, one rank per process: every rank calls it (collectively).
 * Rank 0 leads: it takes the requests, schedules, samples and sends each step's rows to the
 * others (one broadcast per step), which call dsrt_engine_follow. The ranks first check that
 * they run one plan; the followers take rank 0's options. */
DSRT_API dsrt_status dsrt_engine_create_mpi(dsrt_plan *plan, const dsrt_engine_options *options,
                                            dsrt_engine **out);
/* This process's rank (0 without MPI). */
DSRT_API int dsrt_engine_rank(const dsrt_engine *engine);
/* A follower's loop: runs rank 0's steps until rank 0 destroys its engine. */
DSRT_API dsrt_status dsrt_engine_follow(dsrt_engine *engine);
/* Stops the engine's thread, if any, and frees everything; rank 0's ends its followers. */
DSRT_API void dsrt_engine_destroy(dsrt_engine *engine);
/* callback may be NULL (poll instead); set it before adding requests. */
DSRT_API dsrt_status dsrt_engine_set_callback(dsrt_engine *engine, dsrt_engine_callback callback,
                                              void *user_data);
/* options may be NULL. A refused request (bad options, a prompt outside the vocabulary or
 * longer than the plan's positions) is an error; the engine goes on serving the others. */
DSRT_API dsrt_status dsrt_engine_add_request(dsrt_engine *engine, const int64_t *prompt,
                                             size_t length, const dsrt_request_options *options,
                                             int64_t *request_id);
DSRT_API dsrt_status dsrt_engine_cancel(dsrt_engine *engine, int64_t request_id);
/* Forgets the prefix cache: every cached KV block becomes free, and later requests hit
 * nothing computed before (vLLM's reset_prefix_cache; for benchmarks and after changing
 * what prompts mean). Only while no request is live: an error otherwise, changing nothing. */
DSRT_API dsrt_status dsrt_engine_reset_prefix_cache(dsrt_engine *engine);
/* One step; *busy (may be NULL) is 1 while requests remain. */
DSRT_API dsrt_status dsrt_engine_step(dsrt_engine *engine, int *busy);
/* Steps on a thread of the engine's own until dsrt_engine_stop or destroy. */
DSRT_API dsrt_status dsrt_engine_start(dsrt_engine *engine);
DSRT_API void dsrt_engine_stop(dsrt_engine *engine);
/* Copies up to `capacity` of the tokens generated since the last poll to `tokens`, their
 * number to *count (more may remain: poll again), and the request's state. A finished
 * request is forgotten once its last tokens were read. */
DSRT_API dsrt_status dsrt_engine_poll(dsrt_engine *engine, int64_t request_id, int64_t *tokens,
                                      size_t capacity, size_t *count, dsrt_request_state *state);
DSRT_API dsrt_status dsrt_engine_stats_get(const dsrt_engine *engine, dsrt_engine_stats *out);
/* Speculative decoding's drafts so far (engine option speculative_tokens), and how many of
 * them the model confirmed. A function of its own: dsrt_engine_stats has no struct_size
 * that would let it grow. */
DSRT_API dsrt_status dsrt_engine_draft_stats(const dsrt_engine *engine, uint64_t *draft_tokens,
                                             uint64_t *accepted_tokens);
/* The prompt tokens whose KV the request found in the prefix cache when it was first
 * scheduled (whole blocks, never the prompt's last token; vLLM's num_cached_tokens, OpenAI's
 * usage.prompt_tokens_details.cached_tokens), or -1 before then. A preempted request's
 * recompute leaves it as it was. Known while the engine keeps the request: with a callback,
 * until its last callback returns (a callback may ask); with polling, until the poll that
 * returns its finish. An unknown or collected id is an error. */
DSRT_API dsrt_status dsrt_engine_request_cached_tokens(const dsrt_engine *engine,
                                                       int64_t request_id, int64_t *cached);

#ifdef __cplusplus
}
#endif

#endif
