// Keyed hashes for TCP: initial sequence numbers per RFC 6528 (ISN = M + F(4-tuple, secret), M a 4 µs
// clock), per-connection timestamp offsets (RFC 7323 §5.4 / §7.1 recommend randomised TS clocks), and SYN
// cookie MACs. F is SipHash-2-4 from libsodium (crypto_shorthash, Debian's libsodium-dev, linked statically):
// a keyed PRF designed for exactly this (short inputs, secret 128-bit key). Abseil's hash is not keyed
// with a secret and not cryptographic, so it is not used here. One key per process, from getrandom via
// randombytes_buf; all cores share the key (read-only after construction).
#pragma once

#include <cstdint>

#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

struct FourTuple {
  Ipv4Addr local;
  uint16_t local_port = 0;
  Ipv4Addr remote;
  uint16_t remote_port = 0;
  friend bool operator==(const FourTuple&, const FourTuple&) = default;
  template <class H>
  friend H AbslHashValue(H h, const FourTuple& t) {
    return H::combine(std::move(h), t.local.value, t.local_port, t.remote.value, t.remote_port);
  }
};

class SequenceKeys {
 public:
  /// Draws a fresh 128-bit key (libsodium randombytes). Aborts if libsodium cannot initialise.
  SequenceKeys();
  /// RFC 6528 §3: M + F(localip, localport, remoteip, remoteport, secretkey); now_us is a monotonic µs clock
  /// (M ticks every 4 µs).
  uint32_t isn(const FourTuple& t, uint64_t now_us) const;
  /// Per-connection offset added to the millisecond timestamp clock.
  uint32_t ts_offset(const FourTuple& t) const;
  /// 32-bit MAC over the 4-tuple, the client's ISN and a coarse time counter (SYN cookies).
  uint32_t cookie_mac(const FourTuple& t, uint32_t client_isn, uint32_t counter) const;

 private:
  uint64_t hash(const FourTuple& t, uint32_t domain, uint32_t a, uint32_t b) const;
  unsigned char key_[16];
};

}  // namespace kosoku::tcpip
