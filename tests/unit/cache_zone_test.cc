// The keys zone (core/cache/cache_zone.hh) and key naming (cache_key.hh): nginx's file names, entries, the
// lock and its waiters, eviction, the manager's sweep, and the seqlock under concurrent readers and writers.
#include "core/cache/cache_zone.hh"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/cache/cache_key.hh"
#include "core/cache/hot_cache.hh"

namespace kosoku::cache {
namespace {

constexpr int64_t kNow = 1700000000;

TEST(CacheKeyTest, Md5HexAndNginxLevels) {
  // nginx's documentation example: levels=1:2 → /data/nginx/cache/c/29/b7f54b2df7773722d382f4809d65029c
  Hash128 h;
  ASSERT_TRUE(from_hex("b7f54b2df7773722d382f4809d65029c", &h));
  EXPECT_EQ(to_hex(h), "b7f54b2df7773722d382f4809d65029c");
  EXPECT_EQ(entry_path("/data/nginx/cache", {1, 2}, h), "/data/nginx/cache/c/29/b7f54b2df7773722d382f4809d65029c");
  EXPECT_EQ(entry_path("/c", {2}, h), "/c/9c/b7f54b2df7773722d382f4809d65029c");
  EXPECT_EQ(entry_path("/c", {}, h), "/c/b7f54b2df7773722d382f4809d65029c");
  EXPECT_EQ(entry_path("/c", {1, 1, 2}, h), "/c/c/9/02/b7f54b2df7773722d382f4809d65029c");
  // RFC 1321 test vectors.
  EXPECT_EQ(to_hex(hash_key("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(to_hex(hash_key("abc")), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(to_hex(hash_key("message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_FALSE(from_hex("b7f54b2df7773722d382f4809d65029", &h));
  EXPECT_FALSE(from_hex("g7f54b2df7773722d382f4809d65029c", &h));
  // Variants of a key differ from the key and from each other.
  Hash128 k = hash_key("http:a/x");
  EXPECT_NE(hash_variant("http:a/x", "accept-language:en\n"), k);
  EXPECT_NE(hash_variant("http:a/x", "accept-language:en\n"), hash_variant("http:a/x", "accept-language:fr\n"));
  EXPECT_EQ(hash_variant("http:a/x", "m"), hash_variant("http:a/x", "m"));
}

TEST(CacheZoneTest, PlaceholderUsesCommitLookupRemove) {
  CacheZone z("z", 1 << 20, kNow);
  EXPECT_GE(z.capacity(), 2000u);
  Hash128 h = hash_key("k1");
  EXPECT_FALSE(z.lookup(h, kNow).has_value());
  std::optional<EntryView> ev;
  EXPECT_EQ(z.count_use(h, kNow, &ev).uses, 1u);
  EXPECT_EQ(z.count_use(h, kNow, &ev).uses, 2u);
  EXPECT_FALSE(ev.has_value());
  auto v = z.lookup(h, kNow);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->exists());
  EXPECT_EQ(z.entries(), 1u);
  EXPECT_EQ(z.bytes(), 0u);

  EXPECT_EQ(z.commit(h, CacheZone::Commit{kNow + 60, 4096, 0, 0}, kNow, &ev), 0u);
  v = z.lookup(h, kNow + 5);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->exists());
  EXPECT_EQ(v->expires_at, kNow + 60);
  EXPECT_EQ(v->fs_size, 4096u);
  EXPECT_EQ(v->uses, 2u);
  EXPECT_EQ(v->last_access, 5u);
  EXPECT_EQ(z.bytes(), 4096u);
  // Re-commit with another size adjusts the total.
  z.commit(h, CacheZone::Commit{kNow + 90, 1000, 0, 0}, kNow, &ev);
  EXPECT_EQ(z.bytes(), 1000u);
  EXPECT_TRUE(z.set_expires(h, kNow + 120));
  EXPECT_EQ(z.peek(h)->expires_at, kNow + 120);

  z.keys().put(h, "k1");
  auto removed = z.remove(h);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->fs_size, 1000u);
  EXPECT_FALSE(z.peek(h).has_value());
  EXPECT_EQ(z.bytes(), 0u);
  EXPECT_EQ(z.entries(), 0u);
  EXPECT_FALSE(z.keys().get(h).has_value());
  EXPECT_FALSE(z.remove(h).has_value());
}

TEST(CacheZoneTest, PrimaryAndVariants) {
  CacheZone z("z", 1 << 20, kNow);
  Hash128 k = hash_key("http:a/c23");
  std::optional<EntryView> ev;
  z.commit(k, CacheZone::Commit{kNow + 60, 500, 0, 0}, kNow, &ev);
  uint16_t id = z.vary().intern("accept-language");
  EXPECT_EQ(id, 1u);
  EXPECT_EQ(z.vary().intern("accept-language"), 1u);
  EXPECT_EQ(z.vary().intern("accept-encoding"), 2u);
  EXPECT_EQ(z.vary().get(1), "accept-language");
  EXPECT_EQ(z.vary().get(9), "");
  uint64_t old = 0;
  z.set_primary(k, id, kNow, &ev, &old);
  EXPECT_EQ(old, 500u);  // the plain entry's file is now the caller's to unlink
  EXPECT_EQ(z.bytes(), 0u);
  auto p = z.peek(k);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flags, kEntryPrimary);
  EXPECT_EQ(p->vary_id, id);
  Hash128 v = hash_variant("http:a/c23", "accept-language:en\n");
  z.commit(v, CacheZone::Commit{kNow + 60, 300, kEntryVariant, k.tag()}, kNow, &ev);
  auto vv = z.peek(v);
  ASSERT_TRUE(vv.has_value());
  EXPECT_EQ(vv->flags, kEntryExists | kEntryVariant);
  EXPECT_EQ(vv->parent, k.tag());
}

TEST(CacheZoneTest, LockWaitersAndAge) {
  CacheZone z("z", 1 << 20, kNow);
  Hash128 h = hash_key("locked");
  std::optional<EntryView> ev;
  EXPECT_EQ(z.try_lock(h, 1000, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  EXPECT_EQ(z.try_lock(h, 1001, 5000, kNow, &ev), CacheZone::LockResult::kBusy);
  EXPECT_TRUE(z.add_waiter(h, 1, 1002));
  EXPECT_TRUE(z.add_waiter(h, 3, 1002));
  EXPECT_EQ(z.peek(h)->waiters, (1ull << 1) | (1ull << 3));
  EXPECT_EQ(z.peek(h)->lock_until_ms, 6000u);
  // The fill completes: the waiters are handed back to wake, the lock is gone.
  EXPECT_EQ(z.commit(h, CacheZone::Commit{kNow + 60, 10, 0, 0}, kNow, &ev), (1ull << 1) | (1ull << 3));
  EXPECT_EQ(z.peek(h)->lock_until_ms, 0u);
  EXPECT_FALSE(z.add_waiter(h, 1, 1003));  // not locked any more: look again
  // proxy_cache_lock_age: a lock older than its age is taken over.
  EXPECT_EQ(z.try_lock(h, 2000, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  EXPECT_EQ(z.try_lock(h, 6999, 5000, kNow, &ev), CacheZone::LockResult::kBusy);
  EXPECT_EQ(z.try_lock(h, 7000, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  EXPECT_TRUE(z.add_waiter(h, 2, 7001));
  EXPECT_EQ(z.unlock(h), 1ull << 2);
  EXPECT_EQ(z.unlock(h), 0u);
  EXPECT_TRUE(z.peek(h)->exists());  // unlocking keeps the stale file entry
}

TEST(CacheZoneTest, FullBucketEvictsPlaceholdersThenExpiredThenLru) {
  CacheZone z("z", 8192, kNow);  // 16 buckets
  // Hashes forced into one bucket: lo values congruent modulo the bucket count.
  auto in_bucket0 = [](uint64_t i) { return Hash128{i * 16 * 1000003ull, i + 1}; };
  size_t nb = z.capacity() / CacheZone::kWays;
  ASSERT_EQ(nb, 16u);
  std::optional<EntryView> ev;
  for (uint64_t i = 0; i < CacheZone::kWays; ++i) {
    z.commit(in_bucket0(i), CacheZone::Commit{kNow + 100, 10, 0, 0}, kNow + static_cast<int64_t>(i), &ev);
    EXPECT_FALSE(ev.has_value());
  }
  // Entry 3 expired, entry 0 is the least recently used.
  z.commit(in_bucket0(3), CacheZone::Commit{kNow - 1, 10, 0, 0}, kNow + 3, &ev);
  z.commit(in_bucket0(100), CacheZone::Commit{kNow + 100, 10, 0, 0}, kNow + 10, &ev);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->hash, in_bucket0(3));  // expired before LRU
  ev.reset();
  z.commit(in_bucket0(101), CacheZone::Commit{kNow + 100, 10, 0, 0}, kNow + 11, &ev);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->hash, in_bucket0(0));  // then the least recently used
  EXPECT_EQ(z.entries(), CacheZone::kWays);
  EXPECT_EQ(z.bytes(), 10u * CacheZone::kWays);
  // A placeholder goes before any file entry.
  z.remove(in_bucket0(1));
  z.count_use(in_bucket0(200), kNow + 20, &ev);
  ev.reset();
  z.commit(in_bucket0(201), CacheZone::Commit{kNow + 100, 10, 0, 0}, kNow + 21, &ev);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->hash, in_bucket0(200));
}

TEST(CacheZoneTest, SweepRemovesInactiveAndEvictLruPicksOldest) {
  CacheZone z("z", 1 << 16, kNow);
  std::optional<EntryView> ev;
  for (int i = 0; i < 20; ++i) {
    Hash128 h = hash_key("k" + std::to_string(i));
    z.commit(h, CacheZone::Commit{kNow + 1000, 100, 0, 0}, kNow + i, &ev);
    z.keys().put(h, "k" + std::to_string(i));
  }
  EXPECT_EQ(z.bytes(), 2000u);
  EXPECT_EQ(z.keys().size(), 20u);
  // inactive=10s at kNow+19: entries last used before kNow+9 go.
  std::vector<EntryView> removed;
  uint32_t cutoff = z.relative_time(kNow + 9);
  z.sweep(1 << 20, [&](const EntryView& v) { return v.last_access < cutoff; }, &removed);
  EXPECT_EQ(removed.size(), 9u);
  EXPECT_EQ(z.entries(), 11u);
  EXPECT_EQ(z.bytes(), 1100u);
  EXPECT_EQ(z.keys().size(), 11u);
  // The LRU among the rest is k9, then k10.
  auto a = z.evict_lru(1 << 20);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->hash, hash_key("k9"));
  auto b = z.evict_lru(1 << 20);
  EXPECT_EQ(b->hash, hash_key("k10"));
  EXPECT_EQ(z.bytes(), 900u);
  // A hit refreshes the LRU clock.
  z.lookup(hash_key("k11"), kNow + 50);
  EXPECT_EQ(z.evict_lru(1 << 20)->hash, hash_key("k12"));
  size_t n = 0;
  z.for_each([&](const EntryView&) { ++n; });
  EXPECT_EQ(n, 8u);
}

TEST(CacheZoneTest, KeyIndexForEach) {
  KeyIndex idx;
  idx.put(hash_key("/a"), "/a");
  idx.put(hash_key("/b"), "/b");
  idx.put(hash_key("/a"), "/a");
  EXPECT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx.bytes(), 4u);
  std::vector<std::string> keys;
  idx.for_each([&](const Hash128&, std::string_view k) { keys.emplace_back(k); });
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"/a", "/b"}));
  idx.erase(hash_key("/a"));
  EXPECT_EQ(idx.get(hash_key("/b")), "/b");
  EXPECT_FALSE(idx.get(hash_key("/a")).has_value());
}

TEST(CacheZoneTest, CommitGenerationChangesWithEveryCommit) {
  CacheZone z("z", 1 << 16, kNow);
  Hash128 h = hash_key("g");
  std::optional<EntryView> ev;
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);
  uint16_t g1 = z.peek(h)->gen();
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);  // same expiry and size: a new version
  uint16_t g2 = z.peek(h)->gen();
  EXPECT_NE(g1, 0u);
  EXPECT_NE(g2, 0u);
  EXPECT_NE(g1, g2);
  z.count_use(h, kNow, &ev);
  EXPECT_EQ(z.peek(h)->gen(), g2);  // counting uses is not a new version
}

TEST(HotCacheTest, CopyIsUsedOnlyForTheSameVersion) {
  CacheZone z("z", 1 << 16, kNow);
  Hash128 h = hash_key("hot");
  std::optional<EntryView> ev;
  z.commit(h, CacheZone::Commit{kNow + 60, 300, 0, 0}, kNow, &ev);
  EntryMeta m;
  m.key = "hot";
  m.body_size = 5;
  m.header_size = 295;
  HotCache hot;
  hot.put(h, *z.peek(h), m, "hello");
  ASSERT_NE(hot.find(h, *z.peek(h)), nullptr);
  EXPECT_EQ(hot.find(h, *z.peek(h))->body, "hello");
  EXPECT_EQ(hot.hits(), 2u);
  // A new commit (a refill, a revalidation rewrite): the copy is dropped at the next lookup.
  z.commit(h, CacheZone::Commit{kNow + 60, 300, 0, 0}, kNow, &ev);
  EXPECT_EQ(hot.find(h, *z.peek(h)), nullptr);
  EXPECT_EQ(hot.size(), 0u);
  // A purge: the zone has no entry; a placeholder view never matches either.
  hot.put(h, *z.peek(h), m, "hello");
  z.remove(h);
  EntryView gone;
  EXPECT_EQ(hot.find(h, gone), nullptr);
  EXPECT_EQ(hot.bytes(), 0u);
  // Too large or incomplete bodies are not copied.
  z.commit(h, CacheZone::Commit{kNow + 60, 300, 0, 0}, kNow, &ev);
  hot.put(h, *z.peek(h), m, "hell");
  EXPECT_EQ(hot.size(), 0u);
  EntryMeta big = m;
  big.body_size = HotCache::kMaxEntry;
  hot.put(h, *z.peek(h), big, std::string(HotCache::kMaxEntry, 'b'));
  EXPECT_EQ(hot.size(), 0u);
}

TEST(HotCacheTest, LruByBytes) {
  CacheZone z("z", 1 << 16, kNow);
  HotCache hot(3 * (1000 + 256 + 2));  // room for three 1000-byte bodies (with the bookkeeping)
  std::optional<EntryView> ev;
  std::vector<Hash128> hs;
  for (int i = 0; i < 4; ++i) {
    Hash128 h = hash_key("k" + std::to_string(i));
    hs.push_back(h);
    z.commit(h, CacheZone::Commit{kNow + 60, 1100, 0, 0}, kNow, &ev);
    EntryMeta m;
    m.key = "k" + std::to_string(i);
    m.body_size = 1000;
    m.header_size = 100;
    if (i == 3) ASSERT_NE(hot.find(hs[0], *z.peek(hs[0])), nullptr);  // k0 becomes the most recent
    hot.put(h, *z.peek(h), m, std::string(1000, 'x'));
  }
  EXPECT_EQ(hot.size(), 3u);
  EXPECT_NE(hot.find(hs[0], *z.peek(hs[0])), nullptr);
  EXPECT_EQ(hot.find(hs[1], *z.peek(hs[1])), nullptr);  // the least recently used went
  EXPECT_NE(hot.find(hs[3], *z.peek(hs[3])), nullptr);
}

// Writers keep fs_size == 2 * expires_at in every committed version of a few hot keys; readers on other
// threads must never see a torn pair (the seqlock's guarantee), and never block.
TEST(CacheZoneTest, ConcurrentReadersNeverSeeTornEntries) {
  CacheZone z("z", 1 << 14, kNow);  // small: heavy bucket sharing
  std::vector<Hash128> keys;
  for (int i = 0; i < 64; ++i) keys.push_back(hash_key("hot" + std::to_string(i)));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, hits{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      uint64_t x = 88172645463325252ull + static_cast<uint64_t>(w);
      for (int n = 0; n < 200000; ++n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const Hash128& h = keys[x % keys.size()];
        std::optional<EntryView> ev;
        if (x & 0x100) {
          int64_t e = kNow + static_cast<int64_t>(x % 100000);
          z.commit(h, CacheZone::Commit{e, static_cast<uint64_t>(2 * e), 0, 0}, kNow, &ev);
        } else {
          z.remove(h);
        }
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (const Hash128& h : keys) {
          auto v = z.lookup(h, kNow);
          if (v && v->exists()) {
            hits.fetch_add(1, std::memory_order_relaxed);
            if (v->fs_size != static_cast<uint64_t>(2 * v->expires_at) || !(v->hash == h)) {
              torn.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
      }
    });
  }
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  // Accounting stayed exact through the races.
  uint64_t bytes = 0, n = 0;
  z.for_each([&](const EntryView& v) {
    bytes += v.fs_size;
    ++n;
  });
  EXPECT_EQ(z.bytes(), bytes);
  EXPECT_EQ(z.entries(), n);
}

}  // namespace
}  // namespace kosoku::cache
