// dsrun's generation, apart from running programs: the options the model's defaults and the
// command line's flags make, and the generated text as it is printed.
#ifndef DSC_TOOLS_DSRUN_GENERATION_H
#define DSC_TOOLS_DSRUN_GENERATION_H

#include "dsrt/dsrt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsrun {

[[noreturn]] void die(const std::string &message, int code = 2);
// die with `what` and libdsrt's last error where `status` is not DSRT_OK.
void check(dsrt_status status, const std::string &what);

// The flags that set generation options: each one given wins over the model's default.
extern const char *const kSamplingFlags[12];

// `given` (the flags parsed over dsrt_generate_options_init's defaults), or with `model` the
// model's defaults (dsrt_generate_options_from_plan) under the flags in `givenFlags`. The seed
// and the stop tokens are the command line's alone.
dsrt_generate_options withModelDefaults(const dsrt_plan *plan, bool model,
                                        const dsrt_generate_options &given,
                                        const std::vector<std::string> &givenFlags);

// Streams the text of sequence 0 as it grows (a token may end inside a UTF-8 character, so
// the whole text is decoded again and only what is new is printed). The newest token waits
// for the next: the token that stops generation (EOS, --stop) is not part of the text, as in
// vLLM's, and an EOS need not be a special token ("</s>" read as text).
struct Stream {
  const dsrt_tokenizer *tokenizer = nullptr;
  std::vector<int64_t> tokens;
  size_t printed = 0;

  // Prints the text of the first `count` tokens not printed yet; `final` prints a trailing
  // U+FFFD too, which may otherwise be a character whose bytes are still coming.
  void print(size_t count, bool final);
};
// dsrt_token_callback over a Stream.
int streamToken(void *user, size_t sequence, int64_t token);

// Each sequence of `generation`: the rest of the stream's text, the text of each prompt
// given as text (after it, with `echoPrompt`), or the ids and the finish reason.
void printGeneration(dsrt_generation *generation, const dsrt_tokenizer *tokenizer,
                     const std::vector<std::string> &texts, Stream *stream, bool echoPrompt);

} // namespace dsrun

#endif
