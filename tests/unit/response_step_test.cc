// http::evaluate_response / apply_response_step (core/http/response_step.hh): the one response step of static
// files, cache hits and cache pass-through — RFC 9110 §13.2.2's precondition order, then If-Range and Range
// (§13.1.5, §14), the range support of the sender, and the head and body each outcome gives.
#include "core/http/response_step.hh"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"
#include "core/http/parser.hh"

namespace kosoku::http {
namespace {

using config::IfModifiedSince;

constexpr int64_t kMtime = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
constexpr std::string_view kDate = "Sun, 06 Nov 1994 08:49:37 GMT";
constexpr std::string_view kEarlier = "Sat, 05 Nov 1994 08:49:37 GMT";
constexpr std::string_view kEtag = "\"abc\"";

class Req {
 public:
  Req(std::string fields, std::string_view method) {
    text_ = std::string(method) + " /f HTTP/1.1\r\nHost: h.example\r\n" + fields + "\r\n";
    req_.fields = storage_;
    EXPECT_EQ(parse_request(text_, req_, {}).status, ParseStatus::kComplete) << text_;
  }
  const Request& get() const { return req_; }

 private:
  std::string text_;
  std::array<HeaderField, 16> storage_{};
  Request req_;
};

Representation rep26(RangeSupport ranges = RangeSupport::kAny, int64_t length = 26) {
  Representation r;
  r.validators.etag = kEtag;
  r.validators.last_modified = kMtime;
  r.length = length;
  r.ranges = ranges;
  return r;
}

std::string f(std::string_view name, std::string_view value) {
  return std::string(name) + ": " + std::string(value) + "\r\n";
}

struct Row {
  std::string name;
  std::string fields;
  std::string_view method;
  Representation rep;
  int status;
  size_t ranges;  // 206: how many
};

TEST(ResponseStep, EvaluationOrderAndOutcomes) {
  const std::string range = f("Range", "bytes=0-4");
  const std::vector<Row> rows = {
      {"no conditionals", "", "GET", rep26(), 200, 0},
      {"If-Match fails before If-None-Match", f("If-Match", "\"x\"") + f("If-None-Match", kEtag), "GET", rep26(), 412,
       0},
      {"If-Match passes, If-None-Match matches: 304", f("If-Match", kEtag) + f("If-None-Match", kEtag), "GET", rep26(),
       304, 0},
      {"If-Unmodified-Since fails before If-None-Match", f("If-Unmodified-Since", kEarlier) + f("If-None-Match", kEtag),
       "GET", rep26(), 412, 0},
      {"If-Match present: If-Unmodified-Since not evaluated", f("If-Match", kEtag) + f("If-Unmodified-Since", kEarlier),
       "GET", rep26(), 200, 0},
      {"If-None-Match before Range: 304", f("If-None-Match", kEtag) + range, "GET", rep26(), 304, 0},
      {"If-None-Match present: If-Modified-Since not evaluated",
       f("If-None-Match", "\"other\"") + f("If-Modified-Since", kDate), "GET", rep26(), 200, 0},
      {"If-Modified-Since before Range: 304", f("If-Modified-Since", kDate) + range, "GET", rep26(), 304, 0},
      {"If-None-Match on POST: 412", f("If-None-Match", kEtag), "POST", rep26(), 412, 0},
      {"412 before 416", f("If-Match", "\"x\"") + f("Range", "bytes=99-"), "GET", rep26(), 412, 0},
      {"preconditions pass, Range: 206", f("If-Match", kEtag) + range, "GET", rep26(), 206, 1},
      {"If-Range matches: 206", f("If-Range", kEtag) + range, "GET", rep26(), 206, 1},
      {"If-Range date matches: 206", f("If-Range", kDate) + range, "GET", rep26(), 206, 1},
      {"If-Range does not match: 200", f("If-Range", "\"old\"") + range, "GET", rep26(), 200, 0},
      {"If-Range does not match, unsatisfiable Range: 200", f("If-Range", "\"old\"") + f("Range", "bytes=99-"), "GET",
       rep26(), 200, 0},
      {"unsatisfiable: 416", f("Range", "bytes=99-"), "GET", rep26(), 416, 0},
      {"Range on HEAD: 200", range, "HEAD", rep26(), 200, 0},
      {"no range support: 200", range, "GET", rep26(RangeSupport::kNone), 200, 0},
      {"no range support, unsatisfiable: 200", f("Range", "bytes=99-"), "GET", rep26(RangeSupport::kNone), 200, 0},
      {"no range support still answers 304", f("If-None-Match", kEtag) + range, "GET", rep26(RangeSupport::kNone),
       304, 0},
      {"unknown length: no ranges", range, "GET", rep26(RangeSupport::kAny, -1), 200, 0},
      {"several ranges, any order", f("Range", "bytes=10-12,0-2"), "GET", rep26(), 206, 2},
      {"several descending ranges on a stream: 200", f("Range", "bytes=10-12,0-2"), "GET",
       rep26(RangeSupport::kAscending), 200, 0},
      {"several ascending ranges on a stream: 206", f("Range", "bytes=0-2,10-12"), "GET",
       rep26(RangeSupport::kAscending), 206, 2},
      {"overlapping ranges are merged (ascending): 206", f("Range", "bytes=10-12,0-11"), "GET",
       rep26(RangeSupport::kAscending), 206, 1},
      {"unsatisfiable on a stream: 416", f("Range", "bytes=99-"), "GET", rep26(RangeSupport::kAscending), 416, 0},
  };
  for (const Row& r : rows) {
    Req req(r.fields, r.method);
    const ResponseStep s = evaluate_response(req.get(), r.rep, IfModifiedSince::kExact);
    EXPECT_EQ(s.status(), r.status) << r.name;
    EXPECT_EQ(s.range_count, r.ranges) << r.name;
  }
}

TEST(ResponseStep, IfModifiedSinceFollowsTheDirective) {
  Req req(f("If-Modified-Since", "Mon, 07 Nov 1994 08:49:37 GMT"), "GET");
  EXPECT_EQ(evaluate_response(req.get(), rep26(), IfModifiedSince::kExact).status(), 200);
  EXPECT_EQ(evaluate_response(req.get(), rep26(), IfModifiedSince::kBefore).status(), 304);
  EXPECT_EQ(evaluate_response(req.get(), rep26(), IfModifiedSince::kOff).status(), 200);
}

// The head and body of each outcome.
struct Applied {
  ResponseHead h;
  std::string multipart_type;
  std::vector<BodyPiece> pieces;
  ResponseStep step;
};

Applied applied(const std::string& fields, const Representation& rep) {
  Applied a;
  a.h.content_type = "text/plain";
  a.h.etag = std::string(kEtag);
  a.h.last_modified = kMtime;
  a.h.extra = "Age: 3\r\n";
  Req req(fields, "GET");
  a.step = evaluate_response(req.get(), rep, IfModifiedSince::kExact);
  apply_response_step(a.step, rep.length, 1, a.h, a.multipart_type, a.pieces);
  return a;
}

TEST(ResponseStep, FullBodyIsOnePiece) {
  Applied a = applied("", rep26());
  EXPECT_EQ(a.h.status, 200);
  EXPECT_EQ(a.h.content_length, 26);
  ASSERT_EQ(a.pieces.size(), 1u);
  EXPECT_EQ(a.pieces[0].offset, 0u);
  EXPECT_EQ(a.pieces[0].length, 26u);
  EXPECT_EQ(a.h.extra, "Age: 3\r\n");

  Applied empty = applied("", rep26(RangeSupport::kAny, 0));
  EXPECT_EQ(empty.h.content_length, 0);
  EXPECT_TRUE(empty.pieces.empty());

  Applied unknown = applied("", rep26(RangeSupport::kAny, -1));
  EXPECT_EQ(unknown.h.content_length, -1);  // left as the caller set it
  EXPECT_TRUE(unknown.pieces.empty());
}

TEST(ResponseStep, PartialHasContentRange) {
  Applied a = applied(f("Range", "bytes=2-5"), rep26());
  EXPECT_EQ(a.h.status, 206);
  EXPECT_EQ(a.h.content_length, 4);
  EXPECT_EQ(a.h.extra, "Age: 3\r\nContent-Range: bytes 2-5/26\r\n");
  ASSERT_EQ(a.pieces.size(), 1u);
  EXPECT_EQ(a.pieces[0].offset, 2u);

  Applied m = applied(f("Range", "bytes=0-1,5-6"), rep26());
  EXPECT_EQ(m.h.status, 206);
  EXPECT_EQ(m.h.content_type, m.multipart_type);
  EXPECT_EQ(m.h.content_type.substr(0, 31), "multipart/byteranges; boundary=");
  EXPECT_EQ(m.pieces.size(), 5u);  // header, bytes, header, bytes, closing
}

TEST(ResponseStep, NotModifiedKeepsTheValidators) {
  Applied a = applied(f("If-None-Match", kEtag), rep26());
  EXPECT_EQ(a.h.status, 304);
  EXPECT_EQ(a.h.content_length, -1);
  EXPECT_EQ(a.h.etag, kEtag);
  EXPECT_EQ(a.h.last_modified, kMtime);
  EXPECT_TRUE(a.pieces.empty());
}

TEST(ResponseStep, UnsatisfiableCarriesOnlyContentRange) {
  Applied a = applied(f("Range", "bytes=30-"), rep26());
  EXPECT_EQ(a.step.status(), 416);
  EXPECT_EQ(a.h.extra, "Content-Range: bytes */26\r\n");
  EXPECT_TRUE(a.h.etag.empty());
  EXPECT_EQ(a.h.last_modified, -1);
  EXPECT_TRUE(a.pieces.empty());
}

TEST(ResponseStep, PreconditionFailedLeavesTheHead) {
  Applied a = applied(f("If-Match", "\"x\""), rep26());
  EXPECT_EQ(a.step.status(), 412);
  EXPECT_EQ(a.h.status, 200);
  EXPECT_EQ(a.h.extra, "Age: 3\r\n");
  EXPECT_TRUE(a.pieces.empty());
}

}  // namespace
}  // namespace kosoku::http
