// Host names as the certificate store keys them: an SNI name or a wildcard `*.parent`, lower case, without a
// trailing dot. The same rules apply to the admin API's HOST, to file names found by the start-up scan and
// to the console; the TLS code passes the SNI name (already lower-case) to CertCache::find.
#pragma once

#include <string>
#include <string_view>

namespace kosoku::certs {

/// Longest name accepted (RFC 1035 §2.3.4: 253 characters without the trailing dot).
inline constexpr size_t kMaxHostBytes = 253;

/// Lower-cases ASCII letters and drops one trailing '.'; then true if the result is a usable key: labels of
/// 1..63 bytes of [a-z0-9_-] separated by '.', at most 253 bytes, the first label optionally "*" followed by
/// at least one more label (`*.example.com`). No port, no IP literal (SNI carries neither). On false *out is
/// unspecified. Never on the handshake path.
bool normalize_cert_host(std::string_view in, std::string* out);

/// The wildcard key that covers `name` (one label, as browsers and nginx match): "a.b.c" → "*.b.c"; empty
/// if `name` has no '.' or is itself a wildcard. Appends to `scratch` (cleared first) and returns a view of it.
std::string_view wildcard_of(std::string_view name, std::string& scratch);

}  // namespace kosoku::certs
