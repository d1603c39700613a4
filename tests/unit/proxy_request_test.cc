// Unit tests for core/proxy/proxy_request (the upstream request head and the client response head) and for
// the proxy directives (proxy/proxy_directives.cc): real configuration text, real parsed requests, a minimal
// Exchange that only carries the request (the functions under test read nothing else).
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cache/cache_variables.hh"
#include "core/config/loader.hh"
#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/upstream_state.hh"
#include "tests/unit/test_exchange.hh"

namespace kosoku::proxy {
namespace {

/// The request side of an exchange, as the connection would present it.
class RequestOnly final : public testing::TestExchange {
 public:
  RequestOnly(const config::MainConf& conf, std::string raw) : raw_(std::move(raw)) {
    req.fields = fields_;
    http::ParseResult r = http::parse_request(raw_, req, http::ParserLimits{});
    EXPECT_EQ(r.status, http::ParseStatus::kComplete) << r.reason;
    http::normalize_path(req.path, uri_text);
    core_ctx.conf = &conf;  // the configuration, as a core has it (split_clients, $cache_rule defaults)
    server_conf = conf.http.servers[0].get();
    loc = server_conf->find_location(uri_text);
    host_lower = std::string(req.host_name);
    for (char& c : host_lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    client_addr = "192.0.2.10";
    port = 8080;
    head_length = raw_.size();
  }
  uint64_t connection_id() const override { return 7; }

 private:
  std::string raw_;
  http::HeaderField fields_[64];
};

std::unique_ptr<const config::MainConf> load(const std::string& http_body) {
  config::LoadResult r = config::load_from_string("http { " + http_body + " }", "t.conf");
  EXPECT_TRUE(r.conf != nullptr) << r.error.message;
  return std::move(r.conf);
}

std::string load_error(const std::string& http_body) {
  config::LoadResult r = config::load_from_string("http { " + http_body + " }", "t.conf");
  EXPECT_TRUE(r.conf == nullptr) << "expected an error for: " << http_body;
  return r.error.message;
}

std::string head_for(const config::MainConf& conf, const std::string& raw, BodyFraming framing = BodyFraming::kNone,
                     uint64_t length = 0) {
  RequestOnly ex(conf, raw);
  EXPECT_TRUE(ex.location().module<ProxyLocationConf>().pass);
  std::string out;
  build_request_head(ex, ex.location().module<ProxyLocationConf>(), framing, length, out);
  return out;
}

constexpr char kServer[] = "server { listen 127.0.0.1:8080; ";

std::string first_line(const std::string& head) { return head.substr(0, head.find("\r\n")); }

TEST(ProxyRequest, DefaultsWithoutUriPart) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:8081; } }");
  const std::string h = head_for(*conf,
                                 "GET /a%20b/../c?x=%2F&y HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: t\r\n"
                                 "Accept: */*\r\n\r\n");
  EXPECT_EQ(h,
            "GET /a%20b/../c?x=%2F&y HTTP/1.0\r\n"  // the target as received
            "Host: 127.0.0.1:8081\r\n"               // $proxy_host
            "Connection: close\r\n"
            "User-Agent: t\r\n"
            "Accept: */*\r\n"
            "\r\n");
}

TEST(ProxyRequest, UriPartReplacesTheLocationPrefix) {
  auto conf = load(std::string(kServer) +
                   "location /api/ { proxy_pass http://127.0.0.1:81/v2/; proxy_http_version 1.1; } "
                   "location = /one { proxy_pass http://127.0.0.1:81/single; } "
                   "location /root/ { proxy_pass http://127.0.0.1:81/; } }");
  EXPECT_EQ(first_line(head_for(*conf, "GET /api/users/x%20y%3Fz?q=1 HTTP/1.1\r\nHost: h\r\n\r\n")),
            "GET /v2/users/x%20y%3Fz?q=1 HTTP/1.1");
  // The URI is normalised first (dot-segments, merged slashes), as nginx's $uri.
  EXPECT_EQ(first_line(head_for(*conf, "GET /api//a/./b/../c HTTP/1.1\r\nHost: h\r\n\r\n")), "GET /v2/a/c HTTP/1.1");
  EXPECT_EQ(first_line(head_for(*conf, "GET /one?k=v HTTP/1.1\r\nHost: h\r\n\r\n")), "GET /single?k=v HTTP/1.0");
  EXPECT_EQ(first_line(head_for(*conf, "GET /root/caf%C3%A9 HTTP/1.1\r\nHost: h\r\n\r\n")), "GET /caf%C3%A9 HTTP/1.0");
  // proxy_host of an explicit port 80 omits it.
  auto conf80 = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:80; } }");
  EXPECT_NE(head_for(*conf80, "GET / HTTP/1.1\r\nHost: h\r\n\r\n").find("\r\nHost: 127.0.0.1\r\n"), std::string::npos);
}

TEST(ProxyRequest, HopByHopAndConnectionNamedFieldsAreRemoved) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:8081; } }");
  const std::string h = head_for(*conf,
                                 "POST /p HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Private\r\n"
                                 "X-Private: secret\r\nKeep-Alive: 5\r\nTE: trailers\r\nTrailer: X-T\r\n"
                                 "Upgrade: websocket\r\nProxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\n"
                                 "Expect: 100-continue\r\nContent-Length: 3\r\nX-Public: yes\r\n\r\n",
                                 BodyFraming::kLength, 3);
  EXPECT_EQ(h,
            "POST /p HTTP/1.0\r\nHost: 127.0.0.1:8081\r\nConnection: close\r\nContent-Length: 3\r\n"
            "X-Public: yes\r\n\r\n");
}

TEST(ProxyRequest, NeverBothFramings) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:8081; proxy_http_version 1.1; } }");
  const std::string chunked =
      head_for(*conf, "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", BodyFraming::kChunked);
  EXPECT_NE(chunked.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_EQ(chunked.find("Content-Length"), std::string::npos);
  const std::string length =
      head_for(*conf, "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", BodyFraming::kLength, 11);
  EXPECT_NE(length.find("\r\nContent-Length: 11\r\n"), std::string::npos);
  EXPECT_EQ(length.find("Transfer-Encoding"), std::string::npos);
  const std::string none = head_for(*conf, "GET /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(none.find("Content-Length"), std::string::npos);
}

TEST(ProxyRequest, CacheEditsDropConditionalsConvertHeadAndAddValidators) {
  // The cache's request to the origin (RequestEdits): the client's If-*/Range are never sent (the cache answers
  // them), HEAD goes as GET (proxy_cache_convert_head), the stored validators are added.
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:8081; } }");
  RequestOnly ex(*conf,
                 "HEAD /p?q=1 HTTP/1.1\r\nHost: a.example\r\nIf-None-Match: \"c\"\r\nRange: bytes=0-1\r\n"
                 "If-Range: \"c\"\r\nIf-Modified-Since: Thu, 01 Jan 2015 00:00:00 GMT\r\nIf-Match: *\r\n"
                 "If-Unmodified-Since: Thu, 01 Jan 2015 00:00:00 GMT\r\nAccept: */*\r\n\r\n");
  RequestEdits edits;
  edits.method = "GET";
  edits.drop_conditionals = true;
  edits.extra_fields = "If-None-Match: \"s\"\r\n";
  std::string out;
  build_request_head(ex, ex.location().module<proxy::ProxyLocationConf>(), BodyFraming::kNone, 0, out, &edits);
  EXPECT_EQ(out,
            "GET /p?q=1 HTTP/1.0\r\n"
            "Host: 127.0.0.1:8081\r\n"
            "Connection: close\r\n"
            "Accept: */*\r\n"
            "If-None-Match: \"s\"\r\n"
            "\r\n");
  // Without edits the same request goes as it came (the proxy's own path).
  build_request_head(ex, ex.location().module<proxy::ProxyLocationConf>(), BodyFraming::kNone, 0, out);
  EXPECT_EQ(first_line(out), "HEAD /p?q=1 HTTP/1.0");
  EXPECT_NE(out.find("If-None-Match: \"c\"\r\n"), std::string::npos);
  EXPECT_NE(out.find("Range: bytes=0-1\r\n"), std::string::npos);
  // The validators are sent even when the client's fields are not (proxy_pass_request_headers off).
  auto off = load(std::string(kServer) +
                  "location / { proxy_pass http://127.0.0.1:8081; proxy_pass_request_headers off; } }");
  RequestOnly ex2(*off, "GET / HTTP/1.1\r\nHost: a.example\r\nIf-None-Match: \"c\"\r\n\r\n");
  build_request_head(ex2, ex2.location().module<proxy::ProxyLocationConf>(), BodyFraming::kNone, 0, out, &edits);
  EXPECT_EQ(out, "GET / HTTP/1.0\r\nHost: 127.0.0.1:8081\r\nConnection: close\r\nIf-None-Match: \"s\"\r\n\r\n");
}

TEST(ProxyRequest, LogContextInTwoPartsIsTheWhole) {
  // A fetch that outlives its client (the cache's) keeps the two parts; they make the same line.
  auto conf = load(std::string(kServer) + "server_name s.example; location / { proxy_pass http://127.0.0.1:8081; } }");
  RequestOnly ex(*conf, "GET /a\"b HTTP/1.1\r\nHost: h.example\r\n\r\n");
  const std::string whole = upstream_log_context(ex, "http://127.0.0.1:8081");
  EXPECT_EQ(whole, log_context_before_upstream(ex) + ", upstream: \"http://127.0.0.1:8081\"" +
                       log_context_after_upstream(ex));
  EXPECT_EQ(whole,
            ", client: 192.0.2.10, server: s.example, request: \"GET /a\\x22b HTTP/1.1\", upstream: "
            "\"http://127.0.0.1:8081\", host: \"h.example\"");
}

TEST(ProxyRequest, SetHeadersVariablesAndRemoval) {
  auto conf = load(std::string(kServer) +
                   "location / { proxy_pass http://backend; "
                   "proxy_set_header Host $host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; "
                   "proxy_set_header X-Real-IP $remote_addr; proxy_set_header Accept-Encoding \"\"; "
                   "proxy_set_header X-Uri \"$request_method $uri$is_args$args\"; proxy_set_header X-Missing $http_x_none; } } "
                   "upstream backend { server 127.0.0.1:9; }");
  const std::string h = head_for(*conf,
                                 "GET /a?b=1 HTTP/1.1\r\nHost: WWW.Example.COM:8080\r\nX-Forwarded-For: 198.51.100.1\r\n"
                                 "X-Real-IP: 6.6.6.6\r\nAccept-Encoding: gzip\r\nhost-ish: 1\r\n\r\n");
  EXPECT_EQ(h,
            "GET /a?b=1 HTTP/1.0\r\n"
            "Host: www.example.com\r\n"
            "X-Forwarded-For: 198.51.100.1, 192.0.2.10\r\n"
            "X-Real-IP: 192.0.2.10\r\n"
            "X-Uri: GET /a?b=1\r\n"
            "Connection: close\r\n"
            "host-ish: 1\r\n"
            "\r\n");
}

// A decoded $uri holds the client's %0d%0a: the field sent upstream gets SP for every control byte (no CR,
// LF, NUL, ESC or DEL), so it can neither be split nor carry bytes a field value may not hold.
TEST(ProxyRequest, SetHeaderVariablesCannotSplitTheField) {
  auto conf = load(std::string(kServer) +
                   "location / { proxy_pass http://127.0.0.1:81; proxy_set_header X-U \"[$uri]\"; } }");
  const std::string h = head_for(*conf, "GET /a%0d%0aX-Evil:%201%01%1b%7f%09z HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(h,
            "GET /a%0d%0aX-Evil:%201%01%1b%7f%09z HTTP/1.0\r\n"
            "X-U: [/a  X-Evil: 1   \tz]\r\n"
            "Host: 127.0.0.1:81\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(ProxyRequest, PassRequestHeadersOff) {
  auto conf = load(std::string(kServer) +
                   "location / { proxy_pass http://127.0.0.1:81; proxy_pass_request_headers off; } }");
  EXPECT_EQ(head_for(*conf, "GET / HTTP/1.1\r\nHost: h\r\nCookie: c=1\r\n\r\n"),
            "GET / HTTP/1.0\r\nHost: 127.0.0.1:81\r\nConnection: close\r\n\r\n");
}

TEST(ProxyRequest, EscapeUri) {
  std::string out;
  append_escaped_uri("/a b#c%d?e\x01\x7f\xc3\xa9/ok~!$&'()*+,;=:@", out);
  EXPECT_EQ(out, "/a%20b%23c%25d%3Fe%01%7F%C3%A9/ok~!$&'()*+,;=:@");
}

TEST(ProxyRequest, Idempotency) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  for (const char* m : {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PURGE"}) {
    RequestOnly ex(*conf, std::string(m) + " / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_TRUE(idempotent(ex.request())) << m;
  }
  for (const char* m : {"POST", "PATCH", "LOCK"}) {
    RequestOnly ex(*conf, std::string(m) + " / HTTP/1.1\r\nHost: h\r\n\r\n");
    EXPECT_FALSE(idempotent(ex.request())) << m;
  }
}

// ---- the response head passed to the client ----

struct Upstream {
  std::string raw;
  http::HeaderField fields[32];
  http::ParsedResponse resp;
  explicit Upstream(std::string r, bool head = false) : raw(std::move(r)) {
    resp.fields = fields;
    EXPECT_EQ(http::parse_response_head(raw, resp, http::ResponseLimits{}, head).status, http::ParseStatus::kComplete);
  }
};

TEST(ProxyResponse, FieldsPassedAndRemoved) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  const ProxyLocationConf& p = conf->http.servers[0]->locations[0].module<ProxyLocationConf>();
  Upstream u(
      "HTTP/1.1 201 Created\r\nServer: origin\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\nContent-Type: text/plain\r\n"
      "Content-Length: 4\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nETag: \"v1\"\r\n"
      "Location: /new\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Pad: avoid\r\nX-Accel-Expires: 10\r\n"
      "Last-Modified: Tue, 02 Jan 2001 00:00:00 GMT\r\nProxy-Connection: close\r\nVary: Accept\r\n\r\n");
  http::ResponseHead h;
  build_response_head(u.resp, p, h);
  EXPECT_EQ(h.status, 201);
  EXPECT_EQ(h.content_type, "text/plain");
  EXPECT_EQ(h.content_length, 4);
  EXPECT_EQ(h.etag, "\"v1\"");
  EXPECT_EQ(h.location, "/new");
  EXPECT_EQ(h.extra,
            "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nLast-Modified: Tue, 02 Jan 2001 00:00:00 GMT\r\nVary: Accept\r\n");
}

TEST(ProxyResponse, LengthOnlyWhenTheUpstreamGaveOne) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  const ProxyLocationConf& p = conf->http.servers[0]->locations[0].module<ProxyLocationConf>();
  http::ResponseHead h;
  build_response_head(Upstream("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").resp, p, h);
  EXPECT_EQ(h.content_length, -1);  // the client connection re-chunks (or closes for HTTP/1.0)
  EXPECT_EQ(h.extra, "");
  build_response_head(Upstream("HTTP/1.0 200 OK\r\n\r\n").resp, p, h);
  EXPECT_EQ(h.content_length, -1);
  build_response_head(Upstream("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", /*head=*/true).resp, p, h);
  EXPECT_EQ(h.content_length, 99);  // HEAD: the length a GET would have
}

TEST(ProxyResponse, HideAndPassHeader) {
  auto conf = load(std::string(kServer) +
                   "location / { proxy_pass http://127.0.0.1:81; proxy_hide_header X-Internal; proxy_pass_header Server; "
                   "proxy_pass_header X-Pad; } }");
  const ProxyLocationConf& p = conf->http.servers[0]->locations[0].module<ProxyLocationConf>();
  http::ResponseHead h;
  build_response_head(
      Upstream("HTTP/1.1 200 OK\r\nServer: origin\r\nX-Internal: 1\r\nX-Pad: avoid\r\nDate: x\r\nContent-Length: 0\r\n\r\n").resp,
      p, h);
  EXPECT_EQ(h.extra, "Server: origin\r\nX-Pad: avoid\r\n");
}

// ---- directives ----

TEST(ProxyConfig, Defaults) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  const ProxyLocationConf& p = conf->http.servers[0]->locations[0].module<ProxyLocationConf>();
  EXPECT_TRUE(p.pass);
  EXPECT_EQ(p.http_version_minor, 0);
  EXPECT_EQ(p.connect_timeout_ms, 60000u);
  EXPECT_EQ(p.read_timeout_ms, 60000u);
  EXPECT_EQ(p.send_timeout_ms, 60000u);
  EXPECT_TRUE(p.buffering);
  EXPECT_EQ(p.buffer_size, 4096u);
  EXPECT_EQ(p.next_upstream, kNextError | kNextTimeout);
  EXPECT_EQ(p.next_upstream_tries, 0u);
  std::vector<std::string> names;
  for (const ProxySetHeader& h : p.headers) names.push_back(h.name + "=" + h.value);
  EXPECT_EQ(names, (std::vector<std::string>{"Host=$proxy_host", "Connection=close", "TE=", "Keep-Alive=",
                                             "Expect=", "Upgrade="}));
  EXPECT_EQ(p.hidden.size(), 8u);
  ASSERT_NE(p.upstream, nullptr);
  EXPECT_TRUE(p.upstream->implicit);
  EXPECT_EQ(p.upstream->servers[0].addr_text, "127.0.0.1:81");
  EXPECT_EQ(p.proxy_host, "127.0.0.1:81");
  EXPECT_EQ(p.proxy_port, 81);
}

TEST(ProxyConfig, InheritanceIsNginxs) {
  auto conf = load(
      "proxy_set_header X-A 1; proxy_read_timeout 5s; proxy_http_version 1.1; "
      "server { listen 127.0.0.1:8080; proxy_connect_timeout 2s; "
      "location /inherits/ { proxy_pass http://127.0.0.1:81; } "
      "location /own/ { proxy_pass http://127.0.0.1:81; proxy_set_header X-B 2; proxy_buffering off; "
      "  location /own/nested/ { proxy_pass http://127.0.0.1:82; } } "
      "location /plain/ { location /plain/inner/ { } } }");
  const auto& locs = conf->http.servers[0]->locations;
  const ProxyLocationConf& inh = locs[0].module<ProxyLocationConf>();
  EXPECT_EQ(inh.read_timeout_ms, 5000u);
  EXPECT_EQ(inh.connect_timeout_ms, 2000u);
  EXPECT_EQ(inh.http_version_minor, 1);
  ASSERT_EQ(inh.set_header.size(), 1u);
  EXPECT_EQ(inh.set_header[0].name, "X-A");
  const ProxyLocationConf& own = locs[1].module<ProxyLocationConf>();
  ASSERT_EQ(own.set_header.size(), 1u);  // a block with its own list does not inherit the outer one
  EXPECT_EQ(own.set_header[0].name, "X-B");
  EXPECT_FALSE(own.buffering);
  const ProxyLocationConf& nested = locs[1].locations[0].module<ProxyLocationConf>();
  EXPECT_FALSE(nested.buffering);
  EXPECT_EQ(nested.set_header[0].name, "X-B");
  EXPECT_EQ(nested.upstream->servers[0].addr_text, "127.0.0.1:82");
  // proxy_pass is not inherited (nginx): a nested location without it serves files.
  EXPECT_FALSE(locs[2].module<ProxyLocationConf>().pass);
  EXPECT_FALSE(locs[2].locations[0].module<ProxyLocationConf>().pass);
}

TEST(ProxyConfig, UpstreamBlock) {
  auto conf = load(
      "upstream app { server 10.0.0.1:8080 weight=3 max_fails=2 fail_timeout=30s; server [::1]:81 down; "
      "server localhost backup; keepalive 16; keepalive_timeout 30s; keepalive_requests 500; } "
      "upstream h { hash $request_uri consistent; server 10.0.0.2; server 10.0.0.3; } "
      "server { listen 127.0.0.1:8080; location / { proxy_pass http://app; } location /h/ { proxy_pass http://h/; } "
      "location /a/ { proxy_pass http://10.9.9.9:7; } location /b/ { proxy_pass http://10.9.9.9:7/b/; } }");
  const auto& ups = conf->http.module<ProxyHttpConf>().upstreams;
  ASSERT_EQ(ups.size(), 3u);  // two blocks and one implicit group shared by /a/ and /b/
  const UpstreamConf& app = *ups[0];
  EXPECT_EQ(app.name, "app");
  EXPECT_EQ(app.index, 0u);
  ASSERT_EQ(app.servers.size(), 3u);
  EXPECT_EQ(app.servers[0].weight, 3u);
  EXPECT_EQ(app.servers[0].max_fails, 2u);
  EXPECT_EQ(app.servers[0].fail_timeout_ms, 30000u);
  EXPECT_EQ(app.servers[1].addr_text, "[::1]:81");
  EXPECT_TRUE(app.servers[1].down);
  EXPECT_EQ(app.servers[2].addr_text, "127.0.0.1:80");
  EXPECT_TRUE(app.servers[2].backup);
  EXPECT_EQ(app.keepalive, 16u);
  EXPECT_EQ(app.keepalive_timeout_ms, 30000u);
  EXPECT_EQ(app.keepalive_requests, 500u);
  EXPECT_TRUE(ups[1]->hash_consistent);
  EXPECT_EQ(ups[1]->hash_key_text, "$request_uri");
  const auto& locs = conf->http.servers[0]->locations;
  EXPECT_EQ(locs[0].module<ProxyLocationConf>().upstream, &app);
  EXPECT_EQ(locs[0].module<ProxyLocationConf>().proxy_host, "app");
  EXPECT_EQ(locs[1].module<ProxyLocationConf>().upstream, ups[1].get());
  EXPECT_EQ(locs[2].module<ProxyLocationConf>().upstream, locs[3].module<ProxyLocationConf>().upstream);
  EXPECT_TRUE(ups[2]->implicit);
  EXPECT_EQ(ups[2]->index, 2u);
}

TEST(ProxyConfig, Errors) {
  const std::string srv = "server { listen 127.0.0.1:8080; ";
  EXPECT_NE(load_error(srv + "location / { proxy_pass http://nosuch; } }").find("host not found in upstream \"nosuch\""),
            std::string::npos);
  EXPECT_NE(load_error("upstream u { server 10.0.0.1; } " + srv + "location / { proxy_pass http://u:8080; } }")
                .find("upstream \"u\" may not have port 8080"),
            std::string::npos);
  EXPECT_NE(load_error(srv + "location ~ x { proxy_pass http://10.0.0.1/x; } }").find("cannot have URI part"),
            std::string::npos);
  EXPECT_NE(load_error(srv + "location / { proxy_pass https://10.0.0.1; proxy_ssl_verify on; } }")
                .find("no \"proxy_ssl_trusted_certificate\" for \"proxy_ssl_verify\""),
            std::string::npos);
  EXPECT_NE(load_error(srv + "location / { proxy_pass ftp://10.0.0.1; } }").find("invalid URL prefix"),
            std::string::npos);
  EXPECT_NE(load_error(srv + "location / { proxy_pass http://10.0.0.1:99999; } }").find("invalid port"),
            std::string::npos);
  EXPECT_NE(load_error(srv + "proxy_pass http://10.0.0.1; }").find("not allowed here"), std::string::npos);
  EXPECT_NE(load_error("upstream u { keepalive 4; }").find("no servers are inside upstream \"u\""), std::string::npos);
  EXPECT_NE(load_error("upstream u { server 10.0.0.1; } upstream u { server 10.0.0.2; }").find("duplicate upstream"),
            std::string::npos);
  EXPECT_NE(load_error("upstream u { server 10.0.0.1 weight=0; }").find("invalid parameter \"weight=0\""),
            std::string::npos);
  // RFC 6761: .invalid names never resolve.
  EXPECT_NE(load_error("upstream u { server nosuchhost.invalid; }")
                .find("t.conf:1:28: host not found in upstream \"nosuchhost.invalid\""),
            std::string::npos);
  EXPECT_NE(load_error("upstream u { server unix:/tmp/s; }").find("unix domain sockets"), std::string::npos);
  EXPECT_NE(load_error("upstream u { hash $uri; server 10.0.0.1; server 10.0.0.2 backup; }").find("backup"),
            std::string::npos);
  EXPECT_NE(load_error("upstream u { server 10.0.0.1; least_time header; }").find("unknown directive \"least_time\""),
            std::string::npos);
  EXPECT_NE(load_error("upstream u { server 10.0.0.1; hash $nosuchvar; }").find("unknown \"nosuchvar\" variable"),
            std::string::npos);
  EXPECT_NE(load_error("proxy_next_upstream off error;").find("invalid value"), std::string::npos);
  EXPECT_NE(load_error("proxy_next_upstream http_418;").find("invalid value \"http_418\""), std::string::npos);
  EXPECT_NE(load_error("proxy_http_version 2.0;").find("invalid value \"2.0\""), std::string::npos);
  EXPECT_NE(load_error("proxy_set_header X-A $nosuch;").find("unknown \"nosuch\" variable"), std::string::npos);
}

// LoadOptions::resolve_names off (the config fuzzer): a name is not looked up (no DNS query) and stands for
// 127.0.0.1, in upstream blocks and in proxy_pass alike; an address is still an address.
TEST(ProxyConfig, NamesNotResolvedWhenAskedNot) {
  config::LoadOptions opts;
  opts.resolve_names = false;
  config::LoadResult r = config::load_from_string(
      "http { upstream u { server nosuchhost.invalid:81; server 10.0.0.7:82; } server { listen 127.0.0.1:8080; "
      "location /a { proxy_pass http://u; } location /b { proxy_pass http://other.invalid:83; } } }",
      "t.conf", opts);
  ASSERT_TRUE(r.ok()) << r.error.message;
  const auto& locs = r.conf->http.servers[0]->locations;
  ASSERT_EQ(locs[0].module<ProxyLocationConf>().upstream->servers.size(), 2u);
  EXPECT_EQ(locs[0].module<ProxyLocationConf>().upstream->servers[0].addr_text, "127.0.0.1:81");
  EXPECT_EQ(locs[0].module<ProxyLocationConf>().upstream->servers[1].addr_text, "10.0.0.7:82");
  EXPECT_EQ(locs[1].module<ProxyLocationConf>().upstream->servers[0].addr_text, "127.0.0.1:83");
  EXPECT_EQ(locs[1].module<ProxyLocationConf>().proxy_host, "other.invalid:83");
  // Resolved (the default), the same names are errors.
  EXPECT_FALSE(config::load_from_string("http { upstream u { server nosuchhost.invalid:81; } }", "t.conf").ok());
}

// $arg_NAME and $cookie_NAME have one definition (http/variables.cc), and the source without a response (the
// one proxy_set_header and proxy_cache_key expand against) gives the same values as log_format's.
TEST(ProxyVariablesTest, ArgAndCookieAreTheSharedOnes) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  RequestOnly ex(*conf, "GET /p?a=1&NoCache=yes&flag HTTP/1.1\r\nHost: h\r\nCookie: s=1; Theme = dark \r\n"
                        "Cookie: late=2\r\n\r\n");
  const config::Template t = config::compile("[$arg_nocache|$arg_flag|$arg_none|$cookie_theme|$cookie_late|$cookie_x]",
                                             config::SourceLoc{}, nullptr);
  std::string shared, proxied, cached;
  config::expand(t, http::RequestVariables(ex, {}, nullptr), shared);
  config::expand(t, http::RequestVariables(ex, nullptr), proxied);
  config::expand(t, http::RequestVariables(ex, nullptr), cached);
  EXPECT_EQ(shared, "[yes|||dark|2|]");
  EXPECT_EQ(proxied, shared);
  EXPECT_EQ(cached, shared);
}

// Every registered variable resolves in every template: the proxy's $proxy_host in add_header's or
// log_format's source (the one with a response), a split_clients variable outside the cache's templates.
TEST(ProxyVariablesTest, ModuleVariablesResolveInEveryTemplate) {
  auto conf = load("split_clients $uri $half { 50% a; * b; } " + std::string(kServer) +
                   "location / { proxy_pass http://127.0.0.1:81; } }");
  RequestOnly ex(*conf, "GET /p HTTP/1.1\r\nHost: h\r\n\r\n");
  const config::Template t = config::compile("[$proxy_host|$proxy_port|$half]", config::SourceLoc{}, nullptr);
  std::string with_response, before_response;
  config::expand(t, http::RequestVariables(ex, http::RequestVariables::Response{200, 0, 0, 0}, nullptr), with_response);
  config::expand(t, http::RequestVariables(ex, nullptr), before_response);
  EXPECT_TRUE(with_response == "[127.0.0.1:81|81|a]" || with_response == "[127.0.0.1:81|81|b]") << with_response;
  EXPECT_EQ(before_response, with_response);
  // The response variables exist only once there is a response.
  const config::Template st = config::compile("[$status]", config::SourceLoc{}, nullptr);
  std::string a, b;
  config::expand(st, http::RequestVariables(ex, http::RequestVariables::Response{204, 0, 0, 0}, nullptr), a);
  config::expand(st, http::RequestVariables(ex, nullptr), b);
  EXPECT_EQ(a, "[204]");
  EXPECT_EQ(b, "[]");
}

// nginx resolves host names when the configuration loads; every address becomes a server.
TEST(ProxyConfig, HostNamesResolveAtLoad) {
  auto conf = load("upstream u { server localhost:8081 weight=2 max_fails=3; server 127.0.0.2:8082; } " +
                   std::string(kServer) + "location / { proxy_pass http://u; } location /n/ { proxy_pass "
                   "http://localhost:8083; } location /m/ { proxy_pass http://LOCALHOST:8083/x/; } }");
  const auto& ups = conf->http.module<ProxyHttpConf>().upstreams;
  ASSERT_GE(ups[0]->servers.size(), 2u);
  const UpstreamServerConf& first = ups[0]->servers[0];
  EXPECT_EQ(first.name, "localhost:8081");
  EXPECT_EQ(first.addr_text, "127.0.0.1:8081");  // /etc/hosts: localhost is 127.0.0.1 (IPv4 first)
  for (size_t i = 0; i + 1 < ups[0]->servers.size(); ++i) {
    EXPECT_EQ(ups[0]->servers[i].weight, 2u);
    EXPECT_EQ(ups[0]->servers[i].max_fails, 3u);
    EXPECT_NE(ups[0]->servers[i].addr_text.find("8081"), std::string::npos);
  }
  EXPECT_EQ(ups[0]->servers.back().addr_text, "127.0.0.2:8082");
  const auto& locs = conf->http.servers[0]->locations;
  const UpstreamConf* implicit = locs[1].module<ProxyLocationConf>().upstream;
  EXPECT_TRUE(implicit->implicit);
  EXPECT_EQ(implicit->name, "localhost:8083");
  EXPECT_EQ(implicit->servers[0].addr_text, "127.0.0.1:8083");
  EXPECT_EQ(locs[2].module<ProxyLocationConf>().upstream, implicit);  // one implicit group per NAME:PORT (case-insensitive)
  EXPECT_NE(load_error(std::string(kServer) + "location / { proxy_pass http://nosuchhost.invalid:81; } }")
                .find("t.conf:1:64: host not found in upstream \"nosuchhost.invalid\""),
            std::string::npos);
}

std::string redirected(const config::MainConf& conf, const std::string& uri, std::string location,
                       std::string extra = {}) {
  RequestOnly ex(conf, "GET " + uri + " HTTP/1.1\r\nHost: front.example\r\n\r\n");
  http::ResponseHead h;
  h.location = std::move(location);
  h.extra = std::move(extra);
  rewrite_redirects(ex, ex.location().module<ProxyLocationConf>(), h);
  return h.extra.empty() ? h.location : h.location + "|" + h.extra;
}

TEST(ProxyRedirectTest, DefaultTextRegexOffAndRefresh) {
  auto conf = load(std::string(kServer) +
                   "location /two/ { proxy_pass http://127.0.0.1:8000/one/; } "
                   "location /plain/ { proxy_pass http://127.0.0.1:8000; } "
                   "location /text/ { proxy_pass http://127.0.0.1:8000; "
                   "  proxy_redirect http://origin.internal/ http://$host:$server_port/; "
                   "  proxy_redirect ~*^https?://cdn\\.internal/(\\w+)/(.*)$ /static/$2?from=${1}; } "
                   "location /off/ { proxy_pass http://127.0.0.1:8000; proxy_redirect off; "
                   "  location /off/inner/ { proxy_pass http://127.0.0.1:8000; } } "
                   "location /expl/ { proxy_pass http://127.0.0.1:8000/x/; proxy_redirect default; "
                   "  proxy_redirect http://a/ http://b/; } "
                   "location /uri/ { proxy_pass http://127.0.0.1:8000; "
                   "  proxy_redirect http://origin.internal/ http://$host$uri/; } }");
  // default: proxy_pass URL (with its URI part) -> the location's name.
  EXPECT_EQ(redirected(*conf, "/two/a", "http://127.0.0.1:8000/one/page?q=1"), "/two/page?q=1");
  EXPECT_EQ(redirected(*conf, "/two/a", "http://127.0.0.1:8000/other"), "http://127.0.0.1:8000/other");
  // default without a URI part: URL + "/" -> "/".
  EXPECT_EQ(redirected(*conf, "/plain/a", "http://127.0.0.1:8000/plain/b"), "/plain/b");
  EXPECT_EQ(redirected(*conf, "/plain/a", "/relative"), "/relative");
  // Text with variables; the first line that applies wins; a regex replaces the value whole, with captures.
  EXPECT_EQ(redirected(*conf, "/text/a", "http://origin.internal/x/y"), "http://front.example:8080/x/y");
  EXPECT_EQ(redirected(*conf, "/text/a", "http://origin.internal"), "http://origin.internal");  // prefix too short
  EXPECT_EQ(redirected(*conf, "/text/a", "HTTPS://CDN.internal/img/a/b.png"), "/static/a/b.png?from=img");
  EXPECT_EQ(redirected(*conf, "/text/a", "http://127.0.0.1:8000/z"), "http://127.0.0.1:8000/z");  // no default
  // Refresh: only the URL after "url=" is rewritten; other fields stay.
  EXPECT_EQ(redirected(*conf, "/text/a", "", "X-A: 1\r\nRefresh: 5; URL=http://origin.internal/next\r\nX-B: 2\r\n"),
            "|X-A: 1\r\nRefresh: 5; URL=http://front.example:8080/next\r\nX-B: 2\r\n");
  EXPECT_EQ(redirected(*conf, "/text/a", "", "Refresh: 5\r\n"), "|Refresh: 5\r\n");
  // A replacement with variables: a decoded $uri's control bytes are percent-encoded, in Location and Refresh.
  EXPECT_EQ(redirected(*conf, "/uri/a%0d%0aSet-Cookie:%20x=1", "http://origin.internal/next",
                       "Refresh: 5; url=http://origin.internal/r\r\n"),
            "http://front.example/uri/a%0D%0ASet-Cookie:%20x=1/next|"
            "Refresh: 5; url=http://front.example/uri/a%0D%0ASet-Cookie:%20x=1/r\r\n");
  // off, inherited by a nested location (which then gets no default either).
  EXPECT_EQ(redirected(*conf, "/off/a", "http://127.0.0.1:8000/off/b"), "http://127.0.0.1:8000/off/b");
  EXPECT_EQ(redirected(*conf, "/off/inner/a", "http://127.0.0.1:8000/x"), "http://127.0.0.1:8000/x");
  // An explicit `default` next to other lines.
  EXPECT_EQ(redirected(*conf, "/expl/a", "http://127.0.0.1:8000/x/1"), "/expl/1");
  EXPECT_EQ(redirected(*conf, "/expl/a", "http://a/2"), "http://b/2");
  EXPECT_NE(load_error(std::string(kServer) + "location / { proxy_redirect default; proxy_pass http://127.0.0.1; } }")
                .find("\"proxy_redirect default\" should be placed after the \"proxy_pass\" directive"),
            std::string::npos);
  EXPECT_NE(load_error("proxy_redirect ~( /x;").find("invalid regex"), std::string::npos);
}

// $upstream_* (nginx's formats): one value per try joined by ", ", seconds with millisecond resolution,
// "-" for what a try never reached; not set without an upstream.
TEST(ProxyVariablesTest, UpstreamStateFormats) {
  auto conf = load(std::string(kServer) + "location / { proxy_pass http://127.0.0.1:81; } }");
  RequestOnly ex(*conf, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  const config::Template t = config::compile(
      "$upstream_addr|$upstream_status|$upstream_response_time|$upstream_connect_time|$upstream_header_time|"
      "$upstream_response_length",
      config::SourceLoc{}, nullptr);
  auto expand = [&](config::LogEscape e) {
    config::Template x = t;
    x.escape = e;
    std::string out;
    config::expand(x, http::RequestVariables(ex, {}, nullptr), out);
    return out;
  };
  EXPECT_EQ(expand(config::LogEscape::kNone), "|||||");
  EXPECT_EQ(expand(config::LogEscape::kDefault), "-|-|-|-|-|-");
  UpstreamState& st = upstream_state(ex);  // the proxy's record, kept with the request
  st.count = 2;
  st.tries[0].addr = "127.0.0.1:8001";
  st.tries[0].status = 502;
  st.tries[0].response_ms = 3;
  st.tries[1].addr = "[::1]:8002";
  st.tries[1].status = 200;
  st.tries[1].connect_ms = 1;
  st.tries[1].header_ms = 1042;
  st.tries[1].response_ms = 61250;
  st.tries[1].length = 5120;
  EXPECT_EQ(expand(config::LogEscape::kNone),
            "127.0.0.1:8001, [::1]:8002|502, 200|0.003, 61.250|-, 0.001|-, 1.042|0, 5120");
  // Before a response too (proxy_set_header could use them: they describe earlier tries).
  std::string via_proxy;
  config::expand(config::compile("$upstream_status", config::SourceLoc{}, nullptr),
                 http::RequestVariables(ex, nullptr), via_proxy);
  EXPECT_EQ(via_proxy, "502, 200");
}

TEST(ProxyConfig, NextUpstreamFlags) {
  auto conf = load(std::string(kServer) +
                   "location / { proxy_pass http://127.0.0.1:81; proxy_next_upstream error http_502 http_504 "
                   "non_idempotent; proxy_next_upstream_tries 3; proxy_next_upstream_timeout 10s; } "
                   "location /off/ { proxy_pass http://127.0.0.1:81; proxy_next_upstream off; } }");
  const ProxyLocationConf& p = conf->http.servers[0]->locations[0].module<ProxyLocationConf>();
  EXPECT_EQ(p.next_upstream, kNextError | kNextHttp502 | kNextHttp504 | kNextNonIdempotent);
  EXPECT_EQ(p.next_upstream_tries, 3u);
  EXPECT_EQ(p.next_upstream_timeout_ms, 10000u);
  EXPECT_EQ(conf->http.servers[0]->locations[1].module<ProxyLocationConf>().next_upstream, 0u);
}

}  // namespace
}  // namespace kosoku::proxy
