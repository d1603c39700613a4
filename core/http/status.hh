// HTTP status codes: reason phrases (RFC 9110 §15) and nginx-style error page bodies.
#pragma once

#include <string_view>

namespace kosoku::http {

/// Reason phrase for `status` ("Not Found"); "Unknown" for codes without one.
std::string_view reason_phrase(int status);

/// The Server field's value and the error pages' signature: with the version (`server_tokens on`, nginx's
/// default) or without it (`server_tokens off`).
inline constexpr std::string_view kServerName = "kosoku";
inline constexpr std::string_view kServerWithVersion = "kosoku/" KOSOKU_VERSION;

/// The small HTML body nginx sends for an error status (e.g. "<html>...404 Not Found...</html>"), signed
/// with kServerWithVersion or kServerName (`server_tokens`), or empty for statuses that carry no default body
/// (1xx, 204, 304, 2xx). The view lives as long as the process.
std::string_view error_page(int status, bool server_tokens);

/// RFC 9110 §6.4.1: 1xx, 204 and 304 responses never carry content.
constexpr bool status_has_body(int status) { return status >= 200 && status != 204 && status != 304; }

}  // namespace kosoku::http
