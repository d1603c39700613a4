// Character classes of the HTTP grammar (RFC 9110 §5.6, RFC 9112 §2, RFC 3986 §2), as constexpr 256-entry
// tables so each test is one load. Internal to core/http: the parsers include it; other modules should not.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kosoku::http::chars {

enum : uint8_t {
  kTchar = 1 << 0,       // RFC 9110 §5.6.2 tchar: token characters (methods, field names, codings)
  kFieldVchar = 1 << 1,  // RFC 9110 §5.5 field-vchar / SP / HTAB: bytes allowed inside a field value
  kTarget = 1 << 2,      // bytes accepted in a request-target (RFC 3986 chars, plus obs-text as nginx does)
  kHex = 1 << 3,         // HEXDIG
  kDigit = 1 << 4,       // DIGIT
  kHostChar = 1 << 5,    // a byte of a host name kosoku accepts (split_host): ALPHA / DIGIT / "-" / "." / "_"
};

constexpr std::array<uint8_t, 256> make_table() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    uint8_t f = 0;
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool digit = c >= '0' && c <= '9';
    if (alpha || digit || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos) {
      f |= kTchar;
    }
    if (c == '\t' || (c >= 0x20 && c != 0x7f)) f |= kFieldVchar;
    // Visible ASCII except '#' (a fragment is never part of a request-target), plus obs-text (>= 0x80):
    // nginx accepts raw UTF-8 in the target and so do we. SP ends the target; CTLs and DEL are errors.
    if ((c > 0x20 && c < 0x7f && c != '#') || c >= 0x80) f |= kTarget;
    if (digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) f |= kHex;
    if (digit) f |= kDigit;
    if (alpha || digit || c == '-' || c == '.' || c == '_') f |= kHostChar;
    t[static_cast<size_t>(c)] = f;
  }
  return t;
}

inline constexpr std::array<uint8_t, 256> kTable = make_table();

constexpr bool is(char c, uint8_t cls) { return (kTable[static_cast<uint8_t>(c)] & cls) != 0; }
constexpr bool is_tchar(char c) { return is(c, kTchar); }
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_ows(char c) { return c == ' ' || c == '\t'; }
constexpr char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c; }

/// Value of a HEXDIG, or -1.
constexpr int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// ASCII case-insensitive equality; `lower` must already be lower-case.
constexpr bool iequals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (to_lower(s[i]) != lower[i]) return false;
  }
  return true;
}

/// Index of the first byte of [p, p+n) that may not appear in a field value (a CTL other than HTAB, or DEL),
/// or n. 16 bytes per step with SSE2; same answer as testing kFieldVchar byte by byte.
inline size_t find_invalid_field_byte(const char* p, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i k20 = _mm_set1_epi8(0x20), ktab = _mm_set1_epi8(0x09), kdel = _mm_set1_epi8(0x7f);
  const __m128i zero = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i ge20 = _mm_cmpeq_epi8(_mm_subs_epu8(k20, v), zero);  // v >= 0x20 (unsigned)
    const __m128i ok = _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(v, kdel), ge20), _mm_cmpeq_epi8(v, ktab));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(ok));
    if (mask != 0xffff) return i + static_cast<size_t>(__builtin_ctz(~mask));
  }
#endif
  for (; i < n; ++i) {
    if (!is(p[i], kFieldVchar)) return i;
  }
  return n;
}

/// Index of the first byte of [p, p+n) that may not appear in a request-target (see kTarget: SP, CTLs, DEL,
/// '#'), or n. 16 bytes per step with SSE2.
inline size_t find_target_end(const char* p, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i k21 = _mm_set1_epi8(0x21), kdel = _mm_set1_epi8(0x7f), khash = _mm_set1_epi8('#');
  const __m128i zero = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i ge21 = _mm_cmpeq_epi8(_mm_subs_epu8(k21, v), zero);  // v >= 0x21 (unsigned)
    const __m128i bad = _mm_or_si128(_mm_cmpeq_epi8(v, kdel), _mm_cmpeq_epi8(v, khash));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_andnot_si128(bad, ge21)));
    if (mask != 0xffff) return i + static_cast<size_t>(__builtin_ctz(~mask));
  }
#endif
  for (; i < n; ++i) {
    if (!is(p[i], kTarget)) return i;
  }
  return n;
}

/// Removes leading and trailing OWS (SP / HTAB).
constexpr std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

/// Splits the next element off an RFC 9110 §5.6.1 list (`#rule`): returns the OWS-trimmed element before the
/// next comma and advances `rest` past it. Empty elements are returned as empty views (callers skip them,
/// as the RFC's recipient rule asks). Commas inside quoted-strings are respected.
constexpr std::string_view next_list_element(std::string_view& rest) {
  size_t i = 0;
  bool quoted = false;
  for (; i < rest.size(); ++i) {
    const char c = rest[i];
    if (quoted) {
      if (c == '\\' && i + 1 < rest.size()) {
        ++i;
      } else if (c == '"') {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      break;
    }
  }
  std::string_view elem = rest.substr(0, i);
  rest.remove_prefix(i < rest.size() ? i + 1 : i);
  return trim_ows(elem);
}

}  // namespace kosoku::http::chars
