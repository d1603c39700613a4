// IPv4 header (RFC 791 §3.1): read with the RFC 1122 §3.2.1 checks, written without options.
#pragma once

#include <cstdint>
#include <span>

#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

inline constexpr uint8_t kProtoIcmp = 1;
inline constexpr uint8_t kProtoTcp = 6;
inline constexpr uint8_t kProtoUdp = 17;

struct Ipv4Header {
  static constexpr size_t kMinSize = 20;
  static constexpr uint16_t kFlagDontFragment = 0x4000;
  static constexpr uint16_t kFlagMoreFragments = 0x2000;
  static constexpr uint16_t kOffsetMask = 0x1fff;

  uint8_t header_len = kMinSize;  // bytes (IHL × 4)
  uint8_t tos = 0;
  uint16_t total_len = 0;         // bytes, header included
  uint16_t id = 0;
  uint16_t flags_fragment = 0;    // flags (3 bits) and fragment offset (13 bits, 8-byte units)
  uint8_t ttl = 64;
  uint8_t protocol = 0;
  uint16_t checksum = 0;
  Ipv4Addr src;
  Ipv4Addr dst;

  bool is_fragment() const { return (flags_fragment & (kFlagMoreFragments | kOffsetMask)) != 0; }

  enum class Error { kNone, kTooShort, kBadVersion, kBadHeaderLength, kBadTotalLength, kBadChecksum };
  /// Parses `packet` (the bytes after the Ethernet header; may carry link padding beyond total_len).
  /// Checks version 4, IHL ≥ 5, header_len ≤ total_len ≤ packet size, header checksum.
  static Error read(std::span<const uint8_t> packet, Ipv4Header* out);
  /// Writes a 20-byte header (no options) at out, computing the checksum; header_len is taken as 20.
  void write(uint8_t* out) const;
};

}  // namespace kosoku::tcpip
