// 206 bodies (single range or multipart/byteranges); see multipart.hh.
#include "core/http/multipart.hh"

#include "absl/strings/str_cat.h"

namespace kosoku::http {

namespace {

// Per-thread (per-core) boundary sequence: a 64-bit LCG (Knuth's MMIX constants) from a fixed odd start.
thread_local uint64_t t_boundary_seq = 0x2545F4914F6CDD1Dull;

}  // namespace

void layout_partial_response(std::span<const ByteRange> ranges, uint64_t length, uint64_t now_ns, ResponseHead& h,
                             std::string& multipart_type, std::vector<BodyPiece>& pieces) {
  h.status = 206;
  if (ranges.size() == 1) {
    absl::StrAppend(&h.extra, "Content-Range: bytes ", ranges[0].first, "-", ranges[0].last, "/", length, "\r\n");
    pieces.push_back(BodyPiece{{}, ranges[0].first, ranges[0].size()});
    h.content_length = static_cast<int64_t>(ranges[0].size());
    return;
  }
  t_boundary_seq = t_boundary_seq * 6364136223846793005ull + 1442695040888963407ull;
  const std::string boundary = make_boundary(t_boundary_seq ^ now_ns);
  MultipartPlan plan = plan_multipart_byteranges(ranges, length, h.content_type, boundary);
  multipart_type = std::move(plan.content_type);
  h.content_type = multipart_type;
  for (MultipartPart& p : plan.parts) {
    pieces.push_back(BodyPiece{std::move(p.header), 0, 0});
    pieces.push_back(BodyPiece{{}, p.offset, p.length});
  }
  pieces.push_back(BodyPiece{std::move(plan.closing), 0, 0});
  h.content_length = static_cast<int64_t>(plan.content_length);
}

}  // namespace kosoku::http
