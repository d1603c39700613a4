// The keys zone of one proxy_cache_path: the in-memory index of the on-disk cache that every core reads
// (nginx's keys_zone shared memory, ngx_http_file_cache_node_t). It is the one mutable structure the cores
// share, so its design is the "lock-free hit path" one:
//
//   A fixed table of 7-way buckets, one 512-byte bucket per 7 entries, sized from keys_zone SIZE (about 14
//   entries per KiB; nginx keeps ~8 per KiB). Every bucket has a sequence counter (a seqlock):
//     - readers (a lookup on the hit path, any core) read the counter, copy the matching slot with relaxed
//       atomic loads, and re-read the counter: an odd or changed value means a writer was inside, and the
//       reader retries. No lock, no read-modify-write, no shared cache line written — except `last_access`,
//       a relaxed store done only when the second changed (the LRU clock);
//     - writers (insert/update/remove: misses, fills, purges, the loader and the manager) take the bucket's
//       sequence counter as a spin flag (CAS even → odd), write, and release it (odd → even). Writers on
//       different buckets never contend; a writer holds the flag for a few dozen stores.
//   Why not per-core shards with a cross-core hop: a hit on a key owned by another core would cost a mailbox
//   round trip (two loop iterations of latency) on the hot path; with the seqlock a hit costs two loads of the
//   counter and the slot's cache lines, whichever core asks.
//
// Entries: the 128-bit MD5 of the key (cache_key.hh), `expires_at` (fresh until, seconds since the epoch),
// `fs_size` (bytes on disk), the uses count (for proxy_cache_min_uses), `last_access` (LRU), Vary info
// (`vary_id` on a key's primary entry: its responses vary by that list of fields, and each variant is its own
// entry whose `parent` is the primary's tag), and a lock word (proxy_cache_lock / the updating flag: who is
// fetching the entry and until when, plus a bitmask of cores with waiters). An entry without kExists is a
// placeholder: counted uses, or a lock, but no file yet.
//
// LRU clock: `last_access` counts whole seconds since the zone's epoch, so a hit writes its entry's cache line at
// most once per second (readers on other cores keep their copy); entries used within the same second are equally
// recent for eviction.
// Eviction: a full bucket evicts its least recently used slot (placeholders, then expired entries, then the
// oldest); the caller unlinks the evicted file. The manager (one core, bounded work per pass) removes entries
// unused for `inactive` and, while the bytes on disk exceed `max_size`, the least recently used entry among
// a window of buckets (exact LRU for zones up to the window, an approximation above). Keys themselves are not
// needed on the hit path (a hit compares the hash, and the entry's file header holds the key for the
// collision check); they are kept in KeyIndex for prefix/wildcard purge, behind per-shard mutexes that only
// misses, purges and the manager take, and the entries' tags likewise in TagIndex (tag_index.hh) for tag purge.
// A soft purge marks an entry kEntryStale instead of removing it (mark_stale).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/cache/cache_key.hh"
#include "core/cache/tag_index.hh"

namespace kosoku::cache {

/// Entry flags.
enum EntryFlag : uint8_t {
  kEntryExists = 1u << 0,   // a complete file is on disk
  kEntryPrimary = 1u << 1,  // responses for this key vary: look up the variant (vary_id names the fields)
  kEntryVariant = 1u << 2,  // one Vary variant of a primary (parent = the primary's tag)
  kEntryStale = 1u << 3,    // soft-purged: stale from expires_at on, whatever its file says (cleared by a commit)
};

/// A consistent copy of one entry.
struct EntryView {
  Hash128 hash;
  int64_t expires_at = 0;   // fresh until (s since the epoch); meaningful with kEntryExists
  uint64_t fs_size = 0;     // bytes on disk
  uint64_t parent = 0;      // kEntryVariant: Hash128::tag() of the primary
  uint32_t uses = 0;
  uint32_t last_access = 0; // seconds since the zone's epoch
  uint16_t vary_id = 0;     // kEntryPrimary: VaryTable id; kEntryExists: the commit generation (gen())
  uint8_t flags = 0;
  uint64_t lock_until_ms = 0;  // 0: not locked; else the monotonic ms until which the lock holds
  uint64_t waiters = 0;        // cores waiting for the lock (bit per core)
  bool exists() const { return flags & kEntryExists; }
  /// A 16-bit number that changes with every commit of a file for this entry (a per-core copy of the entry is
  /// valid only while gen, expires_at and fs_size are all unchanged).
  uint16_t gen() const { return vary_id; }
};

/// Interned Vary name lists (freshness.hh normalised form), ids 1..kMaxVaryLists. Lock-free reads; interning a
/// new list takes a mutex (a store, never a hit).
class VaryTable {
 public:
  static constexpr uint16_t kMaxVaryLists = 255;
  /// The id of `names` (interned on first use); 0 when the table is full or names is empty/too long.
  uint16_t intern(std::string_view names);
  /// The names of `id` ("" for 0 or an unknown id).
  std::string_view get(uint16_t id) const;

 private:
  struct Item {
    std::atomic<uint8_t> len{0};
    char names[224] = {};
  };
  std::atomic<uint16_t> count_{0};
  Item items_[kMaxVaryLists + 1];
  std::mutex mu_;
};

/// Keys by hash, for prefix and wildcard purge and the manager's logs (not on the hit path).
class KeyIndex {
 public:
  void put(const Hash128& h, std::string_view key);
  void erase(const Hash128& h);
  std::optional<std::string> get(const Hash128& h) const;
  /// Calls f(hash, key) for every key (each shard under its mutex; f must not call back into the index).
  void for_each(const std::function<void(const Hash128&, std::string_view)>& f) const;
  /// The same for one shard (0..shard_count()-1): an incremental walk holds one shard's mutex at a time.
  void for_each_in_shard(size_t shard, const std::function<void(const Hash128&, std::string_view)>& f) const;
  static constexpr size_t shard_count() { return kShards; }
  size_t size() const;
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kShards = 1024;  // ~10,000 keys a shard at 10 million entries
  struct Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<Hash128, std::string, Hash128Hasher> keys;
  };
  Shard shards_[kShards];
  std::atomic<uint64_t> bytes_{0};
};

class CacheZone {
 public:
  /// `size_bytes`: keys_zone SIZE; `epoch_s`: the wall-clock second last_access counts from.
  CacheZone(std::string name, uint64_t size_bytes, int64_t epoch_s);
  ~CacheZone();
  CacheZone(const CacheZone&) = delete;
  CacheZone& operator=(const CacheZone&) = delete;

  const std::string& name() const { return name_; }
  size_t capacity() const { return nbuckets_ * kWays; }
  static constexpr size_t kWays = 7;

  // ---- readers (any core, no lock)

  /// The entry for `h`; `now_s` (wall clock) refreshes its last_access. Never blocks.
  std::optional<EntryView> lookup(const Hash128& h, int64_t now_s);
  /// Same without touching last_access (tests, the manager).
  std::optional<EntryView> peek(const Hash128& h) const;

  // ---- writers (any core; take the bucket's flag)

  /// Counts one use of `h` (creating a placeholder if absent) and returns the uses so far, and the entry.
  /// `evicted` receives an entry pushed out of a full bucket (its file must be unlinked by the caller).
  EntryView count_use(const Hash128& h, int64_t now_s, std::optional<EntryView>* evicted);

  /// Records a complete file for `h`: sets kEntryExists, expires_at, fs_size (adding to the zone's bytes),
  /// clears the lock and returns the waiters mask (cores to wake). `flags` adds kEntryVariant/parent.
  struct Commit {
    int64_t expires_at = 0;
    uint64_t fs_size = 0;
    uint8_t extra_flags = 0;  // kEntryVariant
    uint64_t parent = 0;
    bool only_if_absent = false;  // the cache loader: never overwrite an entry a request stored meanwhile
  };
  uint64_t commit(const Hash128& h, const Commit& c, int64_t now_s, std::optional<EntryView>* evicted);

  /// Marks `h` as a Vary primary with `vary_id` (no file of its own; an old file's bytes are released and
  /// its size returned through *old_fs_size so the caller unlinks it).
  void set_primary(const Hash128& h, uint16_t vary_id, int64_t now_s, std::optional<EntryView>* evicted,
                   uint64_t* old_fs_size);

  /// Updates expires_at of a complete entry after a 304 revalidated it (the file is rewritten later, or not at
  /// all), and ends a soft purge's stale mark: the entry's own head governs again. False (nothing changed) when
  /// the entry is gone or only a placeholder (purged meanwhile).
  bool set_expires(const Hash128& h, int64_t expires_at);

  enum class LockResult {
    kAcquired,  // the caller fetches; it must unlock() or commit()
    kBusy,      // another request holds it (and its lock_age has not passed)
  };
  /// proxy_cache_lock / updating: takes the lock of `h` (creating a placeholder) until now_ms + age_ms.
  /// A lock older than its age may be taken over (nginx's proxy_cache_lock_age).
  LockResult try_lock(const Hash128& h, uint64_t now_ms, uint64_t age_ms, int64_t now_s,
                      std::optional<EntryView>* evicted);
  /// Registers `core` as waiting for the lock of `h`. False when the lock is no longer held (look again).
  bool add_waiter(const Hash128& h, int core, uint64_t now_ms);
  /// Releases the lock without a file (the fill failed or was not cacheable); returns the waiters mask.
  uint64_t unlock(const Hash128& h);

  /// Removes `h`; returns the removed entry (its file is the caller's to unlink).
  std::optional<EntryView> remove(const Hash128& h);
  /// Removes `h` only if it is still the same version (same expires_at and fs_size).
  std::optional<EntryView> remove_if_same(const EntryView& seen);
  /// A purge's removal: forgets what `seen` recorded if the slot still holds exactly that (same flags, gen or
  /// vary_id, expires_at and fs_size), and returns it; nullopt when the entry changed or went meanwhile. A slot
  /// whose lock is held (a fill in flight) keeps the lock, its waiters and its uses as a placeholder; otherwise
  /// the slot and its key go. The placeholder left for a fill is marked kEntryStale: the fill's commit is then
  /// stored stale (what it fetched may predate the purge); unlock() clears the mark of a placeholder.
  std::optional<EntryView> forget(const EntryView& seen);
  /// A soft purge: marks the complete entry `seen` recorded as stale from `at_s` on (kEntryStale, and expires_at
  /// lowered to at_s when later) if the slot still holds that version; false when it changed or went. The file
  /// stays; the next commit of the entry clears the mark. A placeholder with a fill in flight is marked instead
  /// (false): that fill's result is stored stale.
  bool mark_stale(const EntryView& seen, int64_t at_s);

  /// Visits up to `max_buckets` buckets from the manager's clock hand; for every entry calls
  /// `pick(view)` and removes the entries it returns true for (each under its bucket's flag); removed
  /// entries go to `out`. Returns the number of buckets visited.
  size_t sweep(size_t max_buckets, const std::function<bool(const EntryView&)>& pick, std::vector<EntryView>* out);
  /// The least recently used complete entry among the next `window` buckets from the eviction hand, removed;
  /// nullopt when none.
  std::optional<EntryView> evict_lru(size_t window);
  /// Calls f(view) for every entry (seqlock snapshots; the set may change meanwhile).
  void for_each(const std::function<void(const EntryView&)>& f) const;
  /// The same for the buckets [first, last) of bucket_count(): an incremental walk.
  void for_each_in(size_t first, size_t last, const std::function<void(const EntryView&)>& f) const;
  size_t bucket_count() const { return nbuckets_; }

  // ---- accounting
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t entries() const { return entries_.load(std::memory_order_relaxed); }
  uint32_t relative_time(int64_t now_s) const {
    int64_t d = now_s - epoch_s_;
    return d <= 0 ? 0 : static_cast<uint32_t>(d);
  }
  int64_t epoch() const { return epoch_s_; }

  VaryTable& vary() { return vary_; }
  KeyIndex& keys() { return keys_; }
  TagIndex& tags() { return tags_; }

 private:
  struct Slot;

 public:
  struct Bucket;  // public for a static_assert on its size

 private:
  Bucket& bucket_of(const Hash128& h) const;
  uint32_t lock_bucket(Bucket& b) const;
  void unlock_bucket(Bucket& b, uint32_t seq) const;
  // Under the bucket flag: the slot of h, or null.
  Slot* find_locked(Bucket& b, const Hash128& h) const;
  // Under the bucket flag: the slot of h, inserted (evicting the bucket's LRU if full) when absent.
  Slot* find_or_insert_locked(Bucket& b, const Hash128& h, int64_t now_s, std::optional<EntryView>* evicted);
  void clear_slot_locked(Slot& s);
  // After the bucket flag is released: forget the key of an entry pushed out of a full bucket.
  void drop_evicted_key(const std::optional<EntryView>* evicted);
  // After the bucket flag is released: the key and tags of an entry that left the zone.
  void forget_indexes(const Hash128& h);

  std::string name_;
  int64_t epoch_s_;
  size_t nbuckets_;
  Bucket* buckets_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> entries_{0};
  std::atomic<uint16_t> gen_{0};
  std::atomic<size_t> sweep_hand_{0};
  std::atomic<size_t> evict_hand_{0};
  VaryTable vary_;
  KeyIndex keys_;
  TagIndex tags_;
};

}  // namespace kosoku::cache
