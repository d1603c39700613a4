#include "kernel-bypass/tcpip/tcp_segment.hh"

#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/checksum.hh"
#include "kernel-bypass/tcpip/ipv4_header.hh"

namespace kosoku::tcpip {

namespace {
constexpr uint8_t kOptEol = 0, kOptNop = 1, kOptMss = 2, kOptWs = 3, kOptSackOk = 4, kOptSack = 5, kOptTs = 8;
constexpr size_t kMaxOptions = 40;

// Bytes of the fixed part (everything but SACK blocks) in write()'s layout.
size_t fixed_size(const TcpOptions& o) {
  size_t n = 0;
  if (o.has_mss) n += 4;
  if (o.has_timestamps) n += 12;  // SACK-permitted(2)+TS(10), or NOP NOP TS
  else if (o.sack_permitted) n += 4;  // NOP NOP SACK-permitted
  if (o.has_window_scale) n += 4;
  return n;
}

size_t sack_blocks_that_fit(const TcpOptions& o) {
  if (o.sack_count == 0) return 0;
  size_t room = kMaxOptions - fixed_size(o);
  if (room < 2 + 2 + 8) return 0;
  size_t n = (room - 4) / 8;
  return n < o.sack_count ? n : o.sack_count;
}
}  // namespace

size_t TcpOptions::wire_size() const {
  size_t blocks = sack_blocks_that_fit(*this);
  return fixed_size(*this) + (blocks ? 4 + 8 * blocks : 0);
}

size_t TcpOptions::write(uint8_t* out) const {
  uint8_t* p = out;
  if (has_mss) {
    p[0] = kOptMss;
    p[1] = 4;
    store_be16(p + 2, mss);
    p += 4;
  }
  if (has_timestamps) {
    if (sack_permitted) {
      p[0] = kOptSackOk;
      p[1] = 2;
    } else {
      p[0] = p[1] = kOptNop;
    }
    p[2] = kOptTs;
    p[3] = 10;
    store_be32(p + 4, ts_val);
    store_be32(p + 8, ts_ecr);
    p += 12;
  } else if (sack_permitted) {
    p[0] = p[1] = kOptNop;
    p[2] = kOptSackOk;
    p[3] = 2;
    p += 4;
  }
  if (has_window_scale) {
    p[0] = kOptNop;
    p[1] = kOptWs;
    p[2] = 3;
    p[3] = window_scale;
    p += 4;
  }
  size_t blocks = sack_blocks_that_fit(*this);
  if (blocks) {
    p[0] = p[1] = kOptNop;
    p[2] = kOptSack;
    p[3] = static_cast<uint8_t>(2 + 8 * blocks);
    p += 4;
    for (size_t i = 0; i < blocks; ++i) {
      store_be32(p, sack[i].left.v);
      store_be32(p + 4, sack[i].right.v);
      p += 8;
    }
  }
  return static_cast<size_t>(p - out);
}

bool parse_tcp_options(std::span<const uint8_t> a, TcpOptions* o) {
  size_t i = 0;
  while (i < a.size()) {
    uint8_t kind = a[i];
    if (kind == kOptEol) break;
    if (kind == kOptNop) {
      ++i;
      continue;
    }
    if (i + 1 >= a.size()) return false;
    uint8_t len = a[i + 1];
    if (len < 2 || i + len > a.size()) return false;
    const uint8_t* v = a.data() + i + 2;
    switch (kind) {
      case kOptMss:
        if (len == 4) {
          o->has_mss = true;
          o->mss = load_be16(v);
        }
        break;
      case kOptWs:
        if (len == 3) {
          o->has_window_scale = true;
          o->window_scale = v[0];
        }
        break;
      case kOptSackOk:
        if (len == 2) o->sack_permitted = true;
        break;
      case kOptSack:
        if (len >= 10 && (len - 2) % 8 == 0) {
          size_t n = (len - 2) / 8;
          if (n > TcpOptions::kMaxSackBlocks) n = TcpOptions::kMaxSackBlocks;
          o->sack_count = static_cast<uint8_t>(n);
          for (size_t b = 0; b < n; ++b) {
            o->sack[b].left = SeqNum{load_be32(v + 8 * b)};
            o->sack[b].right = SeqNum{load_be32(v + 8 * b + 4)};
          }
        }
        break;
      case kOptTs:
        if (len == 10) {
          o->has_timestamps = true;
          o->ts_val = load_be32(v);
          o->ts_ecr = load_be32(v + 4);
        }
        break;
      default:
        break;  // unknown kinds are skipped by their length (RFC 9293 §3.1, MUST-6)
    }
    i += len;
  }
  return true;
}

TcpParseError parse_tcp_segment(std::span<const uint8_t> l4, Ipv4Addr src, Ipv4Addr dst, bool verify_checksum,
                                TcpSegment* out) {
  if (l4.size() < TcpHeader::kMinSize) return TcpParseError::kTooShort;
  const uint8_t* p = l4.data();
  TcpHeader& h = out->header;
  h.src_port = load_be16(p);
  h.dst_port = load_be16(p + 2);
  h.seq = SeqNum{load_be32(p + 4)};
  h.ack = SeqNum{load_be32(p + 8)};
  h.header_len = static_cast<uint8_t>((p[12] >> 4) * 4);
  h.flags = p[13];
  h.window = load_be16(p + 14);
  h.checksum = load_be16(p + 16);
  h.urgent = load_be16(p + 18);
  if (h.header_len < TcpHeader::kMinSize || h.header_len > l4.size()) return TcpParseError::kBadDataOffset;
  if (verify_checksum &&
      checksum_finish(checksum_add(l4, pseudo_header_sum(src, dst, kProtoTcp, static_cast<uint16_t>(l4.size())))) !=
          0) {
    return TcpParseError::kBadChecksum;
  }
  out->options = TcpOptions{};
  if (!parse_tcp_options(l4.subspan(TcpHeader::kMinSize, h.header_len - TcpHeader::kMinSize), &out->options)) {
    return TcpParseError::kBadOptionLength;
  }
  out->payload = l4.subspan(h.header_len);
  return TcpParseError::kNone;
}

size_t write_tcp_header(const TcpHeader& h, const TcpOptions& options, uint8_t* out) {
  size_t opt = options.write(out + TcpHeader::kMinSize);
  size_t len = TcpHeader::kMinSize + opt;
  store_be16(out, h.src_port);
  store_be16(out + 2, h.dst_port);
  store_be32(out + 4, h.seq.v);
  store_be32(out + 8, h.ack.v);
  out[12] = static_cast<uint8_t>((len / 4) << 4);
  out[13] = h.flags;
  store_be16(out + 14, h.window);
  store_be16(out + 16, 0);
  store_be16(out + 18, h.urgent);
  return len;
}

void fill_tcp_checksum(std::span<uint8_t> l4, Ipv4Addr src, Ipv4Addr dst) {
  store_be16(l4.data() + 16, 0);
  uint32_t sum = checksum_add(l4, pseudo_header_sum(src, dst, kProtoTcp, static_cast<uint16_t>(l4.size())));
  store_be16(l4.data() + 16, checksum_finish(sum));
}

}  // namespace kosoku::tcpip
