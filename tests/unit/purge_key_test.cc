// The key and scope of a purge request (core/cache/purge_key.hh): when a `*` is a wildcard, and that a purge
// stays within the purging request's host unless the configuration says `any_host`.
#include "core/cache/purge_key.hh"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace kosoku::cache {
namespace {

using Kind = PurgeTarget::Kind;

// The request's variables for these cases.
class Vars final : public config::VariableSource {
 public:
  std::string host = "a.example";
  std::string uri = "/p/k1";
  std::string arg_key;
  bool get(const config::Variable& v, std::string_view suffix, std::string& out) const override {
    std::string_view n = v.name;
    if (n == "scheme") { out += "http"; return true; }
    if (n == "host") { out += host; return true; }
    if (n == "http_") {
      if (suffix != "host") return false;
      out += host;
      return true;
    }
    if (n == "server_name") { out += "srv.example"; return true; }
    if (n == "proxy_host") { out += "origin"; return true; }
    if (n == "request_uri" || n == "uri") { out += (n == "uri" ? uri : uri); return true; }
    if (n == "arg_") {
      if (suffix != "key") return false;
      out += arg_key;
      return true;
    }
    return false;
  }
};

config::Template tpl(std::string_view s) {
  std::string err;
  config::Template t = config::compile(s, config::SourceLoc{}, &err);
  EXPECT_EQ(err, "") << s;
  return t;
}

PurgeKeyRules method(bool wildcard = false, bool any_host = false) { return {true, wildcard, any_host}; }
PurgeKeyRules zone_key(bool wildcard = false, bool any_host = false) { return {false, wildcard, any_host}; }

TEST(PurgeKeyTest, MethodFormIsExactUnlessWildcardIsConfigured) {
  Vars v;
  v.uri = "/p/*";
  const config::Template t = tpl("$scheme:$host$request_uri");
  PurgeKey k = build_purge_key(t, v, method());
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kExact);
  EXPECT_EQ(k.target.key, "http:a.example/p/*");  // the entry of the URI "/p/*", nothing else

  k = build_purge_key(t, v, method(true));
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kPrefix);
  EXPECT_EQ(k.target.key, "http:a.example/p/");
  EXPECT_EQ(k.target.host_end, std::string("http:a.example").size());
  EXPECT_TRUE(target_matches(k.target, "http:a.example/p/x"));
  EXPECT_FALSE(target_matches(k.target, "http:b.example/p/x"));
  EXPECT_FALSE(target_matches(k.target, "http:a.example/q/x"));

  v.uri = "/p/a*b";  // a `*` that does not end the key is an ordinary byte
  k = build_purge_key(t, v, method(true));
  EXPECT_EQ(k.target.kind, Kind::kExact);
  EXPECT_EQ(k.target.key, "http:a.example/p/a*b");
}

TEST(PurgeKeyTest, MethodFormOwnKeyIsAlwaysExactAndAllowed) {
  Vars v;
  // A template without any host: the request's own key is still what a GET would read.
  PurgeKey k = build_purge_key(tpl("$request_uri"), v, method());
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kExact);
  EXPECT_EQ(k.target.key, "/p/k1");
  // ... but a wildcard there could reach every host's keys.
  v.uri = "/p/*";
  k = build_purge_key(tpl("$request_uri"), v, method(true));
  EXPECT_NE(k.refusal, "");
  k = build_purge_key(tpl("$request_uri"), v, method(true, true));  // any_host
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kPrefix);
  EXPECT_EQ(k.target.host_end, std::string::npos);
}

TEST(PurgeKeyTest, DefaultKeyIsBoundedByProxyHost) {
  Vars v;
  v.uri = "/p/*";
  PurgeKey k = build_purge_key(tpl("$scheme$proxy_host$request_uri"), v, method(true));
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.key, "httporigin/p/");
  EXPECT_FALSE(target_matches(k.target, "httporigin2/p/x"));
  EXPECT_TRUE(target_matches(k.target, "httporigin/p/x"));
}

TEST(PurgeKeyTest, ArgKeyCannotLeaveTheHost) {
  Vars v;
  const config::Template t = tpl("$scheme:$host$arg_key");
  for (const char* bad : {"x/k", ".evil/k", "x", "-2/k", "_x", ":8080/k", "[", "%41"}) {
    v.arg_key = bad;
    PurgeKey k = build_purge_key(t, v, zone_key());
    EXPECT_NE(k.refusal, "") << bad << " → " << k.target.key;
    k = build_purge_key(t, v, zone_key(true));
    EXPECT_NE(k.refusal, "") << bad;
  }
  for (const char* good : {"/k", "?x", "", "#", "*"}) {  // "*" without `wildcard` is the key "http:a.example*"
    v.arg_key = good;
    PurgeKey k = build_purge_key(t, v, zone_key());
    EXPECT_EQ(k.refusal, "") << good;
    EXPECT_EQ(k.target.kind, Kind::kExact) << good;
    EXPECT_EQ(k.target.key, std::string("http:a.example") + good);
  }
  v.arg_key = "x/k";
  EXPECT_EQ(build_purge_key(t, v, zone_key(false, true)).refusal, "");  // any_host
}

TEST(PurgeKeyTest, ArgKeyWildcardStaysWithinTheHost) {
  Vars v;
  const config::Template t = tpl("$scheme:$host$arg_key");
  v.arg_key = "*";
  PurgeKey k = build_purge_key(t, v, zone_key(true));
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kPrefix);
  EXPECT_EQ(k.target.key, "http:a.example");
  EXPECT_TRUE(target_matches(k.target, "http:a.example"));
  EXPECT_TRUE(target_matches(k.target, "http:a.example/x"));
  EXPECT_TRUE(target_matches(k.target, "http:a.example?x"));
  EXPECT_FALSE(target_matches(k.target, "http:a.examplex/x"));
  EXPECT_FALSE(target_matches(k.target, "http:a.example.evil/x"));
  EXPECT_FALSE(target_matches(k.target, "http:a.example:8080/x"));
  EXPECT_FALSE(target_matches(k.target, "http:a.example-2/x"));

  v.arg_key = "x*";
  EXPECT_NE(build_purge_key(t, v, zone_key(true)).refusal, "");
  v.arg_key = "/img/*";
  k = build_purge_key(t, v, zone_key(true));
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.key, "http:a.example/img/");
  v.arg_key = "*";
  k = build_purge_key(t, v, zone_key(true, true));  // any_host: the whole zone's keys with that prefix
  EXPECT_EQ(k.target.host_end, std::string::npos);
  EXPECT_TRUE(target_matches(k.target, "http:a.examplex/x"));
}

TEST(PurgeKeyTest, StarWrittenInTheConfigurationIsAWildcard) {
  Vars v;
  PurgeKey k = build_purge_key(tpl("*"), v, zone_key());
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kAll);
  k = build_purge_key(tpl("http:a.example/img/*"), v, zone_key());
  EXPECT_EQ(k.target.kind, Kind::kPrefix);
  EXPECT_EQ(k.target.host_end, std::string::npos);  // the configuration named the keys itself
  k = build_purge_key(tpl("$scheme:$host/*"), v, zone_key());
  EXPECT_EQ(k.refusal, "");
  EXPECT_EQ(k.target.kind, Kind::kPrefix);
  EXPECT_EQ(k.target.key, "http:a.example/");
  // A `*` from the request is no wildcard without the parameter.
  v.arg_key = "/img/*";
  k = build_purge_key(tpl("$scheme:$host$arg_key"), v, zone_key());
  EXPECT_EQ(k.target.kind, Kind::kExact);
}

TEST(PurgeKeyTest, HostComesFromTheRequestAndMustNotBeForgeable) {
  Vars v;
  v.host = "";  // no Host and no server_name: nothing to bound by
  v.arg_key = "/k";
  EXPECT_NE(build_purge_key(tpl("$scheme:$host$arg_key"), v, zone_key()).refusal, "");
  v.host = "a.example";
  // Client data before the host: the client could write any host there.
  EXPECT_NE(build_purge_key(tpl("$arg_key$host/x"), v, zone_key()).refusal, "");
  // $server_name is a host segment the configuration fixes; $http_host is the request's.
  EXPECT_EQ(build_purge_key(tpl("$scheme://$server_name$arg_key"), v, zone_key()).refusal, "");
  EXPECT_EQ(build_purge_key(tpl("$scheme://$http_host$arg_key"), v, zone_key()).refusal, "");
}

TEST(PurgeKeyTest, ConfigurationCheck) {
  EXPECT_EQ(check_purge_template(tpl("*")), "");
  // A host written as text is not bounded: `?key=x/k` would make it a.examplex.
  EXPECT_NE(check_purge_template(tpl("http:a.example$arg_key")), "");
  EXPECT_EQ(check_purge_template(tpl("$scheme:$host$arg_key")), "");
  EXPECT_EQ(check_purge_template(tpl("$scheme$proxy_host$request_uri")), "");
  EXPECT_EQ(check_purge_template(tpl("$scheme://$server_name$uri")), "");
  EXPECT_NE(check_purge_template(tpl("$arg_key")), "");
  EXPECT_NE(check_purge_template(tpl("$request_uri")), "");
  EXPECT_NE(check_purge_template(tpl("$arg_x$host$uri")), "");
  EXPECT_NE(check_purge_template(tpl("$scheme:$host:$arg_key")), "");  // ":" may continue a host (a port)
  EXPECT_NE(check_purge_template(tpl("$host.$arg_key")), "");
}

TEST(PurgeKeyTest, HostBytes) {
  for (char c : std::string("az09AZ-._~%:[]")) EXPECT_TRUE(host_byte(c)) << c;
  EXPECT_TRUE(host_byte('\xc3'));
  for (char c : std::string("/?#*@ !$&'()+,;=\"<>\\^`{|}")) EXPECT_FALSE(host_byte(c)) << c;
}

}  // namespace
}  // namespace kosoku::cache
