// Ethernet II header (IEEE 802.3 with an EtherType ≥ 0x0600): 14 bytes, no VLAN tags (tagged frames are
// counted as unknown EtherType and dropped).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;

struct EthernetHeader {
  static constexpr size_t kSize = 14;
  MacAddr dst;
  MacAddr src;
  uint16_t ether_type = 0;

  /// nullopt if `frame` is shorter than 14 bytes.
  static std::optional<EthernetHeader> read(std::span<const uint8_t> frame) {
    if (frame.size() < kSize) return std::nullopt;
    EthernetHeader h;
    for (int i = 0; i < 6; ++i) {
      h.dst.bytes[i] = frame[i];
      h.src.bytes[i] = frame[6 + i];
    }
    h.ether_type = load_be16(frame.data() + 12);
    return h;
  }
  /// Writes 14 bytes at out.
  void write(uint8_t* out) const {
    for (int i = 0; i < 6; ++i) {
      out[i] = dst.bytes[i];
      out[6 + i] = src.bytes[i];
    }
    store_be16(out + 12, ether_type);
  }
};

}  // namespace kosoku::tcpip
