// Cache tags (core/cache/tags.hh): the three header forms, the limits, a purge request's tag list; the tag
// index (tag_index.hh) and the keys zone keeping it in step with its entries; soft purge's stale mark.
#include "core/cache/tags.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/cache/cache_zone.hh"
#include "core/cache/tag_index.hh"

namespace kosoku::cache {
namespace {

constexpr int64_t kNow = 1700000000;

std::vector<http::HeaderField> fields(std::initializer_list<std::pair<std::string_view, std::string_view>> l) {
  std::vector<http::HeaderField> out;
  for (const auto& [n, v] : l) out.push_back(http::HeaderField{n, v});
  return out;
}

TEST(CacheTagsTest, ReadsEachFormAndKeepsEachTagOnceInOrder) {
  TagReport r;
  auto f = fields({{"Surrogate-Key", "a  b\tc"}, {"cache-tag", "d, e,,a"}, {"XKey", "f b"}, {"X-Other", "z"}});
  EXPECT_EQ(collect_tags(f, kTagHeadersAll, &r), "a b c d e f");
  EXPECT_FALSE(r.any());
  EXPECT_EQ(collect_tags(f, kTagCacheTag, &r), "d e a");
  EXPECT_EQ(collect_tags(f, 0, &r), "");
  // Only Cache-Tag separates by commas; a comma is never part of a tag.
  EXPECT_EQ(collect_tags(fields({{"Surrogate-Key", "a,b c"}}), kTagHeadersAll, &r), "c");
  EXPECT_EQ(r.invalid, 1u);
}

TEST(CacheTagsTest, DropsInvalidAndOverLimitTagsAndCountsThem) {
  TagReport r;
  const std::string longest(kMaxTagLength, 'x');
  const std::string too_long(kMaxTagLength + 1, 'y');
  const std::string values = "ok caf\xc3\xa9 " + too_long + " " + longest;
  EXPECT_EQ(collect_tags(fields({{"Surrogate-Key", values}}), kTagHeadersAll, &r), "ok " + longest);
  EXPECT_EQ(r.invalid, 2u);
  EXPECT_EQ(r.over, 0u);
  // Past kMaxEntryTags: the first tags are kept, the rest counted.
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "t" + std::to_string(i) + " ";
  TagReport r2;
  const std::string kept = collect_tags(fields({{"xkey", many}}), kTagHeadersAll, &r2);
  size_t n = 0;
  for_each_stored_tag(kept, [&](std::string_view) { ++n; });
  EXPECT_EQ(n, kMaxEntryTags);
  EXPECT_EQ(kept.substr(0, 6), "t0 t1 ");
  EXPECT_EQ(r2.over, 5000 - kMaxEntryTags);
  // Past kMaxEntryTagBytes: long tags fill the bytes first.
  std::string longs;
  for (int i = 0; i < 40; ++i) longs += std::string(1000, static_cast<char>('a' + i % 26)) + std::to_string(i) + " ";
  TagReport r3;
  const std::string kept3 = collect_tags(fields({{"xkey", longs}}), kTagHeadersAll, &r3);
  EXPECT_LE(kept3.size(), kMaxEntryTagBytes);
  EXPECT_GT(kept3.size(), kMaxEntryTagBytes - 1100);
  EXPECT_GT(r3.over, 0u);
}

TEST(CacheTagsTest, PurgeTagListsAreBounded) {
  std::vector<std::string> tags;
  std::string error;
  EXPECT_TRUE(parse_purge_tags(" a b  c ", tags, error));
  EXPECT_EQ(tags, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(parse_purge_tags("  ", tags, error));
  EXPECT_EQ(error, "no tag");
  EXPECT_FALSE(parse_purge_tags("a \x01" "b", tags, error));
  std::string many;
  for (size_t i = 0; i <= kMaxPurgeTags; ++i) many += "t" + std::to_string(i) + " ";
  EXPECT_FALSE(parse_purge_tags(many, tags, error));
  EXPECT_NE(error.find("more than"), std::string::npos);
}

std::vector<Hash128> entries_of(const TagIndex& ix, std::string_view tag) {
  std::vector<Hash128> out;
  ix.entries_of(tag, out);
  std::sort(out.begin(), out.end(), [](const Hash128& a, const Hash128& b) { return a.lo < b.lo; });
  return out;
}

TEST(TagIndexTest, PutReplacesEraseForgetsAndCountsFollow) {
  TagIndex ix;
  const Hash128 h1 = hash_key("1"), h2 = hash_key("2");
  ix.put(h1, "a b");
  ix.put(h2, "b c");
  EXPECT_EQ(ix.tags(), 3u);
  EXPECT_EQ(ix.pairs(), 4u);
  EXPECT_EQ(entries_of(ix, "b").size(), 2u);
  ix.put(h1, "c");  // a new version of the entry with other tags
  EXPECT_TRUE(entries_of(ix, "a").empty());
  EXPECT_EQ(entries_of(ix, "b"), std::vector<Hash128>{h2});
  EXPECT_EQ(entries_of(ix, "c").size(), 2u);
  EXPECT_EQ(ix.tags_of(h1), "c");
  ix.erase(h2);
  ix.erase(h2);
  EXPECT_EQ(entries_of(ix, "c"), std::vector<Hash128>{h1});
  EXPECT_EQ(ix.tags(), 1u);
  ix.put(h1, "");
  EXPECT_EQ(ix.tags(), 0u);
  EXPECT_EQ(ix.pairs(), 0u);
  EXPECT_EQ(ix.bytes(), 0u);
}

TEST(TagIndexTest, ABudgetBoundsTheIndex) {
  TagIndex ix;
  ix.set_budget(200);
  int indexed = 0;
  for (int i = 0; i < 100; ++i) indexed += ix.put(hash_key(std::to_string(i)), "tag-" + std::to_string(i));
  EXPECT_LT(indexed, 10);
  EXPECT_GT(indexed, 0);
  EXPECT_LE(ix.bytes(), 200u);
  EXPECT_EQ(ix.refused(), static_cast<uint64_t>(100 - indexed));
}

TEST(TagIndexTest, ConcurrentWritersLeaveAConsistentIndex) {
  TagIndex ix;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ix, t] {
      for (int i = 0; i < 2000; ++i) {
        const Hash128 h = hash_key(std::to_string(i % 100));
        if ((i + t) % 3 == 0) {
          ix.erase(h);
        } else {
          ix.put(h, "shared t" + std::to_string(t));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  size_t pairs = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string tags = ix.tags_of(hash_key(std::to_string(i)));
    for_each_stored_tag(tags, [&](std::string_view) { ++pairs; });
  }
  EXPECT_EQ(ix.pairs(), pairs);  // every entry's tags, and nothing else, are linked
}

TEST(TagIndexTest, TheZoneForgetsTheTagsOfEntriesThatLeave) {
  CacheZone z("t", 1 << 20, kNow);
  const Hash128 h = hash_key("http:a/x");
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, nullptr);
  z.tags().put(h, "a");
  ASSERT_TRUE(z.remove(h));
  EXPECT_EQ(z.tags().pairs(), 0u);
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, nullptr);
  z.tags().put(h, "a");
  std::optional<EntryView> v = z.peek(h);
  ASSERT_TRUE(v);
  ASSERT_TRUE(z.forget(*v));
  EXPECT_EQ(z.tags().tags(), 0u);
}

TEST(SoftPurgeTest, MarkStaleLowersTheExpiryUntilTheNextCommit) {
  CacheZone z("t", 1 << 20, kNow);
  const Hash128 h = hash_key("http:a/soft");
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, nullptr);
  EntryView v = *z.peek(h);
  ASSERT_TRUE(z.mark_stale(v, kNow + 5));
  EntryView s = *z.peek(h);
  EXPECT_TRUE(s.flags & kEntryStale);
  EXPECT_EQ(s.expires_at, kNow + 5);
  EXPECT_TRUE(z.mark_stale(s, kNow + 10));  // already stale: the earlier time stays
  EXPECT_EQ(z.peek(h)->expires_at, kNow + 5);
  EXPECT_FALSE(z.mark_stale(v, kNow + 6));  // `v` is no longer what the slot holds
  z.commit(h, CacheZone::Commit{kNow + 120, 100, 0, 0}, kNow, nullptr);
  EXPECT_FALSE(z.peek(h)->flags & kEntryStale);
  // A revalidation ends the mark too.
  ASSERT_TRUE(z.mark_stale(*z.peek(h), kNow + 7));
  z.set_expires(h, kNow + 200);
  EXPECT_FALSE(z.peek(h)->flags & kEntryStale);
  EXPECT_EQ(z.peek(h)->expires_at, kNow + 200);
}

}  // namespace
}  // namespace kosoku::cache
