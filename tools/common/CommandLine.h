// The tools' one command-line layer (docs/usage.md, "Command-line conventions"): dsc,
// dsrun, dsbench, dseval, dsp-dump and dsp-roofline each describe their options to a
// CommandLine, which parses argv with CLI11 and keeps the house style:
//
//   * `--help` (-h) prints "Usage: TOOL ..." lines, a description, then "Arguments:",
//     "Options:" (always -h, --help and --version first) and any further groups, each
//     option's text wrapped at 80 columns, then the tool's closing notes; exit status 0.
//   * `--version` prints "TOOL VERSION" (the project's version; dsc adds MLIR's and its
//     opsets); exit status 0.
//   * A usage error (an unknown option, a missing or malformed value, a missing plan) prints
//     "TOOL: error: WHAT" naming the option, then "Try 'TOOL --help' for more information.",
//     on stderr; exit status 2.
//   * Values are checked as they are parsed, with the same wording in every tool:
//     "--batch must be an integer of at least 1, not 'x'".
//
// CLI11 stays inside CommandLine.cpp: this header declares only what a tool calls.
#ifndef DSC_TOOLS_COMMON_COMMANDLINE_H
#define DSC_TOOLS_COMMON_COMMANDLINE_H

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace dstools {

// "TOOL VERSION" (docs/usage.md): the same project version for every tool.
std::string versionLine(const std::string &tool);

// "TOOL: error: MESSAGE" on stderr, then exit(code). For errors after parsing (a plan that
// cannot be opened, a failed run); usage errors go through CommandLine::usageError.
[[noreturn]] void fail(const std::string &tool, const std::string &message, int code = 2);

class CommandLine {
public:
  // `tool` names the program in errors and --version; `command` is what its usage lines
  // and the --help hint call it ("dsbench serve"; default: the tool). `usage`: the lines
  // after "Usage: ", each starting with the command. `description`: one paragraph.
  CommandLine(std::string tool, std::vector<std::string> usage, std::string description,
              std::string command = "");
  ~CommandLine();
  CommandLine(const CommandLine &) = delete;
  CommandLine &operator=(const CommandLine &) = delete;

  // Options added after this belong to `name`'s section of --help ("Options" until then).
  void group(const std::string &name);
  // Text printed at the end of --help; each line wrapped at 80 columns like the rest, its
  // continuations indented as the line is.
  void notes(const std::string &text);
  // With `version`, --version prints it instead of versionLine(tool).
  void version(const std::string &line);

  // `names`: CLI11's form, "--name" or "-o,--output"; the first long name is the option's
  // name in messages; further names are aliases. `value` names the value in --help.
  // A value given twice: the last one wins (as every tool's own parser did).
  void flag(const std::string &names, bool &target, const std::string &help);
  void text(const std::string &names, std::string &target, const std::string &value,
            const std::string &help);
  // One of `choices`, else "--emit must be one of onnx, tfm, ..., not 'x'".
  void choice(const std::string &names, std::string &target,
              const std::vector<std::string> &choices, const std::string &value,
              const std::string &help);
  // Repeatable: each occurrence appends its value.
  void texts(const std::string &names, std::vector<std::string> &target,
             const std::string &value, const std::string &help);
  // Integers within [least, most]: "--batch must be an integer of at least 1, not 'x'".
  void integer(const std::string &names, int64_t &target, const std::string &value,
               const std::string &help, int64_t least = std::numeric_limits<int64_t>::min(),
               int64_t most = std::numeric_limits<int64_t>::max());
  void integer(const std::string &names, int32_t &target, const std::string &value,
               const std::string &help, int64_t least = std::numeric_limits<int32_t>::min(),
               int64_t most = std::numeric_limits<int32_t>::max());
  void integer(const std::string &names, uint64_t &target, const std::string &value,
               const std::string &help);
  // Repeatable: each occurrence appends one integer.
  void integers(const std::string &names, std::vector<int64_t> &target, const std::string &value,
                const std::string &help);
  enum class Sign { Any, NonNegative, Positive };
  // Finite numbers: "--launch-us must be a non-negative number, not 'fast'".
  void number(const std::string &names, double &target, const std::string &value,
              const std::string &help, Sign sign = Sign::Any);
  void number(const std::string &names, float &target, const std::string &value,
              const std::string &help, Sign sign = Sign::Any);
  // Every argument that is not an option, in order (the tool checks how many it got).
  void arguments(const std::string &name, std::vector<std::string> &target,
                 const std::string &help);

  // Parses argv. Returns only when the tool should run: --help and --version exit 0, usage
  // errors exit 2.
  void parse(int argc, char **argv);
  // Whether the option was on the command line (any of its names).
  bool given(const std::string &name) const;
  // The one argument of `arguments` (from arguments()); else "no WHAT given" or "more than
  // one WHAT given ('a', 'b')" as a usage error.
  const std::string &single(const std::vector<std::string> &arguments,
                            const std::string &what) const;

  // "TOOL: error: MESSAGE" and the --help hint on stderr, then exit(2).
  [[noreturn]] void usageError(const std::string &message) const;

  const std::string &tool() const { return tool_; }

private:
  std::string tool_, command_, group_ = "Options";
  std::unique_ptr<CLI::App> app_;
};

} // namespace dstools

#endif
