// Configuration loader: syntax and directive errors with exact locations, includes, merging, defaults,
// listen grouping, log formats, the `-t` report. Lookups are in config_lookup_test.cc, value syntaxes and
// variables in config_values_test.cc.
#include <arpa/inet.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/config/check.hh"
#include "core/config/conf.hh"
#include "core/config/directive.hh"
#include "core/config/lexer.hh"
#include "core/config/loader.hh"
#include "core/config/parser.hh"
#include "core/config/variables.hh"
#include "core/access/access_conf.hh"
#include "core/access_log/log_conf.hh"
#include "core/headers/headers_conf.hh"
#include "core/rewrite/rewrite_conf.hh"
#include "core/static/static_conf.hh"
#include "core/stats/status_module.hh"
#include "gtest/gtest.h"
#include "tests/unit/tls_test_util.hh"

namespace kosoku::config {
namespace {

std::unique_ptr<const MainConf> ok(const std::string& text) {
  LoadResult r = load_from_string(text, "t.conf");
  EXPECT_TRUE(r.ok()) << r.error.message;
  return std::move(r.conf);
}

std::string err(const std::string& text) {
  LoadResult r = load_from_string(text, "t.conf");
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << text;
  return r.error.message;
}

std::vector<std::string> warnings(const std::string& text) {
  LoadResult r = load_from_string(text, "t.conf");
  EXPECT_TRUE(r.ok()) << r.error.message;
  return r.warnings;
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kosoku_cfg_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- lexer ----

TEST(ConfigLexer, TokensCarryLineAndColumn) {
  Lexer lx("a  b;\n\t{ \"q w\" 'x\\'y' }\n# c\n${v}x}", "f");
  Token t;
  std::string e;
  std::vector<std::tuple<TokenKind, std::string, int, int>> got;
  do {
    ASSERT_TRUE(lx.next(&t, &e)) << e;
    got.emplace_back(t.kind, t.text, t.loc.line, t.loc.col);
  } while (t.kind != TokenKind::kEof);
  using K = TokenKind;
  std::vector<std::tuple<TokenKind, std::string, int, int>> want = {
      {K::kWord, "a", 1, 1},         {K::kWord, "b", 1, 4},  {K::kSemicolon, "", 1, 5},
      {K::kBlockStart, "", 2, 2},    {K::kWord, "q w", 2, 4}, {K::kWord, "x'y", 2, 10},
      {K::kBlockEnd, "", 2, 17},     {K::kWord, "${v}x}", 4, 1}, {K::kEof, "", 4, 7},
  };
  EXPECT_EQ(got, want);
}

TEST(ConfigLexer, EscapesAsNginx) {
  Lexer lx(R"("a\"b\\c\td\ne\x" ~\.php$ a\;b a#b)", "f");
  Token t;
  std::string e;
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.text, "a\"b\\c\td\ne\\x");
  EXPECT_TRUE(t.quoted);
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.text, "~\\.php$");
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.text, "a\\;b");  // the escaped ';' does not end the word and keeps its backslash
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.text, "a#b");
}

TEST(ConfigLexer, VariableBraceStaysInWord) {
  Lexer lx("a${host}b{", "f");
  Token t;
  std::string e;
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.text, "a${host}b");
  ASSERT_TRUE(lx.next(&t, &e));
  EXPECT_EQ(t.kind, TokenKind::kBlockStart);
}

// ---- structural errors ----

TEST(ConfigErrors, Syntax) {
  EXPECT_EQ(err("http {\n  server {\n"), "t.conf:3:1: unexpected end of file, expecting \"}\"");
  EXPECT_EQ(err("worker_processes 1"), "t.conf:1:19: unexpected end of file, expecting \";\" or \"}\"");
  EXPECT_EQ(err("events {}\n}\n"), "t.conf:2:1: unexpected \"}\"");
  EXPECT_EQ(err("events { worker_connections 1 }"), "t.conf:1:31: unexpected \"}\"");
  EXPECT_EQ(err("  ;"), "t.conf:1:3: unexpected \";\"");
  EXPECT_EQ(err("\n {"), "t.conf:2:2: unexpected \"{\"");
  EXPECT_EQ(err("error_log \"abc;\n"), "t.conf:1:11: unexpected end of file, unbalanced quotes");
  EXPECT_EQ(err("error_log \"a\"b;"), "t.conf:1:14: unexpected \"b\"");
}

TEST(ConfigErrors, DirectiveChecks) {
  EXPECT_EQ(err("http {\n  server {\n    lisen 80;\n  }\n}\n"), "t.conf:3:5: unknown directive \"lisen\"");
  EXPECT_EQ(err("listen 80;"), "t.conf:1:1: \"listen\" directive is not allowed here");
  EXPECT_EQ(err("http { status; }"), "t.conf:1:8: \"status\" directive is not allowed here");
  EXPECT_EQ(err("http;"), "t.conf:1:1: directive \"http\" has no opening \"{\"");
  EXPECT_EQ(err("worker_processes 1 { }"), "t.conf:1:1: directive \"worker_processes\" is not terminated by \";\"");
  EXPECT_EQ(err("worker_processes 1 2;"), "t.conf:1:1: invalid number of arguments in \"worker_processes\" directive");
  EXPECT_EQ(err("http { server { location { } } }"),
            "t.conf:1:17: invalid number of arguments in \"location\" directive");
  EXPECT_EQ(err("http {\n etag on;\n etag off;\n}"), "t.conf:3:2: \"etag\" directive is duplicate");
  EXPECT_EQ(err("events {}\nevents {}"), "t.conf:2:1: \"events\" directive is duplicate");
  EXPECT_EQ(err("http { server { location / { root /a; alias /b; } } }"),
            "t.conf:1:39: \"alias\" directive is duplicate, \"root\" directive is specified before");
}

TEST(ConfigErrors, BadValuesPointAtTheArgument) {
  EXPECT_EQ(err("http {\n    etag maybe;\n}"),
            "t.conf:2:10: invalid value \"maybe\" in \"etag\" directive, it must be \"on\" or \"off\"");
  EXPECT_EQ(err("http { keepalive_timeout 10x; }"), "t.conf:1:26: invalid value \"10x\" in \"keepalive_timeout\" directive");
  EXPECT_EQ(err("http { keepalive_timeout 10s 5ms; }"),
            "t.conf:1:30: invalid value \"5ms\" in \"keepalive_timeout\" directive");
  EXPECT_EQ(err("http { client_max_body_size 1t; }"),
            "t.conf:1:29: invalid value \"1t\" in \"client_max_body_size\" directive");
  EXPECT_EQ(err("worker_processes zero;"), "t.conf:1:18: invalid value \"zero\" in \"worker_processes\" directive");
  EXPECT_EQ(err("http { server { max_headers many; } }"),
            "t.conf:1:29: invalid value \"many\" in \"max_headers\" directive");
  EXPECT_EQ(err("http { server { listen 80 fast; } }"), "t.conf:1:27: invalid parameter \"fast\"");
  EXPECT_EQ(err("http { server { listen 1.2.3:80; } }"),
            "t.conf:1:24: host not found in \"1.2.3:80\" of the \"listen\" directive");
  EXPECT_EQ(err("http { server { listen 99999; } }"), "t.conf:1:24: invalid port in \"99999\" of the \"listen\" directive");
  EXPECT_EQ(err("http { server { listen 80 backlog=0; } }"), "t.conf:1:27: invalid backlog \"backlog=0\"");
  EXPECT_EQ(err("http { allow 10.0.0.0/33; }"), "t.conf:1:14: invalid parameter \"10.0.0.0/33\"");
  EXPECT_EQ(err("http { deny 10.0.0.x; }"), "t.conf:1:13: invalid parameter \"10.0.0.x\"");
  EXPECT_EQ(err("http { if_modified_since later; }"),
            "t.conf:1:26: invalid value \"later\" in \"if_modified_since\" directive, it must be \"off\", \"exact\" or "
            "\"before\"");
  EXPECT_EQ(err("http { open_file_cache inactive=10s; }"), "t.conf:1:8: \"open_file_cache\" must have \"max\" parameter");
  EXPECT_EQ(err("http { open_file_cache max=0; }"), "t.conf:1:24: invalid \"open_file_cache\" parameter \"max=0\"");
  EXPECT_EQ(err("http { server { return 1000; } }"), "t.conf:1:24: invalid return code \"1000\"");
  EXPECT_EQ(err("http { server { location / { try_files $uri =abc; } } }"), "t.conf:1:45: invalid code \"=abc\"");
  EXPECT_EQ(err("http { add_header X y sometimes; }"), "t.conf:1:23: invalid parameter \"sometimes\"");
  EXPECT_EQ(err("error_log stderr loud;"), "t.conf:1:18: invalid log level \"loud\"");
  EXPECT_EQ(err("worker_cpu_affinity 0011;"),
            "t.conf:1:21: \"worker_cpu_affinity\" mask \"0011\" names more than one CPU: kosoku pins each worker to one CPU");
  EXPECT_EQ(err("worker_cpu_affinity 01x;"), "t.conf:1:21: invalid character in \"worker_cpu_affinity\" mask \"01x\"");
  EXPECT_EQ(err("disk_queue q depth=0;"), "t.conf:1:14: invalid depth value \"depth=0\"");
  EXPECT_EQ(err("disk_queue q;\ndisk_queue q;"), "t.conf:2:12: duplicate disk_queue \"q\"");
  EXPECT_EQ(err("disk_queue q size=1;"), "t.conf:1:14: invalid parameter \"size=1\"");
}

TEST(ConfigErrors, Locations) {
  EXPECT_EQ(err("http { server { location ~ ^/(a { } } }"),
            "t.conf:1:28: invalid regular expression \"^/(a\": missing ): ^/(a");
  EXPECT_EQ(err("http { server {\n location /a { location /b { } } } }"),
            "t.conf:2:16: location \"/b\" is outside location \"/a\"");
  EXPECT_EQ(err("http { server {\n location = /a { location /a/b { } } } }"),
            "t.conf:2:18: location \"/a/b\" cannot be inside the exact location \"/a\"");
  EXPECT_EQ(err("http { server {\n location /a { }\n location ^~ /a { } } }"), "t.conf:3:2: duplicate location \"/a\"");
  EXPECT_EQ(err("http { server { location == /a { } } }"), "t.conf:1:26: invalid location modifier \"==\"");
  EXPECT_TRUE(load_from_string("http { server { location @x { } } }", "t.conf").ok());
  EXPECT_EQ(err("http { server { location /a { location @x { } } } }"),
            "t.conf:1:31: named location \"@x\" can be on the server level only");
  EXPECT_EQ(err("http { server { location @x { location /y { } } } }"),
            "t.conf:1:31: location \"/y\" could not be inside the named location \"@x\"");
  EXPECT_EQ(err("http { server { location @x { } location @x { } } }"), "t.conf:1:33: duplicate location \"@x\"");
  EXPECT_EQ(err("http { server { location @x { alias /x; } } }"),
            "t.conf:1:31: the \"alias\" directive cannot be used inside the named location");
  EXPECT_EQ(err("http { server { location ~ ^/a { alias /x; } } }"),
            "t.conf:1:34: the \"alias\" directive inside a regex location needs captures, which kosoku does not support");
  EXPECT_EQ(err("http { server { server_name ~^(www. ; } }"),
            "t.conf:1:29: invalid regular expression \"^(www.\": missing ): ^(www.");
  EXPECT_EQ(err("http { server { server_name *example.com; } }"), "t.conf:1:29: server name \"*example.com\" is invalid");
  EXPECT_EQ(err("http { server { server_name www.*.com; } }"), "t.conf:1:29: server name \"www.*.com\" is invalid");
}

TEST(ConfigErrors, NamesResolvedAfterReading) {
  EXPECT_EQ(err("http {\n  aio threads=slow;\n}"), "t.conf:2:7: unknown disk_queue \"slow\"");
  EXPECT_TRUE(ok("http { aio threads=slow; }\ndisk_queue slow depth=4;")->find_disk_queue("slow"));
  EXPECT_EQ(err("http { access_log logs/a.log fancy; }"), "t.conf:1:30: unknown log format \"fancy\"");
  EXPECT_EQ(err("http { log_format combined '$uri'; }"), "t.conf:1:19: duplicate \"log_format\" name \"combined\"");
  EXPECT_EQ(err("http { log_format a '$uri';\nlog_format a '$uri'; }"), "t.conf:2:12: duplicate \"log_format\" name \"a\"");
}

TEST(ConfigErrors, UnknownVariables) {
  EXPECT_EQ(err("http {\n  log_format main '$remote_addr $foo';\n}"), "t.conf:2:19: unknown \"foo\" variable");
  EXPECT_EQ(err("http { add_header X-A \"${host}-$nope\"; }"), "t.conf:1:23: unknown \"nope\" variable");
  EXPECT_EQ(err("http { server { return 301 https://$hots$request_uri; } }"), "t.conf:1:28: unknown \"hots\" variable");
  EXPECT_EQ(err("http { server { location / { try_files $uri $urii =404; } } }"),
            "t.conf:1:45: unknown \"urii\" variable");
  EXPECT_EQ(err("http { add_header X \"${host\"; }"), "t.conf:1:21: the closing bracket in \"host\" variable is missing");
  EXPECT_EQ(err("http { add_header X \"a$\"; }"), "t.conf:1:21: invalid variable name in \"a$\"");
  EXPECT_EQ(err("http { log_format j escape=xml '$uri'; }"), "t.conf:1:21: unknown log format escaping \"xml\"");
}

TEST(ConfigErrors, Listen) {
  EXPECT_EQ(err("http {\n server { listen 80 default_server; }\n server { listen 0.0.0.0:80 default_server; }\n}"),
            "t.conf:3:11: a duplicate default server for 0.0.0.0:80");
  EXPECT_EQ(err("http { server { listen 80; listen *:80; } }"), "t.conf:1:28: a duplicate listen 0.0.0.0:80");
  EXPECT_EQ(err("http {\n server { listen 80 backlog=10; }\n server { listen 80 reuseport; }\n}"),
            "t.conf:3:11: duplicate listen options for 0.0.0.0:80");
}

TEST(ConfigErrors, MissingFile) {
  LoadResult r = load("/nonexistent/kosoku.conf");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error.message, "open() \"/nonexistent/kosoku.conf\" failed (2: No such file or directory)");
}

// ---- includes ----

TEST(ConfigInclude, GlobSortedAndRelativeToMainFileDirectory) {
  TempDir dir;
  dir.write("sites/b.conf", "server { server_name b; listen 8002; }\n");
  dir.write("sites/a.conf", "server { server_name a; listen 8001; }\n");
  dir.write("sites/skip.txt", "garbage");
  dir.write("extra/mime.types", "types { text/x-k kk; }\n");
  std::string main = dir.write("main.conf",
                               "http {\n  include extra/mime.types;\n  include sites/*.conf;\n  include none/*.conf;\n}\n");
  LoadResult r = load(main);
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_EQ(r.conf->http.servers.size(), 2u);
  EXPECT_EQ(r.conf->http.servers[0]->server_names[0], "a");
  EXPECT_EQ(r.conf->http.servers[1]->server_names[0], "b");
  EXPECT_EQ(r.conf->http.servers[0]->loc.file, dir.path() + "/sites/a.conf");
  EXPECT_EQ(r.conf->http.servers[0]->base.types->at("kk"), "text/x-k");
  EXPECT_EQ(r.conf->file, main);
}

TEST(ConfigInclude, ErrorsPointIntoTheIncludedFile) {
  TempDir dir;
  dir.write("inc/bad.conf", "\n\n    lisen 80;\n");
  std::string main = dir.write("main.conf", "http { server { include inc/bad.conf; } }");
  LoadResult r = load(main);
  EXPECT_EQ(r.error.message, dir.path() + "/inc/bad.conf:3:5: unknown directive \"lisen\"");
  std::string main2 = dir.write("main2.conf", "http {\n  include inc/missing.conf;\n}");
  r = load(main2);
  EXPECT_EQ(r.error.message, dir.path() + "/main2.conf:2:11: open() \"" + dir.path() +
                                 "/inc/missing.conf\" failed (2: No such file or directory)");
  dir.write("inc/open.conf", "server {\n");
  std::string main3 = dir.write("main3.conf", "http { include inc/open.conf; }");
  r = load(main3);
  EXPECT_EQ(r.error.message, dir.path() + "/inc/open.conf:2:1: unexpected end of file, expecting \"}\"");
}

TEST(ConfigInclude, CycleAndDepth) {
  TempDir dir;
  dir.write("a.conf", "include b.conf;\n");
  dir.write("b.conf", "include a.conf;\n");
  std::string main = dir.write("main.conf", "include a.conf;\n");
  LoadResult r = load(main);
  EXPECT_EQ(r.error.message, dir.path() + "/b.conf:1:9: recursive include of \"" + dir.path() + "/a.conf\"");
  std::string self = dir.write("self.conf", "include self.conf;\n");
  r = load(self);
  EXPECT_EQ(r.error.message, dir.path() + "/self.conf:1:9: recursive include of \"" + dir.path() + "/self.conf\"");
  for (int i = 0; i < 20; ++i) dir.write("d" + std::to_string(i) + ".conf", "include d" + std::to_string(i + 1) + ".conf;\n");
  dir.write("d20.conf", "");
  r = load(dir.write("deep.conf", "include d0.conf;"));
  EXPECT_EQ(r.error.message, dir.path() + "/d15.conf:1:1: too many nested includes (limit 16)");
}

TEST(ConfigInclude, DisabledByOption) {
  LoadOptions o;
  o.allow_include = false;
  LoadResult r = load_from_string("include x;", "t.conf", o);
  EXPECT_EQ(r.error.message, "t.conf:1:1: \"include\" is disabled here");
  EXPECT_EQ(err("include a b;"), "t.conf:1:1: invalid number of arguments in \"include\" directive");
}

// ---- merging ----

TEST(ConfigMerge, InheritanceDownTheTree) {
  auto c = ok(R"(
http {
  keepalive_timeout 10s 5;
  root /srv;
  index a.html b.html;
  add_header X-A 1;
  allow 10.0.0.0/8;
  deny all;
  etag off;
  client_header_timeout 7s;
  max_headers 2000;
  server {
    client_header_timeout 9s;
    max_headers 50;
    send_timeout 3s;
    location /a {
      add_header X-B 2;
      location /a/b {
        keepalive_timeout 1s;
        index c.html;
      }
    }
    location /c { root /other/; deny 1.2.3.4; }
  }
  server { }
})");
  const ServerConf& s0 = *c->http.servers[0];
  const ServerConf& s1 = *c->http.servers[1];
  EXPECT_EQ(s0.client_header_timeout_ms, 9000u);
  EXPECT_EQ(s1.client_header_timeout_ms, 7000u);
  EXPECT_EQ(s0.max_headers, 50u);
  EXPECT_EQ(s1.max_headers, 2000u);
  EXPECT_EQ(s0.base.send_timeout_ms, 3000u);
  EXPECT_EQ(s1.base.send_timeout_ms, 60000u);
  const LocationConf& a = s0.locations[0];
  const LocationConf& ab = a.locations[0];
  const LocationConf& cl = s0.locations[1];
  EXPECT_EQ(a.keepalive_timeout_ms, 10000u);
  EXPECT_EQ(a.keepalive_header_timeout_s, 5u);
  EXPECT_EQ(ab.keepalive_timeout_ms, 1000u);
  EXPECT_EQ(ab.keepalive_header_timeout_s, 0u);  // one slot: both values come from the block that sets it
  EXPECT_EQ(a.send_timeout_ms, 3000u);
  EXPECT_EQ(ab.send_timeout_ms, 3000u);
  EXPECT_EQ(a.root, "/srv");
  EXPECT_EQ(cl.root, "/other");  // trailing slash dropped
  using static_files::StaticLocConf;
  EXPECT_EQ(a.module<StaticLocConf>().index, (std::vector<std::string>{"a.html", "b.html"}));
  EXPECT_EQ(ab.module<StaticLocConf>().index, (std::vector<std::string>{"c.html"}));
  using headers::HeadersLocConf;
  ASSERT_EQ(a.module<HeadersLocConf>().add_header.size(), 1u);  // own list replaces the inherited one
  EXPECT_EQ(a.module<HeadersLocConf>().add_header[0].name, "X-B");
  EXPECT_EQ(ab.module<HeadersLocConf>().add_header[0].name, "X-B");
  EXPECT_EQ(s1.base.module<HeadersLocConf>().add_header[0].name, "X-A");
  EXPECT_EQ(a.module<access::AccessLocConf>().rules.size(), 2u);
  ASSERT_EQ(cl.module<access::AccessLocConf>().rules.size(), 1u);
  EXPECT_FALSE(cl.module<access::AccessLocConf>().rules[0].allow);
  EXPECT_FALSE(ab.etag);
  EXPECT_EQ(s1.base.root, "/srv");
}

TEST(ConfigMerge, ReturnTryFilesStatusStayWhereWritten) {
  auto c = ok("http { server {\n return 404;\n try_files $uri =404;\n location /a { }\n location = /s { status; } } }");
  const ServerConf& s = *c->http.servers[0];
  ASSERT_EQ(s.base.module<rewrite::RewriteLocConf>().ops.size(), 1u);
  EXPECT_EQ(s.base.module<rewrite::RewriteLocConf>().ops[0].ret.code, 404);
  EXPECT_EQ(s.base.try_files.size(), 2u);
  EXPECT_TRUE(s.locations[0].module<rewrite::RewriteLocConf>().ops.empty());
  EXPECT_TRUE(s.locations[0].try_files.empty());
  EXPECT_FALSE(s.locations[0].module<stats::StatusLocConf>().enabled);
  EXPECT_TRUE(s.locations[1].module<stats::StatusLocConf>().enabled);
  EXPECT_FALSE(s.base.module<stats::StatusLocConf>().enabled);
}

TEST(ConfigMerge, TypesDefaultsAndAccumulation) {
  auto c = ok("http { server { location /x { types { a/b bb; } } } }");
  const ServerConf& s = *c->http.servers[0];
  EXPECT_EQ(s.base.types->size(), 3u);  // nginx's built-in html/gif/jpg
  EXPECT_EQ(s.base.types->at("jpg"), "image/jpeg");
  EXPECT_EQ(s.locations[0].types->size(), 1u);
  auto c2 = ok("http { types { text/html html; } types { application/wasm WASM; } server { } }");
  const MimeTypes& t = *c2->http.servers[0]->base.types;
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("wasm"), "application/wasm");  // lower-cased
  auto w = warnings("http { types { a/a x; b/b x; } }");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "t.conf:1:27: duplicate extension \"x\", content type: \"b/b\", previous content type: \"a/a\"");
}

TEST(ConfigMerge, AccessLogOffAndFormats) {
  auto c = ok(R"(
http {
  log_format main escape=json '{"u":"$uri",' '"s":$status}';
  access_log logs/a.log main buffer=32k flush=5s;
  access_log logs/b.log;
  server {
    location /quiet { access_log off; access_log logs/c.log; }
    location /loud { }
  }
})");
  const ServerConf& s = *c->http.servers[0];
  using access_log::LogFormatConf;
  using access_log::LogLocConf;
  const auto& logs = [](const LocationConf& l) -> const auto& { return l.module<LogLocConf>().logs; };
  ASSERT_EQ(logs(s.base).size(), 2u);
  EXPECT_EQ(logs(s.base)[0].path, "logs/a.log");
  EXPECT_EQ(logs(s.base)[0].format, "main");
  EXPECT_EQ(logs(s.base)[1].format, "combined");
  EXPECT_TRUE(logs(s.locations[0]).empty());
  EXPECT_EQ(logs(s.locations[1]).size(), 2u);
  const access_log::LogHttpConf& lh = c->http.module<access_log::LogHttpConf>();
  const LogFormatConf* f = lh.find("main");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->format, "{\"u\":\"$uri\",\"s\":$status}");
  EXPECT_EQ(f->escape, LogEscape::kJson);
  EXPECT_EQ(f->tpl->escape, LogEscape::kJson);
  EXPECT_EQ(f->tpl->segments.size(), 5u);
  const LogFormatConf* comb = lh.find("combined");
  ASSERT_NE(comb, nullptr);
  EXPECT_EQ(comb->format,
            "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" "
            "\"$http_user_agent\"");
  EXPECT_EQ(comb->tpl->escape, LogEscape::kDefault);
  EXPECT_EQ(lh.formats[0].name, "combined");
  EXPECT_EQ(err("http { access_log off x; }"), "t.conf:1:23: invalid parameter \"x\"");
  EXPECT_EQ(err("http { access_log a.log combined gzip; }"), "t.conf:1:34: invalid parameter \"gzip\"");
}

TEST(ConfigMerge, EveryRowDefaultMatchesConfHh) {
  // For each row with a default, writing `NAME DEFAULT;` must give the same tree as not writing it.
  auto describe_loc = [](const LocationConf& l) {
    std::ostringstream o;
    o << l.root << '|' << l.module<static_files::StaticLocConf>().index.size() << '|' << l.default_type << '|' << l.keepalive_timeout_ms << '|'
      << l.keepalive_header_timeout_s << '|' << l.keepalive_requests << '|' << l.client_body_timeout_ms << '|'
      << l.send_timeout_ms << '|' << l.client_max_body_size << '|' << l.sendfile_max_chunk << '|' << l.etag << '|'
      << static_cast<int>(l.if_modified_since) << '|' << static_cast<int>(l.aio) << '|' << l.aio_queue << '|'
      << l.open_file_cache.enabled << '|' << l.open_file_cache.max << '|' << l.open_file_cache.inactive_ms << '|'
      << l.open_file_cache.valid_ms << '|' << l.open_file_cache.min_uses << '|' << l.open_file_cache.errors;
    for (const auto& i : l.module<static_files::StaticLocConf>().index) o << '|' << i;
    return o.str();
  };
  auto describe = [&](const MainConf& m) {
    std::ostringstream o;
    o << m.worker_processes << '|' << m.worker_connections << '|' << m.error_log_path << '|' << m.error_log_level << '|'
      << m.appliance.interface << '|' << m.appliance.data_device << '|' << m.appliance.data_mount << '|'
      << m.appliance.data_fstype << '|' << m.appliance.data_rw << '|' << m.appliance.hugepages << '|'
      << m.appliance.console << '|' << m.appliance.console_baud << '|' << m.appliance.on_fatal_reboot;
    if (!m.http.servers.empty()) {
      const ServerConf& s = *m.http.servers[0];
      o << '|' << s.client_header_timeout_ms << '|' << s.client_header_buffer_size << '|'
        << s.large_client_header_buffers_num << '|' << s.large_client_header_buffers_size << '|' << s.max_headers << '|'
        << describe_loc(s.base);
    }
    return o.str();
  };
  int checked = 0;
  for (std::span<const DirectiveSpec> table : directive_tables()) {
    for (const DirectiveSpec& row : table) {
      if (row.default_value.empty()) continue;
      std::string line = std::string(row.name) + " " + std::string(row.default_value) + ";";
      std::string with, without;
      if (row.contexts & kCtxServer) {
        with = "http { server { " + line + " } }";
        without = "http { server { } }";
      } else if (row.contexts & kCtxMain) {
        with = line + " http { server { } }";
        without = "http { server { } }";
      } else if (row.contexts & kCtxEvents) {
        with = "events { " + line + " } http { server { } }";
        without = "events { } http { server { } }";
      } else if (row.contexts & kCtxAppliance) {
        with = "appliance { " + line + " } http { server { } }";
        without = "appliance { } http { server { } }";
      } else {
        ADD_FAILURE() << "no context to test " << row.name;
        continue;
      }
      auto a = ok(with);
      auto b = ok(without);
      ASSERT_TRUE(a && b) << row.name;
      EXPECT_EQ(describe(*a), describe(*b)) << row.name << " " << row.default_value;
      ++checked;
    }
  }
  EXPECT_GE(checked, 25);
}

TEST(ConfigDirectives, NamesAreUniquePerContext) {
  std::set<std::pair<std::string_view, uint32_t>> names;  // (name, one context bit)
  for (std::span<const DirectiveSpec> table : directive_tables()) {
    for (const DirectiveSpec& row : table) {
      for (uint32_t bit = 1; bit != 0 && bit <= row.contexts; bit <<= 1) {
        if (!(row.contexts & bit)) continue;
        EXPECT_TRUE(names.insert({row.name, bit}).second) << "duplicate row " << row.name << " in context " << bit;
        EXPECT_EQ(find_directive(row.name, bit), &row);
      }
      EXPECT_NE(row.set, nullptr) << row.name;
      EXPECT_NE(row.contexts, 0u) << row.name;
    }
  }
  EXPECT_EQ(find_directive("include", kCtxHttp), nullptr);  // handled by the parser
  // One name, two contexts: the row of each context is found.
  EXPECT_EQ(find_directive("server", kCtxHttp)->flags & kBlock, kBlock);
  EXPECT_EQ(find_directive("server", kCtxUpstream)->flags & kBlock, 0u);
}

// ---- main, events, appliance ----

TEST(ConfigMain, CoreDirectives) {
  auto c = ok(R"(
worker_processes 3;
worker_cpu_affinity 0001 0100;
worker_rlimit_nofile 65536;
error_log stderr;
disk_queue default depth=8;
disk_queue slow depth=2 max_queue=10;
events { worker_connections 4096; }
)");
  EXPECT_EQ(c->worker_processes, 3);
  EXPECT_EQ(c->worker_cpu_affinity, (std::vector<int>{0, 2, 2}));  // nginx: the last mask for the rest
  EXPECT_EQ(c->worker_rlimit_nofile, 65536u);
  EXPECT_EQ(c->error_log_path, "stderr");
  EXPECT_EQ(c->error_log_level, 3);  // level omitted → error (nginx)
  EXPECT_EQ(c->worker_connections, 4096u);
  ASSERT_EQ(c->disk_queues.size(), 2u);
  EXPECT_EQ(c->find_disk_queue("default")->depth, 8u);
  EXPECT_EQ(c->find_disk_queue("slow")->max_queue, 10u);
  EXPECT_EQ(c->find_disk_queue("nope"), nullptr);
  EXPECT_TRUE(c->http.servers.empty());
  EXPECT_EQ(c->http.module<access_log::LogHttpConf>().formats.size(), 1u);
}

TEST(ConfigMain, Defaults) {
  auto c = ok("");
  EXPECT_EQ(c->worker_processes, 1);
  EXPECT_TRUE(c->worker_cpu_affinity.empty());
  ASSERT_EQ(c->disk_queues.size(), 1u);
  EXPECT_EQ(c->disk_queues[0].name, "default");
  EXPECT_EQ(c->disk_queues[0].depth, 64u);
  EXPECT_EQ(c->error_log_level, 4);
  EXPECT_EQ(c->text, "");
  EXPECT_EQ(c->file, "t.conf");
  EXPECT_FALSE(c->appliance.present);
}

TEST(ConfigMain, WorkerProcessesAutoAndAffinityAuto) {
  auto c = ok("worker_processes auto;\nworker_cpu_affinity auto 1010;");
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(c->worker_processes, static_cast<int>(cpus));
  ASSERT_EQ(c->worker_cpu_affinity.size(), static_cast<size_t>(cpus));
  for (size_t i = 0; i < c->worker_cpu_affinity.size(); ++i) EXPECT_EQ(c->worker_cpu_affinity[i], i % 2 ? 3 : 1);
  EXPECT_TRUE(ok("worker_processes 4; worker_cpu_affinity auto;")->worker_cpu_affinity.empty());
  auto w = warnings("worker_processes 3;\nworker_cpu_affinity 01 10;");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "t.conf:2:1: the number of \"worker_processes\" is not equal to the number of \"worker_cpu_affinity\" "
                  "masks, using last mask for remaining worker processes");
}

TEST(ConfigMain, Appliance) {
  auto c = ok(R"(appliance {
    address 10.0.2.15/24; gateway 10.0.2.2; interface ens3;
    data_disk /dev/vdb rw fstype=xfs mount=/srv; hugepages 512;
    console /dev/ttyS1 9600; on_fatal reboot;
  })");
  const ApplianceConf& a = c->appliance;
  EXPECT_TRUE(a.present);
  EXPECT_EQ(a.loc.line, 1);
  EXPECT_EQ(a.address, "10.0.2.15/24");
  EXPECT_EQ(a.gateway, "10.0.2.2");
  EXPECT_EQ(a.interface, "ens3");
  EXPECT_EQ(a.data_device, "/dev/vdb");
  EXPECT_TRUE(a.data_rw);
  EXPECT_EQ(a.data_fstype, "xfs");
  EXPECT_EQ(a.data_mount, "/srv");
  EXPECT_EQ(a.hugepages, 512u);
  EXPECT_EQ(a.console, "ttyS1");
  EXPECT_EQ(a.console_baud, 9600u);
  EXPECT_TRUE(a.on_fatal_reboot);
  EXPECT_EQ(err("appliance { address 10.0.2.15; }"),
            "t.conf:1:21: invalid value \"10.0.2.15\" in \"address\" directive, it must be an IPv4 address with a prefix "
            "length (10.0.2.15/24)");
  EXPECT_EQ(err("appliance { console ttyS0 12345; }"), "t.conf:1:27: invalid value \"12345\" in \"console\" directive");
  EXPECT_EQ(err("appliance { on_fatal explode; }"),
            "t.conf:1:22: invalid value \"explode\" in \"on_fatal\" directive, it must be \"reboot\" or \"halt\"");
  EXPECT_EQ(err("appliance { data_disk /dev/vda ro mount=data; }"), "t.conf:1:35: invalid parameter \"mount=data\"");
  EXPECT_EQ(err("http { appliance { } }"), "t.conf:1:8: \"appliance\" directive is not allowed here");
  EXPECT_EQ(err("appliance { listen 80; }"), "t.conf:1:13: \"listen\" directive is not allowed here");
}

// ---- listen grouping ----

TEST(ConfigListen, GroupingAndDefaults) {
  auto c = ok(R"(http {
  server { server_name a; listen 8080; listen [::]:8080 reuseport; }
  server { server_name b; listen *:8080 default_server backlog=100; }
  server { server_name c; listen 127.0.0.1:8080; }
  server { server_name d; }
})");
  const HttpConf& h = c->http;
  ASSERT_EQ(h.listen_sockets.size(), 4u);
  const ListenSocket& any = h.listen_sockets[0];
  EXPECT_EQ(any.conf.text, "0.0.0.0:8080");
  ASSERT_EQ(any.servers.size(), 2u);
  EXPECT_EQ(any.default_server, h.servers[1].get());
  EXPECT_TRUE(any.conf.default_server);
  EXPECT_EQ(any.conf.backlog, 100);
  EXPECT_EQ(h.listen_sockets[1].conf.text, "[::]:8080");
  EXPECT_TRUE(h.listen_sockets[1].conf.reuseport);
  EXPECT_EQ(h.listen_sockets[1].conf.addr.ss_family, AF_INET6);
  EXPECT_EQ(h.listen_sockets[1].default_server, h.servers[0].get());
  EXPECT_EQ(h.listen_sockets[2].conf.text, "127.0.0.1:8080");
  EXPECT_EQ(h.listen_sockets[3].conf.text, "0.0.0.0:80");  // server without listen
  EXPECT_EQ(h.listen_sockets[3].servers[0], h.servers[3].get());
  EXPECT_EQ(h.servers[3]->listen.size(), 1u);
  auto* sin = reinterpret_cast<const sockaddr_in*>(&h.listen_sockets[2].conf.addr);
  EXPECT_EQ(ntohs(sin->sin_port), 8080);
  EXPECT_EQ(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_EQ(h.listen_sockets[2].conf.addr_len, sizeof(sockaddr_in));
}

TEST(ConfigListen, ConflictingNamesWarn) {
  auto w = warnings("http {\n server { server_name a; }\n server { server_name A; } }");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "t.conf:3:2: conflicting server name \"a\" on 0.0.0.0:80, ignored");
  auto w2 = warnings("http { allow 10.1.2.3/8; }");
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0], "t.conf:1:14: low address bits of 10.1.2.3/8 are meaningless");
}

// ---- the shipped files ----

TEST(ConfigShipped, DefaultAndApplianceConfigsLoad) {
  const auto repo = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  TempDir dir;  // conf/ with the default TLS pair the image build generates for the appliance
  for (const char* name : {"default.conf", "appliance.conf"}) {
    LoadResult r = load(kosoku::testing::shipped_conf_with_default_pair(repo, dir.path(), name));
    ASSERT_TRUE(r.ok()) << r.error.message;
    EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
    const ServerConf& s = *r.conf->http.servers[0];
    EXPECT_EQ(s.base.types->at("css"), "text/css");
    EXPECT_EQ(s.base.types->at("wasm"), "application/wasm");
    EXPECT_GE(s.base.types->size(), 100u);
    EXPECT_TRUE(s.find_location("/status")->module<stats::StatusLocConf>().enabled);
  }
}

// ---- kosoku -t ----

TEST(ConfigCheck, ReportsLikeNginx) {
  TempDir dir;
  std::string good = dir.write("good.conf", "http { allow 10.1.0.0/8; server { listen 8080; } }");
  std::ostringstream out, errs;
  EXPECT_EQ(test_config(good, out, errs), 0);
  EXPECT_EQ(out.str(), "kosoku: the configuration file " + good + " syntax is ok\nkosoku: configuration file " + good +
                           " test is successful\n");
  EXPECT_EQ(errs.str(), "kosoku: [warn] " + good + ":1:14: low address bits of 10.1.0.0/8 are meaningless\n");
  std::string bad = dir.write("bad.conf", "http {\n    server {\n        lisen 80;\n    }\n}\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(test_config(bad, out2, err2), 1);
  EXPECT_EQ(out2.str(), "");
  EXPECT_EQ(err2.str(), "kosoku: [emerg] " + bad + ":3:9: unknown directive \"lisen\"\nkosoku: configuration file " + bad +
                            " test failed\n");
}

}  // namespace
}  // namespace kosoku::config
