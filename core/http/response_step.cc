// The shared response step (preconditions, If-Range, Range); see response_step.hh.
#include "core/http/response_step.hh"

#include <span>

#include "absl/strings/str_cat.h"

namespace kosoku::http {

int ResponseStep::status() const {
  switch (outcome) {
    case ResponseOutcome::kFull: return 200;
    case ResponseOutcome::kPartial: return 206;
    case ResponseOutcome::kNotModified: return 304;
    case ResponseOutcome::kPreconditionFailed: return 412;
    case ResponseOutcome::kRangeNotSatisfiable: return 416;
  }
  return 200;
}

ResponseStep evaluate_response(const Request& req, const Representation& rep, config::IfModifiedSince ims) {
  ResponseStep s;
  switch (evaluate_preconditions(req, rep.validators, ims)) {
    case Precondition::kPreconditionFailed:
      s.outcome = ResponseOutcome::kPreconditionFailed;
      return s;
    case Precondition::kNotModified:
      s.outcome = ResponseOutcome::kNotModified;
      return s;
    case Precondition::kProceed:
      break;
  }
  if (rep.ranges == RangeSupport::kNone || rep.length < 0) return s;
  const uint64_t len = static_cast<uint64_t>(rep.length);
  const RangeResult rr = evaluate_range(req, rep.validators, len, RangeLimits{kMaxResponseRanges}, s.ranges);
  if (rr.outcome == RangeOutcome::kUnsatisfiable) {
    s.outcome = ResponseOutcome::kRangeNotSatisfiable;
    return s;
  }
  if (rr.outcome != RangeOutcome::kSatisfiable) return s;
  if (rep.ranges == RangeSupport::kAscending) {
    for (size_t i = 1; i < rr.count; ++i) {
      if (s.ranges[i].first <= s.ranges[i - 1].last) return s;  // the whole 200 (nginx does so too)
    }
  }
  s.outcome = ResponseOutcome::kPartial;
  s.range_count = rr.count;
  return s;
}

void apply_response_step(const ResponseStep& step, int64_t length, uint64_t now_ns, ResponseHead& h,
                         std::string& multipart_type, std::vector<BodyPiece>& pieces) {
  switch (step.outcome) {
    case ResponseOutcome::kFull:
      if (length >= 0) h.content_length = length;
      if (length > 0) pieces.push_back(BodyPiece{{}, 0, static_cast<uint64_t>(length)});
      return;
    case ResponseOutcome::kPartial:
      layout_partial_response(std::span<const ByteRange>(step.ranges, step.range_count),
                              static_cast<uint64_t>(length), now_ns, h, multipart_type, pieces);
      return;
    case ResponseOutcome::kNotModified:
      h.status = 304;
      h.content_length = -1;
      return;
    case ResponseOutcome::kPreconditionFailed:
      return;
    case ResponseOutcome::kRangeNotSatisfiable:
      h.extra = absl::StrCat("Content-Range: bytes */", length, "\r\n");
      h.etag.clear();
      h.last_modified = -1;
      return;
  }
}

}  // namespace kosoku::http
