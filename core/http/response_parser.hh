// HTTP/1.1 response-head parser (RFC 9112 §4-§6, RFC 9110 §5, §8.6, §15): the proxy's view of what an origin
// sent. A pure function over the receive buffer, like the request parser (parser.hh): no I/O, no exceptions;
// the status line and every field become spans into the caller's buffer and the fields go into a
// caller-provided fixed array, or heap storage for a head with more lines than it holds (FieldLines, parser.hh).
//
// Lifetime: every std::string_view in ParsedResponse points into `buf`; the caller keeps those bytes in place
// while it uses the result (the proxy copies the head before consuming it from the stream).
//
// Framing (RFC 9112 §6.3), in this order:
//   1. a response to HEAD, any 1xx, 204 and 304: no content whatever the fields say (kNone);
//   2. Transfer-Encoding: the final coding must be `chunked` (kChunked). A response with any other final
//      coding, with chunked applied twice, or with Transfer-Encoding in an HTTP/1.0 response is rejected
//      (§6.1: such framing is faulty; §6.3 item 4 would make it close-delimited, but a proxy cannot pass an
//      undecodable coding on without it, so nginx ≥ 1.23 and we answer 502 instead). Transfer-Encoding together
//      with Content-Length is rejected too (§6.3 item 3: "ought to be handled as an error"; smuggling vector);
//   3. Content-Length: 1*DIGIT ≤ 2^63-1; repeated lines or list members must all be equal (collapsed, §6.3
//      item 5), else the response is invalid (kContentLength);
//   4. otherwise the content runs until the server closes the connection (kClose).
//
// Other choices (strict, because a proxy forwards what it accepts — RFC 9112 §5.2, §11):
//   - status-line = HTTP-version SP 3DIGIT [SP reason-phrase]; the SP before an empty reason may be missing
//     (common in the wild; nginx accepts it). Versions HTTP/1.0 and HTTP/1.1 only; status 100..599 only
//     (RFC 9110 §15: other values are invalid).
//   - Line terminator CRLF, or a bare LF when ResponseLimits::allow_bare_lf (RFC 9112 §2.2 MAY, nginx does);
//     a bare CR is an error.
//   - Field lines as in requests: name must be a token directly followed by ':'; values may not contain CTLs
//     other than HTAB, or DEL. obs-fold is rejected (§5.2 lets a proxy answer 502 instead of unfolding).
//   - Limits (nginx `proxy_buffer_size`: the whole head must fit): head bytes, checked on partial input too, so
//     an endless head fails as soon as it exceeds the limit. The field count has no bound of its own beyond
//     ResponseLimits::max_fields (kMaxFieldLines by default; a field line takes at least 3 bytes of the head).
//
// Resuming: the parser keeps no state; call it again with the grown buffer and `last_len` (the size at the
// previous call, 0 the first time) so a partial head costs only a scan of the new bytes for the empty line.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/http/parser.hh"
#include "core/http/tokens.hh"

namespace kosoku::http {

/// How the response's content is delimited (RFC 9112 §6.3).
enum class ResponseFraming : uint8_t {
  kNone,           // no content (HEAD response, 1xx, 204, 304)
  kContentLength,  // ParsedResponse::content_length bytes
  kChunked,        // chunked transfer coding (ChunkedDecoder, chunked.hh)
  kClose,          // until the server closes the connection
};

struct ResponseLimits {
  /// Largest head (status line + fields + final empty line), bytes. nginx: proxy_buffer_size (4k).
  size_t max_head = 4096;
  /// Most field lines (at most kMaxFieldLines). Lines past ParsedResponse::fields.size() go to the heap.
  size_t max_fields = kMaxFieldLines;
  /// Accept a bare LF as a line terminator (RFC 9112 §2.2 MAY).
  bool allow_bare_lf = true;
};

/// A parsed response head (its field lines: FieldLines).
struct ParsedResponse : FieldLines {
  uint8_t version_minor = 1;      // HTTP/1.<version_minor>
  uint16_t status = 0;            // 100..599
  std::string_view reason;        // may be empty
  ResponseFraming framing = ResponseFraming::kClose;
  uint64_t content_length = 0;    // kContentLength only
  bool has_content_length = false;  // a valid Content-Length field was present (also for HEAD/304 responses)
  bool connection_close = false;  // Connection: close
  bool connection_keep_alive = false;  // Connection: keep-alive

  /// 1xx: an interim response; the final one follows on the same connection.
  bool interim() const { return status < 200; }
  /// Whether the connection may carry another request after this response (RFC 9112 §9.3): HTTP/1.1
  /// without "close", or HTTP/1.0 with "keep-alive"; never for close-delimited content.
  bool reusable() const {
    if (connection_close || framing == ResponseFraming::kClose) return false;
    return version_minor >= 1 || connection_keep_alive;
  }
};

struct ResponseParseResult {
  ParseStatus status = ParseStatus::kPartial;
  /// kComplete: bytes of the head including the final empty line; content starts at buf[consumed].
  size_t consumed = 0;
  /// kError: a short static reason for logs ("invalid status line"); empty otherwise.
  std::string_view reason;
};

/// Parses the response head at the start of `buf` into `out` (reset first, except `fields`).
/// `request_was_head`: the request was HEAD, so the response has no content (RFC 9110 §9.3.2).
/// Returns kComplete, kPartial (more bytes needed) or kError (the response is invalid: a proxy answers 502).
ResponseParseResult parse_response_head(std::string_view buf, ParsedResponse& out, const ResponseLimits& limits,
                                        bool request_was_head, size_t last_len = 0);

}  // namespace kosoku::http
