#include "kernel-bypass/tcpip/arp.hh"

#include "kernel-bypass/tcpip/byte_order.hh"

namespace kosoku::tcpip {

std::optional<ArpPacket> ArpPacket::read(std::span<const uint8_t> p) {
  if (p.size() < kSize) return std::nullopt;
  if (load_be16(p.data()) != 1 || load_be16(p.data() + 2) != 0x0800 || p[4] != 6 || p[5] != 4) {
    return std::nullopt;
  }
  ArpPacket a;
  a.op = load_be16(p.data() + 6);
  if (a.op != kRequest && a.op != kReply) return std::nullopt;
  for (int i = 0; i < 6; ++i) {
    a.sender_mac.bytes[i] = p[8 + i];
    a.target_mac.bytes[i] = p[18 + i];
  }
  a.sender_ip = Ipv4Addr{load_be32(p.data() + 14)};
  a.target_ip = Ipv4Addr{load_be32(p.data() + 24)};
  return a;
}

void ArpPacket::write(uint8_t* out) const {
  store_be16(out, 1);
  store_be16(out + 2, 0x0800);
  out[4] = 6;
  out[5] = 4;
  store_be16(out + 6, op);
  for (int i = 0; i < 6; ++i) {
    out[8 + i] = sender_mac.bytes[i];
    out[18 + i] = target_mac.bytes[i];
  }
  store_be32(out + 14, sender_ip.value);
  store_be32(out + 24, target_ip.value);
}

std::optional<MacAddr> ArpCache::lookup(Ipv4Addr ip, uint64_t now_ms) const {
  auto it = entries_.find(ip);
  if (it == entries_.end() || !it->second.resolved || it->second.expires_ms <= now_ms) return std::nullopt;
  return it->second.mac;
}

std::vector<std::vector<uint8_t>> ArpCache::update(Ipv4Addr ip, const MacAddr& mac, uint64_t now_ms) {
  if (!has_room(ip)) return {};
  Entry& e = entries_[ip];
  e.mac = mac;
  e.resolved = true;
  e.requests = 0;
  e.expires_ms = now_ms + kReachableMs;
  std::vector<std::vector<uint8_t>> out;
  out.swap(e.queued);
  return out;
}

bool ArpCache::enqueue(Ipv4Addr ip, std::vector<uint8_t> frame, uint64_t now_ms, bool* dropped) {
  *dropped = !has_room(ip);
  if (*dropped) return false;
  Entry& e = entries_[ip];
  if (e.queued.size() >= kMaxQueuedPerAddress) {
    *dropped = true;
  } else {
    e.queued.push_back(std::move(frame));
  }
  // An expired resolved entry becomes unresolved again: re-resolve.
  if (e.resolved) {
    e.resolved = false;
    e.requests = 0;
  }
  if (e.requests == 0 || e.expires_ms <= now_ms) {
    if (e.requests >= kMaxRequests) return false;  // expire() forgets it
    ++e.requests;
    e.expires_ms = now_ms + kRetryMs;
    return true;
  }
  return false;
}

size_t ArpCache::expire(uint64_t now_ms, std::vector<Ipv4Addr>* retry) {
  size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.expires_ms > now_ms) {
      ++it;
      continue;
    }
    if (e.resolved || e.requests >= kMaxRequests) {
      dropped += e.queued.size();
      entries_.erase(it++);
      continue;
    }
    ++e.requests;
    e.expires_ms = now_ms + kRetryMs;
    retry->push_back(it->first);
    ++it;
  }
  return dropped;
}

}  // namespace kosoku::tcpip
