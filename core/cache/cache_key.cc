#include "core/cache/cache_key.hh"

#include <md5.h>

#include <cstring>

namespace kosoku::cache {

namespace {

Hash128 from_digest(const unsigned char d[16]) {
  Hash128 h;
  std::memcpy(&h.lo, d, 8);
  std::memcpy(&h.hi, d + 8, 8);
  return h;
}

void digest_of(const Hash128& h, unsigned char d[16]) {
  std::memcpy(d, &h.lo, 8);
  std::memcpy(d + 8, &h.hi, 8);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Hash128 hash_key(std::string_view key) {
  MD5_CTX ctx;
  MD5Init(&ctx);
  MD5Update(&ctx, reinterpret_cast<const uint8_t*>(key.data()), key.size());
  unsigned char d[16];
  MD5Final(d, &ctx);
  return from_digest(d);
}

Hash128 hash_variant(std::string_view key, std::string_view material) {
  MD5_CTX ctx;
  MD5Init(&ctx);
  MD5Update(&ctx, reinterpret_cast<const uint8_t*>(key.data()), key.size());
  const uint8_t nul = 0;
  MD5Update(&ctx, &nul, 1);
  MD5Update(&ctx, reinterpret_cast<const uint8_t*>(material.data()), material.size());
  unsigned char d[16];
  MD5Final(d, &ctx);
  return from_digest(d);
}

std::string to_hex(const Hash128& h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  unsigned char d[16];
  digest_of(h, d);
  std::string out(kHexLen, '0');
  for (int i = 0; i < 16; ++i) {
    out[static_cast<size_t>(2 * i)] = kDigits[d[i] >> 4];
    out[static_cast<size_t>(2 * i + 1)] = kDigits[d[i] & 0xf];
  }
  return out;
}

bool from_hex(std::string_view hex, Hash128* out) {
  if (hex.size() != kHexLen) return false;
  unsigned char d[16];
  for (size_t i = 0; i < 16; ++i) {
    int a = hex_value(hex[2 * i]);
    int b = hex_value(hex[2 * i + 1]);
    if (a < 0 || b < 0) return false;
    d[i] = static_cast<unsigned char>(a << 4 | b);
  }
  *out = from_digest(d);
  return true;
}

std::string level_dirs(const std::vector<uint8_t>& levels, std::string_view hex) {
  std::string out;
  size_t end = hex.size();
  for (uint8_t l : levels) {
    if (!out.empty()) out.push_back('/');
    out.append(hex.substr(end - l, l));
    end -= l;
  }
  return out;
}

std::string entry_path(std::string_view dir, const std::vector<uint8_t>& levels, const Hash128& h) {
  std::string hex = to_hex(h);
  std::string out(dir);
  out.push_back('/');
  if (!levels.empty()) {
    out.append(level_dirs(levels, hex));
    out.push_back('/');
  }
  out.append(hex);
  return out;
}

}  // namespace kosoku::cache
