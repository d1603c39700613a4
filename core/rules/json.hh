// The JSON shapes of the rules admin API and rules file (RFC 8259):
//   {"host":"example.com","patterns":["\\.jpg$","^/static/"]}
// A reader for exactly that object (other members are skipped, any JSON value; strings with every escape
// including \uXXXX surrogate pairs, decoded to UTF-8) and writers for it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/json_writer.hh"

namespace kosoku::rules {

struct HostRules;

struct RulesDoc {
  std::optional<std::string> host;
  std::optional<std::vector<std::string>> patterns;
};

/// Parses one JSON object (surrounding whitespace allowed). "host" must be a string and "patterns" an array
/// of strings when present. On error returns false with *error = "invalid JSON at byte N: what".
bool parse_rules_doc(std::string_view text, RulesDoc* out, std::string* error);

/// Appends `s` as a JSON string (core/base/json_writer.hh; patterns are valid UTF-8: RE2 refuses anything
/// else; hosts are ASCII).
using base::append_json_string;
/// Appends {"host":...,"patterns":[...]}.
void append_host_json(std::string& out, const HostRules& r);
void append_host_json(std::string& out, std::string_view host, std::span<const std::string> patterns);

}  // namespace kosoku::rules
