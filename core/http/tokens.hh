// Interned HTTP field names (H2O's token table idea, built at compile time instead of generated).
// `lookup_header_token(name)` maps a field name, case-insensitively (RFC 9110 §5.1), to a HeaderToken so
// the request parser, the proxy and the cache compare one byte instead of strings. Flags mark the fields
// the protocol treats specially. Adding a field: add an enumerator and one row in kHeaderTokenTable (any
// order); a static_assert checks that every enumerator has exactly one row.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/http/chars.hh"

namespace kosoku::http {

enum class HeaderToken : uint8_t {
  kUnknown = 0,
  kAccept,
  kAcceptCharset,
  kAcceptEncoding,
  kAcceptLanguage,
  kAcceptRanges,
  kAge,
  kAllow,
  kAuthorization,
  kCacheControl,
  kConnection,
  kContentDisposition,
  kContentEncoding,
  kContentLanguage,
  kContentLength,
  kContentLocation,
  kContentRange,
  kContentType,
  kCookie,
  kDate,
  kEtag,
  kExpect,
  kExpires,
  kForwarded,
  kHost,
  kIfMatch,
  kIfModifiedSince,
  kIfNoneMatch,
  kIfRange,
  kIfUnmodifiedSince,
  kKeepAlive,
  kLastModified,
  kLink,
  kLocation,
  kOrigin,
  kPragma,
  kProxyAuthenticate,
  kProxyAuthorization,
  kProxyConnection,
  kRange,
  kReferer,
  kRetryAfter,
  kServer,
  kSetCookie,
  kStrictTransportSecurity,
  kTe,
  kTrailer,
  kTransferEncoding,
  kUpgrade,
  kUpgradeInsecureRequests,
  kUserAgent,
  kVary,
  kVia,
  kWwwAuthenticate,
  kXForwardedFor,
  kXForwardedHost,
  kXForwardedProto,
  kXRealIp,
  kCount  // number of tokens including kUnknown; not a token
};

inline constexpr size_t kHeaderTokenCount = static_cast<size_t>(HeaderToken::kCount);

/// Flags on a token.
enum : uint8_t {
  /// Hop-by-hop (RFC 9110 §7.6.1 and the classic RFC 2616 §13.5.1 list): a proxy never forwards it.
  kTokenHopByHop = 1 << 0,
  /// The request parser interprets it (Host, Content-Length, Transfer-Encoding, Connection, Expect).
  kTokenParserSpecial = 1 << 1,
  /// A request precondition (RFC 9110 §13.1).
  kTokenConditional = 1 << 2,
};

struct HeaderTokenInfo {
  std::string_view name;  // canonical lower-case spelling
  HeaderToken token;
  uint8_t flags;
};

inline constexpr std::array kHeaderTokenTable = {
    HeaderTokenInfo{"accept", HeaderToken::kAccept, 0},
    HeaderTokenInfo{"accept-charset", HeaderToken::kAcceptCharset, 0},
    HeaderTokenInfo{"accept-encoding", HeaderToken::kAcceptEncoding, 0},
    HeaderTokenInfo{"accept-language", HeaderToken::kAcceptLanguage, 0},
    HeaderTokenInfo{"accept-ranges", HeaderToken::kAcceptRanges, 0},
    HeaderTokenInfo{"age", HeaderToken::kAge, 0},
    HeaderTokenInfo{"allow", HeaderToken::kAllow, 0},
    HeaderTokenInfo{"authorization", HeaderToken::kAuthorization, 0},
    HeaderTokenInfo{"cache-control", HeaderToken::kCacheControl, 0},
    HeaderTokenInfo{"connection", HeaderToken::kConnection, kTokenHopByHop | kTokenParserSpecial},
    HeaderTokenInfo{"content-disposition", HeaderToken::kContentDisposition, 0},
    HeaderTokenInfo{"content-encoding", HeaderToken::kContentEncoding, 0},
    HeaderTokenInfo{"content-language", HeaderToken::kContentLanguage, 0},
    HeaderTokenInfo{"content-length", HeaderToken::kContentLength, kTokenParserSpecial},
    HeaderTokenInfo{"content-location", HeaderToken::kContentLocation, 0},
    HeaderTokenInfo{"content-range", HeaderToken::kContentRange, 0},
    HeaderTokenInfo{"content-type", HeaderToken::kContentType, 0},
    HeaderTokenInfo{"cookie", HeaderToken::kCookie, 0},
    HeaderTokenInfo{"date", HeaderToken::kDate, 0},
    HeaderTokenInfo{"etag", HeaderToken::kEtag, 0},
    HeaderTokenInfo{"expect", HeaderToken::kExpect, kTokenParserSpecial},
    HeaderTokenInfo{"expires", HeaderToken::kExpires, 0},
    HeaderTokenInfo{"forwarded", HeaderToken::kForwarded, 0},
    HeaderTokenInfo{"host", HeaderToken::kHost, kTokenParserSpecial},
    HeaderTokenInfo{"if-match", HeaderToken::kIfMatch, kTokenConditional},
    HeaderTokenInfo{"if-modified-since", HeaderToken::kIfModifiedSince, kTokenConditional},
    HeaderTokenInfo{"if-none-match", HeaderToken::kIfNoneMatch, kTokenConditional},
    HeaderTokenInfo{"if-range", HeaderToken::kIfRange, kTokenConditional},
    HeaderTokenInfo{"if-unmodified-since", HeaderToken::kIfUnmodifiedSince, kTokenConditional},
    HeaderTokenInfo{"keep-alive", HeaderToken::kKeepAlive, kTokenHopByHop},
    HeaderTokenInfo{"last-modified", HeaderToken::kLastModified, 0},
    HeaderTokenInfo{"link", HeaderToken::kLink, 0},
    HeaderTokenInfo{"location", HeaderToken::kLocation, 0},
    HeaderTokenInfo{"origin", HeaderToken::kOrigin, 0},
    HeaderTokenInfo{"pragma", HeaderToken::kPragma, 0},
    HeaderTokenInfo{"proxy-authenticate", HeaderToken::kProxyAuthenticate, kTokenHopByHop},
    HeaderTokenInfo{"proxy-authorization", HeaderToken::kProxyAuthorization, kTokenHopByHop},
    HeaderTokenInfo{"proxy-connection", HeaderToken::kProxyConnection, kTokenHopByHop},
    HeaderTokenInfo{"range", HeaderToken::kRange, 0},
    HeaderTokenInfo{"referer", HeaderToken::kReferer, 0},
    HeaderTokenInfo{"retry-after", HeaderToken::kRetryAfter, 0},
    HeaderTokenInfo{"server", HeaderToken::kServer, 0},
    HeaderTokenInfo{"set-cookie", HeaderToken::kSetCookie, 0},
    HeaderTokenInfo{"strict-transport-security", HeaderToken::kStrictTransportSecurity, 0},
    HeaderTokenInfo{"te", HeaderToken::kTe, kTokenHopByHop},
    HeaderTokenInfo{"trailer", HeaderToken::kTrailer, kTokenHopByHop},
    HeaderTokenInfo{"transfer-encoding", HeaderToken::kTransferEncoding, kTokenHopByHop | kTokenParserSpecial},
    HeaderTokenInfo{"upgrade", HeaderToken::kUpgrade, kTokenHopByHop},
    HeaderTokenInfo{"upgrade-insecure-requests", HeaderToken::kUpgradeInsecureRequests, 0},
    HeaderTokenInfo{"user-agent", HeaderToken::kUserAgent, 0},
    HeaderTokenInfo{"vary", HeaderToken::kVary, 0},
    HeaderTokenInfo{"via", HeaderToken::kVia, 0},
    HeaderTokenInfo{"www-authenticate", HeaderToken::kWwwAuthenticate, 0},
    HeaderTokenInfo{"x-forwarded-for", HeaderToken::kXForwardedFor, 0},
    HeaderTokenInfo{"x-forwarded-host", HeaderToken::kXForwardedHost, 0},
    HeaderTokenInfo{"x-forwarded-proto", HeaderToken::kXForwardedProto, 0},
    HeaderTokenInfo{"x-real-ip", HeaderToken::kXRealIp, 0},
};

namespace tokens_internal {

inline constexpr size_t kMaxNameLen = [] {
  size_t m = 0;
  for (const auto& e : kHeaderTokenTable) m = e.name.size() > m ? e.name.size() : m;
  return m;
}();

/// Rows grouped by name length (a counting sort), so a lookup compares only names of the right length.
struct LengthIndex {
  std::array<uint8_t, kHeaderTokenTable.size()> rows{};
  std::array<uint8_t, kMaxNameLen + 2> start{};  // rows[start[len] .. start[len+1]) have that length
  std::array<uint8_t, kHeaderTokenCount> row_of_token{};
};

constexpr LengthIndex build_length_index() {
  LengthIndex idx{};
  std::array<uint8_t, kMaxNameLen + 2> count{};
  for (const auto& e : kHeaderTokenTable) ++count[e.name.size()];
  uint8_t acc = 0;
  for (size_t len = 0; len < idx.start.size(); ++len) {
    idx.start[len] = acc;
    acc = static_cast<uint8_t>(acc + count[len]);
  }
  std::array<uint8_t, kMaxNameLen + 2> fill = idx.start;
  for (size_t i = 0; i < kHeaderTokenTable.size(); ++i) {
    idx.rows[fill[kHeaderTokenTable[i].name.size()]++] = static_cast<uint8_t>(i);
    idx.row_of_token[static_cast<size_t>(kHeaderTokenTable[i].token)] = static_cast<uint8_t>(i);
  }
  return idx;
}

inline constexpr LengthIndex kLengthIndex = build_length_index();

constexpr bool table_is_consistent() {
  std::array<int, kHeaderTokenCount> seen{};
  for (const auto& e : kHeaderTokenTable) {
    if (e.token == HeaderToken::kUnknown || e.token == HeaderToken::kCount) return false;
    ++seen[static_cast<size_t>(e.token)];
    for (char c : e.name) {
      if (c != chars::to_lower(c) || !chars::is_tchar(c)) return false;
    }
  }
  for (size_t t = 1; t < kHeaderTokenCount; ++t) {
    if (seen[t] != 1) return false;
  }
  return true;
}
static_assert(table_is_consistent(), "kHeaderTokenTable: every HeaderToken needs exactly one lower-case row");

}  // namespace tokens_internal

/// The token for a field name, compared ASCII case-insensitively; kUnknown for names not in the table.
constexpr HeaderToken lookup_header_token(std::string_view name) {
  if (name.empty() || name.size() > tokens_internal::kMaxNameLen) return HeaderToken::kUnknown;
  const auto& idx = tokens_internal::kLengthIndex;
  for (size_t i = idx.start[name.size()]; i < idx.start[name.size() + 1]; ++i) {
    const HeaderTokenInfo& row = kHeaderTokenTable[idx.rows[i]];
    if (chars::iequals_lower(name, row.name)) return row.token;
  }
  return HeaderToken::kUnknown;
}

/// Canonical lower-case name of a token; "" for kUnknown.
constexpr std::string_view header_token_name(HeaderToken t) {
  if (t == HeaderToken::kUnknown || t >= HeaderToken::kCount) return {};
  return kHeaderTokenTable[tokens_internal::kLengthIndex.row_of_token[static_cast<size_t>(t)]].name;
}

/// Flags (kToken*) of a token; 0 for kUnknown.
constexpr uint8_t header_token_flags(HeaderToken t) {
  if (t == HeaderToken::kUnknown || t >= HeaderToken::kCount) return 0;
  return kHeaderTokenTable[tokens_internal::kLengthIndex.row_of_token[static_cast<size_t>(t)]].flags;
}

static_assert(lookup_header_token("Content-Length") == HeaderToken::kContentLength);
static_assert(lookup_header_token("HOST") == HeaderToken::kHost);
static_assert(lookup_header_token("x-unknown") == HeaderToken::kUnknown);
static_assert(header_token_name(HeaderToken::kIfNoneMatch) == "if-none-match");

}  // namespace kosoku::http
