// Checks of dsrt/dsrt.hpp beyond what examples/generate uses, on a compiled plan:
// finish reasons, a callback that stops its sequence, an exception thrown by the callback
// reaching the caller, and the tokenizer's encode/decode round trip (when the plan has one).
#include <dsrt/dsrt.hpp>

#include <iostream>
#include <string>

namespace {
int failures = 0;

void expect(bool ok, const std::string &what) {
  std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
  failures += ok ? 0 : 1;
}

struct CallbackError {
  size_t sequence;
};
} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: dsrt_wrapper_check PLAN\n";
    return 2;
  }
  try {
    dsrt::Plan plan(argv[1]);
    dsrt::Session session(plan);
    const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {8}};

    dsrt::GenerateOptions options;
    options.maxNewTokens = 4;
    options.ignoreEos = true;
    dsrt::Generation all = session.generateDetailed(prompts, options);
    expect(all.count() == 2, "two sequences");
    for (size_t s = 0; s < all.count(); ++s)
      expect(all.tokens(s).size() == 4 && all.finishReason(s) == DSRT_FINISH_LENGTH,
             "sequence " + std::to_string(s) + ": 4 tokens, finish reason length");

    // Stopping sequence 1 after its first token leaves sequence 0 alone.
    options.onToken = [](size_t sequence, int64_t) { return sequence == 1; };
    dsrt::Generation stopped = session.generateDetailed(prompts, options);
    expect(stopped.tokens(0) == all.tokens(0) &&
               stopped.finishReason(0) == DSRT_FINISH_LENGTH,
           "sequence 0 unaffected by sequence 1's stop");
    expect(stopped.tokens(1) == std::vector<int64_t>{all.tokens(1)[0]} &&
               stopped.finishReason(1) == DSRT_FINISH_CALLBACK,
           "sequence 1 stopped by the callback after one token");

    // The callback's own exception type arrives, not dsrt::Error, and the session is
    // still usable afterwards.
    options.onToken = [](size_t sequence, int64_t) -> bool { throw CallbackError{sequence}; };
    bool caught = false;
    try {
      session.generate(prompts, options);
    } catch (const CallbackError &) {
      caught = true;
    }
    expect(caught, "an exception thrown by the callback is rethrown by generate");
    options.onToken = nullptr;
    expect(session.generate(prompts, options) == all.sequences(),
           "the session generates the same after the exception");

    // An error of the library arrives as dsrt::Error with the status.
    dsrt::GenerateOptions tooLong;
    tooLong.maxNewTokens = 1 << 20;
    try {
      session.generate(prompts, tooLong);
      expect(false, "max_new_tokens over max_seq_len throws");
    } catch (const dsrt::Error &e) {
      expect(e.status() == DSRT_INVALID_ARGUMENT && !e.message().empty(),
             std::string("max_new_tokens over max_seq_len throws: ") + e.what());
    }

    try {
      dsrt::Tokenizer tokenizer = dsrt::Tokenizer::fromPlan(plan);
      const std::string text = "Hello world, 123";
      std::vector<int64_t> ids = tokenizer.encode(text);
      expect(!ids.empty() && tokenizer.decode(ids) == text,
             "tokenizer: '" + tokenizer.decode(ids) + "' round-trips");
    } catch (const dsrt::Error &e) {
      expect(e.status() == DSRT_INVALID_ARGUMENT,
             std::string("the plan has no tokenizer: ") + e.what());
    }
  } catch (const dsrt::Error &e) {
    std::cerr << "unexpected dsrt::Error: " << e.what() << "\n";
    return 1;
  }
  return failures ? 1 : 0;
}
