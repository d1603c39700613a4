// libFuzzer target for the proxy cache's parsers of untrusted bytes (core/cache/): the on-disk entry header
// (a cache file may be truncated or corrupt), and the RFC 9111 functions over origin response fields
// (Cache-Control, Vary, the store decision, the 304 merge, stored-line iteration). Invariants abort with a
// message. Seeds: tests/fuzz/corpus/cache/. Run: ./cache_fuzz tests/fuzz/corpus/cache
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/cache_store.hh"
#include "core/cache/freshness.hh"
#include "core/http/response_parser.hh"
#include "tests/fuzz/fuzz_check.hh"

namespace {

using namespace kosoku;

void fuzz_header(std::string_view in) {
  cache::EntryMeta m;
  size_t needed = 0;
  switch (cache::decode_header(in, &m, &needed)) {
    case cache::DecodeStatus::kOk: {
      FUZZ_CHECK(m.header_size <= in.size() && m.header_size <= cache::kMaxHeader);
      // What decodes re-encodes to the same bytes.
      std::string again = cache::encode_header(m);
      FUZZ_CHECK(again == in.substr(0, m.header_size));
      break;
    }
    case cache::DecodeStatus::kNeedMore:
      FUZZ_CHECK(needed > in.size() && needed <= cache::kMaxHeader);
      break;
    case cache::DecodeStatus::kCorrupt:
      break;
  }
}

void fuzz_response(std::string_view in) {
  http::HeaderField fields[100];
  http::ParsedResponse resp;
  resp.fields = std::span<http::HeaderField>(fields, 100);
  http::ResponseLimits lim;
  lim.max_head = 65536;
  if (http::parse_response_head(in, resp, lim, false).status != http::ParseStatus::kComplete) return;
  cache::CacheLocConf conf;
  conf.valid.push_back(cache::CacheValid{{}, true, 60000});
  conf.ignore_headers = in.size() % 3 == 0 ? static_cast<uint32_t>(cache::kIgnoreSetCookie) : 0u;
  cache::StoreInput si;
  si.status = resp.status;
  si.fields = resp.headers();
  si.conf = &conf;
  si.request_time = 1700000000;
  si.response_time = 1700000001;
  cache::StoreDecision d = cache::decide_store(si);
  if (d.storable()) {
    FUZZ_CHECK(d.freshness.lifetime >= 0);
    FUZZ_CHECK(d.freshness.corrected_initial_age >= 0);
    FUZZ_CHECK(d.vary.size() <= cache::kMaxVaryNames);
    FUZZ_CHECK(d.freshness.current_age(1700000005) >= d.freshness.corrected_initial_age);
  }
  std::string lines;
  cache::stored_head_lines(resp.headers(), d.strip, lines);
  size_t count = 0;
  cache::for_each_stored_line(lines, [&](std::string_view name, std::string_view) {
    FUZZ_CHECK(!name.empty());
    FUZZ_CHECK(name.find('\n') == std::string_view::npos);
    ++count;
  });
  FUZZ_CHECK(count <= resp.field_count);
  std::string merged = cache::merge_304(lines, resp.headers(), "set-cookie");
  cache::for_each_stored_line(merged, [&](std::string_view name, std::string_view) {
    FUZZ_CHECK(name.find('\r') == std::string_view::npos);
  });
  std::string names;
  cache::parse_vary(resp.headers(), &names);
  cache::validators_match_304(resp.headers(), "\"x\"", "Tue, 14 Nov 2023 22:13:20 GMT");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.empty()) return 0;
  const char mode = in[0];
  in.remove_prefix(1);
  if (mode & 1) {
    fuzz_header(in);
  } else {
    fuzz_response(in);
  }
  return 0;
}
