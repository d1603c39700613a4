#include "core/cache/hot_cache.hh"

namespace kosoku::cache {

void HotCache::unlink(Entry* e) {
  if (e->prev != nullptr) {
    e->prev->next = e->next;
  } else {
    head_ = e->next;
  }
  if (e->next != nullptr) {
    e->next->prev = e->prev;
  } else {
    tail_ = e->prev;
  }
  e->prev = e->next = nullptr;
}

void HotCache::push_front(Entry* e) {
  e->prev = nullptr;
  e->next = head_;
  if (head_ != nullptr) head_->prev = e;
  head_ = e;
  if (tail_ == nullptr) tail_ = e;
}

const HotCache::Entry* HotCache::find(const Hash128& h, const EntryView& v) {
  auto it = map_.find(h);
  if (it == map_.end()) return nullptr;
  Entry& e = it->second;
  if (!v.exists() || e.gen != v.gen() || e.expires_at != v.expires_at || e.fs_size != v.fs_size) {
    erase(h);  // purged, evicted, replaced or rewritten since it was copied
    return nullptr;
  }
  if (head_ != &e) {
    unlink(&e);
    push_front(&e);
  }
  ++hits_;
  return &e;
}

void HotCache::put(const Hash128& h, const EntryView& v, const EntryMeta& meta, std::string_view body) {
  if (!v.exists() || meta.header_size + body.size() > kMaxEntry || body.size() != meta.body_size) return;
  erase(h);
  Entry& e = map_[h];
  e.meta = meta;
  e.body.assign(body);
  e.gen = v.gen();
  e.expires_at = v.expires_at;
  e.fs_size = v.fs_size;
  e.hash = h;
  push_front(&e);
  bytes_ += cost(e);
  while (bytes_ > max_bytes_ && tail_ != nullptr && tail_ != &e) erase(tail_->hash);
}

void HotCache::erase(const Hash128& h) {
  auto it = map_.find(h);
  if (it == map_.end()) return;
  bytes_ -= cost(it->second);
  unlink(&it->second);
  map_.erase(it);
}

}  // namespace kosoku::cache
