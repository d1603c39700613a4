#include "kernel-bypass/tcpip/interface.hh"

#include <cstring>

#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/checksum.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

namespace {
constexpr size_t kFrameHeaders = EthernetHeader::kSize + Ipv4Header::kMinSize;
constexpr uint8_t kIcmpEchoReply = 0, kIcmpUnreachable = 3, kIcmpSourceQuench = 4, kIcmpRedirect = 5,
                  kIcmpEchoRequest = 8, kIcmpTimeExceeded = 11, kIcmpParamProblem = 12;
}  // namespace

Interface::Interface(PacketIO& io, const InterfaceConfig& conf) : io_(io), conf_(conf) {}

bool Interface::on_link(Ipv4Addr a) const {
  if (conf_.prefix_len == 0) return true;
  uint32_t mask = conf_.prefix_len >= 32 ? 0xffffffffu : ~(0xffffffffu >> conf_.prefix_len);
  return (a.value & mask) == (conf_.address.value & mask);
}

bool Interface::transmit(std::span<const uint8_t> frame) {
  std::span<uint8_t> buf = io_.frame_begin(frame.size());
  if (buf.size() < frame.size()) {
    ++stats_.tx_no_buffer;
    return false;
  }
  std::memcpy(buf.data(), frame.data(), frame.size());
  io_.frame_send(frame.size());
  ++stats_.tx_frames;
  return true;
}

void Interface::receive_frame(std::span<const uint8_t> frame, uint64_t now_ms, RxChecksum l4_checksum) {
  ++stats_.rx_frames;
  auto eth = EthernetHeader::read(frame);
  if (!eth) {
    ++stats_.rx_not_for_us;
    return;
  }
  if (!(eth->dst == io_.mac()) && !eth->dst.is_broadcast()) {
    ++stats_.rx_not_for_us;
    return;
  }
  std::span<const uint8_t> payload = frame.subspan(EthernetHeader::kSize);
  switch (eth->ether_type) {
    case kEtherTypeArp:
      on_arp(*eth, payload, now_ms);
      break;
    case kEtherTypeIpv4:
      on_ipv4(payload, now_ms, l4_checksum);
      break;
    default:
      ++stats_.rx_unknown_ethertype;
  }
}

void Interface::send_arp(uint16_t op, const MacAddr& eth_dst, const MacAddr& target_mac, Ipv4Addr target_ip) {
  uint8_t frame[EthernetHeader::kSize + ArpPacket::kSize];
  EthernetHeader{eth_dst, io_.mac(), kEtherTypeArp}.write(frame);
  ArpPacket a;
  a.op = op;
  a.sender_mac = io_.mac();
  a.sender_ip = conf_.address;
  a.target_mac = target_mac;
  a.target_ip = target_ip;
  a.write(frame + EthernetHeader::kSize);
  if (transmit(frame)) ++(op == ArpPacket::kRequest ? stats_.arp_requests_out : stats_.arp_replies_out);
}

void Interface::announce() { send_arp(ArpPacket::kRequest, MacAddr::broadcast(), MacAddr{}, conf_.address); }

void Interface::on_arp(const EthernetHeader& eth, std::span<const uint8_t> p, uint64_t now_ms) {
  auto a = ArpPacket::read(p);
  if (!a || a->sender_mac.is_multicast()) {
    ++stats_.arp_bad;
    return;
  }
  ++(a->op == ArpPacket::kRequest ? stats_.arp_requests_in : stats_.arp_replies_in);
  bool for_us = a->target_ip == conf_.address;
  // RFC 826 "Packet Reception": merge the sender into the table if it is known, or if we are the target;
  // only on-link senders (a neighbour outside our prefix is never a next hop), while the cache has room.
  if (a->sender_ip.value != 0 && (for_us || arp_.contains(a->sender_ip))) {
    if (!on_link(a->sender_ip)) {
      ++stats_.arp_not_on_link;
    } else if (learn(a->sender_ip, a->sender_mac, now_ms) && arp_listener_ != nullptr) {
      arp_listener_->arp_learned(a->sender_ip, a->sender_mac);
    }
  }
  if (for_us && a->op == ArpPacket::kRequest) {
    send_arp(ArpPacket::kReply, a->sender_mac, a->sender_mac, a->sender_ip);
  }
}

bool Interface::learn(Ipv4Addr ip, const MacAddr& mac, uint64_t now_ms) {
  if (!arp_.has_room(ip)) {
    ++stats_.arp_cache_full;
    return false;
  }
  for (std::vector<uint8_t>& f : arp_.update(ip, mac, now_ms)) {
    for (int i = 0; i < 6; ++i) f[i] = mac.bytes[i];
    transmit(f);
  }
  return true;
}

void Interface::fill_tcp_checksum(std::span<uint8_t> l4, Ipv4Addr src, Ipv4Addr dst) const {
  if (!io_.tx_checksum_offload()) {
    tcpip::fill_tcp_checksum(l4, src, dst);
    return;
  }
  // The port sums the segment into the field, which must hold the folded (not complemented) pseudo-header
  // sum (the convention of rte_ipv4_phdr_cksum and virtio's VIRTIO_NET_HDR_F_NEEDS_CSUM).
  uint32_t sum = pseudo_header_sum(src, dst, kProtoTcp, static_cast<uint16_t>(l4.size()));
  store_be16(l4.data() + 16, static_cast<uint16_t>(~checksum_finish(sum)));
}

void Interface::on_ipv4(std::span<const uint8_t> p, uint64_t now_ms, RxChecksum l4_checksum) {
  Ipv4Header ip;
  if (Ipv4Header::read(p, &ip) != Ipv4Header::Error::kNone) {
    ++stats_.ip_bad_header;
    return;
  }
  ++stats_.ip_in;
  if (!(ip.dst == conf_.address)) {
    ++stats_.rx_not_for_us;
    return;
  }
  if (ip.is_fragment()) {
    ++stats_.ip_fragments_dropped;  // no reassembly (see the header comment)
    return;
  }
  std::span<const uint8_t> l4 = p.subspan(ip.header_len, ip.total_len - ip.header_len);
  if (ip.protocol == kProtoIcmp) {
    on_icmp(ip, l4, now_ms);
    return;
  }
  if (L4Handler* h = l4_[ip.protocol]) {
    h->received(ip, l4, l4_checksum);
  } else {
    ++stats_.ip_unknown_protocol;
  }
}

void Interface::on_icmp(const Ipv4Header& ip, std::span<const uint8_t> p, uint64_t now_ms) {
  if (p.size() < 8 || checksum_finish(checksum_add(p)) != 0) {
    ++stats_.icmp_bad;
    return;
  }
  switch (p[0]) {
    case kIcmpEchoRequest: {
      ++stats_.icmp_echo_in;
      bool sent = send_ipv4(ip.src, kProtoIcmp, p.size(), [&](std::span<uint8_t> out) {
        std::memcpy(out.data(), p.data(), p.size());
        out[0] = kIcmpEchoReply;
        out[1] = 0;
        store_be16(out.data() + 2, 0);
        store_be16(out.data() + 2, checksum_finish(checksum_add(out)));
      }, now_ms);
      if (sent) ++stats_.icmp_echo_reply_out;
      break;
    }
    case kIcmpUnreachable:
    case kIcmpSourceQuench:
    case kIcmpRedirect:
    case kIcmpTimeExceeded:
    case kIcmpParamProblem:
      ++stats_.icmp_errors_in;
      break;
    default:
      break;
  }
}

void Interface::fill_tcp_checksum(std::span<uint8_t> header, Ipv4Addr src, Ipv4Addr dst,
                                  std::span<const uint8_t> payload) const {
  auto total = static_cast<uint16_t>(header.size() + payload.size());
  uint32_t sum = pseudo_header_sum(src, dst, kProtoTcp, total);
  if (io_.tx_checksum_offload()) {
    store_be16(header.data() + 16, static_cast<uint16_t>(~checksum_finish(sum)));
    return;
  }
  // The header is a multiple of 4 bytes long: the payload's words line up with the header's.
  store_be16(header.data() + 16, 0);
  sum = checksum_add(payload, checksum_add(header, sum));
  store_be16(header.data() + 16, checksum_finish(sum));
}

bool Interface::send_ipv4(Ipv4Addr dst, uint8_t protocol, size_t l4_len,
                          absl::FunctionRef<void(std::span<uint8_t>)> fill, uint64_t now_ms,
                          const TxPayload* payload) {
  Ipv4Addr next_hop = dst;
  if (!on_link(dst)) {
    if (conf_.gateway.value == 0) {
      ++stats_.ip_no_route;
      return false;
    }
    next_hop = conf_.gateway;
  }
  size_t extra = payload != nullptr ? payload->len : 0;
  size_t total = kFrameHeaders + l4_len + extra;
  Ipv4Header ip;
  ip.total_len = static_cast<uint16_t>(Ipv4Header::kMinSize + l4_len + extra);
  ip.id = next_ip_id_++;
  ip.flags_fragment = Ipv4Header::kFlagDontFragment;
  ip.ttl = conf_.ttl;
  ip.protocol = protocol;
  ip.src = conf_.address;
  ip.dst = dst;
  auto build = [&](uint8_t* f, const MacAddr& dst_mac) {
    EthernetHeader{dst_mac, io_.mac(), kEtherTypeIpv4}.write(f);
    ip.write(f + EthernetHeader::kSize);
    if (io_.tx_checksum_offload()) store_be16(f + EthernetHeader::kSize + 10, 0);  // the port fills it
    std::span<uint8_t> l4(f + kFrameHeaders, l4_len);
    fill(l4);
    // With TX checksum offload the port completes the TCP checksum from the pseudo-header sum; a filler that
    // computed the full sum in software (tcb.cc) gets its field replaced (l4_len ≥ 20 for TCP). A filler with a
    // payload by reference has already summed it (fill_tcp_checksum with the payload).
    if (protocol == kProtoTcp && l4_len >= 20 && io_.tx_checksum_offload() && payload == nullptr) {
      fill_tcp_checksum(l4, ip.src, ip.dst);
    }
  };
  auto copy_payload = [&](uint8_t* f) {
    if (extra > 0) std::memcpy(f + kFrameHeaders + l4_len, payload->data, extra);
  };
  if (auto mac = arp_.lookup(next_hop, now_ms)) {
    // A payload goes by reference behind a headers-only frame if the link can chain it; else into the frame.
    const bool by_ref = extra > 0 && io_.tx_payload_by_reference();
    const size_t len = by_ref ? kFrameHeaders + l4_len : total;
    std::span<uint8_t> buf = io_.frame_begin(len);
    if (buf.size() < len) {
      ++stats_.tx_no_buffer;
      return false;
    }
    build(buf.data(), *mac);
    if (by_ref) {
      io_.frame_send_payload(len, *payload->buf, payload->data, payload->len);
    } else {
      copy_payload(buf.data());
      io_.frame_send(len);
    }
    ++stats_.tx_frames;
    ++stats_.ip_out;
    return true;
  }
  // Unresolved next hop: the frame waits (with its destination MAC filled in on the reply).
  std::vector<uint8_t> frame(total);
  build(frame.data(), MacAddr{});
  copy_payload(frame.data());
  bool dropped = false;
  bool request = arp_.enqueue(next_hop, std::move(frame), now_ms, &dropped);
  if (dropped) ++stats_.arp_queue_drops;
  if (request) send_arp(ArpPacket::kRequest, MacAddr::broadcast(), MacAddr{}, next_hop);
  if (!dropped) ++stats_.ip_out;
  return !dropped;
}

void Interface::tick(uint64_t now_ms) {
  retry_.clear();
  stats_.arp_queue_drops += arp_.expire(now_ms, &retry_);
  for (Ipv4Addr a : retry_) send_arp(ArpPacket::kRequest, MacAddr::broadcast(), MacAddr{}, a);
}

}  // namespace kosoku::tcpip
