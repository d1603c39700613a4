// The tag index of one keys zone: tag → the entries carrying it, and entry → its tags (tags.hh), so that a tag
// purge selects its entries without a scan and an entry that leaves the zone (purge, eviction, `inactive`,
// `max_size`, a replacement) leaves the index with it. Like KeyIndex it is off the hit path: fills, the cache
// loader (which rebuilds it from the files after a restart), purges and the manager use it.
//
// Locking: 64 entry shards (by hash) and 64 tag shards (by tag), each behind a mutex. A writer (put, erase)
// holds its entry's shard for the whole change and takes the tag shards one at a time inside it; a reader of a
// tag (entries_of) takes only that tag's shard. The order is always entry shard → tag shard, so no cycle.
//
// Memory: bounded by a budget (the keys zone's size: CacheZone sets it) — past it, new entries' tags are not
// indexed (counted, and the fill logs it) — and by the limits of one entry's tags (tags.hh). bytes() counts the
// tag bytes and 16 bytes per (tag, entry) pair twice (both directions); the maps' own overhead comes on top.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/cache/cache_key.hh"

namespace kosoku::cache {

class TagIndex {
 public:
  /// At most `bytes` (bytes()) in the index; 0: no bound. Set once, before use.
  void set_budget(uint64_t bytes) { budget_ = bytes; }
  /// Records `tags` (stored form, tags.hh) as the tags of `h`, replacing any it had; "" removes them. False,
  /// and `h` keeps no tags, when the index is at its budget (the entry can then not be purged by tag; counted
  /// in refused()).
  bool put(const Hash128& h, std::string_view tags);
  /// Entries whose tags were not indexed for the budget.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  /// Forgets the tags of `h` (nothing when it has none).
  void erase(const Hash128& h);
  /// The entries carrying `tag`, appended to `out`.
  void entries_of(std::string_view tag, std::vector<Hash128>& out) const;
  /// The stored form of `h`'s tags ("" when none).
  std::string tags_of(const Hash128& h) const;

  /// Distinct tags.
  size_t tags() const { return tags_.load(std::memory_order_relaxed); }
  /// (tag, entry) pairs.
  size_t pairs() const { return pairs_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kShards = 64;
  struct EntryShard {
    mutable std::mutex mu;
    absl::flat_hash_map<Hash128, std::string, Hash128Hasher> tags;  // stored form
  };
  struct TagShard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, absl::flat_hash_set<Hash128, Hash128Hasher>> entries;
  };
  TagShard& shard_of(std::string_view tag) const;
  // Under the entry's shard: adds or removes (h, tag).
  void link(const Hash128& h, std::string_view tag);
  void unlink(const Hash128& h, std::string_view tag);

  mutable EntryShard entry_shards_[kShards];
  mutable TagShard tag_shards_[kShards];
  std::atomic<size_t> tags_{0};
  std::atomic<size_t> pairs_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> refused_{0};
  uint64_t budget_ = 0;
};

}  // namespace kosoku::cache
