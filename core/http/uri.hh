// Request-target path normalisation (RFC 3986 §2.1, §5.2.4; nginx ngx_http_parse_complex_uri semantics):
// the raw path of a request becomes nginx's `$uri`, the name locations are matched against and the static
// handler appends to `root`. The query is never decoded here (it is nginx's `$args`, Request::query).
//
// normalize_path(raw) does, in one pass:
//   1. percent-decodes once: "%XX" → byte; "%" not followed by two HEXDIGs → 400; a decoded NUL (%00) → 400.
//      Nothing is decoded twice ("%252e" → "%2e", a literal segment).
//   2. splits segments at '/' — a decoded "%2F" is a separator too, as in nginx (so "/a%2Fb" is "/a/b").
//      '\\' (raw or "%5C") is an ordinary byte, never a separator.
//   3. removes dot-segments "." and ".." (compared after decoding, so "%2e%2E" is ".."): "/a/./b" → "/a/b",
//      "/a/b/../c" → "/a/c", a trailing "/." or "/.." leaves a trailing '/'. A ".." that would climb above the
//      root ("/..", "/a/../../x", "/..%2fx") → 400, as nginx does (RFC 3986 would clamp it; we reject).
//   4. merges runs of '/' into one (nginx `merge_slashes on`, the default) unless options say otherwise.
//
// Guarantee on success (what makes `root + uri` safe to open, symlinks aside): the result starts with '/',
// contains no NUL byte, and has no segment equal to "." or ".."; with merge_slashes it has no "//". It is
// never longer than the input, so a caller buffer of raw.size() bytes always suffices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kosoku::http {

struct NormalizeOptions {
  bool merge_slashes = true;  // nginx `merge_slashes`
};

struct NormalizeResult {
  uint16_t http_status = 0;  // 0: success; 400: rejected
  size_t length = 0;         // bytes written to the output on success
  std::string_view reason;   // static text when rejected
  bool ok() const { return http_status == 0; }
};

/// Normalises `raw_path` (the undecoded path, e.g. Request::path; must start with '/', else 400) into `out`,
/// which must hold at least raw_path.size() bytes. No allocation.
NormalizeResult normalize_path(std::string_view raw_path, std::span<char> out, const NormalizeOptions& opts = {});

/// Same, into a std::string (resized to the result; empty on failure).
NormalizeResult normalize_path(std::string_view raw_path, std::string& out, const NormalizeOptions& opts = {});

/// Splits an origin-form target at the first '?': path and query (neither decoded).
struct TargetParts {
  std::string_view path;
  std::string_view query;
  bool has_query = false;
};
TargetParts split_target(std::string_view target);

/// Appends `path` to `out` percent-encoding every byte that may not appear raw in a URI path or that would
/// be unsafe in a header (CTLs, SP, '"', '#', '%', '?', '<', '>', '\\', '^', '`', '{', '|', '}', DEL, bytes
/// >= 0x80), as nginx's ngx_escape_uri(NGX_ESCAPE_URI) does. Use it to build `Location` from a decoded $uri
/// (e.g. the 301 to a directory's trailing slash): normalize_path(escape) gives the path back.
void escape_path(std::string_view path, std::string& out);

/// Appends a URI that goes out as a header value (Location) to `out`, percent-encoding the bytes no field
/// value may carry (< 0x20 and DEL: CR, LF, NUL ...) and nothing else, so a Location from any source can
/// never split the head; URIs built by escape_path or by a LogEscape::kUri template pass unchanged.
void append_uri_field(std::string_view uri, std::string& out);

}  // namespace kosoku::http
