// Incremental decoder for the chunked transfer coding (RFC 9112 §7.1). Pure: it is fed whatever bytes have
// arrived and hands back spans of body data that point into the bytes it was fed (zero copy); it keeps only
// a few integers of state between calls, so a body can arrive in any number of pieces.
//
//   chunked-body = *chunk last-chunk trailer-section CRLF
//   chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//   last-chunk   = 1*("0") [ chunk-ext ] CRLF
//
// Choices:
//  - Framing lines must end in CRLF: a bare LF or bare CR anywhere in the framing is a 400. (The head parser
//    accepts bare LF like nginx; inside chunked framing leniency is a known request-smuggling vector, so we
//    are strict there.)
//  - chunk-size: 1*HEXDIG, any number of leading zeros, value < 2^64 (else 400). SP/HTAB (BWS) may follow
//    the digits only before ';' or CRLF.
//  - chunk-ext is skipped without interpretation; its bytes (from the first byte after the digits up to the
//    CR) are bounded by ChunkedLimits::max_chunk_ext (→ 400) and may not contain CTLs other than HTAB.
//  - The trailer section is skipped (RFC 9112 §7.1.2 allows discarding it); its total size is bounded by
//    max_trailer_section (→ 431) and its bytes may not contain CTLs other than HTAB (→ 400).
//  - max_body_size (nginx client_max_body_size): the decoder answers 413 as soon as a chunk-size line would
//    take the decoded body over the limit, before any of that chunk's data is returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kosoku::http {

struct ChunkedLimits {
  uint64_t max_body_size = 0;           // decoded body bytes; 0: unlimited → 413
  uint32_t max_chunk_ext = 1024;        // bytes after chunk-size up to the CR, per chunk → 400
  uint32_t max_trailer_section = 8192;  // bytes of trailer fields, line terminators included → 431
};

enum class ChunkedStatus : uint8_t {
  kNeedMore,  // every byte fed was consumed; feed more
  kData,      // `data` holds body bytes (non-empty); call again with the rest of the input
  kDone,      // the whole chunked body, trailers included, ended; bytes after `consumed` are not body
  kError,     // `http_status` 400 / 413 / 431; the decoder stays in the error state
};

struct ChunkedStep {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  /// Bytes of the input consumed by this call (framing and data); the caller drops them before the next call.
  size_t consumed = 0;
  /// kData: body bytes, a span inside the input of this call.
  std::string_view data;
  uint16_t http_status = 0;  // kError only
  std::string_view reason;   // kError only: short static text for logs
};

/// Usage:
///   ChunkedDecoder dec(limits);
///   while (!in.empty()) {
///     ChunkedStep s = dec.decode(in);
///     in.remove_prefix(s.consumed);
///     if (s.status == ChunkedStatus::kData) sink(s.data);
///     else if (s.status == ChunkedStatus::kDone) break;   // `in` now starts the next pipelined request
///     else if (s.status == ChunkedStatus::kError) reply(s.http_status);
///     // kNeedMore: `in` is empty now
///   }
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(const ChunkedLimits& limits = {}) : limits_(limits) {}

  /// Consumes a prefix of `in` and returns at most one data span. Never consumes past the end of the body.
  ChunkedStep decode(std::string_view in);

  /// Starts a new body with the same limits.
  void reset() { *this = ChunkedDecoder(limits_); }

  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kError; }
  /// Decoded body bytes returned so far.
  uint64_t body_size() const { return body_size_; }

 private:
  enum class State : uint8_t {
    kSizeFirst,   // expecting the first HEXDIG of a chunk-size
    kSize,        // more HEXDIGs, BWS, ';' or CR
    kSizeBws,     // after SP/HTAB following the digits: more BWS, ';' or CR
    kExt,         // inside chunk-ext, skipping to CR
    kSizeLf,      // after the CR of the chunk-size line
    kData,        // chunk-data, remaining_ bytes to go
    kDataCr,      // the CR after chunk-data
    kDataLf,      // the LF after chunk-data
    kTrailerLine, // at the start of a trailer line (or of the final CRLF)
    kTrailerText, // inside a trailer field line, skipping to CR
    kTrailerLf,   // after the CR of a trailer field line
    kEndLf,       // after the CR of the final empty line
    kDone,
    kError,
  };

  ChunkedStep fail(size_t consumed, uint16_t status, std::string_view reason);

  ChunkedLimits limits_;
  State state_ = State::kSizeFirst;
  uint64_t size_ = 0;       // chunk-size being parsed
  uint64_t remaining_ = 0;  // chunk-data bytes still to come
  uint64_t body_size_ = 0;
  uint32_t line_bytes_ = 0;     // chunk-ext bytes in the current size line
  uint32_t trailer_bytes_ = 0;  // trailer-section bytes so far
};

}  // namespace kosoku::http
