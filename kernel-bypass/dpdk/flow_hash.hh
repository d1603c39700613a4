// Flow steering across the per-core stacks: which core owns a TCP/IPv4 4-tuple.
//
// The hash is Toeplitz (Microsoft RSS, the function NICs compute for RSS) over the 12-byte input
// src address | dst address | src port | dst port (network byte order). With the symmetric key (the 16-bit
// pattern 0x6d5a repeated; Woo and Park, "Scalable TCP Session Monitoring with Symmetric Receive-side
// Scaling", 2012) both directions of a connection hash alike: swapping the addresses and the ports shifts the
// input by a multiple of 16 bits, and the key repeats every 16 bits.
//
// owner(hash) = reta[hash mod reta_size] with reta[i] = i mod cores: the redirection table kosoku programs
// into an RSS port (port.hh), and the same function the software path applies (steering.hh) and that
// TcpStack::connect uses to choose source ports whose return traffic lands on the connecting core (as
// F-Stack does). Plain C++ (no DPDK header), so unit tests and the TCP stack can use it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kernel-bypass/tcpip/isn.hh"

namespace kosoku::dpdk {

/// Toeplitz hash with a fixed key; precomputed per-byte tables (12 KiB for 12-byte inputs), so one IPv4/TCP
/// hash costs 12 table loads and XORs.
class ToeplitzHash {
 public:
  static constexpr size_t kMaxInput = 12;  // IPv4 addresses + ports
  /// `key` must hold at least kMaxInput + 4 bytes (RSS keys are 40 or 52 bytes).
  explicit ToeplitzHash(std::span<const uint8_t> key);

  /// Hash of `input` (at most kMaxInput bytes, network byte order).
  uint32_t hash(std::span<const uint8_t> input) const;
  /// Hash of a packet from src:sport to dst:dport (host-order values; serialised big-endian).
  uint32_t ipv4_tcp(tcpip::Ipv4Addr src, tcpip::Ipv4Addr dst, uint16_t sport, uint16_t dport) const;

 private:
  std::array<std::array<uint32_t, 256>, kMaxInput> table_{};
};

/// The symmetric RSS key of `len` bytes (0x6d, 0x5a, 0x6d, 0x5a, ...). len is the port's hash_key_size.
std::vector<uint8_t> symmetric_rss_key(size_t len = 40);

/// Flow → core, over the symmetric Toeplitz hash (see the header comment). Immutable after construction;
/// shared read-only by every core.
class FlowSteering {
 public:
  /// cores ≥ 1; reta_size ≥ cores (the port's RETA size in RSS mode, 128 otherwise).
  FlowSteering(uint16_t cores, uint32_t reta_size = 128);

  uint16_t cores() const { return cores_; }
  uint32_t reta_size() const { return reta_size_; }
  /// RETA entry i (the queue a NIC delivers hash values with hash mod reta_size == i to).
  uint16_t reta_entry(uint32_t i) const { return static_cast<uint16_t>(i % cores_); }
  /// The core owning a flow whose Toeplitz hash is `hash`.
  uint16_t owner_of_hash(uint32_t hash) const { return reta_entry(hash % reta_size_); }
  uint32_t hash(const tcpip::FourTuple& t) const {
    return toeplitz_.ipv4_tcp(t.remote, t.local, t.remote_port, t.local_port);
  }
  /// The core owning connection `t` (either direction hashes alike).
  uint16_t owner(const tcpip::FourTuple& t) const { return owner_of_hash(hash(t)); }
  const ToeplitzHash& toeplitz() const { return toeplitz_; }

 private:
  uint16_t cores_;
  uint32_t reta_size_;
  ToeplitzHash toeplitz_;
};

}  // namespace kosoku::dpdk
