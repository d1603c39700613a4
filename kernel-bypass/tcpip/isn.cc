#include "kernel-bypass/tcpip/isn.hh"

#include <sodium.h>

#include <cstdlib>

#include "kernel-bypass/tcpip/byte_order.hh"

namespace kosoku::tcpip {

SequenceKeys::SequenceKeys() {
  if (sodium_init() < 0) std::abort();
  randombytes_buf(key_, sizeof(key_));
}

uint64_t SequenceKeys::hash(const FourTuple& t, uint32_t domain, uint32_t a, uint32_t b) const {
  static_assert(crypto_shorthash_BYTES == 8 && crypto_shorthash_KEYBYTES == 16);
  uint8_t in[24];
  store_be32(in, t.local.value);
  store_be16(in + 4, t.local_port);
  store_be32(in + 6, t.remote.value);
  store_be16(in + 10, t.remote_port);
  store_be32(in + 12, domain);
  store_be32(in + 16, a);
  store_be32(in + 20, b);
  uint8_t out[8];
  crypto_shorthash(out, in, sizeof(in), key_);
  return (static_cast<uint64_t>(load_be32(out)) << 32) | load_be32(out + 4);
}

uint32_t SequenceKeys::isn(const FourTuple& t, uint64_t now_us) const {
  return static_cast<uint32_t>(now_us / 4) + static_cast<uint32_t>(hash(t, 1, 0, 0));
}

uint32_t SequenceKeys::ts_offset(const FourTuple& t) const { return static_cast<uint32_t>(hash(t, 2, 0, 0)); }

uint32_t SequenceKeys::cookie_mac(const FourTuple& t, uint32_t client_isn, uint32_t counter) const {
  return static_cast<uint32_t>(hash(t, 3, client_isn, counter));
}

}  // namespace kosoku::tcpip
