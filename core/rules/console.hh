// The `rules` commands of the serial console (the console itself is wired elsewhere; it passes each line
// that starts with "rules" here and prints the result):
//
//   rules get HOST                 the host's patterns, one per line (or "no rules for host ...")
//   rules set HOST PATTERN...      replace the host's patterns (validated; the old ones stay on error)
//   rules del HOST                 remove the host's rules (it falls back to cache_rules_default)
//   rules count                    number of hosts with rules
//
// Arguments are separated by blanks; an argument may be double-quoted, with \" and \\ inside, to hold
// blanks (`rules set example.com "^/a b/"`). Changes reach every core at once and are persisted like the
// admin API's (without waiting for the disk).
#pragma once

#include <string>
#include <string_view>

namespace kosoku::rules {

class RuleStore;

/// Runs one console line on the process's rule store. Returns the text to print (ends with '\n').
std::string console_command(std::string_view line);
/// The same on a given store (tests).
std::string console_command(RuleStore& store, std::string_view line);

}  // namespace kosoku::rules
