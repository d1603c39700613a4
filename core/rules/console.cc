#include "core/rules/console.hh"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rules/store.hh"

namespace kosoku::rules {

namespace {

constexpr std::string_view kUsage =
    "usage: rules get HOST | rules set HOST PATTERN... | rules del HOST | rules count\n";

// Splits on blanks; "..." groups with \" and \\ escapes. False on an unterminated quote.
bool tokenize(std::string_view line, std::vector<std::string>* out) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) ++i;
    if (i >= line.size()) break;
    std::string tok;
    if (line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < line.size() && (line[i] == '"' || line[i] == '\\')) c = line[i++];
        tok.push_back(c);
      }
      if (!closed) return false;
    } else {
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n') {
        tok.push_back(line[i++]);
      }
    }
    out->push_back(std::move(tok));
  }
  return true;
}

}  // namespace

std::string console_command(RuleStore& store, std::string_view line) {
  std::vector<std::string> args;
  if (!tokenize(line, &args)) return "error: unterminated quote\n";
  if (args.empty() || args[0] != "rules" || args.size() < 2) return std::string(kUsage);
  const std::string& cmd = args[1];
  if (cmd == "count" && args.size() == 2) return absl::StrCat(store.set().size(), " host(s) with rules\n");
  if (cmd == "get" && args.size() == 3) {
    std::optional<std::vector<std::string>> p = store.set().get(args[2]);
    if (!p) return absl::StrCat("no rules for host \"", args[2], "\"\n");
    std::string out = absl::StrCat(args[2], ": ", p->size(), " pattern(s)\n");
    for (const std::string& s : *p) absl::StrAppend(&out, "  ", s, "\n");
    return out;
  }
  if (cmd == "set" && args.size() >= 3) {
    std::vector<std::string> patterns(args.begin() + 3, args.end());
    RuleSet::Outcome o = store.put(args[2], patterns);
    if (!o.ok) return absl::StrCat("error: ", o.error, " (the old rules are kept)\n");
    return absl::StrCat("ok: ", args[2], ": ", patterns.size(), " pattern(s)", o.existed ? " (replaced)" : "", "\n");
  }
  if (cmd == "del" && args.size() == 3) {
    RuleSet::Outcome o = store.erase(args[2]);
    if (!o.ok) return absl::StrCat("error: ", o.error, "\n");
    return absl::StrCat("ok: ", args[2], ": rules deleted\n");
  }
  return std::string(kUsage);
}

std::string console_command(std::string_view line) {
  RuleStore* store = process_store_if_created();
  if (store == nullptr) return "error: the cache rules are not loaded (no worker has started)\n";
  return console_command(*store, line);
}

}  // namespace kosoku::rules
