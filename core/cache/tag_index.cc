#include "core/cache/tag_index.hh"

#include "absl/hash/hash.h"
#include "core/cache/tags.hh"

namespace kosoku::cache {

TagIndex::TagShard& TagIndex::shard_of(std::string_view tag) const {
  return tag_shards_[absl::Hash<std::string_view>{}(tag) % kShards];
}

void TagIndex::link(const Hash128& h, std::string_view tag) {
  TagShard& s = shard_of(tag);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.entries.find(tag);
  if (it == s.entries.end()) {
    it = s.entries.try_emplace(std::string(tag)).first;
    tags_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(tag.size(), std::memory_order_relaxed);
  }
  if (it->second.insert(h).second) {
    pairs_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(2 * sizeof(Hash128), std::memory_order_relaxed);
  }
}

void TagIndex::unlink(const Hash128& h, std::string_view tag) {
  TagShard& s = shard_of(tag);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.entries.find(tag);
  if (it == s.entries.end() || it->second.erase(h) == 0) return;
  pairs_.fetch_sub(1, std::memory_order_relaxed);
  bytes_.fetch_sub(2 * sizeof(Hash128), std::memory_order_relaxed);
  if (it->second.empty()) {
    tags_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(tag.size(), std::memory_order_relaxed);
    s.entries.erase(it);
  }
}

bool TagIndex::put(const Hash128& h, std::string_view tags) {
  EntryShard& s = entry_shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.tags.find(h);
  if (it != s.tags.end()) {
    if (it->second == tags) return true;
    for_each_stored_tag(it->second, [&](std::string_view t) { unlink(h, t); });
    s.tags.erase(it);
  }
  if (tags.empty()) return true;
  size_t count = 0;
  for_each_stored_tag(tags, [&](std::string_view) { ++count; });
  if (budget_ != 0 && bytes_.load(std::memory_order_relaxed) + tags.size() + count * 2 * sizeof(Hash128) > budget_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  it = s.tags.emplace(h, std::string(tags)).first;
  for_each_stored_tag(it->second, [&](std::string_view t) { link(h, t); });
  return true;
}

void TagIndex::erase(const Hash128& h) {
  EntryShard& s = entry_shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.tags.find(h);
  if (it == s.tags.end()) return;
  for_each_stored_tag(it->second, [&](std::string_view t) { unlink(h, t); });
  s.tags.erase(it);
}

void TagIndex::entries_of(std::string_view tag, std::vector<Hash128>& out) const {
  const TagShard& s = shard_of(tag);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.entries.find(tag);
  if (it == s.entries.end()) return;
  out.insert(out.end(), it->second.begin(), it->second.end());
}

std::string TagIndex::tags_of(const Hash128& h) const {
  const EntryShard& s = entry_shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.tags.find(h);
  return it == s.tags.end() ? std::string() : it->second;
}

}  // namespace kosoku::cache
