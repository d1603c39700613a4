// RFC 9111 rules of core/cache/freshness.hh, each with exact values.
#include "core/cache/freshness.hh"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/http/conditional.hh"
#include "core/http/parser.hh"
#include "core/http/tokens.hh"

namespace kosoku::cache {
namespace {

using http::HeaderField;

// A response head as header fields (tokens set like the response parser does).
class Fields {
 public:
  Fields(std::initializer_list<std::pair<std::string, std::string>> kv) : kv_(kv) {
    for (const auto& [n, v] : kv_) fields_.push_back(HeaderField{n, v, http::lookup_header_token(n)});
  }
  std::span<const HeaderField> span() const { return fields_; }

 private:
  std::vector<std::pair<std::string, std::string>> kv_;
  std::vector<HeaderField> fields_;
};

// A parsed request.
class Req {
 public:
  explicit Req(std::string raw) : buf_(std::move(raw)) {
    r_.fields = std::span<HeaderField>(fields_, 32);
    auto res = http::parse_request(buf_, r_, http::ParserLimits{});
    EXPECT_EQ(res.status, http::ParseStatus::kComplete);
  }
  const http::Request& get() const { return r_; }

 private:
  std::string buf_;
  HeaderField fields_[32];
  http::Request r_;
};

constexpr int64_t kNow = 1700000000;  // Tue, 14 Nov 2023 22:13:20 GMT

CacheLocConf valid_conf() {
  CacheLocConf c;
  c.valid.push_back(CacheValid{{200, 301, 302}, false, 60000});
  c.valid.push_back(CacheValid{{404}, false, 3000});
  return c;
}

StoreDecision decide(int status, const Fields& f, const CacheLocConf& conf, const http::Request* req = nullptr,
                     int64_t request_time = kNow, int64_t response_time = kNow) {
  StoreInput in;
  in.status = status;
  in.fields = f.span();
  in.request = req;
  in.conf = &conf;
  in.request_time = request_time;
  in.response_time = response_time;
  return decide_store(in);
}

std::string date(int64_t t) {
  char buf[http::kHttpDateLen];
  return std::string(http::format_http_date(t, buf));
}

TEST(CacheControlTest, ParsesDirectivesAcrossLines) {
  Fields f{{"Cache-Control", "public, max-age=60"}, {"cache-control", "S-MAXAGE=\"30\", must-revalidate"}};
  CacheControl cc = parse_cache_control(f.span());
  EXPECT_TRUE(cc.present);
  EXPECT_TRUE(cc.public_);
  EXPECT_TRUE(cc.must_revalidate);
  EXPECT_EQ(cc.max_age, 60);
  EXPECT_EQ(cc.s_maxage, 30);
  EXPECT_FALSE(cc.no_store);
}

TEST(CacheControlTest, FirstOccurrenceWinsAndDeltaSaturates) {
  Fields f{{"Cache-Control", "max-age=10, max-age=99"}, {"Cache-Control", "s-maxage=99999999999999"}};
  CacheControl cc = parse_cache_control(f.span());
  EXPECT_EQ(cc.max_age, 10);
  EXPECT_EQ(cc.s_maxage, 2147483648LL);
}

TEST(CacheControlTest, QualifiedNoCacheAndPrivate) {
  Fields f{{"Cache-Control", "no-cache=\"Set-Cookie, X-Foo\", private=\"X-Bar\", max-age=60"}};
  CacheControl cc = parse_cache_control(f.span());
  EXPECT_FALSE(cc.no_cache);
  EXPECT_FALSE(cc.private_);
  EXPECT_EQ(cc.no_cache_fields, "Set-Cookie, X-Foo");
  EXPECT_EQ(cc.private_fields, "X-Bar");
  EXPECT_EQ(cc.max_age, 60);
}

TEST(CacheControlTest, InvalidMaxAgeIsFlagged) {
  Fields f{{"Cache-Control", "max-age=abc"}};
  CacheControl cc = parse_cache_control(f.span());
  EXPECT_TRUE(cc.invalid_age);
  EXPECT_FALSE(cc.max_age.has_value());
}

TEST(StoreTest, MaxAgeGivesLifetime) {
  CacheLocConf conf = valid_conf();
  StoreDecision d = decide(200, Fields{{"Cache-Control", "max-age=120"}, {"Date", date(kNow)}}, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.freshness.lifetime, 120);
  EXPECT_EQ(d.freshness.corrected_initial_age, 0);
  EXPECT_EQ(d.freshness.expires_at(), kNow + 120);
  EXPECT_TRUE(d.freshness.fresh(kNow + 119));
  EXPECT_FALSE(d.freshness.fresh(kNow + 120));
  EXPECT_EQ(d.freshness.flags, 0u);
}

TEST(StoreTest, SMaxAgeBeatsMaxAgeBeatsExpires) {
  CacheLocConf conf = valid_conf();
  StoreDecision a = decide(200, Fields{{"Cache-Control", "max-age=0, s-maxage=1"}, {"Expires", date(kNow + 500)}}, conf);
  ASSERT_TRUE(a.storable());
  EXPECT_EQ(a.freshness.lifetime, 1);
  EXPECT_EQ(a.freshness.flags & kFlagNoStale, kFlagNoStale);  // s-maxage implies proxy-revalidate (§5.2.2.10)
  StoreDecision b = decide(200, Fields{{"Cache-Control", "max-age=7"}, {"Expires", date(kNow + 500)}}, conf);
  EXPECT_EQ(b.freshness.lifetime, 7);
  StoreDecision c = decide(200, Fields{{"Date", date(kNow - 10)}, {"Expires", date(kNow + 500)}}, conf);
  EXPECT_EQ(c.freshness.lifetime, 510);                // Expires − Date
  EXPECT_EQ(c.freshness.corrected_initial_age, 10);    // apparent age
  EXPECT_EQ(c.freshness.expires_at(), kNow + 500);
}

TEST(StoreTest, InvalidExpiresIsAlreadyExpired) {
  CacheLocConf conf = valid_conf();
  StoreDecision d = decide(200, Fields{{"Expires", "0"}, {"ETag", "\"x\""}}, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.freshness.lifetime, 0);
  EXPECT_FALSE(d.freshness.fresh(kNow));
  StoreDecision e = decide(200, Fields{{"Expires", "0"}}, conf);
  EXPECT_EQ(e.refusal, NotStored::kZeroLifetime);  // no validator: pointless to store
}

TEST(StoreTest, ProxyCacheValidByStatusWhenNoExplicitFreshness) {
  CacheLocConf conf = valid_conf();
  EXPECT_EQ(decide(200, Fields{}, conf).freshness.lifetime, 60);
  EXPECT_EQ(decide(301, Fields{}, conf).freshness.lifetime, 60);
  EXPECT_EQ(decide(404, Fields{}, conf).freshness.lifetime, 3);
  EXPECT_EQ(decide(500, Fields{}, conf).refusal, NotStored::kNoValidity);
  EXPECT_EQ(decide(201, Fields{}, conf).refusal, NotStored::kNoValidity);
  // Explicit freshness makes other statuses storable (RFC 9111 §3, nginx).
  EXPECT_EQ(decide(500, Fields{{"Cache-Control", "max-age=5"}}, conf).freshness.lifetime, 5);
  CacheLocConf none;
  EXPECT_EQ(decide(200, Fields{}, none).refusal, NotStored::kNoValidity);  // no heuristic freshness
}

TEST(StoreTest, ValidDefaultCodesAndAny) {
  CacheLocConf c;
  c.valid.push_back(CacheValid{{}, false, 10000});  // `proxy_cache_valid 10s;` = 200 301 302
  EXPECT_EQ(c.valid_for(200), 10000u);
  EXPECT_EQ(c.valid_for(302), 10000u);
  EXPECT_EQ(c.valid_for(404), 0u);
  c.valid.push_back(CacheValid{{}, true, 1000});
  EXPECT_EQ(c.valid_for(404), 1000u);
  EXPECT_EQ(c.valid_for(200), 10000u);  // first entry that matches
}

TEST(StoreTest, UnstorableStatuses) {
  CacheLocConf conf = valid_conf();
  Fields f{{"Cache-Control", "max-age=60"}};
  EXPECT_EQ(decide(206, f, conf).refusal, NotStored::kStatus);
  EXPECT_EQ(decide(304, f, conf).refusal, NotStored::kStatus);
  EXPECT_EQ(decide(100, f, conf).refusal, NotStored::kStatus);
}

TEST(StoreTest, NoStorePrivateNoCache) {
  CacheLocConf conf = valid_conf();
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "no-store, max-age=60"}}, conf).refusal, NotStored::kNoStore);
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "private, max-age=60"}}, conf).refusal, NotStored::kPrivate);
  StoreDecision nc = decide(200, Fields{{"Cache-Control", "no-cache, max-age=60"}, {"ETag", "\"a\""}}, conf);
  ASSERT_TRUE(nc.storable());
  EXPECT_EQ(nc.freshness.flags, kFlagNoStale | kFlagAlwaysRevalidate);
  EXPECT_FALSE(nc.freshness.fresh(kNow));  // never reused without validation
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "no-cache, max-age=60"}}, conf).refusal, NotStored::kZeroLifetime);
}

TEST(StoreTest, IgnoreCacheControlAndExpires) {
  CacheLocConf conf = valid_conf();
  conf.ignore_headers = kIgnoreCacheControl | kIgnoreExpires;
  StoreDecision d = decide(200, Fields{{"Cache-Control", "no-store, max-age=5"}, {"Expires", date(kNow + 900)}}, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.freshness.lifetime, 60);  // proxy_cache_valid
}

TEST(StoreTest, XAccelExpires) {
  CacheLocConf conf = valid_conf();
  EXPECT_EQ(decide(200, Fields{{"X-Accel-Expires", "33"}, {"Cache-Control", "max-age=5"}}, conf).freshness.lifetime, 33);
  EXPECT_EQ(decide(200, Fields{{"X-Accel-Expires", "0"}}, conf).refusal, NotStored::kXAccelExpiresZero);
  StoreDecision abs = decide(200, Fields{{"X-Accel-Expires", "@" + std::to_string(kNow + 100)}, {"Age", "20"}}, conf);
  EXPECT_EQ(abs.freshness.expires_at(), kNow + 100);
  conf.ignore_headers = kIgnoreXAccelExpires;
  EXPECT_EQ(decide(200, Fields{{"X-Accel-Expires", "33"}, {"Cache-Control", "max-age=5"}}, conf).freshness.lifetime, 5);
}

TEST(StoreTest, AuthorizationRule) {
  CacheLocConf conf = valid_conf();
  Req auth("GET /x HTTP/1.1\r\nHost: a\r\nAuthorization: Basic Zm9vOmJhcg==\r\n\r\n");
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "max-age=60"}}, conf, &auth.get()).refusal, NotStored::kAuthorization);
  EXPECT_TRUE(decide(200, Fields{{"Cache-Control", "public, max-age=60"}}, conf, &auth.get()).storable());
  EXPECT_TRUE(decide(200, Fields{{"Cache-Control", "must-revalidate, max-age=60"}}, conf, &auth.get()).storable());
  EXPECT_TRUE(decide(200, Fields{{"Cache-Control", "s-maxage=60"}}, conf, &auth.get()).storable());
  Req plain("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_TRUE(decide(200, Fields{{"Cache-Control", "max-age=60"}}, conf, &plain.get()).storable());
}

TEST(StoreTest, RequestNoStore) {
  CacheLocConf conf = valid_conf();
  Req r("GET /x HTTP/1.1\r\nHost: a\r\nCache-Control: no-store\r\n\r\n");
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "max-age=60"}}, conf, &r.get()).refusal, NotStored::kRequestNoStore);
  Req nc("GET /x HTTP/1.1\r\nHost: a\r\nCache-Control: no-cache\r\n\r\n");
  EXPECT_TRUE(decide(200, Fields{{"Cache-Control", "max-age=60"}}, conf, &nc.get()).storable());
}

TEST(StoreTest, SetCookiePolicy) {  // C22
  CacheLocConf conf = valid_conf();
  Fields f{{"Cache-Control", "public, max-age=60"}, {"Set-Cookie", "session=USER-A-SECRET; Path=/"}};
  EXPECT_EQ(decide(200, f, conf).refusal, NotStored::kSetCookie);
  conf.ignore_headers = kIgnoreSetCookie;
  StoreDecision d = decide(200, f, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.strip, "set-cookie");
  std::string lines;
  stored_head_lines(f.span(), d.strip, lines);
  EXPECT_EQ(lines, "Cache-Control: public, max-age=60\r\n");
}

TEST(StoreTest, QualifiedNoCacheSetCookieIsStrippedWhenIgnored) {  // C22b
  CacheLocConf conf = valid_conf();
  conf.ignore_headers = kIgnoreSetCookie;
  Fields f{{"Cache-Control", "no-cache=\"Set-Cookie\", max-age=60"}, {"Set-Cookie", "s=A"}, {"X-Keep", "1"}};
  StoreDecision d = decide(200, f, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.freshness.lifetime, 60);
  EXPECT_EQ(d.freshness.flags, 0u);
  std::string lines;
  stored_head_lines(f.span(), d.strip, lines);
  EXPECT_EQ(lines, "Cache-Control: no-cache=\"Set-Cookie\", max-age=60\r\nX-Keep: 1\r\n");
}

TEST(StoreTest, PrivateQualifiedStripsFields) {
  CacheLocConf conf = valid_conf();
  Fields f{{"Cache-Control", "private=\"X-User\", max-age=60"}, {"X-User", "alice"}, {"Content-Type", "text/plain"}};
  StoreDecision d = decide(200, f, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.strip, "x-user");
  std::string lines;
  stored_head_lines(f.span(), d.strip, lines);
  EXPECT_EQ(lines, "Cache-Control: private=\"X-User\", max-age=60\r\nContent-Type: text/plain\r\n");
}

TEST(StoreTest, VaryStarAndList) {  // C23
  CacheLocConf conf = valid_conf();
  EXPECT_EQ(decide(200, Fields{{"Cache-Control", "max-age=60"}, {"Vary", "*"}}, conf).refusal, NotStored::kVaryStar);
  EXPECT_EQ(decide(200, Fields{{"Vary", "Accept-Language, *"}}, conf).refusal, NotStored::kVaryStar);
  StoreDecision d =
      decide(200, Fields{{"Vary", "User-Agent,Accept-Language"}, {"vary", "accept-language , Origin"}}, conf);
  ASSERT_TRUE(d.storable());
  EXPECT_EQ(d.vary, "accept-language,origin,user-agent");
  conf.ignore_headers = kIgnoreVary;
  StoreDecision i = decide(200, Fields{{"Vary", "*"}}, conf);
  ASSERT_TRUE(i.storable());
  EXPECT_EQ(i.vary, "");
  std::string long_vary(300, 'a');
  conf.ignore_headers = 0;
  EXPECT_EQ(decide(200, Fields{{"Vary", long_vary}}, conf).refusal, NotStored::kVaryTooLong);
}

TEST(AgeTest, Section423Calculation) {
  // Date 10 s before the response arrived, Age: 30 from upstream, 2 s between request and response.
  CacheLocConf conf = valid_conf();
  Fields f{{"Cache-Control", "max-age=100"}, {"Date", date(kNow - 10)}, {"Age", "30"}};
  StoreDecision d = decide(200, f, conf, nullptr, kNow - 2, kNow);
  const Freshness& fr = d.freshness;
  EXPECT_EQ(fr.date, kNow - 10);
  // apparent_age = 10; corrected_age_value = 30 + 2 = 32; corrected_initial_age = 32.
  EXPECT_EQ(fr.corrected_initial_age, 32);
  EXPECT_EQ(fr.current_age(kNow), 32);
  EXPECT_EQ(fr.current_age(kNow + 8), 40);
  EXPECT_EQ(age_value(fr, kNow + 8), "40");
  EXPECT_EQ(fr.expires_at(), kNow + 68);
  EXPECT_TRUE(fr.fresh(kNow + 67));
  EXPECT_FALSE(fr.fresh(kNow + 68));
}

TEST(AgeTest, DateInTheFutureGivesNoNegativeAge) {
  CacheLocConf conf = valid_conf();
  StoreDecision d = decide(200, Fields{{"Cache-Control", "max-age=100"}, {"Date", date(kNow + 50)}}, conf);
  EXPECT_EQ(d.freshness.corrected_initial_age, 0);
  EXPECT_EQ(d.freshness.current_age(kNow - 5), 0);
}

TEST(StaleTest, ForbiddenByMustRevalidateProxyRevalidateSMaxageNoCache) {  // C26 / §4.2.4
  CacheLocConf conf = valid_conf();
  const uint32_t all = kStaleError | kStaleTimeout | kStaleHttp502 | kStaleUpdating;
  for (const char* cc : {"max-age=1, must-revalidate", "max-age=1, proxy-revalidate", "max-age=0, s-maxage=1"}) {
    StoreDecision d = decide(200, Fields{{"Cache-Control", cc}, {"ETag", "\"c26\""}}, conf);
    ASSERT_TRUE(d.storable()) << cc;
    EXPECT_FALSE(stale_allowed(d.freshness, kNow + 3, all, kStaleHttp502)) << cc;
    EXPECT_FALSE(stale_allowed(d.freshness, kNow + 3, all, kStaleError)) << cc;
  }
  StoreDecision ok = decide(200, Fields{{"Cache-Control", "max-age=1"}, {"ETag", "\"c26\""}}, conf);
  EXPECT_TRUE(stale_allowed(ok.freshness, kNow + 3, all, kStaleHttp502));
  EXPECT_TRUE(stale_allowed(ok.freshness, kNow + 3, all, kStaleError));
  EXPECT_FALSE(stale_allowed(ok.freshness, kNow + 3, kStaleError, kStaleHttp502));  // not configured
  EXPECT_FALSE(stale_allowed(ok.freshness, kNow + 3, 0, kStaleError));
}

TEST(StaleTest, Rfc5861Windows) {
  CacheLocConf conf = valid_conf();
  StoreDecision d =
      decide(200, Fields{{"Cache-Control", "max-age=10, stale-while-revalidate=5, stale-if-error=20"}}, conf);
  const Freshness& f = d.freshness;
  EXPECT_EQ(f.stale_while_revalidate, 5);
  EXPECT_EQ(f.stale_if_error, 20);
  EXPECT_TRUE(stale_allowed(f, kNow + 14, 0, kStaleUpdating));
  EXPECT_FALSE(stale_allowed(f, kNow + 15, 0, kStaleUpdating));
  EXPECT_TRUE(stale_allowed(f, kNow + 29, 0, kStaleHttp503));
  EXPECT_FALSE(stale_allowed(f, kNow + 30, 0, kStaleHttp503));
  EXPECT_EQ(stale_condition_for_status(502), kStaleHttp502);
  EXPECT_EQ(stale_condition_for_status(418), 0u);
}

TEST(RevalidateTest, ConditionalFieldsFromStoredValidators) {  // §4.3.1
  EXPECT_EQ(revalidation_fields("W/\"c15\"", "Tue, 14 Nov 2023 22:13:20 GMT"),
            "If-None-Match: W/\"c15\"\r\nIf-Modified-Since: Tue, 14 Nov 2023 22:13:20 GMT\r\n");
  EXPECT_EQ(revalidation_fields("", ""), "");
  EXPECT_EQ(revalidation_fields("\"a\"", ""), "If-None-Match: \"a\"\r\n");
}

TEST(RevalidateTest, ValidatorsOf304SelectStoredResponse) {  // §4.3.4
  Fields same{{"ETag", "\"v1\""}};
  Fields other{{"ETag", "\"v2\""}};
  Fields weak{{"ETag", "W/\"v1\""}};
  Fields lm{{"Last-Modified", "Tue, 14 Nov 2023 22:13:20 GMT"}};
  Fields none{};
  EXPECT_TRUE(validators_match_304(same.span(), "\"v1\"", ""));
  EXPECT_FALSE(validators_match_304(other.span(), "\"v1\"", ""));
  EXPECT_TRUE(validators_match_304(weak.span(), "\"v1\"", ""));
  EXPECT_TRUE(validators_match_304(lm.span(), "", "Tue, 14 Nov 2023 22:13:20 GMT"));
  EXPECT_FALSE(validators_match_304(lm.span(), "", "Tue, 14 Nov 2023 22:13:21 GMT"));
  EXPECT_TRUE(validators_match_304(none.span(), "\"v1\"", ""));
}

TEST(RevalidateTest, Merge304UpdatesFields) {  // §3.2
  std::string stored =
      "Content-Type: text/plain\r\nCache-Control: max-age=1\r\nETag: \"c\"\r\nX-Old: 1\r\nX-Old: 2\r\n";
  Fields fresh{{"Cache-Control", "max-age=60"}, {"X-Old", "3"}, {"Content-Length", "999"}, {"Connection", "close"},
               {"Set-Cookie", "a=b"}, {"Date", "Tue, 14 Nov 2023 22:13:20 GMT"}};
  EXPECT_EQ(merge_304(stored, fresh.span(), "set-cookie"),
            "Content-Type: text/plain\r\nETag: \"c\"\r\nCache-Control: max-age=60\r\nX-Old: 3\r\n"
            "Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n");
}

TEST(StoredHeadTest, DropsHopByHopFramingAgeAndConnectionListed) {
  Fields f{{"Content-Type", "text/html"}, {"Connection", "keep-alive, X-Hop"}, {"Keep-Alive", "timeout=5"},
           {"X-Hop", "1"}, {"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}, {"Age", "3"},
           {"ETag", "\"e\""}, {"Proxy-Authenticate", "Basic"}};
  std::string lines;
  stored_head_lines(f.span(), "", lines);
  EXPECT_EQ(lines, "Content-Type: text/html\r\nETag: \"e\"\r\n");
  EXPECT_EQ(find_stored_line(lines, "etag"), "\"e\"");
  EXPECT_FALSE(find_stored_line(lines, "age").has_value());
}

TEST(VaryTest, SecondaryKeyMaterial) {  // §4.1
  Req en("GET / HTTP/1.1\r\nHost: a\r\nAccept-Language: en\r\n\r\n");
  Req en2("GET / HTTP/1.1\r\nHost: a\r\naccept-language:   en  \r\n\r\n");
  Req fr("GET / HTTP/1.1\r\nHost: a\r\nAccept-Language: fr\r\n\r\n");
  Req none("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  Req empty("GET / HTTP/1.1\r\nHost: a\r\nAccept-Language:\r\n\r\n");
  Req lines("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip ,br\r\nAccept-Encoding: zstd\r\n\r\n");
  auto key = [](std::string_view names, const Req& r) {
    std::string out;
    vary_key_material(names, r.get(), out);
    return out;
  };
  EXPECT_EQ(key("accept-language", en), "accept-language:en\n");
  EXPECT_EQ(key("accept-language", en), key("accept-language", en2));
  EXPECT_NE(key("accept-language", en), key("accept-language", fr));
  EXPECT_EQ(key("accept-language", none), "accept-language\x01\n");
  EXPECT_EQ(key("accept-language", empty), "accept-language:\n");
  EXPECT_EQ(key("accept-encoding,accept-language", lines), "accept-encoding:gzip,br,zstd\naccept-language\x01\n");
}

}  // namespace
}  // namespace kosoku::cache
