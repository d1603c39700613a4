#include "kernel-bypass/dpdk/flow_hash.hh"

#include <algorithm>

#include "kernel-bypass/tcpip/byte_order.hh"

namespace kosoku::dpdk {

ToeplitzHash::ToeplitzHash(std::span<const uint8_t> key) {
  // Input bit b (counted from the most significant bit of byte 0) contributes the 32-bit window of the key
  // starting at key bit b. Byte j with value v contributes the XOR of the windows of its set bits.
  auto window = [&](size_t bit) {
    uint32_t w = 0;
    for (size_t i = 0; i < 32; ++i) {
      size_t k = bit + i;
      uint32_t kb = k / 8 < key.size() ? (key[k / 8] >> (7 - k % 8)) & 1u : 0u;
      w = (w << 1) | kb;
    }
    return w;
  };
  for (size_t j = 0; j < kMaxInput; ++j) {
    uint32_t bitwin[8];
    for (size_t b = 0; b < 8; ++b) bitwin[b] = window(j * 8 + b);
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t h = 0;
      for (size_t b = 0; b < 8; ++b) {
        if (v & (0x80u >> b)) h ^= bitwin[b];
      }
      table_[j][v] = h;
    }
  }
}

uint32_t ToeplitzHash::hash(std::span<const uint8_t> input) const {
  uint32_t h = 0;
  size_t n = std::min(input.size(), kMaxInput);
  for (size_t j = 0; j < n; ++j) h ^= table_[j][input[j]];
  return h;
}

uint32_t ToeplitzHash::ipv4_tcp(tcpip::Ipv4Addr src, tcpip::Ipv4Addr dst, uint16_t sport, uint16_t dport) const {
  uint8_t in[12];
  tcpip::store_be32(in, src.value);
  tcpip::store_be32(in + 4, dst.value);
  tcpip::store_be16(in + 8, sport);
  tcpip::store_be16(in + 10, dport);
  return hash(in);
}

std::vector<uint8_t> symmetric_rss_key(size_t len) {
  std::vector<uint8_t> key(len);
  for (size_t i = 0; i < len; ++i) key[i] = (i % 2 == 0) ? 0x6d : 0x5a;
  return key;
}

FlowSteering::FlowSteering(uint16_t cores, uint32_t reta_size)
    : cores_(cores > 0 ? cores : 1),
      reta_size_(std::max<uint32_t>(reta_size, cores > 0 ? cores : 1)),
      toeplitz_(symmetric_rss_key(40)) {}

}  // namespace kosoku::dpdk
