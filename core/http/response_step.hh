// The response step for a selected representation, shared by every handler that sends one (static files, proxy
// cache hits, and the origin's 200 a cache miss passes through): the client's preconditions and Range in
// RFC 9110's order — If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since (§13.2.2, by
// evaluate_preconditions), then If-Range (§13.1.5) and Range (§14, by evaluate_range) — give one outcome, and
// apply_response_step() turns it into the head's status and fields and the body's pieces:
//   200  the whole representation (Content-Length when the length is known);
//   206  one range: Content-Range; several: multipart/byteranges (layout_partial_response, multipart.hh);
//   304  no body, no Content-Length; the caller keeps the 200's other fields (ETag, Cache-Control, Vary...);
//   412  nothing: the caller answers with its error response;
//   416  "Content-Range: bytes */LEN" replaces the head's extra fields; no ETag, no Last-Modified.
// Accept-Ranges stays the caller's: it says whether the handler serves ranges for the resource at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/http/conditional.hh"
#include "core/http/multipart.hh"
#include "core/http/range.hh"

namespace kosoku::http {

/// How the handler can send ranges of the representation.
enum class RangeSupport : uint8_t {
  kNone,       // not at all (e.g. the length is unknown, as nginx's range filter needs it): Range is ignored
  kAny,        // any set of ranges (the bytes can be read in any order: a file, a stored entry)
  kAscending,  // the body goes by once, in order (a stream): several ranges only in ascending order, else 200
};

/// What the step knows of the selected representation.
struct Representation {
  Validators validators;
  int64_t length = -1;  // bytes; -1: unknown (then no ranges)
  RangeSupport ranges = RangeSupport::kAny;
};

enum class ResponseOutcome : uint8_t {
  kFull,                 // 200
  kPartial,              // 206
  kNotModified,          // 304
  kPreconditionFailed,   // 412
  kRangeNotSatisfiable,  // 416
};

/// The range set a 206 may carry at most (nginx's max_ranges, capped).
inline constexpr size_t kMaxResponseRanges = 16;

struct ResponseStep {
  ResponseOutcome outcome = ResponseOutcome::kFull;
  size_t range_count = 0;                  // kPartial: ranges[0, range_count), in send order
  ByteRange ranges[kMaxResponseRanges];
  /// The status code of the outcome (200, 206, 304, 412, 416).
  int status() const;
};

/// The outcome for `req` against `rep` (`ims`: nginx's if_modified_since). Pure: no allocation, no clock.
ResponseStep evaluate_response(const Request& req, const Representation& rep, config::IfModifiedSince ims);

/// Applies `step` for a representation of `length` bytes (-1: unknown) to `h` (a 200 head of the
/// representation, content_type set) and appends the body's pieces to `pieces` (kFull: the whole body, one
/// piece when length > 0; kPartial: the parts; else none). `multipart_type` holds a multipart Content-Type and
/// must outlive the head; `now_ns` seeds the multipart boundary.
void apply_response_step(const ResponseStep& step, int64_t length, uint64_t now_ns, ResponseHead& h,
                         std::string& multipart_type, std::vector<BodyPiece>& pieces);

}  // namespace kosoku::http
