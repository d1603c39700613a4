// Unit tests for core/http/uri: path normalisation (C08), splitting and escaping.
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "core/http/uri.hh"

namespace kosoku::http {
namespace {

/// The normalised path, or "<400>" when rejected.
std::string norm(std::string_view raw, NormalizeOptions opts = {}) {
  std::string out;
  const NormalizeResult r = normalize_path(raw, out, opts);
  if (!r.ok()) {
    EXPECT_EQ(r.http_status, 400);
    EXPECT_FALSE(r.reason.empty());
    EXPECT_TRUE(out.empty());
    return "<400>";
  }
  EXPECT_EQ(out.size(), r.length);
  return out;
}

TEST(NormalizePath, C08AttackTargetsNeverLeaveTheRoot) {
  // Encoded or raw ".." that climbs above the root: 400, as nginx.
  EXPECT_EQ(norm("/../outside.txt"), "<400>");
  EXPECT_EQ(norm("/%2e%2e/outside.txt"), "<400>");
  EXPECT_EQ(norm("/%2E%2E/outside.txt"), "<400>");
  EXPECT_EQ(norm("/.%2e/outside.txt"), "<400>");
  EXPECT_EQ(norm("/dir/%2e%2e/%2e%2e/outside.txt"), "<400>");
  EXPECT_EQ(norm("/..%2foutside.txt"), "<400>");  // decoded %2F is a separator, and ".." then climbs
  EXPECT_EQ(norm("/dir/..%2f..%2foutside.txt"), "<400>");
  // '\\' is an ordinary byte: one segment named "..\outside.txt" (a 404 on disk, never a traversal).
  EXPECT_EQ(norm("/..%5coutside.txt"), "/..\\outside.txt");
  EXPECT_EQ(norm("/dir/..\\..\\outside.txt"), "/dir/..\\..\\outside.txt");
  // Decoded once only: "%252e" is the literal "%2e".
  EXPECT_EQ(norm("/dir/%252e%252e/%252e%252e/outside.txt"), "/dir/%2e%2e/%2e%2e/outside.txt");
  // Overlong UTF-8 for '.' is just two bytes, not a dot.
  EXPECT_EQ(norm("/%c0%ae%c0%ae/outside.txt"), "/\xc0\xae\xc0\xae/outside.txt");
}

TEST(NormalizePath, C08Controls) {
  EXPECT_EQ(norm("/dir/../abc.txt"), "/abc.txt");
  EXPECT_EQ(norm("/./abc.txt"), "/abc.txt");
  EXPECT_EQ(norm("//abc.txt"), "/abc.txt");
  EXPECT_EQ(norm("/dir/"), "/dir/");
  EXPECT_EQ(norm("/dir"), "/dir");
  EXPECT_EQ(norm("/"), "/");
  // Fixture names.
  EXPECT_EQ(norm("/sp%20/a.txt"), "/sp /a.txt");
  EXPECT_EQ(norm("/caf%C3%A9.txt"), "/caf\xc3\xa9.txt");
  EXPECT_EQ(norm("/caf\xc3\xa9.txt"), "/caf\xc3\xa9.txt");
  EXPECT_EQ(norm("/protected/%73ecret.txt"), "/protected/secret.txt");
  EXPECT_EQ(norm("/%70rotected/secret.txt"), "/protected/secret.txt");
  EXPECT_EQ(norm("/dir/..//protected/./secret.txt"), "/protected/secret.txt");
}

TEST(NormalizePath, DotSegmentsRfc3986) {
  EXPECT_EQ(norm("/a/b/c/./../../g"), "/a/g");  // RFC 3986 §5.2.4 example
  EXPECT_EQ(norm("/a/b/.."), "/a/");
  EXPECT_EQ(norm("/a/b/../"), "/a/");
  EXPECT_EQ(norm("/a/."), "/a/");
  EXPECT_EQ(norm("/a/./"), "/a/");
  EXPECT_EQ(norm("/."), "/");
  EXPECT_EQ(norm("/.."), "<400>");
  EXPECT_EQ(norm("/a/.."), "/");
  EXPECT_EQ(norm("/a/../.."), "<400>");
  EXPECT_EQ(norm("/a/../../b"), "<400>");
  EXPECT_EQ(norm("/a/..."), "/a/...");
  EXPECT_EQ(norm("/a/.b"), "/a/.b");
  EXPECT_EQ(norm("/a/b.."), "/a/b..");
  EXPECT_EQ(norm("/a/..b/c"), "/a/..b/c");
  EXPECT_EQ(norm("/a/%2E/b"), "/a/b");
  EXPECT_EQ(norm("/a/b/%2e%2E"), "/a/");
  EXPECT_EQ(norm("/a%2fb"), "/a/b");
  EXPECT_EQ(norm("/a%2F%2Fb"), "/a/b");
}

TEST(NormalizePath, MergeSlashes) {
  EXPECT_EQ(norm("/a//b///c"), "/a/b/c");
  EXPECT_EQ(norm("///"), "/");
  EXPECT_EQ(norm("/a//"), "/a/");
  NormalizeOptions keep;
  keep.merge_slashes = false;
  EXPECT_EQ(norm("/a//b", keep), "/a//b");
  EXPECT_EQ(norm("//abc.txt", keep), "//abc.txt");
  EXPECT_EQ(norm("/a//../b", keep), "/a/b");
  EXPECT_EQ(norm("/a/b//..", keep), "/a/b/");
}

TEST(NormalizePath, InvalidInput) {
  EXPECT_EQ(norm("/%zz"), "<400>");
  EXPECT_EQ(norm("/%4"), "<400>");
  EXPECT_EQ(norm("/a%"), "<400>");
  EXPECT_EQ(norm("/%4g"), "<400>");
  EXPECT_EQ(norm("/a%00b"), "<400>");
  EXPECT_EQ(norm(std::string_view("/a\0b", 4)), "<400>");
  EXPECT_EQ(norm("a/b"), "<400>");
  EXPECT_EQ(norm(""), "<400>");
  EXPECT_EQ(norm("*"), "<400>");
  // Other decoded control bytes pass through (they are legal in file names); escape_path re-encodes them.
  EXPECT_EQ(norm("/a%0Ab"), "/a\nb");
}

TEST(NormalizePath, CallerBufferNoLongerThanInput) {
  char buf[16];
  NormalizeResult r = normalize_path("/a/./b/../c%41", std::span<char>(buf, 14));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::string_view(buf, r.length), "/a/cA");
  r = normalize_path("/abc", std::span<char>(buf, 3));
  EXPECT_EQ(r.http_status, 400);
}

TEST(SplitTarget, PathAndQuery) {
  TargetParts t = split_target("/a/b?x=1&y=%20");
  EXPECT_EQ(t.path, "/a/b");
  EXPECT_EQ(t.query, "x=1&y=%20");
  EXPECT_TRUE(t.has_query);
  t = split_target("/a?");
  EXPECT_EQ(t.path, "/a");
  EXPECT_EQ(t.query, "");
  EXPECT_TRUE(t.has_query);
  t = split_target("/a/b");
  EXPECT_EQ(t.path, "/a/b");
  EXPECT_FALSE(t.has_query);
  t = split_target("/a?b?c");
  EXPECT_EQ(t.path, "/a");
  EXPECT_EQ(t.query, "b?c");
}

TEST(EscapePath, EncodesUnsafeBytesAndRoundTrips) {
  std::string out;
  escape_path("/sp /a.txt", out);
  EXPECT_EQ(out, "/sp%20/a.txt");
  out.clear();
  escape_path("/caf\xc3\xa9.txt", out);
  EXPECT_EQ(out, "/caf%C3%A9.txt");
  out.clear();
  escape_path("/a\r\nSet-Cookie: x/%?#\"<>\\^`{|}\x7f", out);
  EXPECT_EQ(out, "/a%0D%0ASet-Cookie:%20x/%25%3F%23%22%3C%3E%5C%5E%60%7B%7C%7D%7F");
  for (std::string_view p : {"/dir/", "/sp /a.txt", "/a%b", "/x\x01y", "/..\\outside.txt", "/caf\xc3\xa9"}) {
    out.clear();
    escape_path(p, out);
    EXPECT_EQ(norm(out), p);
  }
}

}  // namespace
}  // namespace kosoku::http
