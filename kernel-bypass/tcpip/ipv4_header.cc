#include "kernel-bypass/tcpip/ipv4_header.hh"

#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/checksum.hh"

namespace kosoku::tcpip {

Ipv4Header::Error Ipv4Header::read(std::span<const uint8_t> p, Ipv4Header* out) {
  if (p.size() < kMinSize) return Error::kTooShort;
  if ((p[0] >> 4) != 4) return Error::kBadVersion;
  size_t hl = static_cast<size_t>(p[0] & 0x0f) * 4;
  if (hl < kMinSize || hl > p.size()) return Error::kBadHeaderLength;
  uint16_t total = load_be16(p.data() + 2);
  if (total < hl || total > p.size()) return Error::kBadTotalLength;
  if (checksum_finish(checksum_add(p.first(hl))) != 0) return Error::kBadChecksum;
  out->header_len = static_cast<uint8_t>(hl);
  out->tos = p[1];
  out->total_len = total;
  out->id = load_be16(p.data() + 4);
  out->flags_fragment = load_be16(p.data() + 6);
  out->ttl = p[8];
  out->protocol = p[9];
  out->checksum = load_be16(p.data() + 10);
  out->src = Ipv4Addr{load_be32(p.data() + 12)};
  out->dst = Ipv4Addr{load_be32(p.data() + 16)};
  return Error::kNone;
}

void Ipv4Header::write(uint8_t* out) const {
  out[0] = 0x45;
  out[1] = tos;
  store_be16(out + 2, total_len);
  store_be16(out + 4, id);
  store_be16(out + 6, flags_fragment);
  out[8] = ttl;
  out[9] = protocol;
  store_be16(out + 10, 0);
  store_be32(out + 12, src.value);
  store_be32(out + 16, dst.value);
  store_be16(out + 10, checksum_finish(checksum_add({out, kMinSize})));
}

}  // namespace kosoku::tcpip
