// libFuzzer target for the TCP segment and option parser (kernel-bypass/tcpip/tcp_segment.hh).
// Input: raw bytes of a TCP segment (the IPv4 payload). Checks: no crash/UB, the payload lies inside the
// input, and options written back from a parse re-parse to the same values (only SACK blocks that fit the
// 40-byte option space are written). The parsed SACK blocks are then fed to a sender's SACK scoreboard
// (kernel-bypass/tcpip/sack_scoreboard.hh) with SND.UNA = ACK and SND.MAX = ACK + a window taken from the
// input, twice (the second time after a cumulative ACK into the window): the ranges stay sorted, disjoint
// and inside the window, and IsLost/pipe/NextSeg answers stay within it.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernel-bypass/tcpip/sack_scoreboard.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

using namespace kosoku::tcpip;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  TcpSegment seg;
  Ipv4Addr a{0x0a000001}, b{0x0a000002};
  parse_tcp_segment(in, a, b, true, &seg);
  if (parse_tcp_segment(in, a, b, false, &seg) != TcpParseError::kNone) return 0;
  if (seg.payload.data() < data || seg.payload.data() + seg.payload.size() != data + size) std::abort();
  if (seg.header.header_len < 20 || seg.header.header_len > size) std::abort();

  uint8_t out[60];
  size_t n = seg.options.write(out);
  if (n != seg.options.wire_size() || n > 40 || n % 4 != 0) std::abort();
  TcpOptions again;
  if (!parse_tcp_options({out, n}, &again)) std::abort();
  TcpOptions expect = seg.options;
  expect.sack_count = again.sack_count;
  if (again.sack_count > seg.options.sack_count) std::abort();
  for (size_t i = again.sack_count; i < TcpOptions::kMaxSackBlocks; ++i) {
    again.sack[i] = expect.sack[i];
  }
  if (!(again == expect)) std::abort();

  // A header written from the parsed fields parses back to the same fields.
  uint8_t hdr[60];
  size_t hl = write_tcp_header(seg.header, seg.options, hdr);
  TcpSegment back;
  if (parse_tcp_segment({hdr, hl}, a, b, false, &back) != TcpParseError::kNone) std::abort();
  if (back.header.seq != seg.header.seq || back.header.ack != seg.header.ack ||
      back.header.flags != seg.header.flags || back.header.window != seg.header.window) {
    std::abort();
  }

  // SACK scoreboard fed with the parsed blocks.
  SeqNum una = seg.header.ack;
  uint32_t window = (static_cast<uint32_t>(seg.header.window) << 4) + 1;
  SeqNum max = una + window;
  uint32_t smss = 536 + (seg.header.urgent % 1024);
  SackScoreboard sb;
  uint32_t newly = sb.update(una, max, {seg.options.sack, seg.options.sack_count});
  if (newly > window || sb.sacked_bytes() != newly) std::abort();
  for (int round = 0; round < 2; ++round) {
    if (sb.sacked_bytes() > static_cast<uint32_t>(max - una)) std::abort();
    if (sb.ranges() > SackScoreboard::kMaxRanges) std::abort();
    SeqNum lost = sb.lost_boundary(una, smss);
    if (lost < una || lost > max) std::abort();
    if (!sb.empty() && (sb.highest_sacked() > max || !(una < sb.highest_sacked()))) std::abort();
    SeqNum high_rxt = una + (seg.header.seq.v % (window + 1));
    if (sb.pipe(una, max, high_rxt, smss) > 2 * static_cast<uint32_t>(max - una)) std::abort();
    SackBlock hole;
    if (sb.first_hole(una, sb.empty() ? una : sb.highest_sacked(), &hole)) {
      if (!(hole.left < hole.right) || hole.left < una || sb.sacked(hole.left)) std::abort();
      if (sb.sacked(hole.right - 1) || hole.right > max) std::abort();
    }
    SeqNum end = sb.highest_unsacked_end(una, max);
    if (end < una || end > max) std::abort();
    // A cumulative ACK into the window, then the same blocks again.
    una = una + (seg.header.seq.v % (window + 1));
    sb.advance(una);
    if (!sb.empty() && sb.sacked(una - 1)) std::abort();
    sb.update(una, max, {seg.options.sack, seg.options.sack_count});
  }
  return 0;
}
