// A set of field names (case-insensitive, RFC 9110 §5.1) asked once per field line of a head: the options a
// message's Connection lines list (RFC 9110 §7.6.1: fields a proxy must not forward), a cache's field names to
// leave out (no-cache="..."), the names a 304 updates (RFC 9111 §4.3.4). A few names are compared in turn (no
// allocation: the common case); more go to a hash set, so a head with many lines and many names costs
// O(lines + names), never their product. The views point into the caller's bytes, which must outlive the set.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "core/http/parser.hh"

namespace kosoku::http {

class FieldNameSet {
 public:
  /// Adds one name (nothing for an empty one).
  void add(std::string_view name);
  /// Adds the members of a comma-separated list (RFC 9110 §5.6.1; OWS-trimmed, empty members skipped).
  void add_list(std::string_view list);
  /// Adds the options of every Connection line of `fields`.
  void add_connection_options(std::span<const HeaderField> fields);
  bool contains(std::string_view name) const;
  bool empty() const { return few_.empty() && many_.empty(); }

 private:
  /// A name hashed and compared case-insensitively.
  struct Name {
    std::string_view s;
    bool operator==(const Name& o) const;
    template <typename H>
    friend H AbslHashValue(H h, const Name& n) {
      for (char c : n.s) h = H::combine(std::move(h), static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      return H::combine(std::move(h), n.s.size());
    }
  };
  static constexpr size_t kFew = 8;
  absl::InlinedVector<std::string_view, kFew> few_;  // while there are at most kFew names
  absl::flat_hash_set<Name> many_;                    // then all of them
};

}  // namespace kosoku::http
