// TCP segment wire format (RFC 9293 §3.1) and options: MSS (kind 2), window scale (3, RFC 7323 §2),
// SACK-permitted (4) and SACK (5, RFC 2018), timestamps (8, RFC 7323 §3). A pure parser over a span
// (style-anchors §6): no allocation, no I/O; fuzzed by tests/fuzz/tcp_segment_fuzz.cc.
#pragma once

#include <cstdint>
#include <span>

#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

/// A sequence number with RFC 9293 §3.4 modulo-2^32 comparisons (valid while the values are less than 2^31
/// apart).
struct SeqNum {
  uint32_t v = 0;
  friend bool operator==(SeqNum, SeqNum) = default;
  friend SeqNum operator+(SeqNum a, uint32_t n) { return SeqNum{a.v + n}; }
  friend SeqNum operator-(SeqNum a, uint32_t n) { return SeqNum{a.v - n}; }
  /// Signed distance a - b.
  friend int32_t operator-(SeqNum a, SeqNum b) { return static_cast<int32_t>(a.v - b.v); }
  friend bool operator<(SeqNum a, SeqNum b) { return (a - b) < 0; }
  friend bool operator<=(SeqNum a, SeqNum b) { return (a - b) <= 0; }
  friend bool operator>(SeqNum a, SeqNum b) { return (a - b) > 0; }
  friend bool operator>=(SeqNum a, SeqNum b) { return (a - b) >= 0; }
  SeqNum& operator+=(uint32_t n) {
    v += n;
    return *this;
  }
};

namespace tcp_flag {
inline constexpr uint8_t kFin = 0x01;
inline constexpr uint8_t kSyn = 0x02;
inline constexpr uint8_t kRst = 0x04;
inline constexpr uint8_t kPsh = 0x08;
inline constexpr uint8_t kAck = 0x10;
inline constexpr uint8_t kUrg = 0x20;
inline constexpr uint8_t kEce = 0x40;
inline constexpr uint8_t kCwr = 0x80;
}  // namespace tcp_flag

struct SackBlock {
  SeqNum left;
  SeqNum right;
  friend bool operator==(const SackBlock&, const SackBlock&) = default;
};

struct TcpOptions {
  static constexpr size_t kMaxSackBlocks = 4;
  bool has_mss = false;
  uint16_t mss = 0;              // bytes
  bool has_window_scale = false;
  uint8_t window_scale = 0;      // shift count as received (the caller clamps to 14, RFC 7323 §2.3)
  bool sack_permitted = false;
  bool has_timestamps = false;
  uint32_t ts_val = 0;
  uint32_t ts_ecr = 0;
  uint8_t sack_count = 0;
  SackBlock sack[kMaxSackBlocks];
  friend bool operator==(const TcpOptions&, const TcpOptions&) = default;

  /// Bytes write() produces (a multiple of 4, ≤ 40).
  size_t wire_size() const;
  /// Writes the options, NOP-padded to a 4-byte boundary, in the usual order (MSS, SACK-permitted+TS or
  /// NOP NOP TS, NOP WS, NOP NOP SACK). Returns bytes written (= wire_size()). At most 40 bytes: SACK blocks
  /// that do not fit are left out.
  size_t write(uint8_t* out) const;
};

struct TcpHeader {
  static constexpr size_t kMinSize = 20;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  SeqNum seq;
  SeqNum ack;
  uint8_t header_len = kMinSize;  // bytes (data offset × 4)
  uint8_t flags = 0;
  uint16_t window = 0;            // as on the wire (unscaled)
  uint16_t checksum = 0;
  uint16_t urgent = 0;
  bool has(uint8_t f) const { return (flags & f) != 0; }
};

struct TcpSegment {
  TcpHeader header;
  TcpOptions options;
  std::span<const uint8_t> payload;
  /// Sequence space the segment occupies: payload + SYN + FIN.
  uint32_t seq_len() const {
    return static_cast<uint32_t>(payload.size()) + (header.has(tcp_flag::kSyn) ? 1 : 0) +
           (header.has(tcp_flag::kFin) ? 1 : 0);
  }
};

enum class TcpParseError { kNone, kTooShort, kBadDataOffset, kBadOptionLength, kBadChecksum };

/// Parses the TCP segment `l4` (the IPv4 payload, exactly total_len - header_len bytes). If verify_checksum,
/// checks the checksum over the pseudo-header(src, dst). Malformed option lengths (a length < 2 or past the
/// header) reject the segment; a known option with the wrong length is ignored, unknown kinds are skipped.
TcpParseError parse_tcp_segment(std::span<const uint8_t> l4, Ipv4Addr src, Ipv4Addr dst, bool verify_checksum,
                                TcpSegment* out);

/// Parses just the options area (bytes 20..header_len). Returns false on a malformed option length.
bool parse_tcp_options(std::span<const uint8_t> area, TcpOptions* out);

/// Writes header (header_len = 20 + options.wire_size()) and options at out; the checksum field is zero.
/// Returns the header length in bytes.
size_t write_tcp_header(const TcpHeader& h, const TcpOptions& options, uint8_t* out);

/// Fills the checksum of the complete segment `l4` (header + payload) over the pseudo-header.
void fill_tcp_checksum(std::span<uint8_t> l4, Ipv4Addr src, Ipv4Addr dst);

}  // namespace kosoku::tcpip
