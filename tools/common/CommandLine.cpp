// The tools' command-line layer on CLI11 and fmt (CommandLine.h says what it keeps alike).
#include "common/CommandLine.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#ifndef DSC_VERSION
#error "DSC_VERSION is set by tools/common/CMakeLists.txt"
#endif

namespace dstools {
namespace {

constexpr size_t kWidth = 80;   // --help wraps its text here
constexpr size_t kColumn = 26;  // where an option's description starts
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// An error whose message is already the house's ("--batch must be ..."), thrown from the
// options' callbacks so that CLI11 stops parsing.
class UsageError : public CLI::ParseError {
public:
  explicit UsageError(std::string message)
      : CLI::ParseError("UsageError", std::move(message), 2) {}
};

// Appends `text` wrapped at kWidth: the first line continues one already `column` wide,
// the next ones are indented by `indent`. A newline in the text starts a new line.
void appendWrapped(std::string &out, const std::string &text, size_t indent, size_t column) {
  size_t start = 0;
  bool firstLine = true;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(start, end - start);
    if (!firstLine) {
      out += '\n';
      column = 0;
    }
    firstLine = false;
    // Words of this line; leading spaces are kept (an indented continuation).
    size_t lead = line.find_first_not_of(' ');
    std::string pad = lead == std::string::npos ? "" : line.substr(0, lead);
    size_t at = column;
    bool lineStart = true;
    size_t pos = lead == std::string::npos ? line.size() : lead;
    while (pos < line.size()) {
      size_t wordEnd = line.find(' ', pos);
      if (wordEnd == std::string::npos)
        wordEnd = line.size();
      std::string word = line.substr(pos, wordEnd - pos);
      if (lineStart) {
        if (at < indent) {
          out.append(indent - at, ' ');
          at = indent;
        }
        out += pad + word;
        at += pad.size() + word.size();
        lineStart = false;
      } else if (at + 1 + word.size() > kWidth) {
        out += '\n';
        out.append(indent, ' ');
        out += pad + word;
        at = indent + pad.size() + word.size();
      } else {
        out += ' ' + word;
        at += 1 + word.size();
      }
      pos = line.find_first_not_of(' ', wordEnd);
      if (pos == std::string::npos)
        break;
    }
    start = end + 1;
  }
}

// The option as --help shows it: "-o, --output FILE".
std::string optionLabel(const CLI::Option &option) {
  std::vector<std::string> names;
  for (const std::string &name : option.get_snames())
    names.push_back("-" + name);
  for (const std::string &name : option.get_lnames())
    names.push_back("--" + name);
  std::string label;
  for (const std::string &name : names)
    label += (label.empty() ? "" : ", ") + name;
  if (!option.get_type_name().empty())
    label += " " + option.get_type_name();
  return label;
}

// --help in the house layout (CommandLine.h).
class HouseFormatter : public CLI::Formatter {
public:
  explicit HouseFormatter(std::vector<std::string> usage) : usage_(std::move(usage)) {}

  std::string make_help(const CLI::App *app, std::string, CLI::AppFormatMode) const override {
    std::string out;
    for (size_t i = 0; i < usage_.size(); ++i)
      out += (i == 0 ? "Usage: " : "       ") + usage_[i] + "\n";
    if (!app->get_description().empty()) {
      out += "\n";
      appendWrapped(out, app->get_description(), 0, 0);
      out += "\n";
    }
    std::vector<const CLI::Option *> positional =
        app->get_options([](const CLI::Option *option) { return option->get_positional(); });
    if (!positional.empty()) {
      out += "\nArguments:\n";
      for (const CLI::Option *option : positional)
        appendRow(out, option->get_name(true, false), option->get_description());
    }
    for (const std::string &group : app->get_groups()) {
      std::vector<const CLI::Option *> options =
          app->get_options([&](const CLI::Option *option) {
            return option->nonpositional() && option->get_group() == group;
          });
      if (group.empty() || options.empty())
        continue;
      out += "\n" + group + ":\n";
      for (const CLI::Option *option : options)
        appendRow(out, optionLabel(*option), option->get_description());
    }
    std::string notes = app->get_footer();
    while (!notes.empty() && notes.back() == '\n')
      notes.pop_back();
    if (!notes.empty()) {
      out += "\n";
      appendWrapped(out, notes, 0, 0);
      out += "\n";
    }
    return out;
  }

private:
  static void appendRow(std::string &out, const std::string &label, const std::string &help) {
    out += "  " + label;
    size_t at = 2 + label.size();
    if (at + 1 >= kColumn) {
      out += '\n';
      at = 0;
    }
    appendWrapped(out, help, kColumn, at);
    out += '\n';
  }

  std::vector<std::string> usage_;
};

// The option's name in messages: its first long name, else its first name.
std::string primaryName(const std::string &names) {
  std::vector<std::string> parts = CLI::detail::split(names, ',');
  for (std::string &part : parts) {
    CLI::detail::trim(part);
    if (part.rfind("--", 0) == 0)
      return part;
  }
  std::string first = parts.empty() ? names : parts.front();
  CLI::detail::trim(first);
  return first;
}

size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean '--prompt'?)" for a misspelt or shortened option, else "".
std::string suggestion(const CLI::App &app, const std::string &given) {
  if (given.rfind("--", 0) != 0)
    return "";
  std::string typed = given.substr(2);
  std::string best;
  size_t bestDistance = 3;  // at most two edits
  for (const CLI::Option *option : app.get_options()) {
    for (const std::string &name : option->get_lnames()) {
      size_t distance = editDistance(typed, name);
      if (typed.size() >= 3 && name.rfind(typed, 0) == 0)
        distance = std::min<size_t>(distance, 1);  // a prefix of the name
      if (distance < bestDistance) {
        bestDistance = distance;
        best = name;
      }
    }
  }
  return best.empty() ? "" : fmt::format(" (did you mean '--{}'?)", best);
}

// CLI11's error in the house's words.
std::string describe(const CLI::App &app, const CLI::ParseError &error) {
  if (dynamic_cast<const UsageError *>(&error))
    return error.what();
  if (dynamic_cast<const CLI::ExtrasError *>(&error)) {
    std::vector<std::string> extras = app.remaining(false);
    if (!extras.empty()) {
      const std::string &first = extras.front();
      if (first.size() > 1 && first[0] == '-') {
        std::string name = first.substr(0, first.find('='));
        return fmt::format("unknown option '{}'{}", name, suggestion(app, name));
      }
      return fmt::format("unexpected argument '{}'", first);
    }
  }
  std::string message = error.what();
  // A flag given a value it cannot read as true or false: "Could not convert: --json = x".
  const std::string convert = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError *>(&error) && message.rfind(convert, 0) == 0) {
    size_t equals = message.find(" = ");
    if (equals != std::string::npos)
      return fmt::format("{} takes no value, not '{}'",
                         message.substr(convert.size(), equals - convert.size()),
                         message.substr(equals + 3));
  }
  if (dynamic_cast<const CLI::ArgumentMismatch *>(&error) &&
      message.find(" missing") != std::string::npos) {
    // "--device: 1 required NAME missing"
    return fmt::format("{} needs a value", message.substr(0, message.find(':')));
  }
  return message;
}

// An integer in [least, most]; typeMin and typeMax are the target's own limits, which the
// message leaves unsaid.
int64_t parseSigned(const std::string &name, const std::string &text, int64_t least,
                    int64_t most, int64_t typeMin, int64_t typeMax) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < least || value > most) {
    std::string range;
    if (least > typeMin && most < typeMax)
      range = fmt::format(" from {} to {}", least, most);
    else if (least > typeMin)
      range = fmt::format(" of at least {}", least);
    else if (most < typeMax)
      range = fmt::format(" of at most {}", most);
    throw UsageError(fmt::format("{} must be an integer{}, not '{}'", name, range, text));
  }
  return value;
}

double parseNumber(const std::string &name, const std::string &text, CommandLine::Sign sign) {
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  bool ok = !text.empty() && *end == '\0' && errno != ERANGE && std::isfinite(value) &&
            (sign == CommandLine::Sign::Any ||
             (sign == CommandLine::Sign::NonNegative ? value >= 0 : value > 0));
  if (!ok)
    throw UsageError(fmt::format("{} must be a {}number, not '{}'", name,
                                 sign == CommandLine::Sign::Positive      ? "positive "
                                 : sign == CommandLine::Sign::NonNegative ? "non-negative "
                                                                          : "",
                                 text));
  return value;
}

} // namespace

std::string versionLine(const std::string &tool) { return tool + " " DSC_VERSION; }

void fail(const std::string &tool, const std::string &message, int code) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\n", tool, message);
  std::exit(code);
}

CommandLine::CommandLine(std::string tool, std::vector<std::string> usage,
                         std::string description, std::string command)
    : tool_(std::move(tool)), command_(command.empty() ? tool_ : std::move(command)),
      app_(std::make_unique<CLI::App>(std::move(description), command_)) {
  app_->formatter(std::make_shared<HouseFormatter>(std::move(usage)));
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_->set_help_flag("-h,--help", "print this help and exit");
  app_->set_version_flag("--version", versionLine(tool_), "print the version and exit");
}

CommandLine::~CommandLine() = default;

void CommandLine::group(const std::string &name) { group_ = name; }

void CommandLine::notes(const std::string &text) { app_->footer(text); }

void CommandLine::version(const std::string &line) {
  app_->set_version_flag("--version", line, "print the version and exit");
}

void CommandLine::flag(const std::string &names, bool &target, const std::string &help) {
  app_->add_flag(names, target, help)->type_name("")->group(group_);
}

// An option with a value: `read` gets the value each time the option is given (the last
// one only, unless `repeatable`) and throws UsageError for a value it refuses.
static void addValueOption(CLI::App &app, const std::string &names, const std::string &value,
                    const std::string &help, const std::string &group, bool repeatable,
                    std::function<void(const std::string &)> read) {
  CLI::Option *option = app.add_option(
      names,
      [read, repeatable](const CLI::results_t &results) {
        if (repeatable)
          for (const std::string &text : results)
            read(text);
        else
          read(results.back());
        return true;
      },
      help);
  option->type_name(value)->group(group);
  if (repeatable)
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void CommandLine::text(const std::string &names, std::string &target, const std::string &value,
                       const std::string &help) {
  addValueOption(*app_, names, value, help, group_, false,
                 [&target](const std::string &text) { target = text; });
}

void CommandLine::choice(const std::string &names, std::string &target,
                         const std::vector<std::string> &choices, const std::string &value,
                         const std::string &help) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, false, [&target, choices, name](const std::string &text) {
    if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
      std::string list;
      for (size_t i = 0; i < choices.size(); ++i)
        list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
      throw UsageError(fmt::format("{} must be {}, not '{}'", name, list, text));
    }
    target = text;
  });
}

void CommandLine::texts(const std::string &names, std::vector<std::string> &target,
                        const std::string &value, const std::string &help) {
  addValueOption(*app_, names, value, help, group_, true,
                 [&target](const std::string &text) { target.push_back(text); });
}

void CommandLine::integer(const std::string &names, int64_t &target, const std::string &value,
                          const std::string &help, int64_t least, int64_t most) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, false,
                 [&target, name, least, most](const std::string &text) {
                   target = parseSigned(name, text, least, most, kInt64Min, kInt64Max);
                 });
}

void CommandLine::integer(const std::string &names, int32_t &target, const std::string &value,
                          const std::string &help, int64_t least, int64_t most) {
  std::string name = primaryName(names);
  least = std::max<int64_t>(least, std::numeric_limits<int32_t>::min());
  most = std::min<int64_t>(most, std::numeric_limits<int32_t>::max());
  addValueOption(*app_, names, value, help, group_, false,
                 [&target, name, least, most](const std::string &text) {
                   target = static_cast<int32_t>(parseSigned(
                       name, text, least, most, std::numeric_limits<int32_t>::min(),
                       std::numeric_limits<int32_t>::max()));
                 });
}

void CommandLine::integer(const std::string &names, uint64_t &target, const std::string &value,
                          const std::string &help) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, false, [&target, name](const std::string &text) {
    char *end = nullptr;
    errno = 0;
    unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE)
      throw UsageError(fmt::format("{} must be an integer of at least 0, not '{}'", name, text));
    target = parsed;
  });
}

void CommandLine::integers(const std::string &names, std::vector<int64_t> &target,
                           const std::string &value, const std::string &help) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, true, [&target, name](const std::string &text) {
    target.push_back(parseSigned(name, text, kInt64Min, kInt64Max, kInt64Min, kInt64Max));
  });
}

void CommandLine::number(const std::string &names, double &target, const std::string &value,
                         const std::string &help, Sign sign) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, false,
                 [&target, name, sign](const std::string &text) {
                   target = parseNumber(name, text, sign);
                 });
}

void CommandLine::number(const std::string &names, float &target, const std::string &value,
                         const std::string &help, Sign sign) {
  std::string name = primaryName(names);
  addValueOption(*app_, names, value, help, group_, false,
                 [&target, name, sign](const std::string &text) {
                   target = static_cast<float>(parseNumber(name, text, sign));
                 });
}

void CommandLine::arguments(const std::string &name, std::vector<std::string> &target,
                            const std::string &help) {
  app_->add_option(name, target, help)->type_name("")->group(group_);
}

void CommandLine::parse(int argc, char **argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    fmt::print("{}", app_->help());
    std::exit(0);
  } catch (const CLI::CallForVersion &version) {
    fmt::print("{}\n", version.what());
    std::exit(0);
  } catch (const CLI::ParseError &error) {
    usageError(describe(*app_, error));
  }
}

bool CommandLine::given(const std::string &name) const { return app_->count(name) > 0; }

const std::string &CommandLine::single(const std::vector<std::string> &arguments,
                                       const std::string &what) const {
  if (arguments.empty())
    usageError(fmt::format("no {} given", what));
  if (arguments.size() > 1)
    usageError(fmt::format("more than one {} given ('{}', '{}')", what, arguments[0],
                           arguments[1]));
  return arguments[0];
}

void CommandLine::usageError(const std::string &message) const {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\nTry '{} --help' for more information.\n", tool_, message,
             command_);
  std::exit(2);
}

} // namespace dstools
