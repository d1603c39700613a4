// Unit tests for core/http/conditional (RFC 9110 §13, dates, ETags) and core/http/range (§14, multipart).
// Conformance inputs: C11, C13, C15, C17.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/config/conf.hh"
#include "core/http/conditional.hh"
#include "core/http/parser.hh"
#include "core/http/range.hh"

namespace kosoku::http {
namespace {

using config::IfModifiedSince;

constexpr int64_t kRfcExampleTime = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110 §5.6.7)

/// Parses a request head built from `method`, `target` and extra field lines.
class Req {
 public:
  explicit Req(std::string fields, std::string_view method = "GET") {
    text_ = std::string(method) + " /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n" + fields + "\r\n";
    req_.fields = storage_;
    const ParseResult r = parse_request(text_, req_, {});
    EXPECT_EQ(r.status, ParseStatus::kComplete) << text_;
  }
  const Request& get() const { return req_; }

 private:
  std::string text_;
  std::array<HeaderField, 16> storage_{};
  Request req_;
};

std::string etag_of(int64_t mtime, uint64_t size) {
  char buf[kEtagMaxLen];
  return std::string(format_etag(mtime, size, buf));
}

std::string date_of(int64_t t) {
  char buf[kHttpDateLen];
  return std::string(format_http_date(t, buf));
}

Precondition eval(const std::string& fields, const Validators& v, IfModifiedSince ims = IfModifiedSince::kExact,
                  std::string_view method = "GET") {
  Req r(fields, method);
  return evaluate_preconditions(r.get(), v, ims);
}

TEST(Etag, NginxFormat) {
  EXPECT_EQ(etag_of(0x5f5e1000, 26), "\"5f5e1000-1a\"");
  EXPECT_EQ(etag_of(0, 0), "\"0-0\"");
  EXPECT_EQ(etag_of(1700000000, 1048576), "\"6553f100-100000\"");
  const std::string max = etag_of(-1, UINT64_MAX);
  EXPECT_EQ(max, "\"ffffffffffffffff-ffffffffffffffff\"");
  EXPECT_EQ(max.size(), kEtagMaxLen);
}

TEST(Etag, Comparison) {
  EXPECT_TRUE(etag_strong_equal("\"a\"", "\"a\""));
  EXPECT_FALSE(etag_strong_equal("W/\"a\"", "\"a\""));
  EXPECT_FALSE(etag_strong_equal("W/\"a\"", "W/\"a\""));
  EXPECT_FALSE(etag_strong_equal("\"a\"", "\"b\""));
  EXPECT_TRUE(etag_weak_equal("W/\"a\"", "\"a\""));
  EXPECT_TRUE(etag_weak_equal("W/\"a\"", "W/\"a\""));
  EXPECT_FALSE(etag_weak_equal("\"a\"", "\"b\""));
  EXPECT_FALSE(etag_weak_equal("a", "a"));  // unquoted is not an entity-tag
}

TEST(HttpDate, FormatIsImfFixdate) {
  EXPECT_EQ(date_of(kRfcExampleTime), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(date_of(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(date_of(-1), "Wed, 31 Dec 1969 23:59:59 GMT");
  EXPECT_EQ(date_of(951782400), "Tue, 29 Feb 2000 00:00:00 GMT");
  EXPECT_EQ(date_of(4102444799), "Thu, 31 Dec 2099 23:59:59 GMT");
  EXPECT_EQ(date_of(INT64_MAX), "Fri, 31 Dec 9999 23:59:59 GMT");  // clamped
}

TEST(HttpDate, ParsesAllThreeForms) {
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), kRfcExampleTime);
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), kRfcExampleTime);
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), kRfcExampleTime);
  EXPECT_EQ(parse_http_date("Sun Nov 16 08:49:37 1994"), kRfcExampleTime + 10 * 86400);
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT"), 951782400);
  EXPECT_EQ(parse_http_date("Thursday, 01-Jan-70 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_http_date("Sunday, 01-Jan-69 00:00:00 GMT"), parse_http_date("Tue, 01 Jan 2069 00:00:00 GMT"));
}

TEST(HttpDate, RejectsInvalid) {
  for (std::string_view bad : {
           "", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 nov 1994 08:49:37 GMT", "sun, 06 Nov 1994 08:49:37 GMT",
           "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1900 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
           "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT ", " Sun, 06 Nov 1994 08:49:37 GMT",
           "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
           "Sun, 00 Nov 1994 08:49:37 GMT", "Sun Nov  6 08:49:37 94", "Sunday, 06-Nov-1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 08:49:37 GMT; length=34", "Sunny, 06-Nov-94 08:49:37 GMT", "1994-11-06T08:49:37Z"}) {
    EXPECT_FALSE(parse_http_date(bad).has_value()) << bad;
  }
}

TEST(HttpDate, RoundTrip) {
  for (int64_t t : {int64_t{0}, int64_t{1}, kRfcExampleTime, int64_t{951782400}, int64_t{1700000000},
                    int64_t{253402300799}}) {
    EXPECT_EQ(parse_http_date(date_of(t)), t) << t;
  }
}

TEST(Conditional, C15WeakEtagAndListsInIfNoneMatch) {
  // Proxy object with ETag W/"c15".
  Validators cached{"W/\"c15\"", std::nullopt, true};
  EXPECT_EQ(eval("If-None-Match: W/\"c15\"\r\n", cached), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"c15\"\r\n", cached), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"x\", W/\"c15\"\r\n", cached), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"x\", \"y\"\r\n", cached), Precondition::kProceed);
  EXPECT_EQ(eval("If-None-Match: *\r\n", cached), Precondition::kNotModified);
  // Static /abc.txt with its nginx-style strong ETag.
  const std::string et = etag_of(1700000000, 26);
  Validators file{et, 1700000000, true};
  EXPECT_EQ(eval("If-None-Match: W/" + et + "\r\n", file), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"zzz\", " + et + "\r\n", file), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"zzz\"\r\n", file), Precondition::kProceed);
  // Several field lines form one list.
  EXPECT_EQ(eval("If-None-Match: \"zzz\"\r\nIf-None-Match: " + et + "\r\n", file), Precondition::kNotModified);
  // A comma inside an opaque-tag does not split it.
  Validators comma{"\"a,b\"", std::nullopt, true};
  EXPECT_EQ(eval("If-None-Match: \"a,b\"\r\n", comma), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: \"a\", \"b\"\r\n", comma), Precondition::kProceed);
}

TEST(Conditional, C17PipelinedConditionalGetIs304) {
  const std::string et = etag_of(1700000000, 26);
  Validators file{et, 1700000000, true};
  EXPECT_EQ(eval("If-None-Match: " + et + "\r\n", file), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: " + et + "\r\nConnection: close\r\n", file), Precondition::kNotModified);
  EXPECT_EQ(eval("If-None-Match: " + et + "\r\n", file, IfModifiedSince::kExact, "HEAD"),
            Precondition::kNotModified);
}

TEST(Conditional, IfNoneMatchOnUnsafeMethodsIs412) {
  Validators v{"\"a\"", 1000, true};
  EXPECT_EQ(eval("If-None-Match: \"a\"\r\n", v, IfModifiedSince::kExact, "POST"), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-None-Match: *\r\n", v, IfModifiedSince::kExact, "PUT"), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-None-Match: \"b\"\r\n", v, IfModifiedSince::kExact, "POST"), Precondition::kProceed);
}

TEST(Conditional, IfMatchUsesStrongComparison) {
  Validators v{"\"a\"", 1000, true};
  EXPECT_EQ(eval("If-Match: \"a\"\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Match: \"x\", \"a\"\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Match: *\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Match: W/\"a\"\r\n", v), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-Match: \"b\"\r\n", v), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-Match: a\r\n", v), Precondition::kPreconditionFailed);  // malformed never matches
  Validators weak{"W/\"a\"", 1000, true};
  EXPECT_EQ(eval("If-Match: \"a\"\r\n", weak), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-Match: *\r\n", weak), Precondition::kProceed);
  Validators none{"", 1000, true};
  EXPECT_EQ(eval("If-Match: \"a\"\r\n", none), Precondition::kPreconditionFailed);
  EXPECT_TRUE(if_match_passes(" * ", ""));
  EXPECT_FALSE(if_none_match_passes("*", ""));
  EXPECT_TRUE(if_none_match_passes("\"a\"", ""));
}

TEST(Conditional, PrecedenceOrderRfc9110Section13_2_2) {
  const int64_t lm = kRfcExampleTime;
  Validators v{"\"a\"", lm, true};
  const std::string lm_date = date_of(lm);
  const std::string before = date_of(lm - 10);
  const std::string after = date_of(lm + 10);
  // 1. If-Match false wins over everything, even a matching If-None-Match.
  EXPECT_EQ(eval("If-Match: \"b\"\r\nIf-None-Match: \"a\"\r\n", v), Precondition::kPreconditionFailed);
  // 2. If-Unmodified-Since is ignored when If-Match is present.
  EXPECT_EQ(eval("If-Match: \"a\"\r\nIf-Unmodified-Since: " + before + "\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Unmodified-Since: " + before + "\r\n", v), Precondition::kPreconditionFailed);
  EXPECT_EQ(eval("If-Unmodified-Since: " + lm_date + "\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Unmodified-Since: " + after + "\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-Unmodified-Since: yesterday\r\n", v), Precondition::kProceed);  // invalid: ignored
  // 3/4. If-Modified-Since is ignored when If-None-Match is present.
  EXPECT_EQ(eval("If-None-Match: \"b\"\r\nIf-Modified-Since: " + lm_date + "\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval("If-None-Match: \"a\"\r\nIf-Modified-Since: " + before + "\r\n", v), Precondition::kNotModified);
  // 4. If-Modified-Since only for GET/HEAD.
  EXPECT_EQ(eval("If-Modified-Since: " + lm_date + "\r\n", v), Precondition::kNotModified);
  EXPECT_EQ(eval("If-Modified-Since: " + lm_date + "\r\n", v, IfModifiedSince::kExact, "POST"),
            Precondition::kProceed);
}

TEST(Conditional, IfModifiedSinceModes) {
  const int64_t lm = kRfcExampleTime;
  Validators v{"\"a\"", lm, true};
  const std::string eq = "If-Modified-Since: " + date_of(lm) + "\r\n";
  const std::string later = "If-Modified-Since: " + date_of(lm + 60) + "\r\n";
  const std::string earlier = "If-Modified-Since: " + date_of(lm - 60) + "\r\n";
  // exact (nginx default): only an equal date is "not modified".
  EXPECT_EQ(eval(eq, v, IfModifiedSince::kExact), Precondition::kNotModified);
  EXPECT_EQ(eval(later, v, IfModifiedSince::kExact), Precondition::kProceed);
  EXPECT_EQ(eval(earlier, v, IfModifiedSince::kExact), Precondition::kProceed);
  // before: the RFC rule, Last-Modified <= date.
  EXPECT_EQ(eval(eq, v, IfModifiedSince::kBefore), Precondition::kNotModified);
  EXPECT_EQ(eval(later, v, IfModifiedSince::kBefore), Precondition::kNotModified);
  EXPECT_EQ(eval(earlier, v, IfModifiedSince::kBefore), Precondition::kProceed);
  // off: ignored.
  EXPECT_EQ(eval(eq, v, IfModifiedSince::kOff), Precondition::kProceed);
  // Ignored when invalid, on two lines, or without Last-Modified.
  EXPECT_EQ(eval("If-Modified-Since: Sun, 06 Nov 1994 08:49:37 UTC\r\n", v), Precondition::kProceed);
  EXPECT_EQ(eval(eq + eq, v), Precondition::kProceed);
  Validators no_lm{"\"a\"", std::nullopt, true};
  EXPECT_EQ(eval(eq, no_lm, IfModifiedSince::kBefore), Precondition::kProceed);
  EXPECT_EQ(eval("If-Unmodified-Since: " + date_of(0) + "\r\n", no_lm), Precondition::kProceed);
  // RFC 850 and asctime dates work too.
  EXPECT_EQ(eval("If-Modified-Since: Sunday, 06-Nov-94 08:49:37 GMT\r\n", v), Precondition::kNotModified);
  EXPECT_EQ(eval("If-Modified-Since: Sun Nov  6 08:49:37 1994\r\n", v), Precondition::kNotModified);
}

TEST(IfRange, EntityTagOrDate) {
  Validators v{"\"a\"", kRfcExampleTime, true};
  EXPECT_TRUE(if_range_passes("\"a\"", v));
  EXPECT_FALSE(if_range_passes("W/\"a\"", v));
  EXPECT_FALSE(if_range_passes("\"b\"", v));
  EXPECT_FALSE(if_range_passes("\"a\", \"b\"", v));
  EXPECT_TRUE(if_range_passes(date_of(kRfcExampleTime), v));
  EXPECT_FALSE(if_range_passes(date_of(kRfcExampleTime + 1), v));
  EXPECT_FALSE(if_range_passes(date_of(kRfcExampleTime - 1), v));
  EXPECT_FALSE(if_range_passes("garbage", v));
  EXPECT_FALSE(if_range_passes("", v));
  Validators weak_lm{"\"a\"", kRfcExampleTime, false};
  EXPECT_FALSE(if_range_passes(date_of(kRfcExampleTime), weak_lm));
  Validators weak_tag{"W/\"a\"", std::nullopt, true};
  EXPECT_FALSE(if_range_passes("\"a\"", weak_tag));
  EXPECT_FALSE(if_range_passes("W/\"a\"", weak_tag));
}

// ---- Range ---------------------------------------------------------------------------------------------

struct Ranges {
  RangeOutcome outcome;
  std::vector<ByteRange> ranges;
  bool coalesced = false;
};

Ranges ranges(std::string_view value, uint64_t length, size_t max_ranges = 16) {
  std::array<ByteRange, 64> out{};
  RangeLimits lim;
  lim.max_ranges = max_ranges;
  const RangeResult r = parse_range(value, length, lim, out);
  return Ranges{r.outcome, std::vector<ByteRange>(out.begin(), out.begin() + r.count), r.coalesced};
}

using BR = ByteRange;
constexpr auto kSat = RangeOutcome::kSatisfiable;
constexpr auto kUnsat = RangeOutcome::kUnsatisfiable;
constexpr auto kIgnore = RangeOutcome::kIgnore;

TEST(Range, C11MultipleAdjacentAndPartlySatisfiable) {
  Ranges r = ranges("bytes=0-4, 10-14", 26);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 4}, {10, 14}}));  // request order kept
  EXPECT_FALSE(r.coalesced);
  r = ranges("bytes=0-5, 5-10", 26);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 10}}));  // overlapping → coalesced
  EXPECT_TRUE(r.coalesced);
  r = ranges("bytes=0-1, 100-200", 26);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 1}}));
  r = ranges("bytes=100-200", 26);
  EXPECT_EQ(r.outcome, kUnsat);
  EXPECT_TRUE(r.ranges.empty());
  r = ranges("bytes=20-100", 26);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{20, 25}}));
}

TEST(Range, C13SuffixAndHugeNumbers) {
  EXPECT_EQ(ranges("bytes=-1000", 26).ranges, (std::vector<BR>{{0, 25}}));
  EXPECT_EQ(ranges("bytes=-0", 26).outcome, kUnsat);
  Ranges r = ranges("bytes=0-99999999999999999999999", 26);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 25}}));
  // The cached-object case: both suffixes select the whole 10-byte body, coalesced into one range.
  r = ranges("bytes=-1000,-9223372036854774808", 10);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 9}}));
  EXPECT_EQ(ranges("bytes=99999999999999999999999-", 26).outcome, kUnsat);
  EXPECT_EQ(ranges("bytes=-99999999999999999999999", 26).ranges, (std::vector<BR>{{0, 25}}));
  EXPECT_EQ(ranges("bytes=18446744073709551615-18446744073709551615", UINT64_MAX).ranges,
            (std::vector<BR>{}));  // first == length: unsatisfiable
  EXPECT_EQ(ranges("bytes=18446744073709551614-", UINT64_MAX).ranges,
            (std::vector<BR>{{UINT64_MAX - 1, UINT64_MAX - 1}}));
}

TEST(Range, SingleForms) {
  EXPECT_EQ(ranges("bytes=0-", 26).ranges, (std::vector<BR>{{0, 25}}));
  EXPECT_EQ(ranges("bytes=25-", 26).ranges, (std::vector<BR>{{25, 25}}));
  EXPECT_EQ(ranges("bytes=26-", 26).outcome, kUnsat);
  EXPECT_EQ(ranges("bytes=0-0", 26).ranges, (std::vector<BR>{{0, 0}}));
  EXPECT_EQ(ranges("bytes=-1", 26).ranges, (std::vector<BR>{{25, 25}}));
  EXPECT_EQ(ranges("bytes=-26", 26).ranges, (std::vector<BR>{{0, 25}}));
  EXPECT_EQ(ranges("BYTES=1-2", 26).ranges, (std::vector<BR>{{1, 2}}));
  EXPECT_EQ(ranges("  bytes=1-2  ", 26).ranges, (std::vector<BR>{{1, 2}}));
  EXPECT_EQ(ranges("bytes=1-2,", 26).ranges, (std::vector<BR>{{1, 2}}));
  EXPECT_EQ(ranges("bytes=,1-2", 26).ranges, (std::vector<BR>{{1, 2}}));
}

TEST(Range, IgnoredValues) {
  for (std::string_view v : {"items=0-1", "bytes", "bytes=", "bytes=,", "bytes=5-3", "bytes=abc", "bytes=1-2-3",
                             "bytes=1 - 2", "bytes=--1", "bytes=-", "bytes=1-x", "bytes=0x1-2", "bytes 0-1",
                             "bytes=0-1,5-3", "bytes=+1-2"}) {
    EXPECT_EQ(ranges(v, 26).outcome, kIgnore) << v;
  }
}

TEST(Range, CoalescingRules) {
  // Non-overlapping, non-adjacent: request order kept.
  Ranges r = ranges("bytes=10-14, 0-4", 26);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{10, 14}, {0, 4}}));
  EXPECT_FALSE(r.coalesced);
  // Adjacent ranges merge (no byte sent twice, fewer parts), sorted.
  r = ranges("bytes=5-9, 0-4", 26);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 9}}));
  EXPECT_TRUE(r.coalesced);
  // Mixed: everything is sorted and merged once any pair overlaps.
  r = ranges("bytes=20-25, 0-2, 1-3, 10-11", 26);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 3}, {10, 11}, {20, 25}}));
  // Many overlapping copies of the whole representation collapse to one range.
  r = ranges("bytes=0-,0-,0-,0-,0-,0-,0-,0-", 26);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 25}}));
  // Contained range.
  r = ranges("bytes=0-20, 5-6", 26);
  EXPECT_EQ(r.ranges, (std::vector<BR>{{0, 20}}));
}

TEST(Range, MaxRanges) {
  std::string v = "bytes=0-0";
  for (int i = 1; i < 16; ++i) v += "," + std::to_string(2 * i) + "-" + std::to_string(2 * i);
  Ranges r = ranges(v, 100);
  EXPECT_EQ(r.outcome, kSat);
  EXPECT_EQ(r.ranges.size(), 16u);
  EXPECT_EQ(r.ranges[15], (BR{30, 30}));
  v += ",40-40";
  EXPECT_EQ(ranges(v, 100).outcome, kIgnore);  // 17 > max_ranges: as if no Range (nginx)
  EXPECT_EQ(ranges("bytes=0-1", 26, 0).outcome, kIgnore);
  EXPECT_EQ(ranges("bytes=0-1,3-4", 26, 1).outcome, kIgnore);
  // Unsatisfiable specs count too.
  EXPECT_EQ(ranges("bytes=100-,0-1", 26, 1).outcome, kIgnore);
}

TEST(Range, EmptyRepresentation) {
  EXPECT_EQ(ranges("bytes=0-", 0).outcome, kUnsat);
  EXPECT_EQ(ranges("bytes=-5", 0).outcome, kIgnore);
  EXPECT_EQ(ranges("bytes=-0", 0).outcome, kUnsat);
}

TEST(Range, EvaluateRangeForRequest) {
  std::array<ByteRange, 16> out{};
  Validators v{"\"a\"", kRfcExampleTime, true};
  {
    Req r("Range: bytes=0-4\r\n");
    const RangeResult res = evaluate_range(r.get(), v, 26, {}, out);
    EXPECT_EQ(res.outcome, kSat);
    EXPECT_EQ(out[0], (BR{0, 4}));
  }
  {
    Req r("Range: bytes=0-4\r\n", "HEAD");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kIgnore);
  }
  {
    Req r("Range: bytes=0-4\r\nIf-Range: \"a\"\r\n");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kSat);
  }
  {
    Req r("Range: bytes=0-4\r\nIf-Range: \"b\"\r\n");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kIgnore);
  }
  {
    Req r("Range: bytes=0-4\r\nIf-Range: " + date_of(kRfcExampleTime) + "\r\n");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kSat);
  }
  {
    Req r("Range: bytes=0-4\r\nRange: bytes=5-6\r\n");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kIgnore);
  }
  {
    Req r("Range: bytes=100-200\r\n");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kUnsat);
  }
  {
    Req r("");
    EXPECT_EQ(evaluate_range(r.get(), v, 26, {}, out).outcome, kIgnore);
  }
}

TEST(Range, ContentRangeValues) {
  char buf[kContentRangeMaxLen];
  EXPECT_EQ(format_content_range({0, 4}, 26, buf), "bytes 0-4/26");
  EXPECT_EQ(format_content_range({20, 25}, 26, buf), "bytes 20-25/26");
  EXPECT_EQ(format_unsatisfied_range(26, buf), "bytes */26");
  const std::string_view max = format_content_range({UINT64_MAX - 1, UINT64_MAX - 1}, UINT64_MAX, buf);
  EXPECT_EQ(max, "bytes 18446744073709551614-18446744073709551614/18446744073709551615");
  EXPECT_EQ(max.size(), kContentRangeMaxLen);
}

TEST(Range, BoundaryIsTwentyDigits) {
  EXPECT_EQ(make_boundary(42), "00000000000000000042");
  EXPECT_EQ(make_boundary(UINT64_MAX), "18446744073709551615");
}

TEST(Range, C11MultipartLayoutAndExactLength) {
  const std::string abc = "abcdefghijklmnopqrstuvwxyz";
  const std::vector<BR> rs = {{0, 4}, {10, 14}};
  const std::string b = make_boundary(1);
  const MultipartPlan plan = plan_multipart_byteranges(rs, abc.size(), "text/plain", b);
  EXPECT_EQ(plan.content_type, "multipart/byteranges; boundary=00000000000000000001");
  ASSERT_EQ(plan.parts.size(), 2u);
  EXPECT_EQ(plan.parts[0].header,
            "--00000000000000000001\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-4/26\r\n\r\n");
  EXPECT_EQ(plan.parts[1].header,
            "\r\n--00000000000000000001\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-14/26\r\n\r\n");
  EXPECT_EQ(plan.parts[1].offset, 10u);
  EXPECT_EQ(plan.parts[1].length, 5u);
  EXPECT_EQ(plan.closing, "\r\n--00000000000000000001--\r\n");
  std::string body;
  for (const MultipartPart& p : plan.parts) body += p.header + abc.substr(p.offset, p.length);
  body += plan.closing;
  EXPECT_EQ(body,
            "--00000000000000000001\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-4/26\r\n\r\nabcde"
            "\r\n--00000000000000000001\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-14/26\r\n\r\nklmno"
            "\r\n--00000000000000000001--\r\n");
  EXPECT_EQ(plan.content_length, body.size());
  EXPECT_EQ(plan.content_length, 204u);

  const MultipartPlan untyped = plan_multipart_byteranges(rs, abc.size(), "", b);
  EXPECT_EQ(untyped.parts[0].header, "--00000000000000000001\r\nContent-Range: bytes 0-4/26\r\n\r\n");
  EXPECT_EQ(untyped.content_length, plan.content_length - 2 * std::string("Content-Type: text/plain\r\n").size());
}

}  // namespace
}  // namespace kosoku::http
