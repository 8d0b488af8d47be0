/* generate: text generation with libdsrt's C API.
 *
 *   generate PLAN (--prompt TEXT | --ids 1,2,3)... [--max-new-tokens N] [--temperature T]
 *            [--top-k K] [--top-p P] [--seed S] [--stop ID]... [--ignore-eos] [--quiet]
 *
 * Each --prompt or --ids adds one prompt; several make one batch. Text prompts go through
 * the tokenizer embedded in the plan (`dsc compile` embeds tokenizer.json when it lies
 * beside the model). Tokens are printed as they come (decoded when the plan has a
 * tokenizer), then every sequence's ids and text:
 *
 *   generated ids [0]: 97,57,191
 *   finish reason [0]: length
 *   text [0]: ...
 *
 * Exit status: 0 on success, 1 when libdsrt reports an error (printed with its status and
 * dsrt_last_error()), 2 on a usage error.
 */
#include <dsrt/dsrt.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS 64
#define MAX_STOPS 64

typedef struct prompt_arg {
  const char *text; /* --prompt, or NULL */
  const char *ids;  /* --ids, or NULL */
} prompt_arg;

/* What the streaming callback needs: the tokens so far of each sequence, to decode them
 * together (a byte-level BPE token can be half of a UTF-8 character) and print what is
 * new since the last call. */
typedef struct stream_state {
  const dsrt_tokenizer *tokenizer; /* NULL: print ids */
  size_t count;                    /* sequences */
  size_t capacity;                 /* tokens per sequence: max_new_tokens */
  int64_t **tokens;
  size_t *lengths;
  size_t *printed; /* bytes of each sequence's decoded text already printed */
  size_t *held;    /* tokens since the last print, held back as incomplete UTF-8 */
  int failed;      /* a decode failed: stop every sequence, report after dsrt_generate */
  dsrt_status failed_status;
  char failed_message[512];
} stream_state;

static void usage(FILE *to) {
  fprintf(to,
          "usage: generate PLAN (--prompt TEXT | --ids 1,2,3)... [--max-new-tokens N]\n"
          "                [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
          "                [--stop ID]... [--ignore-eos] [--quiet]\n");
}

/* Reports a failed libdsrt call; returns 1 so that callers can `return report(...)`. */
static int report(dsrt_status status, const char *what) {
  fprintf(stderr, "error: %s: %s: %s\n", what, dsrt_status_name(status), dsrt_last_error());
  return 1;
}

static int parse_i64(const char *s, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    return 0;
  *out = v;
  return 1;
}

static int parse_float(const char *s, float *out) {
  char *end = NULL;
  errno = 0;
  float v = strtof(s, &end);
  if (errno != 0 || end == s || *end != '\0')
    return 0;
  *out = v;
  return 1;
}

/* "1,2,3" into a malloc'ed array; 0 on anything else ("1,,2", "1,x", ""). */
static int parse_ids(const char *list, int64_t **ids, size_t *count) {
  size_t n = 1;
  for (const char *c = list; *c; ++c)
    n += *c == ',';
  int64_t *out = malloc(n * sizeof *out);
  if (!out)
    return 0;
  const char *at = list;
  for (size_t k = 0; k < n; ++k) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(at, &end, 10);
    if (errno != 0 || end == at || (*end != ',' && *end != '\0')) {
      free(out);
      return 0;
    }
    out[k] = v;
    at = end + 1;
  }
  *ids = out;
  *count = n;
  return 1;
}

static void print_ids(const int64_t *ids, size_t count) {
  for (size_t i = 0; i < count; ++i)
    printf("%s%lld", i ? "," : "", (long long)ids[i]);
}

static const char *finish_reason_name(dsrt_finish_reason reason) {
  switch (reason) {
  case DSRT_FINISH_LENGTH:
    return "length";
  case DSRT_FINISH_STOP:
    return "stop";
  case DSRT_FINISH_CALLBACK:
    return "callback";
  }
  return "unknown";
}

/* U+FFFD at the end: the last token ended inside a UTF-8 character; wait for the rest,
 * but only for as many tokens as a character can have bytes: what is still incomplete then
 * never will be (a random model's bytes need not form UTF-8). */
#define MAX_HELD_TOKENS 3

static int ends_incomplete(const char *text) {
  size_t n = strlen(text);
  return n >= 3 && memcmp(text + n - 3, "\xEF\xBF\xBD", 3) == 0;
}

static int on_token(void *user_data, size_t sequence, int64_t token) {
  stream_state *state = user_data;
  if (state->failed || sequence >= state->count ||
      state->lengths[sequence] == state->capacity)
    return 1;
  state->tokens[sequence][state->lengths[sequence]++] = token;
  const char *prefix = "";
  char label[32];
  if (state->count > 1) {
    snprintf(label, sizeof label, "[%zu] ", sequence);
    prefix = label;
  }
  if (!state->tokenizer) {
    printf("%s%lld%s", prefix, (long long)token, state->count > 1 ? "\n" : " ");
    fflush(stdout);
    return 0;
  }
  char *text = NULL;
  dsrt_status status = dsrt_tokenizer_decode(state->tokenizer, state->tokens[sequence],
                                             state->lengths[sequence], 1, &text);
  if (status != DSRT_OK) {
    state->failed = 1;
    state->failed_status = status;
    snprintf(state->failed_message, sizeof state->failed_message, "%s", dsrt_last_error());
    return 1;
  }
  size_t length = strlen(text);
  /* Printed text is never taken back: a decode that changes it (a merge across tokens)
   * shows up in the final text, not in the stream. */
  if (ends_incomplete(text) && state->held[sequence] < MAX_HELD_TOKENS) {
    ++state->held[sequence];
  } else if (length > state->printed[sequence]) {
    printf("%s%s%s", prefix, text + state->printed[sequence], state->count > 1 ? "\n" : "");
    fflush(stdout);
    state->printed[sequence] = length;
    state->held[sequence] = 0;
  }
  dsrt_free(text);
  return 0;
}

int main(int argc, char **argv) {
  const char *plan_path = NULL;
  prompt_arg prompt_args[MAX_PROMPTS];
  size_t prompt_count = 0;
  int64_t stops[MAX_STOPS];
  size_t stop_count = 0;
  int quiet = 0;
  dsrt_generate_options options;
  dsrt_generate_options_init(&options);

  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    long long n;
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(arg, "--ignore-eos")) {
      options.ignore_eos = 1;
      continue;
    } else if (!strcmp(arg, "--quiet")) {
      quiet = 1;
      continue;
    } else if (arg[0] != '-') {
      if (plan_path) {
        fprintf(stderr, "error: more than one plan: %s and %s\n", plan_path, arg);
        return 2;
      }
      plan_path = arg;
      continue;
    }
    if (!value) {
      fprintf(stderr, "error: %s needs a value\n", arg);
      usage(stderr);
      return 2;
    }
    ++i;
    if (!strcmp(arg, "--prompt") || !strcmp(arg, "--ids")) {
      if (prompt_count == MAX_PROMPTS) {
        fprintf(stderr, "error: more than %d prompts\n", MAX_PROMPTS);
        return 2;
      }
      prompt_args[prompt_count].text = arg[2] == 'p' ? value : NULL;
      prompt_args[prompt_count].ids = arg[2] == 'i' ? value : NULL;
      ++prompt_count;
    } else if (!strcmp(arg, "--max-new-tokens") && parse_i64(value, &n) && n > 0 &&
               n <= INT32_MAX) {
      options.max_new_tokens = (int32_t)n;
    } else if (!strcmp(arg, "--top-k") && parse_i64(value, &n) && n >= 0 && n <= INT32_MAX) {
      options.top_k = (int32_t)n;
    } else if (!strcmp(arg, "--seed") && parse_i64(value, &n)) {
      options.seed = (uint64_t)n;
    } else if (!strcmp(arg, "--stop") && parse_i64(value, &n)) {
      if (stop_count == MAX_STOPS) {
        fprintf(stderr, "error: more than %d stop tokens\n", MAX_STOPS);
        return 2;
      }
      stops[stop_count++] = n;
    } else if (!strcmp(arg, "--temperature") && parse_float(value, &options.temperature)) {
    } else if (!strcmp(arg, "--top-p") && parse_float(value, &options.top_p)) {
    } else {
      fprintf(stderr, "error: bad option or value: %s %s\n", arg, value);
      usage(stderr);
      return 2;
    }
  }
  if (!plan_path || prompt_count == 0) {
    usage(stderr);
    return 2;
  }
  options.stop_tokens = stop_count ? stops : NULL;
  options.stop_token_count = stop_count;

  int rc = 1;
  dsrt_status status;
  dsrt_plan *plan = NULL;
  dsrt_session *session = NULL;
  dsrt_tokenizer *tokenizer = NULL;
  dsrt_generation *generation = NULL;
  int64_t *prompts[MAX_PROMPTS] = {0};
  int prompt_from_library[MAX_PROMPTS] = {0}; /* freed with dsrt_free, not free */
  size_t lengths[MAX_PROMPTS] = {0};
  stream_state state;
  memset(&state, 0, sizeof state);

  if ((status = dsrt_plan_open(plan_path, &plan)) != DSRT_OK) {
    report(status, plan_path);
    goto done;
  }
  /* DSRT_INVALID_ARGUMENT means the plan has no tokenizer: ids only, then. */
  status = dsrt_tokenizer_from_plan(plan, &tokenizer);
  if (status == DSRT_INVALID_ARGUMENT) {
    tokenizer = NULL;
  } else if (status != DSRT_OK) {
    report(status, "reading the plan's tokenizer");
    goto done;
  }

  for (size_t p = 0; p < prompt_count; ++p) {
    if (prompt_args[p].ids) {
      if (!parse_ids(prompt_args[p].ids, &prompts[p], &lengths[p])) {
        fprintf(stderr, "error: --ids wants comma-separated integers, got '%s'\n",
                prompt_args[p].ids);
        rc = 2;
        goto done;
      }
      continue;
    }
    if (!tokenizer) {
      fprintf(stderr, "error: %s has no tokenizer; give the prompt as --ids\n", plan_path);
      rc = 2;
      goto done;
    }
    status = dsrt_tokenizer_encode(tokenizer, prompt_args[p].text, strlen(prompt_args[p].text),
                                   1, &prompts[p], &lengths[p]);
    if (status != DSRT_OK) {
      report(status, "encoding the prompt");
      goto done;
    }
    prompt_from_library[p] = 1;
  }
  for (size_t p = 0; p < prompt_count; ++p) {
    printf("prompt ids [%zu]: ", p);
    print_ids(prompts[p], lengths[p]);
    printf("\n");
  }

  if ((status = dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session)) != DSRT_OK) {
    report(status, "creating a session");
    goto done;
  }

  state.tokenizer = tokenizer;
  state.count = prompt_count;
  state.capacity = (size_t)options.max_new_tokens;
  state.tokens = calloc(prompt_count, sizeof *state.tokens);
  state.lengths = calloc(prompt_count, sizeof *state.lengths);
  state.printed = calloc(prompt_count, sizeof *state.printed);
  state.held = calloc(prompt_count, sizeof *state.held);
  if (!state.tokens || !state.lengths || !state.printed || !state.held) {
    fprintf(stderr, "error: out of memory\n");
    goto done;
  }
  for (size_t p = 0; p < prompt_count; ++p) {
    state.tokens[p] = malloc((size_t)options.max_new_tokens * sizeof **state.tokens);
    if (!state.tokens[p]) {
      fprintf(stderr, "error: out of memory\n");
      goto done;
    }
  }
  if (!quiet) {
    options.on_token = on_token;
    options.user_data = &state;
  }

  status = dsrt_generate(session, prompt_count, (const int64_t *const *)prompts, lengths,
                         &options, &generation);
  if (!quiet && prompt_count == 1)
    printf("\n");
  if (status != DSRT_OK) {
    report(status, "generating");
    goto done;
  }
  if (state.failed) {
    fprintf(stderr, "error: decoding a streamed token: %s: %s\n",
            dsrt_status_name(state.failed_status), state.failed_message);
    goto done;
  }

  size_t count = dsrt_generation_count(generation);
  for (size_t s = 0; s < count; ++s) {
    const int64_t *tokens = NULL;
    size_t n = 0;
    dsrt_finish_reason reason;
    if ((status = dsrt_generation_tokens(generation, s, &tokens, &n, &reason)) != DSRT_OK) {
      report(status, "reading the generated tokens");
      goto done;
    }
    printf("generated ids [%zu]: ", s);
    print_ids(tokens, n);
    printf("\nfinish reason [%zu]: %s\n", s, finish_reason_name(reason));
    if (tokenizer) {
      char *text = NULL;
      if ((status = dsrt_tokenizer_decode(tokenizer, tokens, n, 1, &text)) != DSRT_OK) {
        report(status, "decoding the generated tokens");
        goto done;
      }
      printf("text [%zu]: %s\n", s, text);
      dsrt_free(text);
    }
  }
  rc = 0;

done:
  if (generation)
    dsrt_generation_free(generation);
  if (state.tokens)
    for (size_t p = 0; p < prompt_count; ++p)
      free(state.tokens[p]);
  free(state.tokens);
  free(state.lengths);
  free(state.printed);
  free(state.held);
  for (size_t p = 0; p < prompt_count; ++p) {
    if (prompt_from_library[p])
      dsrt_free(prompts[p]);
    else
      free(prompts[p]);
  }
  if (tokenizer)
    dsrt_tokenizer_free(tokenizer);
  if (session)
    dsrt_session_destroy(session);
  if (plan)
    dsrt_plan_close(plan);
  return rc;
}
