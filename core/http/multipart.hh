// The body of a 206 Partial Content response (RFC 9110 §14.6, §15.3.7) as a list of pieces, shared by every
// handler that answers Range requests from a representation it streams in order (static files, proxy cache
// hits and passed-through misses): one range → Content-Range and the range's bytes; several →
// multipart/byteranges (RFC 2046 §5.1, layout by range.hh's plan_multipart_byteranges) with a boundary unique
// per response, delimiter texts between the ranges, and the exact Content-Length up front.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/http/exchange.hh"
#include "core/http/range.hh"

namespace kosoku::http {

/// One piece of a response body: literal text when `length` is 0 (multipart delimiters and part headers), else
/// `length` bytes of the representation starting at `offset` (`text` empty).
struct BodyPiece {
  std::string text;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// Turns `h` into the 206 for `ranges` (count ≥ 1, in send order, from evaluate_range) of a representation
/// of `length` bytes whose type is h.content_type, and appends the body's pieces to `pieces`:
///   - one range: `Content-Range: bytes F-L/LEN` appended to h.extra, one piece;
///   - several: h.content_type becomes "multipart/byteranges; boundary=B" (the text lives in
///     `multipart_type`, which must outlive the head), each part's header text then its bytes, the closing
///     delimiter. B is 20 digits, unique per response on this thread (a per-thread sequence mixed with
///     `now_ns`).
/// h.content_length is the exact body size.
void layout_partial_response(std::span<const ByteRange> ranges, uint64_t length, uint64_t now_ns, ResponseHead& h,
                             std::string& multipart_type, std::vector<BodyPiece>& pieces);

}  // namespace kosoku::http
