// Value syntaxes of nginx directives: times, sizes, numbers, CIDR rules and listen addresses.
// Pure functions over strings; the directive setters (config/directive.hh) turn failures into errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/config/conf.hh"

namespace kosoku::config {

/// nginx time (ngx_parse_time): parts `N` + unit among `y` (365 d), `M` (30 d), `w`, `d`, `h`, `m`, `s`,
/// `ms`, each at most once and in that order, optionally separated by spaces ("1m30s", "1h 5m", "500ms");
/// a bare trailing number is seconds ("75" = 75 s). Result in milliseconds; at most 2^31-1 ms (nginx's
/// "value must be less than 597 hours"). nullopt on any syntax error or overflow.
std::optional<uint64_t> parse_time_ms(std::string_view s);

/// A configuration regex in nginx's (PCRE) spelling made RE2's where only the spelling differs: the named group
/// `(?<name>...)` becomes `(?P<name>...)` (lookbehind `(?<=`, `(?<!` and escaped parentheses are left alone,
/// and RE2 then refuses lookbehind with its own message).
std::string re2_spelling(std::string_view pcre);

/// The same syntax for second-granular values (nginx's is_sec): `ms` is refused; result in seconds,
/// at most 2^31-1.
std::optional<uint64_t> parse_time_sec(std::string_view s);

/// nginx size (ngx_parse_size): `N`, `Nk`/`NK` (×1024), `Nm`/`NM` (×1024²), `Ng`/`NG` (×1024³). Bytes;
/// nullopt on syntax error or a value above 2^62.
std::optional<uint64_t> parse_size(std::string_view s);

/// Plain decimal integer (digits only, no sign) up to `max`; nullopt otherwise.
std::optional<uint64_t> parse_number(std::string_view s, uint64_t max = UINT32_MAX);

/// `allow`/`deny` operand (ngx_http_access_module): `all`, an IPv4 or IPv6 address, or ADDR/PREFIX.
/// Host bits beyond the prefix are cleared (nginx accepts them with the warning
/// `low address bits of ADDR/N are meaningless`): *host_bits_set reports it. False on a bad address or
/// prefix. `rule->allow` is left to the caller.
bool parse_access_rule(std::string_view s, AccessRule* rule, bool* host_bits_set);

/// `listen` address (ngx_parse_url with listen=1): `ADDR:PORT`, `PORT`, `ADDR` (port 80), `*:PORT`,
/// `[IPV6]:PORT`, `[IPV6]`, `localhost[:PORT]` (127.0.0.1; no other host names are resolved). `*` is
/// 0.0.0.0. Fills addr, addr_len and text (normalised `ADDR:PORT` / `[V6]:PORT`); false with *error set
/// (`invalid port`, `invalid host`, ...).
bool parse_listen_address(std::string_view s, ListenConf* out, std::string* error);

/// "ADDR:PORT" for AF_INET, "[ADDR]:PORT" for AF_INET6.
std::string format_sockaddr(const sockaddr_storage& ss);

/// Same family, address and port.
bool same_sockaddr(const sockaddr_storage& a, const sockaddr_storage& b);

}  // namespace kosoku::config
