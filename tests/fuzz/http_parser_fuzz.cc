// libFuzzer target for the pure HTTP/1.1 pieces: request-head parser (one-shot and resumed), chunked decoder
// (one-shot and piecewise), path normalisation, Range, conditional and HTTP-date helpers, all over the same
// input. Each invariant failure aborts with a message. Seeds: tests/fuzz/corpus/http_parser/, dictionary:
// tests/fuzz/http.dict. Run: ./http_parser_fuzz -dict=tests/fuzz/http.dict tests/fuzz/corpus/http_parser
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/http/chars.hh"
#include "core/http/chunked.hh"
#include "core/http/conditional.hh"
#include "core/http/parser.hh"
#include "core/http/range.hh"
#include "core/http/uri.hh"
#include "tests/fuzz/fuzz_check.hh"

namespace {

using namespace kosoku::http;

bool within(std::string_view inner, std::string_view outer) {
  if (inner.empty()) return true;
  return inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

uint64_t mix(std::string_view in) {
  uint64_t h = 1469598103934665603ull;
  for (char c : in) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

void check_complete(std::string_view buf, const ParseResult& r, const Request& req, const ParserLimits& lim) {
  FUZZ_CHECK(r.consumed > 0 && r.consumed <= buf.size());
  FUZZ_CHECK(r.http_status == 0 && r.reason.empty());
  const std::string_view head = buf.substr(0, r.consumed);
  FUZZ_CHECK(r.consumed <= lim.max_header_section);
  FUZZ_CHECK(req.field_count <= lim.max_fields && req.headers().size() == req.field_count);
  // Lines past the caller's array are all in the heap storage.
  if (req.field_count > req.fields.size()) FUZZ_CHECK(req.spilled_fields.size() >= req.field_count);
  FUZZ_CHECK(req.version_minor <= 1);
  FUZZ_CHECK(within(req.method_text, head) && !req.method_text.empty());
  FUZZ_CHECK(within(req.target, head) && !req.target.empty());
  FUZZ_CHECK(within(req.query, head) && within(req.host, head));
  FUZZ_CHECK(req.path == "/" || within(req.path, head));
  FUZZ_CHECK(!req.path.empty());
  if (req.target_form == TargetForm::kOrigin || req.target_form == TargetForm::kAbsolute) {
    FUZZ_CHECK(req.path[0] == '/');
  }
  if (req.target_form == TargetForm::kAbsolute) FUZZ_CHECK(!req.host_name.empty());
  for (char c : req.target) FUZZ_CHECK(static_cast<uint8_t>(c) > 0x20 && c != 0x7f && c != '#');
  if (req.version_minor == 1) FUZZ_CHECK(req.find(HeaderToken::kHost) != nullptr);
  FUZZ_CHECK((req.body == BodyFraming::kContentLength) == req.content_length.has_value());
  if (req.body == BodyFraming::kChunked) {
    FUZZ_CHECK(req.find(HeaderToken::kContentLength) == nullptr && req.version_minor == 1);
  }
  int hosts = 0;
  std::array<bool, kHeaderTokenCount> seen{};
  for (size_t i = 0; i < req.field_count; ++i) {
    const HeaderField& f = req.headers()[i];
    FUZZ_CHECK(within(f.name, head) && within(f.value, head) && !f.name.empty());
    for (char c : f.name) FUZZ_CHECK(kosoku::http::chars::is_tchar(c));
    for (char c : f.value) FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0');
    if (!f.value.empty()) FUZZ_CHECK(!chars::is_ows(f.value.front()) && !chars::is_ows(f.value.back()));
    FUZZ_CHECK(f.token == lookup_header_token(f.name));
    const auto t = static_cast<size_t>(f.token);
    if (f.token != HeaderToken::kUnknown && !seen[t]) {
      FUZZ_CHECK(req.find(f.token) == &req.headers()[i]);
      seen[t] = true;
    }
    hosts += f.token == HeaderToken::kHost;
  }
  FUZZ_CHECK(hosts <= 1);
}

void check_error(const ParseResult& r) {
  FUZZ_CHECK(r.http_status == 400 || r.http_status == 414 || r.http_status == 431 || r.http_status == 501 ||
             r.http_status == 505);
  FUZZ_CHECK(!r.reason.empty() && r.consumed == 0);
}

bool same_fields(const Request& a, const Request& b) {
  if (a.field_count != b.field_count) return false;
  for (size_t i = 0; i < a.field_count; ++i) {
    const HeaderField& x = a.headers()[i];
    const HeaderField& y = b.headers()[i];
    if (x.name != y.name || x.value != y.value || x.token != y.token) return false;
  }
  return a.first_field == b.first_field;
}

void fuzz_parser(std::string_view in, const ParserLimits& lim, size_t split) {
  // Three sizes of the caller's array: most heads fit in the first, the others spill to the heap after 3 lines
  // or at once; the results must not depend on it.
  std::array<HeaderField, 24> s0{};
  std::array<HeaderField, 3> s1{};
  Request r0, r1, r2;
  r0.fields = s0;
  r1.fields = s1;
  const ParseResult full = parse_request(in, r0, lim);
  if (full.status == ParseStatus::kComplete) check_complete(in, full, r0, lim);
  if (full.status == ParseStatus::kError) check_error(full);

  // Prefix then resume with the last_len hint, as the engine does when bytes trickle in.
  const std::string_view prefix = in.substr(0, split);
  const ParseResult first = parse_request(prefix, r1, lim);
  if (first.status == ParseStatus::kComplete) {
    check_complete(prefix, first, r1, lim);
    FUZZ_CHECK(full.status == ParseStatus::kComplete && full.consumed == first.consumed);
    FUZZ_CHECK(same_fields(r0, r1));
    return;
  }
  if (first.status == ParseStatus::kError) {
    check_error(first);
    FUZZ_CHECK(full.status == ParseStatus::kError);
    return;
  }
  const ParseResult resumed = parse_request(in, r2, lim, split);
  if (full.status == ParseStatus::kComplete) {
    FUZZ_CHECK(resumed.status == ParseStatus::kComplete && resumed.consumed == full.consumed);
    FUZZ_CHECK(same_fields(r2, r0) && r2.target == r0.target);
    r2.release_fields();
    FUZZ_CHECK(r2.spilled_fields.capacity() == 0 && r2.headers().size() == r2.field_count);
  }
  if (resumed.status == ParseStatus::kError) {
    check_error(resumed);
    FUZZ_CHECK(full.status == ParseStatus::kError);
  }
  if (resumed.status == ParseStatus::kPartial) FUZZ_CHECK(full.status != ParseStatus::kComplete);

  if (full.status == ParseStatus::kComplete && r0.target_form != TargetForm::kAsterisk &&
      r0.target_form != TargetForm::kAuthority) {
    std::string out;
    const NormalizeResult n = normalize_path(r0.path, out);
    FUZZ_CHECK(n.ok() || n.http_status == 400);
  }
}

struct Decoded {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  std::string data;
  size_t consumed = 0;
  uint16_t http_status = 0;
};

Decoded decode(std::string_view in, size_t piece, const ChunkedLimits& lim) {
  ChunkedDecoder dec(lim);
  Decoded d;
  size_t pos = 0;
  while (pos < in.size()) {
    const size_t len = piece == 0 || piece > in.size() - pos ? in.size() - pos : piece;
    std::string_view chunk = in.substr(pos, len);
    while (!chunk.empty()) {
      const ChunkedStep s = dec.decode(chunk);
      FUZZ_CHECK(s.consumed <= chunk.size());
      FUZZ_CHECK(within(s.data, chunk) && s.data.size() <= s.consumed);
      chunk.remove_prefix(s.consumed);
      d.consumed += s.consumed;
      d.status = s.status;
      if (s.status == ChunkedStatus::kData) {
        FUZZ_CHECK(!s.data.empty());
        d.data.append(s.data);
      } else if (s.status == ChunkedStatus::kDone || s.status == ChunkedStatus::kError) {
        if (s.status == ChunkedStatus::kError) {
          FUZZ_CHECK(s.http_status == 400 || s.http_status == 413 || s.http_status == 431);
          d.http_status = s.http_status;
        }
        FUZZ_CHECK(d.data.size() == dec.body_size());
        return d;
      } else {
        FUZZ_CHECK(chunk.empty());
      }
    }
    pos += len;
  }
  if (d.status == ChunkedStatus::kData) d.status = ChunkedStatus::kNeedMore;
  FUZZ_CHECK(d.data.size() == dec.body_size());
  return d;
}

void fuzz_chunked(std::string_view in, size_t piece, uint64_t max_body) {
  ChunkedLimits lim;
  lim.max_body_size = max_body;
  lim.max_chunk_ext = 64;
  lim.max_trailer_section = 256;
  const Decoded a = decode(in, 0, lim);
  const Decoded b = decode(in, piece, lim);
  FUZZ_CHECK(a.status == b.status && a.data == b.data && a.consumed == b.consumed && a.http_status == b.http_status);
  FUZZ_CHECK(a.consumed <= in.size() && a.data.size() <= a.consumed);
  if (max_body != 0) FUZZ_CHECK(a.data.size() <= max_body);
}

bool has_dot_segment(std::string_view p) {
  size_t i = 0;
  while (i < p.size()) {
    const size_t j = p.find('/', i);
    const std::string_view seg = p.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i);
    if (seg == "." || seg == "..") return true;
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return false;
}

void fuzz_uri(std::string_view raw) {
  for (bool merge : {true, false}) {
    NormalizeOptions opts;
    opts.merge_slashes = merge;
    std::string out;
    const NormalizeResult r = normalize_path(raw, out, opts);
    if (!r.ok()) {
      FUZZ_CHECK(r.http_status == 400 && out.empty());
      continue;
    }
    FUZZ_CHECK(!out.empty() && out[0] == '/' && out.size() <= raw.size());
    FUZZ_CHECK(out.find('\0') == std::string::npos);
    FUZZ_CHECK(!has_dot_segment(out));
    if (merge) {
      FUZZ_CHECK(out.find("//") == std::string::npos);
      std::string escaped, again;
      escape_path(out, escaped);
      FUZZ_CHECK(normalize_path(escaped, again).ok() && again == out);
    }
  }
}

void fuzz_range_and_validators(std::string_view in, uint64_t h) {
  const uint64_t length = (h >> 8) % 3 == 0 ? (h >> 16) : (h >> 16) % 4096;
  std::array<ByteRange, 16> out{};
  RangeLimits lim;
  lim.max_ranges = 1 + (h % 16);
  const RangeResult r = parse_range(in, length, lim, out);
  FUZZ_CHECK(r.count <= lim.max_ranges);
  FUZZ_CHECK((r.outcome == RangeOutcome::kSatisfiable) == (r.count > 0));
  uint64_t total = 0;
  for (size_t i = 0; i < r.count; ++i) {
    FUZZ_CHECK(out[i].first <= out[i].last && out[i].last < length);
    if (r.coalesced && i > 0) FUZZ_CHECK(out[i - 1].last + 1 < out[i].first);
    total += out[i].size();
  }
  if (r.coalesced) FUZZ_CHECK(total <= length);
  if (r.count > 0) {
    const MultipartPlan plan = plan_multipart_byteranges(std::span<const ByteRange>(out.data(), r.count), length,
                                                         "text/plain", make_boundary(h));
    uint64_t sum = plan.closing.size();
    for (const MultipartPart& p : plan.parts) sum += p.header.size() + p.length;
    FUZZ_CHECK(sum == plan.content_length && plan.parts.size() == r.count);
  }

  if (const std::optional<int64_t> t = parse_http_date(in)) {
    char buf[kHttpDateLen];
    const std::string_view f = format_http_date(*t, buf);
    FUZZ_CHECK(parse_http_date(f) == t);
  }
  char et[kEtagMaxLen];
  const std::string_view etag = format_etag(static_cast<int64_t>(h), length, et);
  Validators v{etag, static_cast<int64_t>(h >> 40), (h & 1) != 0};
  (void)if_match_passes(in, etag);
  (void)if_none_match_passes(in, "W/\"x\"");
  (void)if_range_passes(in, v);
  (void)etag_weak_equal(in, etag);
  // A list containing the current tag always matches (weakly for INM, strongly for IM if both strong).
  const std::string list = std::string(in.substr(0, 16)) + ", " + std::string(etag);
  (void)if_match_passes(list, etag);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const uint64_t h = mix(in);
  const size_t split = size == 0 ? 0 : static_cast<size_t>(h % (size + 1));

  fuzz_parser(in, ParserLimits{}, split);
  ParserLimits small;
  small.max_request_line = 64;
  small.max_field_line = 48;
  small.max_header_section = 256;
  small.max_fields = 8;
  small.allow_bare_lf = (h & 2) != 0;
  fuzz_parser(in, small, split);
  // nginx's first buffer: lines ending within it are exempt from the line limits.
  small.initial_buffer = (h >> 8) % 160;
  small.max_fields = kosoku::http::kMaxFieldLines;
  fuzz_parser(in, small, split);

  fuzz_chunked(in, 1 + (h >> 3) % 7, (h & 4) ? (h >> 20) % 64 : 0);
  // The bytes after a complete head are the body when the head says chunked.
  {
    std::array<HeaderField, 24> st{};
    Request req;
    req.fields = st;
    const ParseResult r = parse_request(in, req, ParserLimits{});
    if (r.status == ParseStatus::kComplete) {
      fuzz_chunked(in.substr(r.consumed), 1 + (h >> 5) % 5, 0);
      fuzz_uri(req.path);
    }
  }
  fuzz_uri(in);
  if (!in.empty() && in[0] != '/') fuzz_uri(std::string("/") + std::string(in));
  fuzz_range_and_validators(in, h);
  return 0;
}
