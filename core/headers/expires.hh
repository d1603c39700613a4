// nginx's `expires` (ngx_http_headers_module): the Expires and Cache-Control fields of a response, from a
// time relative to the response, to its Last-Modified, or to a time of day.
//
//   expires [modified] TIME | @TIME-OF-DAY | epoch | max | off | $variable;   http, server, location
//
// TIME may be negative ("-1h": Cache-Control: no-cache). Applied to the statuses add_header applies to without
// `always` (200, 201, 204, 206, 301, 302, 303, 304, 307, 308); the fields replace any Expires and
// Cache-Control the response already had (a proxied or cached one's). A variable's value is parsed per
// response with the same syntax; an invalid value adds nothing and logs an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/config/conf.hh"

namespace kosoku::http {
class Exchange;
}

namespace kosoku::headers {

struct Expires {
  enum class Kind : uint8_t { kOff, kEpoch, kMax, kAccess, kModified, kDaily };
  Kind kind = Kind::kOff;
  int64_t seconds = 0;  // kAccess, kModified: offset (may be negative); kDaily: seconds after midnight
};

/// Parses the arguments of `expires` ("off", "epoch", "max", "1h", "-1", "modified 1d", "@15h30m"): `first`
/// and, for `modified`, `second` (empty when there is none). False on any other value.
bool parse_expires(std::string_view first, std::string_view second, Expires* out);

/// The fields for `e` at wall time `now_s`, for a response whose Last-Modified is `last_modified` (-1: none),
/// each "Name: value\r\n", appended to `out`. Nothing for kOff (nor for kModified without Last-Modified).
void append_expires_fields(const Expires& e, int64_t now_s, int64_t last_modified, std::string& out);

/// Erases the Expires and Cache-Control lines of a head being built (`head`: "Name: value\r\n" lines after
/// the status line).
void erase_cache_fields(std::string& head);

}  // namespace kosoku::headers
