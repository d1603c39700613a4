// Per-core cache of compiled rule sets: host → one RE2::Set of all its patterns, compiled on first use,
// bounded (`cache_rules_compiled N`: least recently used set evicted beyond N) and freed when idle
// (`inactive=`, swept by the core's housekeeping). Core-local: no locks.
//
// An entry remembers the encoded pattern list it was compiled from and the version of the shard that
// held it; a lookup with a newer shard version compares the pattern bytes and recompiles only if this
// host's patterns really changed (another host of the same shard changing costs one memcmp).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "re2/set.h"

namespace kosoku::rules {

struct HostRules;

class CompiledCache {
 public:
  CompiledCache(uint32_t max_sets, uint64_t inactive_ms);

  struct Result {
    const RE2::Set* set = nullptr;  // null: nothing matches (empty list, or the patterns failed to compile)
    bool compiled = false;          // compiled by this call
    bool failed = false;            // RE2 refused the patterns (error in *error)
  };
  /// The compiled set of `rules` (the host's record in the shard of version `version`).
  Result get(const HostRules& rules, uint64_t version, uint64_t now_ms, std::string* error);
  /// Frees sets unused for more than inactive_ms. Returns how many were freed.
  size_t expire(uint64_t now_ms);

  size_t size() const { return index_.size(); }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::string host;
    std::string encoded;  // HostRules::encoded the set was compiled from
    uint64_t version = 0;
    uint64_t last_used_ms = 0;
    std::unique_ptr<RE2::Set> set;
    bool failed = false;
  };
  using List = std::list<Entry>;

  uint32_t max_;
  uint64_t inactive_ms_;
  List lru_;  // front: most recently used
  absl::flat_hash_map<std::string_view, List::iterator> index_;  // keys view Entry::host
  uint64_t evictions_ = 0;
};

}  // namespace kosoku::rules
