// Software flow steering between the per-core stacks (shared-nothing: cores exchange only messages over
// lock-free single-producer/single-consumer rte_rings, never a shared mutable table).
//
// CoreMesh (created once by DpdkBackend::start, before the workers) holds, for every ordered pair of cores
// (from, to): a ring of mbufs ("packets": TCP/IPv4 frames that arrived on `from`'s RX queue but whose 4-tuple
// the FlowSteering assigns to `to`), and a ring of 16-byte ArpUpdate records ("arp": neighbours `from`
// learned from the wire, so every core's ARP cache knows them: ARP frames are not steered, a reply to core
// B's request may arrive on core A). A core without a TX queue of its own (the port has fewer TX queues
// than workers) also has a "tx" ring to the core that transmits for it (core mod tx_queues).
//
// CoreSteering is one core's end: dispatch() decides for each received frame whether it is local (TCP/IPv4
// to a 4-tuple this core owns, or anything that is not TCP/IPv4: ARP, ICMP, fragments) or forwarded;
// forwarded frames are batched per destination and enqueued by flush(). drain() delivers what other cores
// forwarded here and applies their ARP updates. A full ring drops the frame (counted; TCP retransmits).
// With RSS programmed (port.hh) nearly every frame is local and dispatch() costs one Toeplitz hash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel-bypass/dpdk/flow_hash.hh"
#include "kernel-bypass/dpdk/queue.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

struct rte_mbuf;
struct rte_ring;

namespace kosoku::dpdk {

/// One neighbour learned from ARP, as carried between cores (rte_ring element of 16 bytes).
struct ArpUpdate {
  uint32_t ip = 0;  // host order
  uint8_t mac[6] = {};
  uint8_t pad[6] = {};
};
static_assert(sizeof(ArpUpdate) == 16);

class CoreMesh {
 public:
  static constexpr unsigned kPacketRing = 2048;  // mbufs per (from, to) pair
  static constexpr unsigned kArpRing = 256;      // ArpUpdates per pair
  static constexpr unsigned kTxRing = 2048;      // mbufs per core without a TX queue

  /// Rings for `cores` cores, of which the first `tx_queues` have their own TX queue. nullptr with *err
  /// ("rte_ring_create(...): ...") on failure.
  static std::unique_ptr<CoreMesh> create(uint16_t cores, uint16_t tx_queues, std::string* err);
  ~CoreMesh();  // frees the mbufs still queued (call after every core stopped)
  CoreMesh(const CoreMesh&) = delete;
  CoreMesh& operator=(const CoreMesh&) = delete;

  uint16_t cores() const { return cores_; }
  rte_ring* packets(uint16_t from, uint16_t to) const { return packets_[from * cores_ + to]; }
  rte_ring* arp(uint16_t from, uint16_t to) const { return arp_[from * cores_ + to]; }
  /// The ring from `from` to its TX core, or nullptr if `from` has its own TX queue.
  rte_ring* tx(uint16_t from) const { return tx_[from]; }

 private:
  explicit CoreMesh(uint16_t cores) : cores_(cores) {}
  uint16_t cores_;
  std::vector<rte_ring*> packets_, arp_, tx_;
};

/// Per-core steering counters (plain fields, owning core only).
struct SteeringStats {
  uint64_t forwarded_out = 0;   // frames handed to another core
  uint64_t forwarded_in = 0;    // frames other cores handed here
  uint64_t ring_full_drops = 0; // frames dropped: the destination ring was full
  uint64_t arp_replicated_out = 0, arp_replicated_in = 0, arp_ring_full = 0;
  uint64_t tx_relayed = 0;      // frames transmitted here for a core without a TX queue
};

class CoreSteering final : public tcpip::ArpListener, public tcpip::FlowOwner {
 public:
  CoreSteering(const CoreMesh& mesh, const FlowSteering& flows, uint16_t core);
  ~CoreSteering();  // frees frames still batched

  /// Takes `m` if its 4-tuple belongs to another core (then it is batched for that core and true is
  /// returned); false: the caller delivers it here.
  bool dispatch(rte_mbuf* m);
  /// Enqueues the batched frames (once per RX burst).
  void flush();
  /// Delivers the frames other cores forwarded here (through `q`, which frees them) and applies their ARP
  /// updates to `ifc`; transmits the frames of cores this core sends for, unless `q`'s TX backlog holds frames
  /// (the port refuses: their frames wait in their relay rings). Returns the frames handled.
  unsigned drain(Queue& q, tcpip::Interface& ifc, uint64_t now_ms);

  // tcpip::ArpListener: replicate to every other core.
  void arp_learned(tcpip::Ipv4Addr ip, const tcpip::MacAddr& mac) override;
  // tcpip::FlowOwner: connect() picks only source ports whose tuple this core owns.
  bool is_local(const tcpip::FourTuple& t) const override { return flows_.owner(t) == core_; }

  /// The core owning the TCP/IPv4 frame `frame` (Ethernet), or -1 if it is not steered (not TCP/IPv4, a
  /// fragment, truncated): such frames are handled where they arrive.
  static int owner_of_frame(const FlowSteering& flows, const uint8_t* frame, size_t len);

  const SteeringStats& stats() const { return stats_; }

 private:
  struct Batch {
    rte_mbuf* m[Queue::kBurst];
    unsigned n = 0;
  };
  void flush_to(uint16_t to);

  const CoreMesh& mesh_;
  const FlowSteering& flows_;
  uint16_t core_;
  std::vector<Batch> out_;
  std::vector<uint16_t> tx_for_;  // cores without a TX queue whose frames this core transmits
  SteeringStats stats_;
};

}  // namespace kosoku::dpdk
