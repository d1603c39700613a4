// Host names as the rule set keys them: lower case, no port, no trailing dot ("Example.COM.:8080" →
// "example.com"), the form nginx's $host has after ngx_http_validate_host.
#pragma once

#include <string>
#include <string_view>

namespace kosoku::rules {

/// Longest host name accepted as a key (RFC 1035 §2.3.4: 253 characters without the trailing dot).
inline constexpr size_t kMaxHostBytes = 253;

/// Normalises `host` (a Host field value or $host): drops a `:PORT` suffix (not inside an IPv6 `[...]`
/// literal), one trailing '.', and lower-cases ASCII letters. Returns a view of `host` when nothing needs
/// lower-casing, else of `scratch` (reused: no allocation once it has grown). Hot path; never fails.
std::string_view normalize_host(std::string_view host, std::string& scratch);

/// True if `host` (already normalised) is usable as a key: 1..253 bytes of [a-z0-9._-], or an IPv6 literal
/// `[hex:...]`. Used by the admin API and the file loader, not by the request path.
bool valid_host(std::string_view host);

}  // namespace kosoku::rules
