#include "kernel-bypass/tcpip/checksum.hh"

#include "kernel-bypass/tcpip/byte_order.hh"

namespace kosoku::tcpip {

uint32_t checksum_add(std::span<const uint8_t> data, uint32_t sum) {
  uint64_t acc = sum;
  size_t i = 0;
  const uint8_t* p = data.data();
  for (; i + 8 <= data.size(); i += 8) {
    acc += load_be16(p + i) + load_be16(p + i + 2) + load_be16(p + i + 4) + load_be16(p + i + 6);
  }
  for (; i + 2 <= data.size(); i += 2) acc += load_be16(p + i);
  if (i < data.size()) acc += static_cast<uint32_t>(p[i]) << 8;
  while (acc >> 32) acc = (acc & 0xffffffffu) + (acc >> 32);
  return static_cast<uint32_t>(acc);
}

uint16_t checksum_finish(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffffu) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

uint32_t pseudo_header_sum(Ipv4Addr src, Ipv4Addr dst, uint8_t protocol, uint16_t l4_length) {
  uint64_t s = (src.value >> 16) + (src.value & 0xffffu) + (dst.value >> 16) + (dst.value & 0xffffu) +
               protocol + l4_length;
  while (s >> 32) s = (s & 0xffffffffu) + (s >> 32);
  return static_cast<uint32_t>(s);
}

}  // namespace kosoku::tcpip
