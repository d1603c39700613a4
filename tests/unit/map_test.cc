// Unit tests for the map module (core/map/): real configuration text through config::load_from_string, real
// parsed requests in a minimal Exchange, map variables expanded the way every template expands them. Map
// variable names are declared process-wide, so each test uses its own (`mt_` names) unless it checks reuse.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/config/loader.hh"
#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"
#include "core/map/map_conf.hh"
#include "tests/unit/test_exchange.hh"

namespace kosoku::map {
namespace {

constexpr const char* kServer = "server { listen 127.0.0.1:8080; location / { } }";

class Request final : public testing::TestExchange {
 public:
  Request(const config::MainConf& conf, std::string raw) : raw_(std::move(raw)) {
    req.fields = fields_;
    http::ParseResult r = http::parse_request(raw_, req, http::ParserLimits{});
    EXPECT_EQ(r.status, http::ParseStatus::kComplete) << r.reason;
    http::normalize_path(req.path, uri_text);
    core_ctx.conf = &conf;
    server_conf = conf.http.servers[0].get();
    loc = server_conf->find_location(uri_text);
    host_lower = std::string(req.host_name);
    for (char& c : host_lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }

 private:
  std::string raw_;
  http::HeaderField fields_[64];
};

std::unique_ptr<const config::MainConf> load(const std::string& http_body) {
  config::LoadResult r = config::load_from_string("http { " + http_body + " " + kServer + " }", "t.conf");
  EXPECT_TRUE(r.conf != nullptr) << r.error.message;
  return std::move(r.conf);
}

std::string load_error(const std::string& http_body) {
  config::LoadResult r = config::load_from_string("http { " + http_body + " }", "t.conf");
  EXPECT_TRUE(r.conf == nullptr) << "expected an error for: " << http_body;
  return r.error.message;
}

// `text` (a template) expanded for `GET target` with Host `host`.
std::string eval(const config::MainConf& conf, const std::string& text, const std::string& target,
                 const std::string& host = "h.example") {
  Request ex(conf, "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
  std::string err;
  const config::Template t = config::compile(text, config::SourceLoc{}, &err);
  EXPECT_EQ(err, "");
  std::string out;
  config::expand(t, http::RequestVariables(ex, nullptr), out);
  return out;
}

TEST(MapMatch, ExactThenRegexesInFileOrderThenDefault) {
  auto conf = load(R"(map $uri $mt_order {
      default dflt;
      /x exact;
      ~^/x regex-x;
      ~^/y first;
      ~^/y.* second;
      ~*\.JPG$ image;
      ~\.PNG$ png-case-sensitive;
    })");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_order", "/x"), "exact");   // an exact string beats a regex listed after it
  EXPECT_EQ(eval(*conf, "$mt_order", "/X"), "exact");   // exact strings match ignoring case (nginx)
  EXPECT_EQ(eval(*conf, "$mt_order", "/xy"), "regex-x");
  EXPECT_EQ(eval(*conf, "$mt_order", "/yz"), "first");  // the first matching regex wins
  EXPECT_EQ(eval(*conf, "$mt_order", "/a.jpg"), "image");
  EXPECT_EQ(eval(*conf, "$mt_order", "/a.JpG"), "image");
  EXPECT_EQ(eval(*conf, "$mt_order", "/a.PNG"), "png-case-sensitive");
  EXPECT_EQ(eval(*conf, "$mt_order", "/a.png"), "dflt");
  EXPECT_EQ(eval(*conf, "$mt_order", "/zzz"), "dflt");
  EXPECT_EQ(eval(*conf, "[$mt_order]", "/x"), "[exact]");
}

TEST(MapMatch, DefaultIsEmptyAndEmptySourceSkipsRegexes) {
  auto conf = load(R"(map $uri $mt_nodef { /a a; }
    map $arg_q $mt_empty { ~^$ regex-on-empty; ~. any; default dflt; }
    map $arg_q $mt_empty_key { "" exact-empty; ~.* any; })");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "[$mt_nodef]", "/b"), "[]");
  EXPECT_EQ(eval(*conf, "$mt_empty", "/"), "dflt");  // nginx never runs a map's regexes on an empty string
  EXPECT_EQ(eval(*conf, "$mt_empty", "/?q=v"), "any");
  EXPECT_EQ(eval(*conf, "$mt_empty_key", "/"), "exact-empty");
  EXPECT_EQ(eval(*conf, "$mt_empty_key", "/?q=v"), "any");
}

TEST(MapMatch, Hostnames) {
  auto conf = load(R"(map $http_host $mt_host {
      hostnames;
      default none;
      example.com exact;
      *.example.com star;
      *.a.example.com deeper;
      .example.org dot;
      www.example.* tail;
      www.example.co.* tail-longer;
      ~^www\. regex;
    })");
  ASSERT_TRUE(conf);
  auto v = [&](const std::string& host) { return eval(*conf, "$mt_host", "/", host); };
  EXPECT_EQ(v("example.com"), "exact");
  EXPECT_EQ(v("EXAMPLE.com."), "exact");  // lower-cased, one trailing dot dropped
  EXPECT_EQ(v("x.example.com"), "star");
  EXPECT_EQ(v("y.x.example.com"), "star");
  EXPECT_EQ(v("a.example.com"), "star");  // `*.a.example.com` wants a label before a.example.com
  EXPECT_EQ(v("b.a.example.com"), "deeper");
  EXPECT_EQ(v("example.org"), "dot");     // `.example.org` is the name itself too
  EXPECT_EQ(v("w.example.org"), "dot");
  EXPECT_EQ(v("www.example.net"), "tail");
  EXPECT_EQ(v("www.example.co.uk"), "tail-longer");
  EXPECT_EQ(v("www.example"), "regex");   // `www.example.*` wants a label after it
  EXPECT_EQ(v("other.net"), "none");
}

TEST(MapMatch, WithoutHostnamesMasksAreExactStrings) {
  auto conf = load("map $arg_h $mt_nohost { *.example.com star; .example.org dot; default none; }");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_nohost", "/?h=x.example.com"), "none");
  EXPECT_EQ(eval(*conf, "$mt_nohost", "/?h=*.example.com"), "star");
  EXPECT_EQ(eval(*conf, "$mt_nohost", "/?h=example.org"), "none");
  EXPECT_EQ(eval(*conf, "$mt_nohost", "/?h=.example.org"), "dot");
}

TEST(MapValues, TemplatesInSourcesAndValues) {
  auto conf = load(R"(map $uri $mt_tpl { default "d-$host"; /a "a:$uri:$arg_q"; }
    map $mt_tpl $mt_nested { "a:/a:1" "nested-$mt_tpl"; default no; }
    map $http_host$uri $mt_complex { h.example/p hp; default "[$http_host$uri]"; }
    map $uri $mt_self { default "x$mt_self"; }
    map $arg_k $mt_kw { \default d; hostnames h; volatile v; \include i; default none; })");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_tpl", "/z"), "d-h.example");
  EXPECT_EQ(eval(*conf, "$mt_tpl", "/a?q=1"), "a:/a:1");
  EXPECT_EQ(eval(*conf, "$mt_tpl", "/a"), "a:/a:");  // a missing variable in a value expands to nothing
  EXPECT_EQ(eval(*conf, "$mt_nested", "/a?q=1"), "nested-a:/a:1");
  EXPECT_EQ(eval(*conf, "$mt_nested", "/a?q=2"), "no");
  EXPECT_EQ(eval(*conf, "$mt_complex", "/p"), "hp");
  EXPECT_EQ(eval(*conf, "$mt_complex", "/q"), "[h.example/q]");
  // A map whose value names itself stops at the nesting bound (8 levels) instead of recursing forever.
  EXPECT_EQ(eval(*conf, "$mt_self", "/"), "xxxxxxxx");
  // `\` makes a parameter name a source string; so does an argument more than the parameter takes (nginx).
  EXPECT_EQ(eval(*conf, "$mt_kw", "/?k=default"), "d");
  EXPECT_EQ(eval(*conf, "$mt_kw", "/?k=hostnames"), "h");
  EXPECT_EQ(eval(*conf, "$mt_kw", "/?k=volatile"), "v");
  EXPECT_EQ(eval(*conf, "$mt_kw", "/?k=include"), "i");
  EXPECT_EQ(eval(*conf, "$mt_kw", "/?k=other"), "none");
}

TEST(MapValues, RegexCaptures) {
  auto conf = load(R"(map $uri $mt_cap {
      ~^/u/(\w+)/(\d+)$ "user=$1 id=$2 host=$host $12";
      ~^/x(.)(.)? "$1$1[$2]$3";
      /exact "e[$1]";
      default "none[$1]";
    })");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_cap", "/u/bob/42"), "user=bob id=42 host=h.example bob2");  // $12 is $1 then "2"
  EXPECT_EQ(eval(*conf, "$mt_cap", "/xy"), "yy[]");  // a group that did not take part, a group that does not exist
  EXPECT_EQ(eval(*conf, "$mt_cap", "/xyz"), "yy[z]");
  EXPECT_EQ(eval(*conf, "$mt_cap", "/exact"), "e[]");
  EXPECT_EQ(eval(*conf, "$mt_cap", "/q"), "none[]");
}

TEST(MapValues, EscapingIsTheUsingTemplates) {
  auto conf = load(R"(map $uri $mt_esc { default "a\"b"; })");
  ASSERT_TRUE(conf);
  Request ex(*conf, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  config::Template t = config::compile("$mt_esc", config::SourceLoc{}, nullptr);
  t.escape = config::LogEscape::kDefault;  // log_format's default escaping applies to the map's value
  std::string out;
  config::expand(t, http::RequestVariables(ex, nullptr), out);
  EXPECT_EQ(out, "a\\x22b");
}

TEST(MapConfig, IncludeInsideTheBlock) {
  char dir[] = "/tmp/kosoku-map-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/entries.map";
  std::ofstream(file) << "/inc included;\n~^/re from-include;\n";
  auto conf = load("map $uri $mt_inc { default d; include " + file + "; /after after; }");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_inc", "/inc"), "included");
  EXPECT_EQ(eval(*conf, "$mt_inc", "/rex"), "from-include");
  EXPECT_EQ(eval(*conf, "$mt_inc", "/after"), "after");
  std::remove(file.c_str());
  ::rmdir(dir);
}

TEST(MapConfig, SameVariableTwiceTheLastMapWins) {
  auto conf = load("map $uri $mt_twice { default one; } map $uri $mt_twice { default two; }");
  ASSERT_TRUE(conf);
  EXPECT_EQ(eval(*conf, "$mt_twice", "/"), "two");
  // A later load of the same process declares it again (the getter reads the configuration it serves).
  auto again = load("map $uri $mt_twice { default three; }");
  ASSERT_TRUE(again);
  EXPECT_EQ(eval(*again, "$mt_twice", "/"), "three");
}

TEST(MapConfig, UsableInEveryTemplateAfterIt) {
  auto conf = load(R"(map $uri $mt_use { default v; }
    log_format mt '$mt_use';
    server { listen 127.0.0.1:8081; add_header X-M $mt_use; location / { return 200 "$mt_use"; }
             location /p { proxy_pass http://127.0.0.1:1; proxy_set_header X-M $mt_use; } })");
  EXPECT_TRUE(conf);
  // kosoku compiles a template where it is written: a map after its first use is not known there yet.
  EXPECT_EQ(load_error("log_format mt2 '$mt_later'; map $uri $mt_later { default v; }"),
            "t.conf:1:23: unknown \"mt_later\" variable");
}

TEST(MapConfig, ErrorsAtFileLineColumn) {
  // Columns count from `http { ` (8 bytes) before the text below.
  EXPECT_EQ(load_error("map $uri $mt_e1 { a 1 2; }"), "t.conf:1:26: invalid number of the map parameters");
  EXPECT_EQ(load_error("map $uri $mt_e2 { a; }"), "t.conf:1:26: invalid number of the map parameters");
  EXPECT_EQ(load_error("map $uri $mt_e3 { default 1; default 2; }"),
            "t.conf:1:37: duplicate default map parameter");
  EXPECT_EQ(load_error("map $uri $mt_e4 { X 1; x 2; }"), "t.conf:1:31: conflicting parameter \"x\"");
  EXPECT_EQ(load_error("map $uri $mt_e5 { hostnames; .a.com 1; a.com 2; }"),
            "t.conf:1:47: conflicting parameter \"a.com\"");
  EXPECT_EQ(load_error("map $uri $mt_e6 { hostnames; *.a.com 1; .a.com 2; }"),
            "t.conf:1:48: conflicting parameter \".a.com\"");
  EXPECT_EQ(load_error("map $uri $mt_e7 { hostnames; a.*.com 1; }"),
            "t.conf:1:37: invalid hostname or wildcard \"a.*.com\"");
  EXPECT_EQ(load_error("map $uri $mt_e8 { hostnames; *.a.* 1; }"),
            "t.conf:1:37: invalid hostname or wildcard \"*.a.*\"");
  EXPECT_EQ(load_error("map $uri $mt_e9 { ~^/(?=a) 1; }"),
            "t.conf:1:26: invalid regular expression \"^/(?=a)\": invalid perl operator: (?=");
  EXPECT_EQ(load_error("map $uri $mt_e10 { ~*( 1; }"),
            "t.conf:1:27: invalid regular expression \"(\": missing ): (");
  EXPECT_EQ(load_error("map $uri $mt_e11 { a $nope; }"), "t.conf:1:29: unknown \"nope\" variable");
  EXPECT_EQ(load_error("map $nope $mt_e12 { a 1; }"), "t.conf:1:12: unknown \"nope\" variable");
  EXPECT_EQ(load_error("map $uri mt_e13 { a 1; }"), "t.conf:1:17: invalid variable name \"mt_e13\"");
  EXPECT_EQ(load_error("map $uri $host { a 1; }"), "t.conf:1:17: the duplicate \"host\" variable");
  EXPECT_EQ(load_error("split_clients $uri $mt_sc { * a; } map $uri $mt_sc { a 1; }"),
            "t.conf:1:52: the duplicate \"mt_sc\" variable");
  EXPECT_EQ(load_error("map $uri $mt_e14 { a { } }"), "t.conf:1:27: unexpected \"{\"");
  EXPECT_EQ(load_error("map $uri { a 1; }"), "t.conf:1:8: invalid number of arguments in \"map\" directive");
  EXPECT_EQ(load_error("map $uri $mt_e15;"), "t.conf:1:8: directive \"map\" has no opening \"{\"");
  EXPECT_EQ(load_error("server { map $uri $mt_e16 { a 1; } }"),
            "t.conf:1:17: \"map\" directive is not allowed here");
}

}  // namespace
}  // namespace kosoku::map
