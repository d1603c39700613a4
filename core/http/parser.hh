// HTTP/1.1 request-head parser (RFC 9112 §2-§7, RFC 9110 §5-§7), picohttpparser style: a pure function over
// the receive buffer. No I/O, no exceptions: the request line and every field become spans into the caller's
// buffer, and the fields go into a caller-provided fixed array (no allocation unless a head has more field
// lines than that array holds; see "Field storage" below).
//
// Lifetime: every std::string_view in Request points into `buf` (or at a static literal: Request::path "/"
// for an absolute-form target without a path, "*" for asterisk-form). The caller must keep those bytes in
// place until it is done with the Request (the engine copies what it needs before the buffer moves).
//
// Choices (all deliberate, most are nginx's):
//  - Line terminator: CRLF; a bare LF is accepted too (RFC 9112 §2.2 MAY; nginx does) unless
//    ParserLimits::allow_bare_lf is false. A bare CR anywhere is a 400 (§2.2 MUST NOT treat as terminator).
//  - Empty lines before the request-line are skipped (§2.2 SHOULD) and count toward `consumed`.
//  - Exactly one SP between the request-line parts (§3, no "whitespace-delimited" leniency).
//  - Methods are case-sensitive tokens; unknown tokens parse as Method::kOther (the engine answers 405/501).
//  - Request-target: origin-form, absolute-form (http/https only; host taken from it, §3.2.2), authority-form
//    for CONNECT only, asterisk-form for OPTIONS only. Raw bytes >= 0x80 are accepted (as nginx); CTLs, DEL
//    and '#' are 400.
//  - Version: exactly `HTTP/D.D`. 1.0 and 1.1 are served; any other well-formed version is 505; anything else
//    (`HTTX/1.1`, `http/1.1`, `HTTP/1.10`, missing) is 400.
//  - Framing (§6.3): Content-Length and Transfer-Encoding together → 400 (as nginx ≥ 1.21.1; the engine closes).
//    Content-Length: 1*DIGIT ≤ 2^63-1; repeated lines or list members must all have the same value (collapsed)
//    else 400. Transfer-Encoding: the final coding must be `chunked` (else 400, §6.3 item 4), chunked at most
//    once (else 400), any other coding before it → 501 (§6.1); TE in an HTTP/1.0 request → 400 (as nginx).
//  - Host (§3.2) and the authority of an absolute-form or CONNECT target: HTTP/1.1 without Host → 400; more
//    than one Host line → 400; a value that is not a host name, IPv4 address or bracketed IPv6 address with an
//    optional ":" port of 1-5 digits (≤ 65535) → 400 (split_host). An empty Host value is valid (RFC 9110 §7.2).
//  - Field lines: obs-fold (a line starting with SP/HTAB) → 400; whitespace between name and ':' → 400;
//    name must be a token; value bytes must be field-vchar/SP/HTAB (NUL, CR, other CTLs, DEL → 400).
//
// Limits (ParserLimits; nginx `client_header_buffer_size` and `large_client_header_buffers`), in bytes: an
// over-long request-line → 414, an over-long field line or too large a header section → 431. A line that ends
// within the first ParserLimits::initial_buffer bytes is never too long (nginx reads it into the connection's
// first buffer and needs no large one for it). They are checked on partial input too, so a peer that never
// ends its line gets its error as soon as the buffered bytes exceed the limit. More than
// ParserLimits::max_fields field lines → 431 too (nginx `max_headers`, 1000 by default). nginx answers these
// 431s with 400 "Request Header Or Cookie Too Large"; RFC 6585 §5 defines 431 for them.
//
// Field storage: the lines go into the caller's fixed array (Request::fields, no allocation: the common case);
// a head with more lines continues in Request::spilled_fields, a heap array the parser grows as needed (all
// the lines are copied there, so headers() stays one span). Bounded by the limits above; release_fields()
// frees it once the caller is done with the request.
//
// Resuming: the parser keeps no state; call it again with the grown buffer. Pass `last_len` (the buffer length
// at the previous call for this same request, 0 the first time) and a still-partial head is answered after
// scanning only the new bytes plus at most one line's worth (limit checks), so a head arriving byte by byte
// costs O(bytes × max line) at worst, not O(bytes²) over the whole head. The full parse runs once, when the
// end of the head (an empty line) has arrived.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/http/tokens.hh"

namespace kosoku::http {

enum class Method : uint8_t {
  kGet,
  kHead,
  kPost,
  kPut,
  kDelete,
  kOptions,
  kTrace,
  kPatch,
  kConnect,
  kPurge,
  kOther,  // any other token; see Request::method_text
};

/// The method for a token, compared case-sensitively (RFC 9110 §9.1); kOther when not listed.
Method method_from_token(std::string_view token);
/// "GET", "HEAD", ...; "" for kOther.
std::string_view method_name(Method m);

enum class TargetForm : uint8_t {
  kOrigin,     // "/path?query" (RFC 9112 §3.2.1)
  kAbsolute,   // "http://host/path?query" (§3.2.2)
  kAuthority,  // "host:port", CONNECT only (§3.2.3)
  kAsterisk,   // "*", OPTIONS only (§3.2.4)
};

/// How the request's message body is framed (RFC 9112 §6.3).
enum class BodyFraming : uint8_t {
  kNone,           // no Content-Length, no Transfer-Encoding: no body
  kContentLength,  // Request::content_length bytes
  kChunked,        // Transfer-Encoding: chunked (use ChunkedDecoder, core/http/chunked.hh)
};

/// One field line. `value` has leading and trailing OWS removed; both are spans into the receive buffer.
struct HeaderField {
  std::string_view name;   // as received (case preserved)
  std::string_view value;  // OWS-trimmed, may be empty
  HeaderToken token = HeaderToken::kUnknown;
};

/// The most field lines a parser stores, whatever its limits say: the field index (FieldLines::first_field) is
/// 16 bits wide. The byte limits bind long before (a field line takes at least 3 bytes: 33 KiB of head, nginx's
/// default buffers, hold about 11,000 of them).
inline constexpr size_t kMaxFieldLines = 0xffff;

struct ParserLimits {
  /// Lines that end within this many bytes from the start of the head are not held to max_request_line /
  /// max_field_line. nginx: client_header_buffer_size (the connection's first buffer).
  size_t initial_buffer = 0;
  /// Longest request-line, in bytes without its line terminator → 414. nginx: large_client_header_buffers size.
  size_t max_request_line = 8192;
  /// Longest field line, in bytes without its line terminator → 431. nginx: large_client_header_buffers size.
  size_t max_field_line = 8192;
  /// Largest head (leading empty lines + request-line + fields + final empty line), bytes → 431.
  /// nginx: client_header_buffer_size + large_client_header_buffers number × size (the first buffer keeps the
  /// lines it holds when the large ones take over).
  size_t max_header_section = 32768;
  /// Most field lines → 431 (capped at kMaxFieldLines). nginx: max_headers. Lines past Request::fields.size()
  /// go to the heap.
  size_t max_fields = 1000;
  /// Accept a bare LF as a line terminator (RFC 9112 §2.2 MAY). nginx does.
  bool allow_bare_lf = true;
};

/// The field lines of a parsed head (a request's or a response's) and where they are stored: the caller's
/// fixed array while they fit, else heap storage the parser grows (see "Field storage" above).
struct FieldLines {
  /// Storage for the field lines; set by the caller before parsing. Never reallocated. A head with more lines
  /// than it holds is stored in spilled_fields instead: read the lines through headers().
  std::span<HeaderField> fields;
  /// Number of field lines of the last parse (in `fields`, or in spilled_fields when more than fields.size()).
  size_t field_count = 0;
  /// All the lines of a head with more of them than `fields` holds; otherwise unused (and kept for the next
  /// such head until release_fields()).
  std::vector<HeaderField> spilled_fields;

  /// Index into the field lines of the first line with each token, or kNoField.
  static constexpr uint16_t kNoField = 0xffff;
  std::array<uint16_t, kHeaderTokenCount> first_field = no_fields();

  /// The field lines of the last parse, in order.
  std::span<const HeaderField> headers() const {
    if (field_count <= fields.size()) return fields.first(field_count);
    return std::span<const HeaderField>(spilled_fields).first(field_count);
  }
  /// The same, writable (a caller moving the head's bytes rebases the views).
  std::span<HeaderField> headers() {
    if (field_count <= fields.size()) return fields.first(field_count);
    return std::span<HeaderField>(spilled_fields).first(field_count);
  }
  /// The first field line with this token, or nullptr.
  const HeaderField* find(HeaderToken t) const {
    const uint16_t i = first_field[static_cast<size_t>(t)];
    return i == kNoField ? nullptr : &headers()[i];
  }
  /// Frees spilled_fields. A head that was stored there has no field lines afterwards: call it once done.
  void release_fields() {
    if (spilled_fields.capacity() == 0) return;
    if (field_count > fields.size()) {
      field_count = 0;
      first_field = no_fields();
    }
    std::vector<HeaderField>().swap(spilled_fields);
  }

 protected:
  static constexpr std::array<uint16_t, kHeaderTokenCount> no_fields() {
    std::array<uint16_t, kHeaderTokenCount> a{};
    a.fill(kNoField);
    return a;
  }
};

/// The parsed head. A new member must also be reset in reset() in parser.cc (the parser resets member by
/// member instead of assigning a fresh Request, which is measurably slower).
struct Request : FieldLines {
  Method method = Method::kOther;
  std::string_view method_text;  // the method token as received
  std::string_view target;       // the request-target exactly as received (what a proxy forwards)
  TargetForm target_form = TargetForm::kOrigin;
  /// Path part of the target, undecoded, starting with '/' (origin/absolute form; "/" when an absolute-form
  /// target has an empty path), "*" for asterisk-form, the authority for CONNECT. Feed it to normalize_path.
  std::string_view path;
  std::string_view query;  // after the first '?', undecoded (nginx $args); empty if none
  bool has_query = false;  // a '?' was present (even if the query is empty)
  uint8_t version_minor = 1;  // HTTP/1.<version_minor>: 0 or 1
  /// 2: the request came in an HTTP/2 stream (core/http2/; version_minor is then 1: the head reads as an
  /// HTTP/1.1 one's), else 1. $server_protocol and $request say "HTTP/2.0".
  uint8_t version_major = 1;
  /// "HTTP/1.0", "HTTP/1.1" or "HTTP/2.0" ($server_protocol).
  std::string_view protocol_text() const {
    return version_major == 2 ? "HTTP/2.0" : version_minor == 0 ? "HTTP/1.0" : "HTTP/1.1";
  }

  /// The request's host (RFC 9112 §3.2.2): the authority of an absolute-form target if there is one, else
  /// the Host field value; empty if neither. `host_name` is the same without ":port" and a trailing dot (as
  /// nginx), not yet lower-cased (server_name matching is case-insensitive).
  std::string_view host;
  std::string_view host_name;
  std::string_view host_port;  // digits after ':' in `host`, empty if none

  BodyFraming body = BodyFraming::kNone;
  std::optional<uint64_t> content_length;  // set iff body == kContentLength
  bool connection_close = false;       // Connection: close
  bool connection_keep_alive = false;  // Connection: keep-alive
  bool connection_upgrade = false;     // Connection: upgrade
  bool expect_100_continue = false;    // Expect: 100-continue in an HTTP/1.1 request (RFC 9110 §10.1.1)
  bool expect_other = false;           // Expect with another expectation (the engine MAY answer 417)

  /// Whether the connection stays open after this request (RFC 9112 §9.3): HTTP/1.1 unless "close";
  /// HTTP/1.0 only with "keep-alive" and without "close".
  bool keep_alive() const {
    if (connection_close) return false;
    return version_minor >= 1 || connection_keep_alive;
  }
  using FieldLines::find;
  /// The first field line named `name` (case-insensitive), or nullptr. Prefer find(HeaderToken).
  const HeaderField* find(std::string_view name) const;
};

enum class ParseStatus : uint8_t { kComplete, kPartial, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kPartial;
  /// kError: 400, 414, 431, 501 or 505. 0 otherwise.
  uint16_t http_status = 0;
  /// kComplete: bytes of the head (leading empty lines + request-line + fields + final empty line); the body
  /// or the next pipelined request starts at buf[consumed]. 0 otherwise.
  size_t consumed = 0;
  /// kError: a short static reason for logs ("invalid header name"); empty otherwise.
  std::string_view reason;
};

/// Parses the request head at the start of `buf` into `out` (which is reset first, except `fields`).
/// `last_len`: buf.size() at the previous call for this same request (same start, bytes only appended), or 0.
/// Returns kComplete with the head's length, kPartial if more bytes are needed, or kError with an HTTP status
/// (the engine answers it and closes the connection). Fields in `out` are valid only on kComplete.
ParseResult parse_request(std::string_view buf, Request& out, const ParserLimits& limits, size_t last_len = 0);

/// Checks a Host value or an authority (RFC 9110 §7.2, RFC 3986 §3.2.2, §3.2.3) and splits it into the host
/// name (one trailing dot removed, not lower-cased) and the port digits (may be empty). Accepted:
///   host = DNS-style name or IPv4 address: labels of ALPHA / DIGIT / "-" / "_" joined by single dots, with
///          one optional trailing dot (the RFC 3986 reg-name bytes no DNS name has — sub-delims such as "*",
///          "%" escapes, raw bytes >= 0x80 — are refused: they name no HTTP server, and a host is copied into
///          server selection, cache keys (a purge key's "*" would be a wildcard) and logs)
///        | "[" IPv6address "]" (as inet_pton reads it; no IPvFuture, no zone identifier)
///   then optionally ":" and 1-5 digits up to 65535 (an empty port is refused).
/// Anything else — "*", SP, "/", "\\", "?", "#", "@", control bytes, "..", ":" without a port, a name that
/// is empty after its dot — is false. An empty value is valid (empty name; RFC 9110 §7.2 lets a client send it).
/// `name` and `port` view `host`.
bool split_host(std::string_view host, std::string_view& name, std::string_view& port);

}  // namespace kosoku::http
