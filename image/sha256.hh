// SHA-256 (FIPS 180-4 §6.2) of a byte string, for the appliance's flashed configuration: `make image` stores
// the config's digest next to it in the initramfs, and PID 1 recomputes the digest of the text it actually
// loaded so the console's `config` command can show both and say whether they match. Not on any request path.
// Computed by libsodium (crypto_hash_sha256), already linked for the TCP stack's SipHash.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kosoku::appliance {

/// The 32-byte digest of `data`.
std::array<uint8_t, 32> sha256(std::string_view data);
/// The digest as 64 lower-case hex digits (what `sha256sum` prints).
std::string sha256_hex(std::string_view data);

}  // namespace kosoku::appliance
