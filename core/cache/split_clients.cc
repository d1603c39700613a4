#include "core/cache/split_clients.hh"

namespace kosoku::cache {

uint32_t murmur_hash2(std::string_view s) {
  const auto* data = reinterpret_cast<const unsigned char*>(s.data());
  size_t len = s.size();
  uint32_t h = static_cast<uint32_t>(len);
  while (len >= 4) {
    uint32_t k = data[0];
    k |= static_cast<uint32_t>(data[1]) << 8;
    k |= static_cast<uint32_t>(data[2]) << 16;
    k |= static_cast<uint32_t>(data[3]) << 24;
    k *= 0x5bd1e995;
    k ^= k >> 24;
    k *= 0x5bd1e995;
    h *= 0x5bd1e995;
    h ^= k;
    data += 4;
    len -= 4;
  }
  switch (len) {
    case 3:
      h ^= static_cast<uint32_t>(data[2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<uint32_t>(data[1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= data[0];
      h *= 0x5bd1e995;
  }
  h ^= h >> 13;
  h *= 0x5bd1e995;
  h ^= h >> 15;
  return h;
}

std::string_view split_value(const SplitClientsConf& sc, std::string_view expanded) {
  const uint32_t hash = murmur_hash2(expanded);
  for (const SplitPart& p : sc.parts) {
    if (p.percent == 0 || hash < p.threshold) return p.value;
  }
  return {};
}

}  // namespace kosoku::cache
