#include "core/rules/memo.hh"

#include "core/rules/shard.hh"

namespace kosoku::rules {

Memo::Memo(uint32_t max_entries) : max_(max_entries), index_(0, Hash{this}, Eq{this}) {}

void Memo::unlink(uint32_t i) {
  Entry& e = entries_[i];
  if (e.prev != kNil) {
    entries_[e.prev].next = e.next;
  } else {
    head_ = e.next;
  }
  if (e.next != kNil) {
    entries_[e.next].prev = e.prev;
  } else {
    tail_ = e.prev;
  }
  e.prev = e.next = kNil;
}

void Memo::push_front(uint32_t i) {
  Entry& e = entries_[i];
  e.prev = kNil;
  e.next = head_;
  if (head_ != kNil) entries_[head_].prev = i;
  head_ = i;
  if (tail_ == kNil) tail_ = i;
}

Memo::Hit Memo::find(std::string_view host, std::string_view uri, uint64_t version) {
  return find(host, hash_host(host), uri, version);
}

void Memo::insert(std::string_view host, std::string_view uri, uint64_t version, bool cache) {
  insert(host, hash_host(host), uri, version, cache);
}

Memo::Hit Memo::find(std::string_view host, size_t host_hash, std::string_view uri, uint64_t version) {
  if (max_ == 0) return Hit::kMiss;
  auto it = index_.find(Key{host, host_hash, uri});
  if (it == index_.end()) return Hit::kMiss;
  uint32_t i = *it;
  if (entries_[i].version != version) return Hit::kMiss;
  if (head_ != i) {
    unlink(i);
    push_front(i);
  }
  return entries_[i].cache ? Hit::kCache : Hit::kNoCache;
}

void Memo::insert(std::string_view host, size_t host_hash, std::string_view uri, uint64_t version, bool cache) {
  if (max_ == 0) return;
  auto it = index_.find(Key{host, host_hash, uri});
  uint32_t i;
  if (it != index_.end()) {
    i = *it;
    unlink(i);
  } else if (entries_.size() < max_) {
    i = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
    Entry& e = entries_[i];
    e.key.reserve(host.size() + uri.size());
    e.key.assign(host).append(uri);
    e.host_len = static_cast<uint32_t>(host.size());
    e.host_hash = host_hash;
    index_.insert(i);
  } else {
    i = tail_;
    unlink(i);
    index_.erase(i);  // hashes the old key: erase before the key is overwritten
    Entry& e = entries_[i];
    e.key.assign(host).append(uri);  // reuses the capacity
    e.host_len = static_cast<uint32_t>(host.size());
    e.host_hash = host_hash;
    index_.insert(i);
    ++evictions_;
  }
  Entry& e = entries_[i];
  e.version = version;
  e.cache = cache;
  push_front(i);
}

}  // namespace kosoku::rules
