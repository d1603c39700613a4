// libFuzzer target for the TCP segment and option parser (kernel-bypass/tcpip/tcp_segment.hh).
// Input: raw bytes of a TCP segment (the IPv4 payload). Checks: no crash/UB, the payload lies inside the
// input, and options written back from a parse re-parse to the same values (only SACK blocks that fit the
// 40-byte option space are written).
#include <cstdint>
#include <cstdlib>
#include <cstring>

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
  return 0;
}
