// Range requests (RFC 9110 §14): parsing `Range: bytes=...` against a representation length, the abuse
// limits, Content-Range values, and the exact layout of a multipart/byteranges body (§14.6) so the engine can
// send Content-Length up front and stream each part's bytes from the file.
//
// Rules (nginx-like where the RFC leaves a choice):
//  - Only the "bytes" unit (case-insensitive) is understood; any other unit → kIgnore (send 200, §14.2 MUST).
//  - A syntactically invalid ranges-specifier (e.g. "bytes=5-3", "bytes=x", "bytes=") → kIgnore (§14.2 MAY).
//  - More range-specs than RangeLimits::max_ranges (nginx `max_ranges`) → kIgnore, as nginx ("as if there
//    were no byte ranges specified"); max_ranges 0 disables ranges.
//  - Numbers of any length are accepted and saturate at 2^64-1 (§14.1.2: "anticipate large numerals"), so
//    "bytes=0-99999999999999999999999" on 26 bytes is 0-25. last-pos is clamped to length-1. A suffix longer
//    than the representation selects all of it; "-0" is unsatisfiable. A first-pos ≥ length is unsatisfiable.
//  - The set is satisfiable if any range-spec is (§14.1.1); unsatisfiable ones are dropped. None → kUnsatisfiable
//    (416 with "Content-Range: bytes */LEN"). On an empty representation a non-zero suffix is "satisfiable"
//    but selects nothing → kIgnore (200 with the empty body).
//  - Coalescing (§15.3.7.2 MAY; the answer to the overlapping-ranges abuse named in §14.2): if any two
//    satisfiable ranges overlap or are adjacent, all ranges are sorted by first-pos and merged, so the result
//    never sends a byte twice and its total never exceeds the length. Otherwise the request order is kept.
//  - Range applies to GET only (§14.2 MUST ignore for other methods) and only when If-Range passes (§13.1.5):
//    see evaluate_range().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kosoku::http {

struct Request;
struct Validators;

/// An inclusive byte range [first, last] of the representation, last < length.
struct ByteRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t size() const { return last - first + 1; }
  bool operator==(const ByteRange&) const = default;
};

struct RangeLimits {
  size_t max_ranges = 16;  // nginx `max_ranges`; 0: ignore Range entirely
};

enum class RangeOutcome : uint8_t {
  kIgnore,         // send the whole representation (200)
  kSatisfiable,    // 206: one range → single part with Content-Range, several → multipart/byteranges
  kUnsatisfiable,  // 416 with Content-Range: bytes */length
};

struct RangeResult {
  RangeOutcome outcome = RangeOutcome::kIgnore;
  size_t count = 0;        // kSatisfiable: ranges written to `out`, in send order
  bool coalesced = false;  // the ranges were sorted and merged
};

/// Parses a Range field value for a representation of `length` bytes into `out` (capacity: the effective
/// limit is min(limits.max_ranges, out.size())). No allocation.
RangeResult parse_range(std::string_view field_value, uint64_t length, const RangeLimits& limits,
                        std::span<ByteRange> out);

/// The whole decision for `req`: kIgnore unless the method is GET, there is exactly one Range field line and
/// If-Range (if any) passes against `v`; else parse_range() of that line.
RangeResult evaluate_range(const Request& req, const Validators& v, uint64_t length, const RangeLimits& limits,
                           std::span<ByteRange> out);

/// "bytes FIRST-LAST/LENGTH" (a Content-Range value, §14.4). Returns the view of `out`.
inline constexpr size_t kContentRangeMaxLen = 6 + 20 + 1 + 20 + 1 + 20;
std::string_view format_content_range(const ByteRange& r, uint64_t length,
                                      std::span<char, kContentRangeMaxLen> out);
/// "bytes */LENGTH" (the Content-Range of a 416).
std::string_view format_unsatisfied_range(uint64_t length, std::span<char, kContentRangeMaxLen> out);

/// A multipart/byteranges boundary: 20 decimal digits of `seed` (zero-padded, like nginx's counter-based
/// boundary). The caller supplies a per-response unique value (e.g. a per-core counter mixed with a random
/// start). As in nginx, the representation's bytes are not scanned for the delimiter.
std::string make_boundary(uint64_t seed);

/// One part of a multipart/byteranges body: the delimiter and part header text, then `length` bytes of the
/// representation starting at `offset`.
struct MultipartPart {
  std::string header;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// The complete body layout: send parts[0].header, bytes [parts[0].offset, +length), parts[1].header, ...,
/// then `closing`. content_length is the exact body size.
struct MultipartPlan {
  std::string content_type;  // "multipart/byteranges; boundary=<boundary>"
  std::vector<MultipartPart> parts;
  std::string closing;       // "\r\n--<boundary>--\r\n"
  uint64_t content_length = 0;
};

/// Lays out a multipart/byteranges body (RFC 9110 §14.6, RFC 2046 §5.1) for `ranges` of a representation of
/// `length` bytes and type `content_type` (the part's Content-Type; omitted when empty). Part header text:
///   first: "--B\r\nContent-Type: T\r\nContent-Range: bytes F-L/LEN\r\n\r\n"
///   next:  "\r\n--B\r\nContent-Type: T\r\nContent-Range: bytes F-L/LEN\r\n\r\n"
MultipartPlan plan_multipart_byteranges(std::span<const ByteRange> ranges, uint64_t length,
                                        std::string_view content_type, std::string_view boundary);

}  // namespace kosoku::http
