// ARP for IPv4 over Ethernet (RFC 826): the 28-byte packet, and the per-core neighbour cache with aging
// (entries live kReachableMs after the last confirmation; unresolved addresses are re-requested every
// kRetryMs up to kMaxRequests times, then forgotten with their queued packets). At most kMaxEntries
// addresses: a flood of ARP from ever new senders (or of traffic to ever new on-link addresses) cannot
// grow it further.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

struct ArpPacket {
  static constexpr size_t kSize = 28;
  static constexpr uint16_t kRequest = 1;
  static constexpr uint16_t kReply = 2;
  uint16_t op = kRequest;
  MacAddr sender_mac;
  Ipv4Addr sender_ip;
  MacAddr target_mac;
  Ipv4Addr target_ip;

  /// nullopt unless htype = 1 (Ethernet), ptype = 0x0800, hlen = 6, plen = 4 and op is 1 or 2.
  static std::optional<ArpPacket> read(std::span<const uint8_t> p);
  void write(uint8_t* out) const;  // 28 bytes
};

/// Neighbour cache: IPv4 → MAC with aging, plus the frames waiting for a resolution (bounded per address).
class ArpCache {
 public:
  static constexpr uint64_t kReachableMs = 60'000;
  static constexpr uint64_t kRetryMs = 1'000;
  static constexpr unsigned kMaxRequests = 3;
  static constexpr size_t kMaxQueuedPerAddress = 16;  // frames; more are dropped (counted by the caller)
  static constexpr size_t kMaxEntries = 1024;  // addresses per cache (per core), like Linux's gc_thresh3
                                               // default; a new address beyond it is refused

  /// The MAC for ip if known and not expired at now_ms.
  std::optional<MacAddr> lookup(Ipv4Addr ip, uint64_t now_ms) const;
  /// Records (or refreshes) ip → mac. Returns the frames that were waiting for ip (now sendable). A new
  /// address while the cache holds kMaxEntries is not recorded (check has_room() to count it).
  std::vector<std::vector<uint8_t>> update(Ipv4Addr ip, const MacAddr& mac, uint64_t now_ms);
  /// True if ip is cached or a new entry fits (size() < kMaxEntries).
  bool has_room(Ipv4Addr ip) const { return entries_.size() < kMaxEntries || entries_.contains(ip); }
  /// True if ip is known (even if stale), used for RFC 826's "merge" rule: update only known senders
  /// unless we are the target.
  bool contains(Ipv4Addr ip) const { return entries_.contains(ip); }

  /// Queues `frame` (a full Ethernet frame whose destination MAC is filled in later) behind the resolution
  /// of ip. Returns true if a request should be sent now (first miss, or the retry interval passed), false
  /// otherwise; *dropped is set if the queue was full (or the cache, for a new address) and the frame was
  /// dropped.
  bool enqueue(Ipv4Addr ip, std::vector<uint8_t> frame, uint64_t now_ms, bool* dropped);

  /// Aging: removes expired entries, and unresolved addresses after kMaxRequests. Fills `retry` with the
  /// addresses to re-request now. Returns the number of queued frames dropped with failed resolutions.
  size_t expire(uint64_t now_ms, std::vector<Ipv4Addr>* retry);

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    MacAddr mac;
    bool resolved = false;
    uint64_t expires_ms = 0;       // resolved: end of validity; unresolved: next retry time
    unsigned requests = 0;
    std::vector<std::vector<uint8_t>> queued;
  };
  absl::flat_hash_map<Ipv4Addr, Entry> entries_;
};

}  // namespace kosoku::tcpip
