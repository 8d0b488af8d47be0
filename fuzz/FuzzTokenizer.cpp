// libFuzzer harness of the tokenizer (issue 19): any tokenizer.json either loads or is refused
// with a message, and a loaded one encodes any text (invalid UTF-8 is an error, not a crash)
// and decodes any ids (ids past the vocabulary are an error). An input is the JSON, then
// optionally a NUL and the text to encode; without one a fixed text is encoded. Seeds: the
// tokenizers under test/tokenizers (fuzz/run.sh).
#include "fuzz/FuzzSupport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace {

using dsc::fuzz::requireMessage;

const char kDefaultText[] = "Hello, world! <|endoftext|> \xc3\xa9t\xc3\xa9  42\n\tdone";

} // namespace

// The runtime allocates plan-sized buffers with new (std::nothrow) and refuses what it cannot
// get; ASan would abort on a forged size instead of returning null.
extern "C" const char *__asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  const size_t separator = input.find('\0');
  std::string_view json = input.substr(0, separator);
  std::string_view text = separator == std::string_view::npos
                              ? std::string_view(kDefaultText)
                              : input.substr(separator + 1);

  dsc::fuzz::MemoryFile file(json.data(), json.size());
  dsrt_tokenizer *tokenizer = nullptr;
  dsrt_status status = dsrt_tokenizer_from_file(file.path(), &tokenizer);
  requireMessage(status, "dsrt_tokenizer_from_file");
  if (status == DSRT_OK) {
    for (int addSpecial = 0; addSpecial < 2; ++addSpecial) {
      int64_t *ids = nullptr;
      size_t count = 0;
      status = dsrt_tokenizer_encode(tokenizer, text.data(), text.size(), addSpecial, &ids,
                                     &count);
      requireMessage(status, "dsrt_tokenizer_encode");
      if (status != DSRT_OK)
        continue;
      // The ids it made decode; so do ids read from the text's bytes, or they are refused.
      std::vector<int64_t> fromBytes;
      for (size_t i = 0; i + 2 <= text.size() && fromBytes.size() < 64; i += 2)
        fromBytes.push_back(static_cast<int16_t>(static_cast<uint8_t>(text[i]) |
                                                 static_cast<uint8_t>(text[i + 1]) << 8));
      const std::vector<int64_t> encoded(ids, ids + count);
      const std::vector<int64_t> &bytesAsIds = fromBytes;
      for (const std::vector<int64_t> *sequence : {&encoded, &bytesAsIds}) {
        char *decoded = nullptr;
        status = dsrt_tokenizer_decode(tokenizer, sequence->data(), sequence->size(),
                                       addSpecial, &decoded);
        requireMessage(status, "dsrt_tokenizer_decode");
        if (status != DSRT_OK && sequence == &encoded) {
          std::fprintf(stderr, "fuzz: the ids the tokenizer made do not decode: %s\n",
                       dsrt_last_error());
          std::abort();
        }
        if (status == DSRT_OK)
          dsrt_free(decoded);
      }
      dsrt_free(ids);
    }
    dsrt_tokenizer_free(tokenizer);
  }
  return 0;
}
