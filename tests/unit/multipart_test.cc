// http::layout_partial_response: the 206 head and body pieces shared by the static handler and the proxy
// cache (one range; multipart/byteranges with a per-response boundary and the exact Content-Length).
#include "core/http/multipart.hh"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kosoku::http {
namespace {

// The body the pieces describe, over a representation `rep`.
std::string body_of(const std::vector<BodyPiece>& pieces, const std::string& rep) {
  std::string out;
  for (const BodyPiece& p : pieces) out += p.length == 0 ? p.text : rep.substr(p.offset, p.length);
  return out;
}

TEST(PartialResponse, OneRangeHasContentRangeAndOnePiece) {
  ResponseHead h;
  h.content_type = "text/plain";
  std::string mt;
  std::vector<BodyPiece> pieces;
  const ByteRange r[] = {{2, 5}};
  layout_partial_response(r, 26, 1, h, mt, pieces);
  EXPECT_EQ(h.status, 206);
  EXPECT_EQ(h.extra, "Content-Range: bytes 2-5/26\r\n");
  EXPECT_EQ(h.content_type, "text/plain");
  EXPECT_EQ(h.content_length, 4);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(body_of(pieces, "abcdefghijklmnopqrstuvwxyz"), "cdef");
}

TEST(PartialResponse, SeveralRangesAreMultipartByteranges) {
  const std::string rep = "abcdefghijklmnopqrstuvwxyz";
  ResponseHead h;
  h.content_type = "text/plain";
  std::string mt;
  std::vector<BodyPiece> pieces;
  const ByteRange r[] = {{0, 1}, {24, 25}};
  layout_partial_response(r, 26, 12345, h, mt, pieces);
  EXPECT_EQ(h.status, 206);
  EXPECT_TRUE(h.extra.empty());
  ASSERT_EQ(mt.rfind("multipart/byteranges; boundary=", 0), 0u) << mt;
  EXPECT_EQ(h.content_type, mt);
  const std::string b = mt.substr(mt.find('=') + 1);
  EXPECT_EQ(b.size(), 20u);
  const std::string expect = "--" + b + "\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/26\r\n\r\nab" +
                             "\r\n--" + b + "\r\nContent-Type: text/plain\r\nContent-Range: bytes 24-25/26\r\n\r\nyz" +
                             "\r\n--" + b + "--\r\n";
  EXPECT_EQ(body_of(pieces, rep), expect);
  EXPECT_EQ(h.content_length, static_cast<int64_t>(expect.size()));
  // The next response on this thread gets another boundary, even at the same instant.
  ResponseHead h2;
  std::string mt2;
  std::vector<BodyPiece> p2;
  layout_partial_response(r, 26, 12345, h2, mt2, p2);
  EXPECT_NE(mt2, mt);
}

}  // namespace
}  // namespace kosoku::http
