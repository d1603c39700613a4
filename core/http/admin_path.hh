// The path of a run-time admin API (cache rules, certificates): PREFIX/COLLECTION lists, PREFIX/COLLECTION/NAME
// names one entry, relative to the location's prefix (for a regex or exact location: from the first
// "/COLLECTION" segment).
#pragma once

#include <string_view>

namespace kosoku::http {

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
