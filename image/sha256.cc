// SHA-256 through libsodium (crypto_hash_sha256, FIPS 180-4): a well-kept library rather than our own code.
#include "image/sha256.hh"

#include <sodium/crypto_hash_sha256.h>

namespace kosoku::appliance {

std::array<uint8_t, 32> sha256(std::string_view data) {
  std::array<uint8_t, 32> out{};
  crypto_hash_sha256(out.data(), reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return out;
}

std::string sha256_hex(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::array<uint8_t, 32> d = sha256(data);
  std::string hex;
  hex.reserve(64);
  for (uint8_t b : d) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return hex;
}

}  // namespace kosoku::appliance
