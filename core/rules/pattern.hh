// Rule patterns: RE2 regular expressions over nginx's $uri (the normalised, percent-decoded path without
// the query string — the string `location ~` regexes see), matched unanchored as written: `\.jpg$` matches
// any path ending in ".jpg", `^/img/` only paths under /img/ (nginx's `location ~` semantics; case-sensitive
// unless the pattern says `(?i)`). All of a host's patterns are compiled into one RE2::Set.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "re2/set.h"

namespace kosoku::rules {

struct HostRules;

/// Limits per host (the admin API and the file loader refuse more).
inline constexpr size_t kMaxPatterns = 1024;
inline constexpr size_t kMaxPatternBytes = 4096;
/// RE2 memory budget per compiled set (program + lazily built DFA), bytes.
inline constexpr int64_t kSetMaxMem = 1 << 20;

/// Checks a host's pattern list: count and size limits, each pattern valid RE2 syntax, and the whole list
/// compiles as one set. On error returns false with *error = `invalid pattern "P": MESSAGE` (RE2's message,
/// e.g. `missing ): (`), or a limit message.
bool validate_patterns(std::span<const std::string> patterns, std::string* error);

/// Compiles a host's patterns into one unanchored RE2::Set. Null (with *error) if RE2 refuses them (only
/// possible for patterns that were not validated, or over the memory budget). An empty list gives null
/// with an empty *error (nothing matches).
std::unique_ptr<RE2::Set> compile_set(const HostRules& rules, std::string* error);

/// True if `uri` matches one of the set's patterns. An RE2 out-of-memory (DFA budget) counts as no match
/// and sets *oom.
bool set_matches(const RE2::Set& set, std::string_view uri, bool* oom);

}  // namespace kosoku::rules
