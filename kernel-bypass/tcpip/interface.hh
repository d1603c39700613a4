// One IPv4 interface on one core: Ethernet dispatch, ARP (answers requests for our address, resolves next
// hops with a queue of waiting frames, gratuitous ARP on announce()), IPv4 input checks and output (no
// fragmentation on send: DF set, the TCP MSS keeps segments within the MTU), ICMP echo reply, and the L4
// handler table (TCP registers itself). Incoming IPv4 fragments are DROPPED and counted
// (InterfaceStats::ip_fragments_dropped): no reassembly. ICMP errors received are counted, not acted on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "kernel-bypass/tcpip/arp.hh"
#include "kernel-bypass/tcpip/ethernet.hh"
#include "kernel-bypass/tcpip/ipv4_header.hh"
#include "kernel-bypass/tcpip/packet_io.hh"

namespace kosoku::tcpip {

struct InterfaceConfig {
  Ipv4Addr address;
  uint8_t prefix_len = 24;
  Ipv4Addr gateway;  // 0.0.0.0: no default route (off-link destinations are unreachable)
  uint8_t ttl = 64;
};

/// Per-core counters (plain fields, written only by the owning core).
struct InterfaceStats {
  uint64_t rx_frames = 0, tx_frames = 0, tx_no_buffer = 0;
  uint64_t rx_unknown_ethertype = 0, rx_not_for_us = 0;
  uint64_t arp_requests_in = 0, arp_replies_in = 0, arp_requests_out = 0, arp_replies_out = 0;
  uint64_t arp_queue_drops = 0, arp_bad = 0;
  uint64_t arp_not_on_link = 0;  // ARP senders outside our prefix: not learned
  uint64_t arp_cache_full = 0;   // new neighbours not learned: ArpCache::kMaxEntries reached
  uint64_t ip_in = 0, ip_bad_header = 0, ip_fragments_dropped = 0, ip_unknown_protocol = 0;
  uint64_t ip_out = 0, ip_no_route = 0;
  uint64_t icmp_echo_in = 0, icmp_echo_reply_out = 0, icmp_errors_in = 0, icmp_bad = 0;
};

/// What the link layer already checked of a received frame's checksums (DPDK RX checksum offload: the mbuf's
/// RTE_MBUF_F_RX_*_CKSUM_* flags). kUnknown: verify in software.
enum class RxChecksum : uint8_t { kUnknown, kGood, kBad };

/// Receives the payload of IPv4 packets of one protocol (RFC 791 protocol number).
class L4Handler {
 public:
  /// `l4` is the IPv4 payload (exactly total_len - header_len bytes); `l4_checksum` is what the port
  /// verified (kGood: skip the software check; kBad: drop).
  virtual void received(const Ipv4Header& ip, std::span<const uint8_t> l4, RxChecksum l4_checksum) = 0;

 protected:
  ~L4Handler() = default;
};

/// Told of each neighbour an interface learns from ARP on the wire (the DPDK glue replicates it to the other
/// cores' interfaces).
class ArpListener {
 public:
  virtual void arp_learned(Ipv4Addr ip, const MacAddr& mac) = 0;

 protected:
  ~ArpListener() = default;
};

class Interface {
 public:
  Interface(PacketIO& io, const InterfaceConfig& conf);

  /// Handles one received Ethernet frame (any length; short or malformed frames are counted and dropped).
  /// `l4_checksum`: the port's verdict on the TCP/UDP checksum (RxChecksum).
  void receive_frame(std::span<const uint8_t> frame, uint64_t now_ms,
                     RxChecksum l4_checksum = RxChecksum::kUnknown);
  /// Records ip → mac learned by another core's interface (ARP replication between the per-core stacks,
  /// dpdk/steering.hh) and sends the frames waiting here for that address. Never reported to the ArpListener.
  /// False (counted in arp_cache_full) when ip is new and the cache holds ArpCache::kMaxEntries.
  bool learn(Ipv4Addr ip, const MacAddr& mac, uint64_t now_ms);
  /// Called with each ARP entry this interface learns from the wire (RFC 826 merge), for replication.
  void set_arp_listener(ArpListener* listener) { arp_listener_ = listener; }
  /// Fills the TCP checksum of `l4` (a segment from src to dst): in software, or only the pseudo-header sum
  /// when the link offloads TCP checksums (PacketIO::tx_checksum_offload; the port completes it).
  void fill_tcp_checksum(std::span<uint8_t> l4, Ipv4Addr src, Ipv4Addr dst) const;

  void register_l4(uint8_t protocol, L4Handler* h) { l4_[protocol] = h; }

  /// Sends an IPv4 packet to dst with `l4_len` bytes of payload written by fill(span of l4_len bytes); the
  /// filler computes its own checksum (it knows the pseudo-header: source = address()). Resolves the next
  /// hop with ARP first if needed (the packet then waits in the ARP queue). Returns false if the packet was
  /// dropped (no route, no TX buffer, ARP queue full).
  bool send_ipv4(Ipv4Addr dst, uint8_t protocol, size_t l4_len, absl::FunctionRef<void(std::span<uint8_t>)> fill,
                 uint64_t now_ms) {
    return send_ipv4(dst, protocol, l4_len, fill, now_ms, nullptr);
  }
  /// Payload bytes a TCP segment carries by reference (Tcb: bytes of a net::SharedBuffer in its send buffer).
  struct TxPayload {
    net::SharedBuffer* buf;
    const uint8_t* data;
    size_t len;
  };
  /// As above, for TCP: fill() writes the `l4_len` header bytes and `payload` follows them. The link sends the
  /// payload by reference if it can (PacketIO::tx_payload_by_reference), else it is copied into the frame.
  /// fill() must leave the TCP checksum to fill_tcp_checksum(header, src, dst, payload) (called by fill).
  bool send_ipv4(Ipv4Addr dst, uint8_t protocol, size_t l4_len, absl::FunctionRef<void(std::span<uint8_t>)> fill,
                 uint64_t now_ms, const TxPayload* payload);
  /// The TCP checksum of a segment whose `header` is followed by `payload`: in software over both, or with TX
  /// offload the pseudo-header sum for their total length.
  void fill_tcp_checksum(std::span<uint8_t> header, Ipv4Addr src, Ipv4Addr dst,
                         std::span<const uint8_t> payload) const;
  /// True if the link sends payloads by reference (PacketIO::tx_payload_by_reference).
  bool tx_payload_by_reference() const { return io_.tx_payload_by_reference(); }

  /// Gratuitous ARP (a request for our own address, RFC 5227 §3 "ARP Announcement").
  void announce();
  /// ARP aging and request retries; call every ~100 ms.
  void tick(uint64_t now_ms);

  Ipv4Addr address() const { return conf_.address; }
  /// Largest IPv4 payload per packet (MTU - 20).
  size_t max_l4_payload() const { return io_.mtu() - Ipv4Header::kMinSize; }
  const InterfaceStats& stats() const { return stats_; }
  ArpCache& arp() { return arp_; }

 private:
  void on_arp(const EthernetHeader& eth, std::span<const uint8_t> p, uint64_t now_ms);
  void on_ipv4(std::span<const uint8_t> p, uint64_t now_ms, RxChecksum l4_checksum);
  void on_icmp(const Ipv4Header& ip, std::span<const uint8_t> p, uint64_t now_ms);
  void send_arp(uint16_t op, const MacAddr& eth_dst, const MacAddr& target_mac, Ipv4Addr target_ip);
  bool transmit(std::span<const uint8_t> frame);
  bool on_link(Ipv4Addr a) const;

  PacketIO& io_;
  InterfaceConfig conf_;
  InterfaceStats stats_;
  ArpCache arp_;
  L4Handler* l4_[256] = {};
  uint16_t next_ip_id_ = 1;
  std::vector<Ipv4Addr> retry_;
  ArpListener* arp_listener_ = nullptr;
};

}  // namespace kosoku::tcpip
