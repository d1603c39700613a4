// `expires` (core/headers/expires.hh): its argument syntax, the fields for each kind at a fixed time, and the
// removal of a head's own Expires and Cache-Control; plus its config errors and notices of the loader.
#include "core/headers/expires.hh"

#include <gtest/gtest.h>

#include <string>

#include "core/config/loader.hh"

namespace kosoku::headers {
namespace {

constexpr int64_t kNow = 1764633600;  // Tue, 02 Dec 2025 00:00:00 GMT

std::string fields(std::string_view a, std::string_view b = {}, int64_t last_modified = -1) {
  Expires e;
  EXPECT_TRUE(parse_expires(a, b, &e)) << a << " " << b;
  std::string out;
  append_expires_fields(e, kNow, last_modified, out);
  return out;
}

TEST(Expires, ParsesNginxForms) {
  Expires e;
  EXPECT_TRUE(parse_expires("off", {}, &e));
  EXPECT_EQ(e.kind, Expires::Kind::kOff);
  EXPECT_TRUE(parse_expires("1h30m", {}, &e));
  EXPECT_EQ(e.kind, Expires::Kind::kAccess);
  EXPECT_EQ(e.seconds, 5400);
  EXPECT_TRUE(parse_expires("-1", {}, &e));
  EXPECT_EQ(e.seconds, -1);
  EXPECT_TRUE(parse_expires("modified", "2d", &e));
  EXPECT_EQ(e.kind, Expires::Kind::kModified);
  EXPECT_EQ(e.seconds, 2 * 86400);
  EXPECT_TRUE(parse_expires("@15h30m", {}, &e));
  EXPECT_EQ(e.kind, Expires::Kind::kDaily);
  EXPECT_EQ(e.seconds, 15 * 3600 + 30 * 60);
  for (auto [a, b] : {std::pair<std::string_view, std::string_view>{"soon", {}}, {"@25h", {}}, {"1h", "2h"},
                      {"modified", "x"}, {"", {}}, {"-", {}}, {"1ms", {}}}) {
    EXPECT_FALSE(parse_expires(a, b, &e)) << a << " " << b;
  }
}

TEST(Expires, FieldsPerKind) {
  EXPECT_EQ(fields("off"), "");
  EXPECT_EQ(fields("epoch"), "Expires: Thu, 01 Jan 1970 00:00:01 GMT\r\nCache-Control: no-cache\r\n");
  EXPECT_EQ(fields("max"), "Expires: Thu, 31 Dec 2037 23:55:55 GMT\r\nCache-Control: max-age=315360000\r\n");
  EXPECT_EQ(fields("1h"), "Expires: Tue, 02 Dec 2025 01:00:00 GMT\r\nCache-Control: max-age=3600\r\n");
  EXPECT_EQ(fields("-1"), "Expires: Mon, 01 Dec 2025 23:59:59 GMT\r\nCache-Control: no-cache\r\n");
  // modified: from Last-Modified when there is one (past: no-cache), else from now.
  EXPECT_EQ(fields("modified", "1h", kNow - 7200), "Expires: Mon, 01 Dec 2025 23:00:00 GMT\r\nCache-Control: no-cache\r\n");
  EXPECT_EQ(fields("modified", "3h", kNow - 7200), "Expires: Tue, 02 Dec 2025 01:00:00 GMT\r\nCache-Control: max-age=3600\r\n");
  EXPECT_EQ(fields("modified", "1h"), "Expires: Tue, 02 Dec 2025 01:00:00 GMT\r\nCache-Control: max-age=3600\r\n");
}

TEST(Expires, EraseCacheFieldsKeepsTheRest) {
  std::string h = "HTTP/1.1 200 OK\r\nServer: kosoku\r\nexpires: x\r\nX-A: 1\r\nCache-Control: a\r\n"
                  "Cache-Control: b\r\nX-Expires: keep\r\n";
  erase_cache_fields(h);
  EXPECT_EQ(h, "HTTP/1.1 200 OK\r\nServer: kosoku\r\nX-A: 1\r\nX-Expires: keep\r\n");
}

std::string load_error(const std::string& text) {
  config::LoadResult r = config::load_from_string(text, "t.conf");
  return r.ok() ? std::string() : r.error.message;
}

TEST(Expires, ConfigErrors) {
  EXPECT_EQ(load_error("http { expires soon; }"), "t.conf:1:16: invalid value \"soon\" in \"expires\" directive");
  EXPECT_EQ(load_error("http { expires modified x; }"), "t.conf:1:25: invalid value \"x\" in \"expires\" directive");
  EXPECT_EQ(load_error("http { expires 1h; expires 2h; }"), "t.conf:1:20: \"expires\" directive is duplicate");
  EXPECT_EQ(load_error("http { expires $nope; }"), "t.conf:1:16: unknown \"nope\" variable");
  EXPECT_EQ(load_error("http { server { listen 8080; expires max; location / { expires -1; } } }"), "");
}

TEST(NoEffectDirectives, EachIsANoticeNamingItsLine) {
  config::LoadResult r = config::load_from_string(
      "events { multi_accept on; }\nhttp { types_hash_max_size 2048; server { listen 8080; } }", "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_EQ(r.notices.size(), 2u);
  EXPECT_EQ(r.notices[0], "t.conf:1:10: \"multi_accept\" directive has no effect in kosoku: each loop takes every "
                          "connection its multishot accept reports");
  EXPECT_EQ(r.notices[1].rfind("t.conf:2:8: \"types_hash_max_size\" directive has no effect in kosoku: ", 0), 0u);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(load_error("events { multi_accept maybe; }"),
            "t.conf:1:23: invalid value \"maybe\" in \"multi_accept\" directive, it must be \"on\" or \"off\"");
  EXPECT_EQ(load_error("http { server { listen 8080; location /x root /tmp; } }"),
            "t.conf:1:30: directive \"location\" has no opening \"{\"");
}

}  // namespace
}  // namespace kosoku::headers
