// The Internet checksum (RFC 1071): 16-bit one's-complement sum, computed in software (the DPDK port layer
// may offload it later; the stack then skips these calls). Used by IPv4 headers, ICMP and TCP (with the
// RFC 9293 §3.1 pseudo-header).
#pragma once

#include <cstdint>
#include <span>

#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

/// Adds `data` (big-endian 16-bit words; an odd last byte is padded with zero) to the unfolded 32-bit
/// accumulator `sum`. Only the last span of a chain may have odd length.
uint32_t checksum_add(std::span<const uint8_t> data, uint32_t sum = 0);
/// Folds the carries and complements: the value to store in a checksum field (host order).
uint16_t checksum_finish(uint32_t sum);
/// Sum of the IPv4 pseudo-header (source, destination, zero, protocol, L4 length in bytes), unfolded.
uint32_t pseudo_header_sum(Ipv4Addr src, Ipv4Addr dst, uint8_t protocol, uint16_t l4_length);

}  // namespace kosoku::tcpip
