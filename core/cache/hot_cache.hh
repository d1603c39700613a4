// A per-core copy of small, recently hit cache entries (header and body both in memory), so that a hit on a
// hot small object costs no file system call at all: no open, stat, read or close (the four calls of a disk
// hit, each with a path walk or an fd table update). Only entries whose whole file came in with the first read
// of a disk hit (EntryReader::kFirstRead, 16 KiB) are copied, so filling costs no extra I/O.
//
// Correctness: the keys zone stays the only authority. A copy is used only while the zone's entry has the same
// generation, expires_at and fs_size as when it was copied (EntryView::gen() changes with every commit), so a
// purge, an eviction, a replacement or a revalidation rewrite makes the copy unusable at the very next lookup,
// on every core. Freshness is still checked from the copied header on every hit.
//
// Bounded: at most kMaxBytes per core (LRU), entries of at most EntryReader::kFirstRead bytes. One per
// CacheModule, used only on its loop (no lock).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/node_hash_map.h"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_store.hh"
#include "core/cache/cache_zone.hh"

namespace kosoku::cache {

class HotCache {
 public:
  static constexpr size_t kMaxBytes = 16 << 20;
  static constexpr size_t kMaxEntry = EntryReader::kFirstRead;

  struct Entry {
    EntryMeta meta;
    std::string body;
    uint16_t gen = 0;
    int64_t expires_at = 0;
    uint64_t fs_size = 0;
    Hash128 hash;
    Entry* prev = nullptr;  // LRU: head = most recent
    Entry* next = nullptr;
  };

  explicit HotCache(size_t max_bytes = kMaxBytes) : max_bytes_(max_bytes) {}
  HotCache(const HotCache&) = delete;
  HotCache& operator=(const HotCache&) = delete;

  /// The copy of `h` if it is still the zone's current version `v` (else it is dropped); moves it to the front.
  const Entry* find(const Hash128& h, const EntryView& v);
  /// Copies an entry just read from disk (`body`: all of it) for version `v`; ignored when too large.
  void put(const Hash128& h, const EntryView& v, const EntryMeta& meta, std::string_view body);
  void erase(const Hash128& h);

  size_t bytes() const { return bytes_; }
  size_t size() const { return map_.size(); }
  uint64_t hits() const { return hits_; }

 private:
  static size_t cost(const Entry& e) {
    return e.body.size() + e.meta.head.size() + e.meta.key.size() + e.meta.etag.size() + e.meta.vary.size() + 256;
  }
  void unlink(Entry* e);
  void push_front(Entry* e);

  size_t max_bytes_;
  size_t bytes_ = 0;
  uint64_t hits_ = 0;
  absl::node_hash_map<Hash128, Entry, Hash128Hasher> map_;
  Entry* head_ = nullptr;
  Entry* tail_ = nullptr;
};

}  // namespace kosoku::cache
