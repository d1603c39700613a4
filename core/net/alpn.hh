// ALPN protocol lists (RFC 7301 §3.1: each protocol name after its length byte), as OpenSSL takes them.
#pragma once

#include <string_view>

namespace kosoku::net {

/// HTTP/1.1 only.
inline constexpr std::string_view kAlpnHttp11{"\x08http/1.1", 9};
/// HTTP/2 first, then HTTP/1.1 (a server with HTTP/2 on).
inline constexpr std::string_view kAlpnH2Http11{"\x02h2\x08http/1.1", 12};

}  // namespace kosoku::net
