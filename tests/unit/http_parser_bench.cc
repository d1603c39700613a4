// Micro-benchmark (not a test; not globbed by CMake): ns per parse_request of a typical ~300-byte browser
// request, of parse + normalize_path, and of a head with 150 small fields (more than the 64-entry array: the
// lines go to heap storage, kept between parses as in the engine). Build and run, e.g.:
//   g++ -std=c++20 -O2 -I. tests/unit/http_parser_bench.cc core/http/parser.cc core/http/field_line.cc \
//       core/http/uri.cc -o /tmp/hb && /tmp/hb
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/http/parser.hh"
#include "core/http/uri.hh"

namespace {

constexpr std::string_view kRequest =
    "GET /assets/css/site.min.css?v=20240101 HTTP/1.1\r\n"
    "Host: static.example.com\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"
    "Accept: text/css,*/*;q=0.1\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Referer: http://static.example.com/\r\n"
    "Connection: keep-alive\r\n"
    "\r\n";

template <class F>
double ns_per_call(F f, int iterations) {
  for (int i = 0; i < iterations / 10; ++i) f();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
}

}  // namespace

int main() {
  using namespace kosoku::http;
  std::array<HeaderField, 64> storage{};
  Request req;
  req.fields = storage;
  const ParserLimits lim;
  size_t sink = 0;
  const int n = 2'000'000;
  const double parse_ns = ns_per_call(
      [&] {
        const ParseResult r = parse_request(kRequest, req, lim);
        sink += r.consumed + req.field_count;
        asm volatile("" : : "r"(sink) : "memory");
      },
      n);
  char path[256];
  const double both_ns = ns_per_call(
      [&] {
        const ParseResult r = parse_request(kRequest, req, lim);
        const NormalizeResult u = normalize_path(req.path, path);
        sink += r.consumed + u.length;
        asm volatile("" : : "r"(sink) : "memory");
      },
      n);
  std::string many = "GET /many HTTP/1.1\r\nHost: static.example.com\r\n";
  for (int i = 0; i < 149; ++i) many += "X-Field-" + std::to_string(i) + ": value\r\n";
  many += "\r\n";
  const double many_ns = ns_per_call(
      [&] {
        const ParseResult r = parse_request(many, req, lim);
        sink += r.consumed + req.field_count;
        asm volatile("" : : "r"(sink) : "memory");
      },
      n / 10);
  const size_t many_fields = req.field_count;
  parse_request(kRequest, req, lim);
  std::printf("request bytes: %zu, fields: %zu\n", kRequest.size(), req.field_count);
  std::printf("parse_request:                 %.1f ns/parse (%.2f GB/s)\n", parse_ns, kRequest.size() / parse_ns);
  std::printf("parse_request + normalize_path: %.1f ns\n", both_ns);
  std::printf("parse_request, %zu fields (%zu bytes): %.1f ns/parse (%.1f ns/field)\n", many_fields, many.size(),
              many_ns, many_ns / static_cast<double>(many_fields));
  return sink == 0;
}
