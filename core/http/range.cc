// Range requests and multipart/byteranges layout; see range.hh.
#include "core/http/range.hh"

#include <cstdio>
#include <limits>

#include "core/http/chars.hh"
#include "core/http/conditional.hh"
#include "core/http/parser.hh"

namespace kosoku::http {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

/// Reads 1*DIGIT at the start of `s`, saturating at 2^64-1; advances `s`. False if there is no digit.
bool take_number(std::string_view& s, uint64_t& v) {
  size_t i = 0;
  v = 0;
  while (i < s.size() && chars::is_digit(s[i])) {
    const auto d = static_cast<uint64_t>(s[i] - '0');
    v = v > (kMax - d) / 10 ? kMax : v * 10 + d;
    ++i;
  }
  s.remove_prefix(i);
  return i > 0;
}

bool touch_or_overlap(const ByteRange& a, const ByteRange& b) {
  // Adjacent: one ends right before the other starts (no overflow: last < length ≤ 2^64-1).
  return a.first <= b.last + 1 && b.first <= a.last + 1;
}

size_t put_u64(char* p, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) p[i] = tmp[n - 1 - i];
  return n;
}

}  // namespace

RangeResult parse_range(std::string_view field_value, uint64_t length, const RangeLimits& limits,
                        std::span<ByteRange> out) {
  RangeResult ignore;
  const size_t max = limits.max_ranges < out.size() ? limits.max_ranges : out.size();
  if (max == 0) return ignore;
  const std::string_view v = chars::trim_ows(field_value);
  const size_t eq = v.find('=');
  if (eq == std::string_view::npos || !chars::iequals_lower(chars::trim_ows(v.substr(0, eq)), "bytes")) {
    return ignore;
  }
  std::string_view set = v.substr(eq + 1);
  size_t specs = 0;
  size_t n = 0;
  bool empty_selection = false;  // a satisfiable suffix on an empty representation
  while (!set.empty()) {
    const size_t comma = set.find(',');
    std::string_view spec = chars::trim_ows(set.substr(0, comma));
    set.remove_prefix(comma == std::string_view::npos ? set.size() : comma + 1);
    if (spec.empty()) continue;
    if (++specs > max) return ignore;
    ByteRange r;
    if (spec[0] == '-') {
      // suffix-range = "-" suffix-length
      spec.remove_prefix(1);
      uint64_t suffix = 0;
      if (!take_number(spec, suffix) || !spec.empty()) return ignore;
      if (suffix == 0) continue;  // unsatisfiable
      if (length == 0) {
        empty_selection = true;
        continue;
      }
      r.first = suffix >= length ? 0 : length - suffix;
      r.last = length - 1;
    } else {
      // int-range = first-pos "-" [ last-pos ]
      uint64_t first = 0, last = kMax;
      if (!take_number(spec, first) || spec.empty() || spec[0] != '-') return ignore;
      spec.remove_prefix(1);
      if (!spec.empty() && (!take_number(spec, last) || !spec.empty())) return ignore;
      if (last < first) return ignore;  // invalid range-spec (§14.1.1)
      if (first >= length) continue;    // unsatisfiable
      r.first = first;
      r.last = last < length - 1 ? last : length - 1;
    }
    out[n++] = r;
  }
  if (specs == 0) return ignore;
  if (n == 0) {
    if (empty_selection) return ignore;
    return RangeResult{RangeOutcome::kUnsatisfiable, 0, false};
  }
  RangeResult res{RangeOutcome::kSatisfiable, n, false};
  bool overlap = false;
  for (size_t i = 0; i < n && !overlap; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (touch_or_overlap(out[i], out[j])) {
        overlap = true;
        break;
      }
    }
  }
  if (!overlap) return res;
  // Insertion sort by first-pos (n ≤ max_ranges, small), then merge.
  for (size_t i = 1; i < n; ++i) {
    const ByteRange x = out[i];
    size_t j = i;
    while (j > 0 && out[j - 1].first > x.first) {
      out[j] = out[j - 1];
      --j;
    }
    out[j] = x;
  }
  size_t m = 0;
  for (size_t i = 1; i < n; ++i) {
    if (touch_or_overlap(out[m], out[i])) {
      if (out[i].last > out[m].last) out[m].last = out[i].last;
    } else {
      out[++m] = out[i];
    }
  }
  res.count = m + 1;
  res.coalesced = true;
  return res;
}

RangeResult evaluate_range(const Request& req, const Validators& v, uint64_t length, const RangeLimits& limits,
                           std::span<ByteRange> out) {
  if (req.method != Method::kGet) return {};
  const HeaderField* range = req.find(HeaderToken::kRange);
  if (range == nullptr) return {};
  for (const HeaderField& f : req.headers()) {
    if (f.token == HeaderToken::kRange && &f != range) return {};  // several Range lines: invalid, ignore
  }
  if (!range_allowed_by_if_range(req, v)) return {};
  return parse_range(range->value, length, limits, out);
}

std::string_view format_content_range(const ByteRange& r, uint64_t length,
                                      std::span<char, kContentRangeMaxLen> out) {
  char* p = out.data();
  size_t n = 0;
  for (char c : std::string_view("bytes ")) p[n++] = c;
  n += put_u64(p + n, r.first);
  p[n++] = '-';
  n += put_u64(p + n, r.last);
  p[n++] = '/';
  n += put_u64(p + n, length);
  return std::string_view(p, n);
}

std::string_view format_unsatisfied_range(uint64_t length, std::span<char, kContentRangeMaxLen> out) {
  char* p = out.data();
  size_t n = 0;
  for (char c : std::string_view("bytes */")) p[n++] = c;
  n += put_u64(p + n, length);
  return std::string_view(p, n);
}

std::string make_boundary(uint64_t seed) {
  char buf[21];
  std::snprintf(buf, sizeof(buf), "%020llu", static_cast<unsigned long long>(seed));
  return std::string(buf, 20);
}

MultipartPlan plan_multipart_byteranges(std::span<const ByteRange> ranges, uint64_t length,
                                        std::string_view content_type, std::string_view boundary) {
  // Built with std::string appends: Debian's Abseil (20220623) has its own string_view, which StrCat does
  // not take from a std::string_view.
  MultipartPlan plan;
  plan.content_type.append("multipart/byteranges; boundary=").append(boundary);
  plan.parts.reserve(ranges.size());
  char cr[kContentRangeMaxLen];
  for (size_t i = 0; i < ranges.size(); ++i) {
    MultipartPart part;
    std::string& h = part.header;
    if (i != 0) h.append("\r\n");
    h.append("--").append(boundary).append("\r\n");
    if (!content_type.empty()) h.append("Content-Type: ").append(content_type).append("\r\n");
    h.append("Content-Range: ").append(format_content_range(ranges[i], length, cr)).append("\r\n\r\n");
    part.offset = ranges[i].first;
    part.length = ranges[i].size();
    plan.content_length += h.size() + part.length;
    plan.parts.push_back(std::move(part));
  }
  plan.closing.append("\r\n--").append(boundary).append("--\r\n");
  plan.content_length += plan.closing.size();
  return plan;
}

}  // namespace kosoku::http
