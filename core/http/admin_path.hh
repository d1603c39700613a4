// The path of a run-time admin API (cache rules, certificates): PREFIX/COLLECTION lists, PREFIX/COLLECTION/NAME
// names one entry, relative to the location's prefix (for a regex or exact location: from the first
// "/COLLECTION" segment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/base/json_writer.hh"

namespace kosoku::http {

/// Listing pages: `limit` when the query names none, and the largest one taken.
inline constexpr size_t kAdminDefaultLimit = 100;
inline constexpr size_t kAdminMaxLimit = 1000;

/// An admin API's error body: `{"error":"MESSAGE"}` and a newline.
inline std::string admin_error_json(std::string_view message) {
  std::string out = "{\"error\":";
  base::append_json_string(out, message);
  out.append("}\n");
  return out;
}

/// `offset=N&limit=M` from the raw query into *offset / *limit (limit 0 counts as 1, above kAdminMaxLimit as
/// kAdminMaxLimit); unknown or malformed parameters are ignored.
inline void parse_admin_paging(std::string_view args, size_t* offset, size_t* limit) {
  for (std::string_view kv : absl::StrSplit(args, '&')) {
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view k = kv.substr(0, eq);
    uint64_t v;
    if (!absl::SimpleAtoi(kv.substr(eq + 1), &v)) continue;
    if (k == "offset") *offset = v;
    if (k == "limit") *limit = v == 0 ? 1 : (v > kAdminMaxLimit ? kAdminMaxLimit : v);
  }
}

/// Splits `uri`: true with *list (PREFIX/COLLECTION[/]) or *name (PREFIX/COLLECTION/NAME[/], as written); false
/// if it is not an admin path. `loc_prefix`: the prefix location's pattern, or empty. `collection` e.g. "rules".
inline bool split_admin_path(std::string_view uri, std::string_view loc_prefix, std::string_view collection,
                             bool* list, std::string_view* name) {
  std::string_view rest;
  if (!loc_prefix.empty() && uri.substr(0, loc_prefix.size()) == loc_prefix) {
    rest = uri.substr(loc_prefix.size());
    while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  } else {
    size_t pos = 0;
    for (;;) {
      pos = uri.find(collection, pos);
      if (pos == std::string_view::npos) return false;
      const size_t after = pos + collection.size();
      if (pos > 0 && uri[pos - 1] == '/' && (after == uri.size() || uri[after] == '/')) {
        rest = uri.substr(pos);
        break;
      }
      pos = after;
    }
  }
  if (rest.substr(0, collection.size()) != collection) return false;
  std::string_view tail = rest.substr(collection.size());
  if (tail.empty() || tail == "/") {
    *list = true;
    return true;
  }
  if (tail.front() != '/') return false;
  std::string_view n = tail.substr(1);
  if (!n.empty() && n.back() == '/') n.remove_suffix(1);
  if (n.empty() || n.find('/') != std::string_view::npos) return false;
  *list = false;
  *name = n;
  return true;
}

}  // namespace kosoku::http
