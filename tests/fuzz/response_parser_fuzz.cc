// libFuzzer target for the upstream response-head parser (core/http/response_parser.hh): one-shot and resumed
// parses of the same input must agree, every span must lie inside the head, and the framing must follow RFC 9112
// §6.3 as the header documents. After a complete head the rest of the input is fed to the chunked decoder
// when the framing says chunked, piecewise, as the proxy does. Each invariant failure aborts with a message.
// Seeds: tests/fuzz/corpus/response_parser/, dictionary: tests/fuzz/http.dict.
// Run: ./response_parser_fuzz -dict=tests/fuzz/http.dict tests/fuzz/corpus/response_parser
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/http/chars.hh"
#include "core/http/chunked.hh"
#include "core/http/response_parser.hh"
#include "tests/fuzz/fuzz_check.hh"

namespace {

using namespace kosoku::http;

bool within(std::string_view inner, std::string_view outer) {
  if (inner.empty()) return true;
  return inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

void check_complete(std::string_view buf, const ResponseParseResult& r, const ParsedResponse& resp,
                    const ResponseLimits& lim, bool head_request) {
  FUZZ_CHECK(r.consumed > 0 && r.consumed <= buf.size() && r.consumed <= lim.max_head);
  FUZZ_CHECK(r.reason.empty());
  const std::string_view head = buf.substr(0, r.consumed);
  FUZZ_CHECK(head.substr(0, 7) == "HTTP/1." && head.back() == '\n');
  FUZZ_CHECK(resp.status >= 100 && resp.status <= 599);
  FUZZ_CHECK(resp.version_minor <= 1);
  FUZZ_CHECK(within(resp.reason, head));
  FUZZ_CHECK(resp.field_count <= lim.max_fields && resp.headers().size() == resp.field_count);
  if (resp.field_count > resp.fields.size()) FUZZ_CHECK(resp.spilled_fields.size() >= resp.field_count);
  std::array<bool, kHeaderTokenCount> seen{};
  bool te = false;
  for (size_t i = 0; i < resp.field_count; ++i) {
    const HeaderField& f = resp.headers()[i];
    FUZZ_CHECK(!f.name.empty() && within(f.name, head) && within(f.value, head));
    for (char c : f.name) FUZZ_CHECK(chars::is_tchar(c));
    for (char c : f.value) FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0');
    if (!f.value.empty()) FUZZ_CHECK(!chars::is_ows(f.value.front()) && !chars::is_ows(f.value.back()));
    FUZZ_CHECK(f.token == lookup_header_token(f.name));
    const auto t = static_cast<size_t>(f.token);
    if (f.token != HeaderToken::kUnknown && !seen[t]) {
      FUZZ_CHECK(resp.find(f.token) == &resp.headers()[i]);
      seen[t] = true;
    }
    te = te || f.token == HeaderToken::kTransferEncoding;
  }
  // Never both framings; chunked only in HTTP/1.1.
  FUZZ_CHECK(!(te && resp.has_content_length));
  if (te) FUZZ_CHECK(resp.version_minor == 1);
  const bool bodiless = head_request || resp.status < 200 || resp.status == 204 || resp.status == 304;
  if (bodiless) {
    FUZZ_CHECK(resp.framing == ResponseFraming::kNone);
  } else if (te) {
    FUZZ_CHECK(resp.framing == ResponseFraming::kChunked);
  } else if (resp.has_content_length) {
    FUZZ_CHECK(resp.framing == ResponseFraming::kContentLength);
    FUZZ_CHECK(resp.content_length <= static_cast<uint64_t>(INT64_MAX));
  } else {
    FUZZ_CHECK(resp.framing == ResponseFraming::kClose && !resp.reusable());
  }
  if (resp.connection_close) FUZZ_CHECK(!resp.reusable());
}

bool same_result(const ParsedResponse& a, const ParsedResponse& b) {
  if (a.status != b.status || a.version_minor != b.version_minor || a.framing != b.framing ||
      a.content_length != b.content_length || a.field_count != b.field_count || a.reason != b.reason ||
      a.connection_close != b.connection_close || a.connection_keep_alive != b.connection_keep_alive) {
    return false;
  }
  for (size_t i = 0; i < a.field_count; ++i) {
    const HeaderField& x = a.headers()[i];
    const HeaderField& y = b.headers()[i];
    if (x.name != y.name || x.value != y.value || x.token != y.token) return false;
  }
  return a.first_field == b.first_field;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: options (HEAD request, strict LF, small limits); the rest is the upstream's bytes.
  const uint8_t opts = data[0];
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string_view buf(input);
  ResponseLimits lim;
  lim.allow_bare_lf = (opts & 1) == 0;
  if (opts & 2) lim.max_head = 256;
  if (opts & 4) lim.max_fields = 4;
  const bool head_request = (opts & 8) != 0;

  std::array<HeaderField, 32> storage{};
  ParsedResponse one;
  one.fields = storage;
  const ResponseParseResult r = parse_response_head(buf, one, lim, head_request, 0);
  if (r.status == ParseStatus::kComplete) {
    check_complete(buf, r, one, lim, head_request);
  } else if (r.status == ParseStatus::kError) {
    FUZZ_CHECK(!r.reason.empty() && r.consumed == 0);
  } else {
    FUZZ_CHECK(r.consumed == 0 && buf.size() <= lim.max_head);
  }

  // Resumed: feed growing prefixes (steps chosen by the input) with last_len; the final answer must match.
  // This one has a 3-line array: longer heads spill to the heap, with the same result.
  std::array<HeaderField, 3> storage2{};
  ParsedResponse two;
  two.fields = storage2;
  size_t last = 0;
  size_t n = 0;
  ResponseParseResult r2;
  size_t step = 1 + (opts >> 4);
  while (true) {
    n = n + step > buf.size() ? buf.size() : n + step;
    r2 = parse_response_head(buf.substr(0, n), two, lim, head_request, last);
    if (r2.status != ParseStatus::kPartial || n == buf.size()) break;
    last = n;
  }
  if (r2.status == ParseStatus::kComplete) {
    // A complete head found early must be the same head the one-shot parse found.
    FUZZ_CHECK(r.status == ParseStatus::kComplete && r.consumed == r2.consumed && same_result(one, two));
  } else if (r2.status == ParseStatus::kPartial) {
    FUZZ_CHECK(r.status == ParseStatus::kPartial);
  } else {
    // An error on a prefix: either the full input fails too, or the prefix was already over a limit.
    FUZZ_CHECK(r.status == ParseStatus::kError || n > lim.max_head || (n > 0 && buf[0] != 'H'));
  }

  // The content, as the proxy reads it: chunked bodies through the decoder in small pieces.
  if (r.status == ParseStatus::kComplete && one.framing == ResponseFraming::kChunked) {
    ChunkedDecoder dec;
    std::string_view rest = buf.substr(r.consumed);
    uint64_t total = 0;
    while (!rest.empty()) {
      const std::string_view piece = rest.substr(0, step * 3);
      ChunkedStep s = dec.decode(piece);
      FUZZ_CHECK(s.consumed <= piece.size());
      rest.remove_prefix(s.consumed);
      if (s.status == ChunkedStatus::kData) {
        FUZZ_CHECK(!s.data.empty() && within(s.data, piece));
        total += s.data.size();
      } else if (s.status == ChunkedStatus::kDone || s.status == ChunkedStatus::kError) {
        break;
      } else {
        FUZZ_CHECK(s.consumed == piece.size());
      }
    }
    FUZZ_CHECK(total == dec.body_size());
  }
  return 0;
}
