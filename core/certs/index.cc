#include "core/certs/index.hh"

#include "absl/container/flat_hash_map.h"

namespace kosoku::certs {

namespace {

size_t shard_of(size_t hash) { return hash >> (64 - CertIndex::kShardBits); }

}  // namespace

void IndexShard::append(std::string& blob, std::string_view host, uint64_t version) {
  blob.push_back(static_cast<char>(static_cast<uint8_t>(host.size())));
  blob.append(host);
  char v[8];
  std::memcpy(v, &version, 8);
  blob.append(v, 8);
}

IndexShard::IndexShard(std::string blob) : blob_(std::move(blob)), index_(0, Hash{&blob_}, Eq{&blob_}) {
  blob_.shrink_to_fit();
  size_t n = 0;
  for (size_t off = 0; off < blob_.size(); off += 1 + static_cast<uint8_t>(blob_[off]) + 8) ++n;
  index_.reserve(n);
  for (size_t off = 0; off < blob_.size(); off += 1 + static_cast<uint8_t>(blob_[off]) + 8) {
    index_.insert(static_cast<uint32_t>(off));
  }
}

void CertIndex::publish_locked(size_t index, std::string blob, size_t old_count) {
  auto fresh = std::make_unique<const IndexShard>(std::move(blob));
  const size_t count = fresh->size();
  shards_[index].store(fresh.get(), std::memory_order_release);
  std::unique_ptr<const IndexShard> old = std::move(owners_[index]);
  owners_[index] = std::move(fresh);
  hosts_.store(hosts_.load(std::memory_order_relaxed) + count - old_count, std::memory_order_relaxed);
  if (old != nullptr) retired_.emplace_back(qsbr_.advance(), std::move(old));
  reclaim_locked();
}

CertIndex::Outcome CertIndex::set(std::string_view host) {
  std::lock_guard<std::mutex> lock(mu_);
  Outcome out;
  const size_t h = hash_cert_host(host);
  const size_t i = shard_of(h);
  const IndexShard* old = owners_[i].get();
  std::string blob;
  size_t old_count = 0;
  if (old != nullptr) {
    old_count = old->size();
    out.existed = old->find(host, h) != 0;
    old->for_each([&](std::string_view k, uint64_t v) {
      if (k != host) IndexShard::append(blob, k, v);
    });
  }
  out.version = next_version_++;
  IndexShard::append(blob, host, out.version);
  publish_locked(i, std::move(blob), old_count);
  return out;
}

CertIndex::Outcome CertIndex::erase(std::string_view host) {
  std::lock_guard<std::mutex> lock(mu_);
  Outcome out;
  const size_t h = hash_cert_host(host);
  const size_t i = shard_of(h);
  const IndexShard* old = owners_[i].get();
  if (old == nullptr || old->find(host, h) == 0) return out;
  out.existed = true;
  std::string blob;
  old->for_each([&](std::string_view k, uint64_t v) {
    if (k != host) IndexShard::append(blob, k, v);
  });
  publish_locked(i, std::move(blob), old->size());
  return out;
}

void CertIndex::set_many(const std::vector<std::string>& hosts) {
  absl::flat_hash_map<size_t, std::vector<std::string_view>> by_shard;
  for (const std::string& host : hosts) by_shard[shard_of(hash_cert_host(host))].push_back(host);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [i, list] : by_shard) {
    const IndexShard* old = owners_[i].get();
    absl::flat_hash_set<std::string_view> fresh(list.begin(), list.end());
    std::string blob;
    size_t old_count = 0;
    if (old != nullptr) {
      old_count = old->size();
      old->for_each([&](std::string_view k, uint64_t v) {
        if (!fresh.contains(k)) IndexShard::append(blob, k, v);
      });
    }
    for (std::string_view host : list) {
      if (fresh.erase(host) == 1) IndexShard::append(blob, host, next_version_++);
    }
    publish_locked(i, std::move(blob), old_count);
  }
}

uint64_t CertIndex::get(std::string_view host) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t h = hash_cert_host(host);
  const IndexShard* s = owners_[shard_of(h)].get();
  return s == nullptr ? 0 : s->find(host, h);
}

size_t CertIndex::list(size_t offset, size_t limit, const std::function<void(std::string_view, uint64_t)>& f) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t pos = 0;
  const size_t end = offset + limit < offset ? SIZE_MAX : offset + limit;
  for (const auto& s : owners_) {
    if (s == nullptr || s->size() == 0) continue;
    if (pos >= end) break;
    if (pos + s->size() <= offset) {
      pos += s->size();
      continue;
    }
    s->for_each([&](std::string_view host, uint64_t v) {
      if (pos >= offset && pos < end) f(host, v);
      ++pos;
    });
  }
  return hosts_.load(std::memory_order_relaxed);
}

size_t CertIndex::reclaim_locked() {
  const uint64_t min = qsbr_.min_seen();
  size_t n = 0;
  while (n < retired_.size() && retired_[n].first <= min) ++n;
  retired_.erase(retired_.begin(), retired_.begin() + static_cast<ptrdiff_t>(n));
  return retired_.size();
}

size_t CertIndex::reclaim() {
  std::lock_guard<std::mutex> lock(mu_);
  return reclaim_locked();
}

void CertIndex::try_reclaim() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock() && !retired_.empty()) reclaim_locked();
}

size_t CertIndex::retired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_.size();
}

size_t CertIndex::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& s : owners_) {
    if (s != nullptr) total += s->memory_bytes() + sizeof(IndexShard);
  }
  return total;
}

}  // namespace kosoku::certs
