// The proxy-cache directives (cache/cache_directives.cc): values, defaults, inheritance and nginx's errors.
#include <gtest/gtest.h>

#include <string>

#include "core/cache/cache_conf.hh"
#include "core/cache/cache_variables.hh"
#include "core/config/loader.hh"
#include "core/config/variables.hh"

namespace kosoku::config {
namespace {

// `events {}` goes last so that error positions in the tests stay on line 1 as written.
std::unique_ptr<const MainConf> load_ok(const std::string& text) {
  LoadResult r = load_from_string(text + "\nevents {}\n", "t.conf");
  EXPECT_TRUE(r.ok()) << r.error.message;
  return std::move(r.conf);
}

std::string err(const std::string& text) {
  LoadResult r = load_from_string(text + "\nevents {}\n", "t.conf");
  EXPECT_FALSE(r.ok());
  return r.error.message;
}

TEST(CacheConfigTest, ProxyCachePathParameters) {
  auto c = load_ok(
      "disk_queue ssd1;\n"
      "http { proxy_cache_path /var/cache/k/ levels=1:2 keys_zone=one:10m inactive=30m max_size=1g "
      "use_temp_path=off disk_queue=ssd1 loader_files=50 loader_threshold=100ms manager_files=10;\n"
      "proxy_cache_path /c2 keys_zone=two:64k; }");
  const auto& paths = c->http.module<cache::CacheHttpConf>().paths;
  ASSERT_EQ(paths.size(), 2u);
  const cache::CachePathConf& p = paths[0];
  EXPECT_EQ(p.path, "/var/cache/k");
  EXPECT_EQ(p.levels, (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(p.zone, "one");
  EXPECT_EQ(p.zone_size, 10u << 20);
  EXPECT_EQ(p.inactive_ms, 1800000u);
  EXPECT_EQ(p.max_size, 1ull << 30);
  EXPECT_FALSE(p.use_temp_path);
  EXPECT_EQ(p.disk_queue, "ssd1");
  EXPECT_EQ(p.loader_files, 50u);
  EXPECT_EQ(p.loader_threshold_ms, 100u);
  EXPECT_EQ(p.manager_files, 10u);
  const cache::CachePathConf& q = paths[1];
  EXPECT_TRUE(q.levels.empty());
  EXPECT_EQ(q.inactive_ms, 600000u);  // nginx default 10m
  EXPECT_EQ(q.max_size, 0u);
  EXPECT_TRUE(q.use_temp_path);
  EXPECT_EQ(q.disk_queue, "default");
  EXPECT_EQ(c->http.module<cache::CacheHttpConf>().find_zone("two"), &q);
  EXPECT_EQ(c->http.module<cache::CacheHttpConf>().find_zone("three"), nullptr);
}

TEST(CacheConfigTest, ProxyCachePathErrors) {
  EXPECT_EQ(err("http { proxy_cache_path /a levels=1:2; }"),
            "t.conf:1:8: \"proxy_cache_path\" must have \"keys_zone\" parameter");
  EXPECT_EQ(err("http { proxy_cache_path /a levels=3 keys_zone=z:1m; }"), "t.conf:1:28: invalid parameter \"levels=3\"");
  EXPECT_EQ(err("http { proxy_cache_path /a levels=1:1:1:1 keys_zone=z:1m; }"),
            "t.conf:1:28: invalid parameter \"levels=1:1:1:1\"");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z; }"), "t.conf:1:28: invalid keys zone size \"keys_zone=z\"");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z:1k; }"), "t.conf:1:28: keys zone \"z\" is too small");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z:1m bogus=1; }"), "t.conf:1:43: invalid parameter \"bogus=1\"");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z:1m; proxy_cache_path /b keys_zone=z:1m; }"),
            "t.conf:1:44: duplicate zone \"z\"");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z:1m; proxy_cache_path /a keys_zone=y:1m; }"),
            "t.conf:1:61: duplicate cache path \"/a\"");
  EXPECT_EQ(err("http { proxy_cache_path /a keys_zone=z:1m disk_queue=nope; }"),
            "t.conf:1:43: unknown disk_queue \"nope\"");
  EXPECT_EQ(err("http { server { proxy_cache_path /a keys_zone=z:1m; } }"),
            "t.conf:1:17: \"proxy_cache_path\" directive is not allowed here");
}

TEST(CacheConfigTest, DefaultsAreNginxs) {
  auto c = load_ok("http { server { location / { } } }");
  const cache::CacheLocConf& l = c->http.servers[0]->locations[0].module<cache::CacheLocConf>();
  EXPECT_FALSE(l.enabled);
  EXPECT_EQ(l.key, nullptr);
  EXPECT_EQ(l.key_text, "$scheme$proxy_host$request_uri");
  EXPECT_TRUE(l.valid.empty());
  EXPECT_EQ(l.methods, cache::kMethodGet | cache::kMethodHead);
  EXPECT_EQ(l.min_uses, 1u);
  EXPECT_FALSE(l.revalidate);
  EXPECT_TRUE(l.convert_head);
  EXPECT_FALSE(l.lock);
  EXPECT_EQ(l.lock_timeout_ms, 5000u);
  EXPECT_EQ(l.lock_age_ms, 5000u);
  EXPECT_EQ(l.use_stale, 0u);
  EXPECT_FALSE(l.background_update);
  EXPECT_EQ(l.ignore_headers, 0u);
  EXPECT_EQ(l.purge.mode, cache::PurgeConf::Mode::kOff);
}

TEST(CacheConfigTest, LocationDirectivesAndInheritance) {
  auto c = load_ok(R"(http {
  proxy_cache_path /c keys_zone=z:1m;
  proxy_cache z;
  proxy_cache_valid 200 302 10m;
  proxy_cache_valid 404 1m;
  proxy_cache_valid any 5s;
  proxy_cache_use_stale error timeout updating http_500 http_502 http_503 http_504;
  server {
    proxy_cache_key "$scheme:$host$request_uri";
    proxy_cache_lock on;
    proxy_cache_lock_timeout 2s;
    proxy_cache_lock_age 750ms;
    location /a {
      proxy_cache_valid 1h;
      proxy_cache_methods POST;
      proxy_cache_min_uses 3;
      proxy_cache_bypass $cookie_nocache $arg_nocache;
      proxy_no_cache $http_pragma;
      proxy_cache_revalidate on;
      proxy_cache_background_update on;
      proxy_ignore_headers Set-Cookie cache-control X-Accel-Expires;
      proxy_cache_convert_head off;
    }
    location /b { proxy_cache off; proxy_cache_use_stale off; }
  }
})");
  const ServerConf& s = *c->http.servers[0];
  const cache::CacheLocConf& a = s.locations[0].module<cache::CacheLocConf>();
  const cache::CacheLocConf& b = s.locations[1].module<cache::CacheLocConf>();
  const cache::CacheLocConf& base = s.base.module<cache::CacheLocConf>();
  EXPECT_TRUE(base.enabled);
  EXPECT_EQ(base.zone, "z");
  ASSERT_EQ(base.valid.size(), 3u);
  EXPECT_EQ(base.valid_for(200), 600000u);
  EXPECT_EQ(base.valid_for(302), 600000u);
  EXPECT_EQ(base.valid_for(404), 60000u);
  EXPECT_EQ(base.valid_for(500), 5000u);
  EXPECT_EQ(base.key_text, "$scheme:$host$request_uri");
  ASSERT_NE(base.key, nullptr);
  EXPECT_TRUE(base.key->uses("host"));
  EXPECT_TRUE(base.lock);
  EXPECT_EQ(base.lock_timeout_ms, 2000u);
  EXPECT_EQ(base.lock_age_ms, 750u);
  EXPECT_EQ(base.use_stale, cache::kStaleError | cache::kStaleTimeout | cache::kStaleUpdating | cache::kStaleHttp500 |
                                cache::kStaleHttp502 | cache::kStaleHttp503 | cache::kStaleHttp504);
  // /a: own valid list replaces the inherited one; the rest inherited.
  EXPECT_TRUE(a.enabled);
  ASSERT_EQ(a.valid.size(), 1u);
  EXPECT_EQ(a.valid_for(200), 3600000u);
  EXPECT_EQ(a.valid_for(404), 0u);
  EXPECT_EQ(a.methods, cache::kMethodGet | cache::kMethodHead | cache::kMethodPost);
  EXPECT_EQ(a.min_uses, 3u);
  ASSERT_EQ(a.bypass.size(), 2u);
  EXPECT_TRUE(a.bypass[0]->uses("cookie_"));
  EXPECT_EQ(a.bypass[0]->segments[0].text, "nocache");
  EXPECT_TRUE(a.bypass[1]->uses("arg_"));
  ASSERT_EQ(a.no_cache.size(), 1u);
  EXPECT_TRUE(a.revalidate);
  EXPECT_TRUE(a.background_update);
  EXPECT_FALSE(a.convert_head);
  EXPECT_EQ(a.ignore_headers, cache::kIgnoreSetCookie | cache::kIgnoreCacheControl | cache::kIgnoreXAccelExpires);
  EXPECT_TRUE(a.lock);
  EXPECT_EQ(a.key_text, "$scheme:$host$request_uri");
  EXPECT_FALSE(b.enabled);
  EXPECT_EQ(b.use_stale, 0u);
}

TEST(CacheConfigTest, LocationDirectiveErrors) {
  const std::string zone = "http { proxy_cache_path /c keys_zone=z:1m; ";
  EXPECT_EQ(err("http { server { location / { proxy_cache nope; } } }"),
            "t.conf:1:42: \"proxy_cache\" zone \"nope\" is unknown");
  EXPECT_EQ(err(zone + "proxy_cache_valid 200 abc; }"), "t.conf:1:66: invalid time value \"abc\"");
  EXPECT_EQ(err(zone + "proxy_cache_valid 99 1m; }"), "t.conf:1:62: invalid status \"99\"");
  EXPECT_EQ(err(zone + "proxy_cache_methods GET PUT; }"), "t.conf:1:68: invalid value \"PUT\" in \"proxy_cache_methods\" directive");
  EXPECT_EQ(err(zone + "proxy_cache_use_stale error http_418; }"), "t.conf:1:72: invalid value \"http_418\"");
  EXPECT_EQ(err(zone + "proxy_ignore_headers Server; }"), "t.conf:1:65: invalid value \"Server\"");
  EXPECT_EQ(err(zone + "proxy_cache_min_uses 0; }"), "t.conf:1:65: invalid value \"0\" in \"proxy_cache_min_uses\" directive");
  EXPECT_EQ(err(zone + "proxy_cache_key $nope; }"), "t.conf:1:60: unknown \"nope\" variable");
  EXPECT_EQ(err(zone + "proxy_cache z; proxy_cache z; }"), "t.conf:1:59: \"proxy_cache\" directive is duplicate");
}

TEST(CacheConfigTest, ProxyCacheWithVariable) {
  auto c = load_ok(R"(http {
  proxy_cache_path /d1 keys_zone=d1:1m;
  proxy_cache_path /d2 keys_zone=d2:1m;
  split_clients $request_uri $cache_disk_t1 { 50% d1; * d2; }
  server { location / { proxy_cache $cache_disk_t1; } }
})");
  const cache::CacheLocConf& l = c->http.servers[0]->locations[0].module<cache::CacheLocConf>();
  EXPECT_TRUE(l.enabled);
  EXPECT_TRUE(l.zone.empty());
  ASSERT_NE(l.zone_tpl, nullptr);
  ASSERT_EQ(l.zone_tpl->segments.size(), 1u);
  EXPECT_EQ(l.zone_tpl->segments[0].var->get, &cache::split_clients_value);  // a declared split_clients variable
  EXPECT_EQ(l.zone_tpl->segments[0].text, "cache_disk_t1");
}

TEST(CacheConfigTest, SplitClientsThresholdsAreNginxs) {
  auto c = load_ok(R"(http {
  split_clients "${remote_addr}AAA" $variant_t2 {
    0.5% .one;
    2.0% .two;
    * "";
  }
})");
  const cache::SplitClientsConf* s = c->http.module<cache::CacheHttpConf>().find_split("variant_t2");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->parts.size(), 3u);
  EXPECT_EQ(s->parts[0].percent, 50u);
  EXPECT_EQ(s->parts[0].threshold, 21474836u);  // 50 * 0xffffffff / 10000
  EXPECT_EQ(s->parts[0].value, ".one");
  EXPECT_EQ(s->parts[1].percent, 200u);
  EXPECT_EQ(s->parts[1].threshold, 21474836u + 85899345u);
  EXPECT_EQ(s->parts[2].percent, 0u);
  EXPECT_EQ(s->parts[2].value, "");
}

TEST(CacheConfigTest, SplitClientsErrors) {
  EXPECT_EQ(err("http { split_clients $uri $sc_e1 { 60% a; 50% b; } }"), "t.conf:1:43: percent total is greater than 100%");
  EXPECT_EQ(err("http { split_clients $uri $sc_e2 { 1.234% a; } }"), "t.conf:1:36: invalid percent value \"1.234%\"");
  EXPECT_EQ(err("http { split_clients $uri $sc_e3 { 10 a; } }"), "t.conf:1:36: invalid percent value \"10\"");
  EXPECT_EQ(err("http { split_clients $uri sc_e4 { 10% a; } }"), "t.conf:1:27: invalid variable name \"sc_e4\"");
  EXPECT_EQ(err("http { split_clients $uri $host { 10% a; } }"), "t.conf:1:27: the duplicate \"host\" variable");
  EXPECT_EQ(err("http { split_clients $uri $sc_e5 { 10% a b; } }"),
            "t.conf:1:36: invalid number of arguments in \"split_clients\" block");
}

TEST(CacheConfigTest, PurgeShapes) {
  auto c = load_ok(R"(http {
  proxy_cache_path /c keys_zone=z:1m;
  server {
    location /purge/ { allow 127.0.0.1; deny all; proxy_cache_purge z "$scheme:$host$arg_key"; }
    location / { proxy_cache z; proxy_cache_purge PURGE from 127.0.0.1 10.0.0.0/8; }
    location /on { proxy_cache z; proxy_cache_purge on; }
    location /inherit { }
  }
})");
  const ServerConf& s = *c->http.servers[0];
  const cache::PurgeConf& zk = s.locations[0].module<cache::CacheLocConf>().purge;
  EXPECT_EQ(zk.mode, cache::PurgeConf::Mode::kZoneKey);
  EXPECT_EQ(zk.zone, "z");
  ASSERT_NE(zk.key, nullptr);
  EXPECT_TRUE(zk.key->uses("arg_"));
  const cache::PurgeConf& m = s.locations[1].module<cache::CacheLocConf>().purge;
  EXPECT_EQ(m.mode, cache::PurgeConf::Mode::kMethod);
  EXPECT_EQ(m.method, "PURGE");
  ASSERT_EQ(m.from.size(), 2u);
  EXPECT_EQ(m.from[0].prefix, 32);
  EXPECT_EQ(m.from[1].prefix, 8);
  EXPECT_EQ(s.locations[2].module<cache::CacheLocConf>().purge.method, "PURGE");
  EXPECT_EQ(s.locations[3].module<cache::CacheLocConf>().purge.mode, cache::PurgeConf::Mode::kOff);  // not inherited
  EXPECT_EQ(err("http { proxy_cache_path /c keys_zone=z:1m; server { location / { proxy_cache_purge y $host$uri; } } }"),
            "t.conf:1:84: \"proxy_cache_purge\" zone \"y\" is unknown");
  EXPECT_EQ(err("http { server { location / { proxy_cache_purge PURGE from; } } }"),
            "t.conf:1:30: invalid number of arguments in \"proxy_cache_purge\" directive");
  EXPECT_EQ(err("http { server { location / { proxy_cache_purge PURGE from nowhere; } } }"),
            "t.conf:1:59: invalid parameter \"nowhere\"");
}


// `wildcard` and `any_host` (cache/purge_key.hh): where a purge's `*` is a wildcard and how far a purge reaches.
TEST(CacheConfigTest, PurgeWildcardAndHostScope) {
  auto c = load_ok(R"(http {
  proxy_cache_path /c keys_zone=z:1m;
  server {
    location /a { proxy_cache z; proxy_cache_purge PURGE wildcard from 127.0.0.1; }
    location /b { proxy_cache z; proxy_cache_purge on wildcard any_host; }
    location /c { proxy_cache_purge z "$scheme:$host$arg_key" wildcard; }
    location /d { proxy_cache_purge z "$arg_key" any_host; }
    location /e { proxy_cache_purge z "wildcard"; }
    location /f { proxy_cache_purge z "*"; }
    location /g { proxy_cache z; proxy_cache_key $request_uri; proxy_cache_purge PURGE; }
    location /h { proxy_cache z; proxy_cache_key $request_uri; proxy_cache_purge PURGE wildcard any_host; }
  }
})");
  const ServerConf& s = *c->http.servers[0];
  const cache::PurgeConf& a = s.locations[0].module<cache::CacheLocConf>().purge;
  EXPECT_EQ(a.mode, cache::PurgeConf::Mode::kMethod);
  EXPECT_TRUE(a.wildcard);
  EXPECT_FALSE(a.any_host);
  ASSERT_EQ(a.from.size(), 1u);
  EXPECT_TRUE(s.locations[1].module<cache::CacheLocConf>().purge.wildcard);
  EXPECT_TRUE(s.locations[1].module<cache::CacheLocConf>().purge.any_host);
  EXPECT_TRUE(s.locations[1].module<cache::CacheLocConf>().purge.from.empty());
  EXPECT_EQ(s.locations[2].module<cache::CacheLocConf>().purge.mode, cache::PurgeConf::Mode::kZoneKey);
  EXPECT_TRUE(s.locations[2].module<cache::CacheLocConf>().purge.wildcard);
  EXPECT_TRUE(s.locations[3].module<cache::CacheLocConf>().purge.any_host);
  EXPECT_EQ(s.locations[4].module<cache::CacheLocConf>().purge.mode, cache::PurgeConf::Mode::kZoneKey);  // a quoted word is a KEY
  EXPECT_FALSE(s.locations[4].module<cache::CacheLocConf>().purge.wildcard);
  EXPECT_FALSE(s.locations[5].module<cache::CacheLocConf>().purge.wildcard);
  const std::string http = "http { proxy_cache_path /c keys_zone=z:1m; server { location / { ";
  const std::string no_host =
      " takes client data before any host variable ($host, $http_host, $server_name, $proxy_host), so a request "
      "could name another host's keys; add \"any_host\" if that is intended";
  EXPECT_EQ(err(http + "proxy_cache_purge z \"$arg_key\"; } } }"),
            "t.conf:1:86: \"proxy_cache_purge\" key \"$arg_key\"" + no_host);
  EXPECT_EQ(err(http + "proxy_cache_purge z \"$scheme:$host:$arg_key\"; } } }"),
            "t.conf:1:86: \"proxy_cache_purge\" key \"$scheme:$host:$arg_key\" continues the host with \":\", a byte a "
            "host may contain (use \"/\"); add \"any_host\" if that is intended");
  EXPECT_EQ(err(http + "proxy_cache z; proxy_cache_key $request_uri; proxy_cache_purge PURGE wildcard; } } }"),
            "t.conf:1:111: \"proxy_cache_purge ... wildcard\": the cache key \"$request_uri\"" + no_host);
  EXPECT_EQ(err("http { proxy_cache_path /c keys_zone=z:1m; server { location / { proxy_cache_purge z \"$host$uri\" bogus; } } }"),
            "t.conf:1:98: invalid parameter \"bogus\"");
  EXPECT_EQ(err("http { proxy_cache_path /c keys_zone=z:1m; server { location / { proxy_cache_purge PURGE wildcard nowhere; } } }"),
            "t.conf:1:99: invalid parameter \"nowhere\"");
  EXPECT_EQ(err("http { proxy_cache_path /c keys_zone=z:1m; server { location / { proxy_cache_purge off wildcard; } } }"),
            "t.conf:1:88: invalid parameter \"wildcard\"");
  EXPECT_EQ(err("http { proxy_cache_path /c keys_zone=z:1m; server { location / { proxy_cache_purge PURGE wildcard from; } } }"),
            "t.conf:1:66: invalid number of arguments in \"proxy_cache_purge\" directive");
}

}  // namespace
}  // namespace kosoku::config
