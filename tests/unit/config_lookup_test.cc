// Per-request lookups: ServerConf::find_location (nginx's location order) and ListenSocket::find_server
// (nginx's virtual-server order), on configurations loaded by the real loader.
#include <string>

#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "gtest/gtest.h"

namespace kosoku::config {
namespace {

std::unique_ptr<const MainConf> load_ok(const std::string& text) {
  LoadResult r = load_from_string(text, "t.conf");
  EXPECT_TRUE(r.ok()) << r.error.message;
  return std::move(r.conf);
}

// The location chosen for `uri`, named by its pattern ("" for the server-level base), with the match kind.
std::string where(const ServerConf& s, std::string_view uri) {
  const LocationConf* l = s.find_location(uri);
  switch (l->match) {
    case LocationConf::Match::kNone:
      return "(server)";
    case LocationConf::Match::kExact:
      return "= " + l->pattern;
    case LocationConf::Match::kPrefixNoRegex:
      return "^~ " + l->pattern;
    case LocationConf::Match::kRegex:
      return "~ " + l->pattern;
    case LocationConf::Match::kRegexCaseless:
      return "~* " + l->pattern;
    case LocationConf::Match::kPrefix:
      return l->pattern;
  }
  return "?";
}

// The example of nginx's `location` documentation, plus nesting.
constexpr char kLocations[] = R"(http { server {
  location = / { }
  location / { }
  location /documents/ { }
  location ^~ /images/ { }
  location ~* \.(gif|jpg|jpeg)$ { }
  location /doc { }
  location /documents/private/ {
    location ~ \.secret$ { }
    location /documents/private/deep/ { }
  }
  location ^~ /static/ {
    location ~ \.css$ { }
  }
  location ~ ^/api/v[0-9]+/ {
    location ~ /users$ { }
  }
  location ~ ^/api/ { }
  location = /exact/ { }
  location /exact/ { }
} })";

TEST(ConfigFindLocation, NginxDocumentationOrder) {
  auto c = load_ok(kLocations);
  const ServerConf& s = *c->http.servers[0];
  EXPECT_EQ(where(s, "/"), "= /");                                  // exact beats prefix "/"
  EXPECT_EQ(where(s, "/index.html"), "/");                          // only "/" matches
  EXPECT_EQ(where(s, "/documents/document.html"), "/documents/");   // longest prefix
  EXPECT_EQ(where(s, "/images/1.gif"), "^~ /images/");              // ^~ stops the regex search
  EXPECT_EQ(where(s, "/documents/1.jpg"), "~* \\.(gif|jpg|jpeg)$"); // regex beats prefix
  EXPECT_EQ(where(s, "/documents/1.JPG"), "~* \\.(gif|jpg|jpeg)$"); // ~* is case-insensitive
  EXPECT_EQ(where(s, "/doc"), "/doc");
  EXPECT_EQ(where(s, "/docx"), "/doc");                              // prefix, not a path segment
  EXPECT_EQ(where(s, "/do"), "/");
}

TEST(ConfigFindLocation, NestedAndRegexOrder) {
  auto c = load_ok(kLocations);
  const ServerConf& s = *c->http.servers[0];
  EXPECT_EQ(where(s, "/documents/private/a.txt"), "/documents/private/");
  EXPECT_EQ(where(s, "/documents/private/a.secret"), "~ \\.secret$");  // nested regex first
  EXPECT_EQ(where(s, "/documents/private/a.jpg"), "~* \\.(gif|jpg|jpeg)$");  // then the outer regexes
  EXPECT_EQ(where(s, "/documents/private/deep/x"), "/documents/private/deep/");
  EXPECT_EQ(where(s, "/documents/private/deep/x.secret"), "~ \\.secret$");  // regex of the enclosing level
  EXPECT_EQ(where(s, "/static/a.css"), "~ \\.css$");    // ^~ still searches its own nested regexes
  EXPECT_EQ(where(s, "/static/a.jpg"), "^~ /static/");  // but not the outer ones
  EXPECT_EQ(where(s, "/api/v2/users"), "~ /users$");    // nested location of a regex location
  EXPECT_EQ(where(s, "/api/v2/items"), "~ ^/api/v[0-9]+/");
  EXPECT_EQ(where(s, "/api/x"), "~ ^/api/");            // first matching regex in file order
  EXPECT_EQ(where(s, "/exact/"), "= /exact/");
  EXPECT_EQ(where(s, "/exact/more"), "/exact/");
}

TEST(ConfigFindLocation, NoMatchGivesServerBase) {
  auto c = load_ok("http { server { root /srv; location /a { } location = /b { } location ~ c$ { } } }");
  const ServerConf& s = *c->http.servers[0];
  EXPECT_EQ(where(s, "/x"), "(server)");
  EXPECT_EQ(s.find_location("/x"), &s.base);
  EXPECT_EQ(where(s, "/bb"), "(server)");
  EXPECT_EQ(where(s, "/ac"), "~ c$");
  EXPECT_EQ(where(s, "/a"), "/a");
  EXPECT_EQ(where(s, ""), "(server)");
  EXPECT_EQ(s.base.root, "/srv");
}

TEST(ConfigFindLocation, PrefixChainsWithManySiblings) {
  // Sorted neighbours that are not prefixes of each other: the parent chain must skip them.
  auto c = load_ok(R"(http { server {
    location /a { } location /a/b { } location /a/b/c { } location /a/bz { } location /a/b/d { }
    location /a/c { } location /b { } location /a/b/ca { }
  } })");
  const ServerConf& s = *c->http.servers[0];
  EXPECT_EQ(where(s, "/a/b/cz"), "/a/b/c");
  EXPECT_EQ(where(s, "/a/b/e"), "/a/b");
  EXPECT_EQ(where(s, "/a/bzz"), "/a/bz");
  EXPECT_EQ(where(s, "/a/b/caa"), "/a/b/ca");
  EXPECT_EQ(where(s, "/a/b/d/x"), "/a/b/d");
  EXPECT_EQ(where(s, "/a/d"), "/a");
  EXPECT_EQ(where(s, "/ba"), "/b");
  EXPECT_EQ(where(s, "/c"), "(server)");
  // Exhaustive check against a plain longest-prefix scan.
  std::vector<std::string> pats = {"/a", "/a/b", "/a/b/c", "/a/bz", "/a/b/d", "/a/c", "/b", "/a/b/ca"};
  for (std::string uri : {"/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c", "/a/b/ca", "/a/b/cb", "/a/bz", "/a/c/x", "/b/x", "/bb"}) {
    std::string best = "(server)";
    size_t len = 0;
    for (const std::string& p : pats) {
      if (uri.compare(0, p.size(), p) == 0 && p.size() > len) {
        best = p;
        len = p.size();
      }
    }
    EXPECT_EQ(where(s, uri), best) << uri;
  }
}

// ---- server selection ----

constexpr char kServers[] = R"(http {
  server { listen 80; server_name first.test; }
  server { listen 80; server_name example.com www.example.com; }
  server { listen 80; server_name *.example.com; }
  server { listen 80; server_name *.sub.example.com; }
  server { listen 80; server_name .example.org; }
  server { listen 80; server_name www.example.*; }
  server { listen 80; server_name www.example.co.*; }
  server { listen 80; server_name ~^(?P<n>[a-z]+)\.regex\.test$ ~^api\.; }
  server { listen 80 default_server; server_name default.test; }
  server { listen 80; server_name ""; }
  server { listen 81; }
})";

std::string pick(const ListenSocket& ls, std::string_view host) {
  const ServerConf* s = ls.find_server(host);
  return s->server_names.empty() ? "(none)" : s->server_names[0];
}

TEST(ConfigFindServer, NginxOrder) {
  auto c = load_ok(kServers);
  const ListenSocket& ls = c->http.listen_sockets[0];
  EXPECT_EQ(pick(ls, "example.com"), "example.com");              // exact
  EXPECT_EQ(pick(ls, "www.example.com"), "example.com");          // exact beats *.example.com and www.example.*
  EXPECT_EQ(pick(ls, "mail.example.com"), "*.example.com");       // leading wildcard
  EXPECT_EQ(pick(ls, "a.sub.example.com"), "*.sub.example.com");  // longest leading wildcard
  EXPECT_EQ(pick(ls, "a.b.example.com"), "*.example.com");
  EXPECT_EQ(pick(ls, "example.org"), ".example.org");             // .name matches the name itself
  EXPECT_EQ(pick(ls, "x.y.example.org"), ".example.org");
  EXPECT_EQ(pick(ls, "www.example.net"), "www.example.*");        // trailing wildcard
  EXPECT_EQ(pick(ls, "www.example.co.uk"), "www.example.co.*");   // longest trailing wildcard
  EXPECT_EQ(pick(ls, "foo.regex.test"), "~^(?P<n>[a-z]+)\\.regex\\.test$");  // regex
  EXPECT_EQ(pick(ls, "api.anything"), "~^(?P<n>[a-z]+)\\.regex\\.test$");    // 2nd regex of that server
  EXPECT_EQ(pick(ls, "FOO1.regex.test"), "default.test");          // no match → default_server
  EXPECT_EQ(pick(ls, "unknown.test"), "default.test");
  EXPECT_EQ(pick(ls, "first.test."), "first.test");                // trailing dot ignored
  EXPECT_EQ(pick(ls, ""), "");                                      // server_name "" matches no Host
  EXPECT_EQ(pick(ls, "example"), "default.test");
  EXPECT_EQ(pick(ls, "www.example"), "default.test");              // "www.example.*" needs a label after the dot
  const ListenSocket& other = c->http.listen_sockets[1];
  EXPECT_EQ(pick(other, "anything"), "(none)");
  EXPECT_EQ(pick(other, ""), "(none)");
}

TEST(ConfigFindServer, DefaultIsFirstWithoutDefaultServer) {
  auto c = load_ok("http { server { server_name a; } server { server_name b; } }");
  const ListenSocket& ls = c->http.listen_sockets[0];
  EXPECT_EQ(ls.default_server, c->http.servers[0].get());
  EXPECT_EQ(pick(ls, "b"), "b");
  EXPECT_EQ(pick(ls, "c"), "a");
  EXPECT_EQ(pick(ls, ""), "a");  // neither has "": default
}

TEST(ConfigFindServer, RegexIsCaseInsensitiveAndFileOrdered) {
  auto c = load_ok("http { server { server_name ~^a; } server { server_name ~^ab; } server { server_name z; } }");
  const ListenSocket& ls = c->http.listen_sockets[0];
  EXPECT_EQ(pick(ls, "abc"), "~^a");
  EXPECT_EQ(pick(ls, "ABC"), "~^a");
  EXPECT_EQ(pick(ls, "zz"), "~^a");  // default: first server
}

}  // namespace
}  // namespace kosoku::config
