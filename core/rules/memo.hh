// Per-core memo of rule decisions: (host, $uri) → cache / do not cache, an LRU bounded by
// `cache_rules_memo` entries (core-local: no locks, no atomics).
//
// Each entry remembers the version of the shard its decision was computed from; a lookup passes the
// current version of the host's shard and an entry from an older version is a miss (and is overwritten by
// the next insert). A rule change replaces the host's shard, so it invalidates exactly that shard's entries
// (1/4096 of the hosts) at once on every core, with no message to the cores.
//
// Storage: a vector of entries (key = host bytes followed by uri bytes in one std::string whose capacity is
// reused when the entry is recycled: no allocation once warm) with an intrusive LRU list, and an
// absl::flat_hash_set of 32-bit entry indexes (hash and equality read the entry: ~5 bytes per slot).
// The key's hash mixes the host's hash_host() (the caller has it already: the shard lookup needs it, and the
// entry keeps it) with the uri's, so a probe hashes the uri only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

namespace kosoku::rules {

class Memo {
 public:
  enum class Hit : int8_t { kMiss = -1, kNoCache = 0, kCache = 1 };

  /// max_entries 0: the memo is off (every lookup misses, inserts are dropped).
  explicit Memo(uint32_t max_entries);
  Memo(const Memo&) = delete;
  Memo& operator=(const Memo&) = delete;

  /// The remembered decision for (host, uri) computed from shard `version`, else kMiss. `host_hash` =
  /// hash_host(host). A hit becomes the most recently used entry. No allocation.
  Hit find(std::string_view host, size_t host_hash, std::string_view uri, uint64_t version);
  /// Remembers a decision, evicting the least recently used entry when full.
  void insert(std::string_view host, size_t host_hash, std::string_view uri, uint64_t version, bool cache);
  /// The same, hashing the host here.
  Hit find(std::string_view host, std::string_view uri, uint64_t version);
  void insert(std::string_view host, std::string_view uri, uint64_t version, bool cache);

  size_t size() const { return index_.size(); }
  uint32_t capacity() const { return max_; }
  uint64_t evictions() const { return evictions_; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Entry {
    std::string key;  // host then uri
    uint32_t host_len = 0;
    size_t host_hash = 0;
    uint32_t prev = kNil;
    uint32_t next = kNil;
    uint64_t version = 0;
    bool cache = false;
  };
  struct Key {
    std::string_view host;
    size_t host_hash;
    std::string_view uri;
  };
  static size_t hash_key(size_t host_hash, std::string_view uri) {
    return absl::Hash<std::pair<size_t, std::string_view>>{}({host_hash, uri});
  }
  struct Hash {
    using is_transparent = void;
    const Memo* m;
    size_t operator()(uint32_t i) const {
      const Entry& e = m->entries_[i];
      return hash_key(e.host_hash, std::string_view(e.key).substr(e.host_len));
    }
    size_t operator()(const Key& k) const { return hash_key(k.host_hash, k.uri); }
  };
  struct Eq {
    using is_transparent = void;
    const Memo* m;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, const Key& k) const { return m->matches(a, k); }
    bool operator()(const Key& k, uint32_t a) const { return m->matches(a, k); }
  };
  bool matches(uint32_t i, const Key& k) const {
    const Entry& e = entries_[i];
    return e.host_hash == k.host_hash && e.host_len == k.host.size() && e.key.size() == k.host.size() + k.uri.size() &&
           std::string_view(e.key).substr(0, e.host_len) == k.host &&
           std::string_view(e.key).substr(e.host_len) == k.uri;
  }
  void unlink(uint32_t i);
  void push_front(uint32_t i);

  uint32_t max_;
  std::vector<Entry> entries_;
  absl::flat_hash_set<uint32_t, Hash, Eq> index_;
  uint32_t head_ = kNil;  // most recently used
  uint32_t tail_ = kNil;  // least recently used
  uint64_t evictions_ = 0;
};

}  // namespace kosoku::rules
