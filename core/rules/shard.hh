// One shard of the rule set: an immutable, compact table of hosts and their URI patterns.
//
// Storage (built for millions of hosts): every record of the shard sits back to back in one byte string,
//   u8 host_len | host bytes | u16 count | count × (u16 len | pattern bytes)      (little-endian)
// and the index is an absl::flat_hash_set of 32-bit record offsets whose hash and equality read the host
// out of the blob (heterogeneous lookup by std::string_view). A host with two ~15-byte patterns costs its
// record (~55 bytes) plus ~5 bytes of index: no per-host heap allocation, no per-host std::string.
// A shard is never modified after construction: a change builds a new shard (rule_set.hh publishes it and
// retires the old one), so readers need no lock.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

namespace kosoku::rules {

/// Hash of a normalised host: picks the shard (top bits) and is the shard index's hash.
inline size_t hash_host(std::string_view host) { return absl::Hash<std::string_view>{}(host); }

/// A view of one host's record inside a shard (valid while the shard is).
struct HostRules {
  std::string_view host;
  /// The record bytes after the host (u16 count, then the patterns): equal bytes ⇔ equal pattern lists.
  std::string_view encoded;

  uint16_t count() const {
    uint16_t n;
    std::memcpy(&n, encoded.data(), 2);
    return n;
  }
  /// Calls f(std::string_view pattern) for each pattern, in order.
  template <class F>
  void for_each(F&& f) const {
    size_t pos = 2;
    for (uint16_t i = 0, n = count(); i < n; ++i) {
      uint16_t len;
      std::memcpy(&len, encoded.data() + pos, 2);
      f(encoded.substr(pos + 2, len));
      pos += 2 + len;
    }
  }
  std::vector<std::string> patterns() const;
};

/// Appends one record to `blob`. `patterns`: at most 65535 of at most 65535 bytes each (callers enforce
/// the smaller limits of pattern.hh). `host`: at most 255 bytes.
void append_record(std::string& blob, std::string_view host, std::span<const std::string> patterns);
/// Appends a record whose pattern part is already encoded (HostRules::encoded).
void append_record_encoded(std::string& blob, std::string_view host, std::string_view encoded);

class Shard {
 public:
  /// `blob`: records as appended by append_record, each host at most once (a later duplicate replaces the
  /// earlier one in the index, the earlier bytes are dropped). `version`: unique across every shard of a
  /// rule set, so (shard, version) identifies a shard's contents forever (memo and compiled-set validity).
  Shard(uint64_t version, std::string blob);
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  uint64_t version() const { return version_; }
  size_t size() const { return index_.size(); }

  /// The record of `host` (normalised), `hash` = hash_host(host). Hot path: one probe of the index.
  std::optional<HostRules> find(std::string_view host, size_t hash) const {
    auto it = index_.find(host, hash);
    if (it == index_.end()) return std::nullopt;
    return record_at(*it);
  }
  /// Every record, in blob order (stable for a given shard).
  template <class F>
  void for_each(F&& f) const {
    for (size_t off = 0; off < blob_.size();) {
      HostRules r = record_at(static_cast<uint32_t>(off));
      off += 1 + r.host.size() + r.encoded.size();
      f(r);
    }
  }
  /// Heap bytes held (blob capacity + index slots and control bytes).
  size_t memory_bytes() const;

 private:
  struct Hash {
    using is_transparent = void;
    const std::string* blob;
    size_t operator()(uint32_t off) const { return hash_host(host_at(*blob, off)); }
    size_t operator()(std::string_view h) const { return hash_host(h); }
  };
  struct Eq {
    using is_transparent = void;
    const std::string* blob;
    bool operator()(uint32_t a, uint32_t b) const { return host_at(*blob, a) == host_at(*blob, b); }
    bool operator()(uint32_t a, std::string_view b) const { return host_at(*blob, a) == b; }
    bool operator()(std::string_view a, uint32_t b) const { return a == host_at(*blob, b); }
  };
  static std::string_view host_at(const std::string& blob, uint32_t off) {
    return std::string_view(blob.data() + off + 1, static_cast<uint8_t>(blob[off]));
  }
  HostRules record_at(uint32_t off) const;

  uint64_t version_;
  std::string blob_;
  absl::flat_hash_set<uint32_t, Hash, Eq> index_;
};

}  // namespace kosoku::rules
