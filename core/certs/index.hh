// The certificate index: the set of hosts the store holds, each with a version, shared read-only by every
// core. A TLS handshake asks it once or twice (exact name, then the wildcard): that read takes no lock.
//
// Layout (as the cache rules' set, core/rules/rule_set.hh): 4096 shards chosen by the top bits of the host's
// hash; each shard is immutable — every record back to back in one byte string, `u8 len | host | u64
// version`, indexed by an absl::flat_hash_set of 32-bit offsets (a host costs its length + 9 bytes + ~5
// bytes of index: ~35 MB for a million hosts). A read is one acquire load of the shard pointer and one
// probe. A change copies one shard (~250 records at a million hosts), publishes it with a pointer store
// and retires the old shard through QSBR (core/rules/qsbr.hh, reused as is: readers are the loops, which
// announce a quiescent state once per iteration in CertCache::poll()).
//
// Versions are unique in the process and never reused (1, 2, ...; 0 means "absent"), so a per-core cache
// entry that remembers (host, version) knows it is stale as soon as the index shows another version.
//
// Writers (the store's writer thread, the start-up scan) are serialised by a mutex; admin reads (list,
// get) take it too. Neither is on the handshake path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "core/rules/qsbr.hh"

namespace kosoku::certs {

using Qsbr = rules::Qsbr;

inline size_t hash_cert_host(std::string_view host) { return absl::Hash<std::string_view>{}(host); }

/// One immutable shard: host → version.
class IndexShard {
 public:
  /// `blob`: records `u8 len | host | u64 version` (little-endian), each host once.
  explicit IndexShard(std::string blob);
  IndexShard(const IndexShard&) = delete;
  IndexShard& operator=(const IndexShard&) = delete;

  /// `host`'s version, 0 if absent. `hash` = hash_cert_host(host).
  uint64_t find(std::string_view host, size_t hash) const {
    auto it = index_.find(host, hash);
    return it == index_.end() ? 0 : version_at(*it);
  }
  size_t size() const { return index_.size(); }
  /// f(std::string_view host, uint64_t version) for each record, in blob order (stable for the shard).
  template <class F>
  void for_each(F&& f) const {
    for (size_t off = 0; off < blob_.size();) {
      std::string_view h = host_at(blob_, static_cast<uint32_t>(off));
      f(h, version_at(static_cast<uint32_t>(off)));
      off += 1 + h.size() + 8;
    }
  }
  size_t memory_bytes() const { return blob_.capacity() + index_.capacity() * (sizeof(uint32_t) + 1) + 16; }

  static void append(std::string& blob, std::string_view host, uint64_t version);

 private:
  static std::string_view host_at(const std::string& blob, uint32_t off) {
    return std::string_view(blob.data() + off + 1, static_cast<uint8_t>(blob[off]));
  }
  uint64_t version_at(uint32_t off) const {
    uint64_t v;
    std::memcpy(&v, blob_.data() + off + 1 + static_cast<uint8_t>(blob_[off]), 8);
    return v;
  }
  struct Hash {
    using is_transparent = void;
    const std::string* blob;
    size_t operator()(uint32_t off) const { return hash_cert_host(host_at(*blob, off)); }
    size_t operator()(std::string_view h) const { return hash_cert_host(h); }
  };
  struct Eq {
    using is_transparent = void;
    const std::string* blob;
    bool operator()(uint32_t a, uint32_t b) const { return host_at(*blob, a) == host_at(*blob, b); }
    bool operator()(uint32_t a, std::string_view b) const { return host_at(*blob, a) == b; }
    bool operator()(std::string_view a, uint32_t b) const { return a == host_at(*blob, b); }
  };

  std::string blob_;
  absl::flat_hash_set<uint32_t, Hash, Eq> index_;
};

class CertIndex {
 public:
  static constexpr int kShardBits = 12;
  static constexpr size_t kShards = size_t{1} << kShardBits;

  CertIndex() = default;
  CertIndex(const CertIndex&) = delete;
  CertIndex& operator=(const CertIndex&) = delete;

  // ---- handshake path: threads enrolled in qsbr(), between two quiescent points ----

  /// `host`'s version (host normalised: host_name.hh), 0 if the store has no certificate for it.
  uint64_t version(std::string_view host) const {
    const size_t h = hash_cert_host(host);
    const IndexShard* s = shards_[h >> (64 - kShardBits)].load(std::memory_order_acquire);
    return s == nullptr ? 0 : s->find(host, h);
  }
  Qsbr& qsbr() { return qsbr_; }

  // ---- changes and admin reads: any thread, serialised ----

  struct Outcome {
    bool existed = false;  // the host was in the index before
    uint64_t version = 0;  // set: the new version
  };
  /// Adds `host` or gives it a new version; published before the call returns.
  Outcome set(std::string_view host);
  /// Removes `host`; existed = false if it was absent (nothing published then).
  Outcome erase(std::string_view host);
  /// Adds many hosts as one publication per shard (the start-up scan; duplicates are kept once).
  void set_many(const std::vector<std::string>& hosts);

  /// `host`'s version under the writer lock (admin reads from threads that are not enrolled readers).
  uint64_t get(std::string_view host) const;
  /// f(host, version) for hosts [offset, offset + limit) in the index's stable order (shard order, then
  /// record order; stable between changes). Returns the number of hosts.
  size_t list(size_t offset, size_t limit, const std::function<void(std::string_view, uint64_t)>& f) const;
  size_t size() const { return hosts_.load(std::memory_order_relaxed); }

  /// Frees retired shards whose grace period has passed; returns how many still wait.
  size_t reclaim();
  /// reclaim() unless a writer holds the lock (the loops' housekeeping).
  void try_reclaim();
  size_t retired() const;
  size_t memory_bytes() const;

 private:
  void publish_locked(size_t index, std::string blob, size_t old_count);
  size_t reclaim_locked();

  std::array<std::atomic<const IndexShard*>, kShards> shards_{};
  mutable std::mutex mu_;  // writers, admin reads, owners_, retired_
  std::array<std::unique_ptr<const IndexShard>, kShards> owners_;
  std::vector<std::pair<uint64_t, std::unique_ptr<const IndexShard>>> retired_;  // (epoch, shard) ascending
  uint64_t next_version_ = 1;
  std::atomic<size_t> hosts_{0};
  Qsbr qsbr_;
};

}  // namespace kosoku::certs
