#include "core/rules/shard.hh"

namespace kosoku::rules {

namespace {

void put_u16(std::string& out, size_t v) {
  uint16_t x = static_cast<uint16_t>(v);
  char b[2];
  std::memcpy(b, &x, 2);
  out.append(b, 2);
}

// Length of the encoded pattern part starting at `p` (u16 count, then u16-prefixed patterns).
size_t encoded_size(const char* p) {
  uint16_t n;
  std::memcpy(&n, p, 2);
  size_t pos = 2;
  for (uint16_t i = 0; i < n; ++i) {
    uint16_t len;
    std::memcpy(&len, p + pos, 2);
    pos += 2 + len;
  }
  return pos;
}

}  // namespace

std::vector<std::string> HostRules::patterns() const {
  std::vector<std::string> out;
  out.reserve(count());
  for_each([&](std::string_view p) { out.emplace_back(p); });
  return out;
}

void append_record(std::string& blob, std::string_view host, std::span<const std::string> patterns) {
  blob.push_back(static_cast<char>(static_cast<uint8_t>(host.size())));
  blob.append(host);
  put_u16(blob, patterns.size());
  for (const std::string& p : patterns) {
    put_u16(blob, p.size());
    blob.append(p);
  }
}

void append_record_encoded(std::string& blob, std::string_view host, std::string_view encoded) {
  blob.push_back(static_cast<char>(static_cast<uint8_t>(host.size())));
  blob.append(host);
  blob.append(encoded);
}

HostRules Shard::record_at(uint32_t off) const {
  HostRules r;
  r.host = host_at(blob_, off);
  const char* p = blob_.data() + off + 1 + r.host.size();
  r.encoded = std::string_view(p, encoded_size(p));
  return r;
}

Shard::Shard(uint64_t version, std::string blob)
    : version_(version), blob_(std::move(blob)), index_(0, Hash{&blob_}, Eq{&blob_}) {
  size_t n = 0;
  for (size_t off = 0; off < blob_.size();) {
    HostRules r = record_at(static_cast<uint32_t>(off));
    off += 1 + r.host.size() + r.encoded.size();
    ++n;
  }
  index_.reserve(n);
  bool duplicates = false;
  for (size_t off = 0; off < blob_.size();) {
    HostRules r = record_at(static_cast<uint32_t>(off));
    auto [it, inserted] = index_.insert(static_cast<uint32_t>(off));
    if (!inserted) {
      // A later record for the same host replaces the earlier one (bulk loads with repeated hosts).
      index_.erase(it);
      index_.insert(static_cast<uint32_t>(off));
      duplicates = true;
    }
    off += 1 + r.host.size() + r.encoded.size();
  }
  if (duplicates) {
    // Keep only the live records, in blob order, and rebuild the index over the compacted blob.
    std::string compact;
    compact.reserve(blob_.size());
    for (size_t off = 0; off < blob_.size();) {
      HostRules r = record_at(static_cast<uint32_t>(off));
      auto it = index_.find(r.host);
      if (*it == off) append_record_encoded(compact, r.host, r.encoded);
      off += 1 + r.host.size() + r.encoded.size();
    }
    index_.clear();
    blob_ = std::move(compact);
    for (size_t off = 0; off < blob_.size();) {
      HostRules r = record_at(static_cast<uint32_t>(off));
      index_.insert(static_cast<uint32_t>(off));
      off += 1 + r.host.size() + r.encoded.size();
    }
  }
  blob_.shrink_to_fit();
}

size_t Shard::memory_bytes() const {
  // absl's flat_hash_set: one slot (4 bytes) and one control byte per bucket, plus a group of cloned
  // control bytes.
  return blob_.capacity() + index_.capacity() * (sizeof(uint32_t) + 1) + 16;
}

}  // namespace kosoku::rules
