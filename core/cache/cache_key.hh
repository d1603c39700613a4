// Cache keys: the 128-bit hash an entry is known by, its hex name and its file path, as nginx names them
// (ngx_http_file_cache_create_key / ngx_create_hashed_filename): MD5 of the key string (libmd, Debian's
// libmd-dev), 32 lower-case hex digits, and `levels` directory levels taken from the END of the hex name:
//   key "http://example.com/a", levels=1:2 → PATH/<hex[31]>/<hex[29..30]>/<hex>
// so a kosoku cache directory has nginx's layout. A Vary variant (§4.1 secondary key) is the MD5 of the key,
// a NUL byte and the request's secondary-key material (freshness.hh vary_key_material).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kosoku::cache {

/// A 128-bit key hash: the 16 MD5 bytes, `lo` = bytes 0..7 and `hi` = bytes 8..15 (little-endian loads).
struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Hash128&) const = default;
  bool zero() const { return lo == 0 && hi == 0; }
  /// A 64-bit tag for cheap "same key" checks (purge of variants, the loader).
  uint64_t tag() const { return lo ^ (hi * 0x9e3779b97f4a7c15ull); }
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo); }
};

/// MD5 of `key`.
Hash128 hash_key(std::string_view key);
/// MD5 of `key` '\0' `material`: the hash of one Vary variant of `key`.
Hash128 hash_variant(std::string_view key, std::string_view material);

/// The 32 lower-case hex digits of the MD5 bytes (nginx's file name).
inline constexpr size_t kHexLen = 32;
std::string to_hex(const Hash128& h);
/// Parses 32 hex digits (either case); false otherwise.
bool from_hex(std::string_view hex, Hash128* out);

/// `dir` + "/" + level directories + "/" + hex (see the header comment). `levels`: each 1 or 2.
std::string entry_path(std::string_view dir, const std::vector<uint8_t>& levels, const Hash128& h);
/// The level directories of an entry (relative, without the file), e.g. "c/29".
std::string level_dirs(const std::vector<uint8_t>& levels, std::string_view hex);

}  // namespace kosoku::cache
