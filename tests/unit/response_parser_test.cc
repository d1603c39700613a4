// Unit tests for core/http/response_parser (the proxy's upstream response-head parser).
#include <array>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "core/http/response_parser.hh"

namespace kosoku::http {
namespace {

class ResponseParserTest : public ::testing::Test {
 protected:
  ResponseParseResult parse(std::string_view s, bool head = false, const ResponseLimits& lim = {},
                            size_t last_len = 0) {
    buf_.assign(s);
    resp_.fields = storage_;
    return parse_response_head(buf_, resp_, lim, head, last_len);
  }
  void expect_error(std::string_view s, const ResponseLimits& lim = {}) {
    const ResponseParseResult r = parse(s, false, lim);
    EXPECT_EQ(r.status, ParseStatus::kError) << s;
    EXPECT_FALSE(r.reason.empty()) << s;
  }
  ResponseFraming framing_of(std::string_view s, bool head = false) {
    const ResponseParseResult r = parse(s, head);
    EXPECT_EQ(r.status, ParseStatus::kComplete) << s << " reason: " << r.reason;
    return resp_.framing;
  }
  std::string value(HeaderToken t) const {
    const HeaderField* f = resp_.find(t);
    return f ? std::string(f->value) : "<none>";
  }

  std::string buf_;
  std::array<HeaderField, 16> storage_{};
  ParsedResponse resp_;
};

constexpr std::string_view kOrigin =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/html; charset=utf-8\r\n"
    "Content-Length: 12\r\n"
    "ETag: \"abc\"\r\n"
    "X-Custom:   spaced value  \r\n"
    "\r\n"
    "hello world!";

TEST_F(ResponseParserTest, StatusLineFieldsAndContentLength) {
  const ResponseParseResult r = parse(kOrigin);
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.reason;
  EXPECT_EQ(r.consumed, kOrigin.size() - 12);  // the content starts right after the head
  EXPECT_EQ(resp_.status, 200);
  EXPECT_EQ(resp_.reason, "OK");
  EXPECT_EQ(resp_.version_minor, 1);
  EXPECT_EQ(resp_.field_count, 4u);
  EXPECT_EQ(resp_.framing, ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.content_length, 12u);
  EXPECT_TRUE(resp_.has_content_length);
  EXPECT_EQ(value(HeaderToken::kContentType), "text/html; charset=utf-8");
  EXPECT_EQ(value(HeaderToken::kEtag), "\"abc\"");
  EXPECT_EQ(resp_.fields[3].name, "X-Custom");
  EXPECT_EQ(resp_.fields[3].value, "spaced value");  // OWS trimmed
  EXPECT_TRUE(resp_.reusable());
  EXPECT_FALSE(resp_.interim());
}

TEST_F(ResponseParserTest, ReasonPhraseMayBeEmptyOrMissing) {
  EXPECT_EQ(framing_of("HTTP/1.1 204\r\n\r\n"), ResponseFraming::kNone);
  EXPECT_EQ(resp_.status, 204);
  EXPECT_EQ(resp_.reason, "");
  EXPECT_EQ(framing_of("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n"), ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.status, 404);
  EXPECT_EQ(framing_of("HTTP/1.0 502 Bad Gateway From Far Away\r\n\r\n"), ResponseFraming::kClose);
  EXPECT_EQ(resp_.reason, "Bad Gateway From Far Away");
  EXPECT_EQ(resp_.version_minor, 0);
}

TEST_F(ResponseParserTest, Framing) {
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), ResponseFraming::kChunked);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), ResponseFraming::kChunked);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n"), ResponseFraming::kChunked);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n"), ResponseFraming::kClose);
  EXPECT_FALSE(resp_.reusable());  // close-delimited content ends the connection
  // No content, whatever the fields say (RFC 9112 §6.3 item 1).
  EXPECT_EQ(framing_of("HTTP/1.1 304 Not Modified\r\nContent-Length: 26\r\n\r\n"), ResponseFraming::kNone);
  EXPECT_TRUE(resp_.has_content_length);
  EXPECT_EQ(resp_.content_length, 26u);
  EXPECT_EQ(framing_of("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"), ResponseFraming::kNone);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", /*head=*/true), ResponseFraming::kNone);
  EXPECT_EQ(resp_.content_length, 100u);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\n\r\n", /*head=*/true), ResponseFraming::kNone);
}

TEST_F(ResponseParserTest, InterimResponses) {
  const ResponseParseResult r = parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_TRUE(resp_.interim());
  EXPECT_EQ(resp_.status, 100);
  EXPECT_EQ(resp_.framing, ResponseFraming::kNone);
  EXPECT_EQ(r.consumed, 25u);  // the final response follows
  const std::string rest = buf_.substr(r.consumed);
  const ResponseParseResult r2 = parse(rest);
  ASSERT_EQ(r2.status, ParseStatus::kComplete);
  EXPECT_EQ(resp_.status, 200);
  EXPECT_EQ(framing_of("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"), ResponseFraming::kNone);
  EXPECT_TRUE(resp_.interim());
}

TEST_F(ResponseParserTest, ContentLengthRules) {
  // Identical repeated values are collapsed (RFC 9110 §8.6, RFC 9112 §6.3 item 5).
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
            ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.content_length, 5u);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n"), ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.content_length, 7u);
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.content_length, 0u);
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n");
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n"),
            ResponseFraming::kContentLength);
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n");
}

TEST_F(ResponseParserTest, TransferEncodingRules) {
  // Both framings: an error for a proxy (smuggling; RFC 9112 §6.3 item 3).
  expect_error("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");             // not chunked-final
  expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n");  // applied twice
  expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;q=1\r\n\r\n");
  expect_error("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");           // not in HTTP/1.0
}

TEST_F(ResponseParserTest, ConnectionAndReuse) {
  framing_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(resp_.connection_close);
  EXPECT_FALSE(resp_.reusable());
  framing_of("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
  EXPECT_FALSE(resp_.reusable());  // HTTP/1.0 without keep-alive
  framing_of("HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: Keep-Alive\r\n\r\n");
  EXPECT_TRUE(resp_.connection_keep_alive);
  EXPECT_TRUE(resp_.reusable());
  framing_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\n\r\n");
  EXPECT_TRUE(resp_.reusable());
}

TEST_F(ResponseParserTest, InvalidStatusLines) {
  expect_error("HTTP/2.0 200 OK\r\n\r\n");
  expect_error("HTTP/1.2 200 OK\r\n\r\n");
  expect_error("http/1.1 200 OK\r\n\r\n");
  expect_error("HTTP/1.1 20 OK\r\n\r\n");
  expect_error("HTTP/1.1 2000 OK\r\n\r\n");
  expect_error("HTTP/1.1 099 Low\r\n\r\n");
  expect_error("HTTP/1.1 600 High\r\n\r\n");
  expect_error("HTTP/1.1  200 OK\r\n\r\n");
  expect_error("HTTP/1.1 200\tOK\r\n\r\n");
  expect_error("HTTP/1.1 200 O\x01K\r\n\r\n");
  expect_error("ICY 200 OK\r\n\r\n");
  expect_error("\r\nHTTP/1.1 200 OK\r\n\r\n");  // no leading empty lines in responses
}

TEST_F(ResponseParserTest, InvalidFieldLines) {
  expect_error("HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n");  // obs-fold (RFC 9112 §5.2: 502)
  expect_error("HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n");            // whitespace before ':'
  expect_error("HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\n: 1\r\n\r\n");
  expect_error("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n");
  expect_error(std::string_view("HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n", 29));
  expect_error("HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n");  // bare CR
  expect_error("HTTP/1.1 200 OK\r\nX-A: a\x7f\r\n\r\n");
}

TEST_F(ResponseParserTest, BareLineFeeds) {
  EXPECT_EQ(framing_of("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"), ResponseFraming::kContentLength);
  EXPECT_EQ(value(HeaderToken::kContentLength), "2");
  ResponseLimits strict;
  strict.allow_bare_lf = false;
  expect_error("HTTP/1.1 200 OK\nContent-Length: 2\n\n", strict);
}

TEST_F(ResponseParserTest, PartialInputByteByByte) {
  const std::string full(kOrigin.substr(0, kOrigin.size() - 12));
  size_t last = 0;
  for (size_t n = 1; n < full.size(); ++n) {
    const ResponseParseResult r = parse(full.substr(0, n), false, {}, last);
    ASSERT_EQ(r.status, ParseStatus::kPartial) << n;
    last = n;
  }
  const ResponseParseResult r = parse(full, false, {}, last);
  ASSERT_EQ(r.status, ParseStatus::kComplete);
  EXPECT_EQ(r.consumed, full.size());
  EXPECT_EQ(resp_.content_length, 12u);
  EXPECT_EQ(value(HeaderToken::kEtag), "\"abc\"");
}

TEST_F(ResponseParserTest, Limits) {
  ResponseLimits lim;
  lim.max_head = 64;
  const std::string big = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(100, 'a') + "\r\n\r\n";
  expect_error(big, lim);
  // Also while the head is still incomplete: an endless head fails as soon as it is too large.
  const ResponseParseResult r = parse(big.substr(0, 80), false, lim);
  EXPECT_EQ(r.status, ParseStatus::kError);
  lim = {};
  lim.max_fields = 3;
  expect_error("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", lim);
  // A wrong first byte fails at once, without waiting for a head that will never end.
  EXPECT_EQ(parse("<html>").status, ParseStatus::kError);
  EXPECT_EQ(parse("HTT").status, ParseStatus::kPartial);
}

// nginx has no bound on the number of an upstream's header fields: only the head's bytes (proxy_buffer_size)
// count. Lines past the caller's array (16 here) go to heap storage.
TEST_F(ResponseParserTest, ManyFieldsWithinTheByteLimitSpillToTheHeap) {
  std::string many = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 300; ++i) many += "X-F" + std::to_string(i) + ": v" + std::to_string(i) + "\r\n";
  many += "ETag: \"late\"\r\nContent-Length: 2\r\n\r\n";
  ASSERT_LT(many.size(), 4096u);  // within the default proxy_buffer_size
  const ResponseParseResult r = parse(many);
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.reason;
  EXPECT_EQ(r.consumed, many.size());
  ASSERT_EQ(resp_.field_count, 302u);
  ASSERT_EQ(resp_.headers().size(), 302u);
  EXPECT_EQ(resp_.headers()[0].name, "X-F0");
  EXPECT_EQ(resp_.headers()[15].value, "v15");
  EXPECT_EQ(resp_.headers()[16].value, "v16");
  EXPECT_EQ(resp_.headers()[299].value, "v299");
  EXPECT_EQ(value(HeaderToken::kEtag), "\"late\"");  // found through first_field past the array
  EXPECT_EQ(resp_.framing, ResponseFraming::kContentLength);
  EXPECT_EQ(resp_.content_length, 2u);
  // The same head a byte over the limit: too big, whatever its field count.
  ResponseLimits lim;
  lim.max_head = many.size() - 1;
  expect_error(many, lim);
  // The heap storage is kept for the next head and freed on request; a head that fits uses the array again.
  framing_of("HTTP/1.1 204 No Content\r\nA: 1\r\n\r\n");
  EXPECT_EQ(resp_.headers().data(), storage_.data());
  EXPECT_EQ(value(HeaderToken::kEtag), "<none>");
  resp_.release_fields();
  EXPECT_EQ(resp_.spilled_fields.capacity(), 0u);
  EXPECT_EQ(resp_.field_count, 1u);  // lines in the caller's array stay
}

TEST_F(ResponseParserTest, FirstFieldIndexAndDuplicates) {
  framing_of("HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: Accept\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(value(HeaderToken::kSetCookie), "a=1");
  int cookies = 0;
  for (const HeaderField& f : resp_.headers()) cookies += f.token == HeaderToken::kSetCookie;
  EXPECT_EQ(cookies, 2);
  EXPECT_EQ(value(HeaderToken::kVary), "Accept");
  EXPECT_EQ(resp_.find(HeaderToken::kLocation), nullptr);
}

}  // namespace
}  // namespace kosoku::http
