// The HTTP/2 module (nginx's ngx_http_v2_module): RFC 9113 on `http2 on` servers — negotiated by ALPN ("h2",
// preferred over http/1.1) on TLS sockets, and with prior knowledge (the client starts with the connection
// preface, RFC 9113 §3.3) on cleartext ones, where HTTP/1.1 requests are still served.
//
//   http2 on|off;                          http, server          default off
//   listen ... http2;                      (older form: every server on that address)
//   http2_max_concurrent_streams N;        http, server          default 128
//   http2_recv_buffer_size SIZE;           http, server          default 256k (input decoded per read step)
//   http2_body_preread_size SIZE;          http, server          default 64k (a stream's receive window)
//   http2_chunk_size SIZE;                 http, server, location  default 8k (DATA frame payload)
//   http2_idle_timeout TIME;               http, server          (nginx before 1.19.7; keepalive_timeout)
// keepalive_timeout closes an idle connection (GOAWAY), keepalive_requests bounds the streams of one, and
// large_client_header_buffers (with client_header_buffer_size and max_headers) bounds a request's header list
// (SETTINGS_MAX_HEADER_LIST_SIZE; over it: 431). Connection-wide settings are the socket's default server's.
// nginx's obsolete HTTP/2 directives (http2_max_requests, http2_max_field_size, http2_max_header_size,
// http2_recv_timeout, http2_push, http2_push_preload) are accepted with a warning and do nothing.
// Variables: $http2 ("h2" over TLS, "h2c" over cleartext, empty for HTTP/1.x); $server_protocol is
// "HTTP/2.0" for its requests.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/values.hh"
#include "core/config/variables.hh"
#include "core/http/connection.hh"
#include "core/http/module_core.hh"
#include "core/http2/http2_conf.hh"
#include "core/http2/http2_connection.hh"
#include "core/http2/http2_module.hh"
#include "core/net/alpn.hh"

namespace kosoku::http2 {

namespace {

using namespace config;  // the directive-table vocabulary

constexpr uint32_t kCtx = kCtxHttp | kCtxServer;

// RFC 9113 §3.4: the client connection preface starts with this octet sequence.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceLen = sizeof(kPreface) - 1;

template <auto M>
bool set_window(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_size(d.args[0].value);
  // RFC 9113 §6.9.1: a window is at most 2^31-1 octets.
  if (!v || *v > 0x7fffffff) return fail_invalid_value(b, d, 0);
  target<Http2SrvConf>(s).*M = *v;
  return true;
}

bool set_recv_buffer_size(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_size(d.args[0].value);
  if (!v || *v < 1024) {
    return b.fail(d.args[0].loc, absl::StrCat("the http2_recv_buffer_size value ", quoted(d.args[0].value),
                                              " must be at least 1k"));
  }
  target<Http2SrvConf>(s).recv_buffer_size = *v;
  return true;
}

bool set_chunk_size(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_size(d.args[0].value);
  if (!v || *v == 0 || *v > (1u << 24) - 1) {  // RFC 9113 §4.2: a frame payload is at most 2^24-1 octets
    return b.fail(d.args[0].loc, absl::StrCat("the http2 chunk size cannot be ", quoted(d.args[0].value)));
  }
  target<Http2LocConf>(s).chunk_size = *v;
  return true;
}

bool set_obsolete(Builder& b, Scope&, const Directive& d) {
  const std::string_view n = d.name;
  const char* instead = n == "http2_max_requests"                               ? "keepalive_requests"
                        : n == "http2_recv_timeout"                             ? "client_header_timeout"
                        : n == "http2_push" || n == "http2_push_preload"        ? nullptr
                                                                                : "large_client_header_buffers";
  b.warn(d.loc, instead != nullptr ? absl::StrCat("the \"", n, "\" directive is obsolete, use the \"", instead,
                                                  "\" directive instead")
                                   : absl::StrCat("the \"", n, "\" directive is obsolete, ignored (no server push)"));
  return true;
}

constexpr DirectiveSpec kHttp2Directives[] = {
    {.name = "http2", .contexts = kCtx, .args = kTake1, .set = set_flag<&Http2SrvConf::enable>,
     .merge_srv = inherit<&Http2SrvConf::enable>, .default_value = "off"},
    {.name = "http2_max_concurrent_streams", .contexts = kCtx, .args = kTake1,
     .set = set_number<&Http2SrvConf::max_concurrent_streams>, .merge_srv = inherit<&Http2SrvConf::max_concurrent_streams>,
     .default_value = "128"},
    {.name = "http2_recv_buffer_size", .contexts = kCtx, .args = kTake1, .set = set_recv_buffer_size,
     .merge_srv = inherit<&Http2SrvConf::recv_buffer_size>, .default_value = "256k"},
    {.name = "http2_body_preread_size", .contexts = kCtx, .args = kTake1,
     .set = set_window<&Http2SrvConf::body_preread_size>, .merge_srv = inherit<&Http2SrvConf::body_preread_size>,
     .default_value = "64k"},
    {.name = "http2_idle_timeout", .contexts = kCtx, .args = kTake1, .set = set_msec<&Http2SrvConf::idle_timeout_ms>,
     .merge_srv = inherit<&Http2SrvConf::idle_timeout_ms>},
    {.name = "http2_chunk_size", .contexts = kCtxHttpAny, .args = kTake1, .set = set_chunk_size,
     .merge_loc = inherit<&Http2LocConf::chunk_size>, .default_value = "8k"},
    {.name = "http2_max_requests", .contexts = kCtx, .args = kTake1, .set = set_obsolete},
    {.name = "http2_max_field_size", .contexts = kCtx, .args = kTake1, .set = set_obsolete},
    {.name = "http2_max_header_size", .contexts = kCtx, .args = kTake1, .set = set_obsolete},
    {.name = "http2_recv_timeout", .contexts = kCtx, .args = kTake1, .set = set_obsolete},
    {.name = "http2_push", .contexts = kCtxHttpAny, .args = kTake1, .set = set_obsolete},
    {.name = "http2_push_preload", .contexts = kCtxHttpAny, .args = kTake1, .set = set_obsolete},
};

// Which servers offer h2 in ALPN: those with `http2 on` (a `listen ... http2` socket offers it for every
// server on it: the TLS module reads ListenConf::http2).
bool finalize(Builder& b) {
  for (const std::unique_ptr<ServerConf>& srv : b.main->http.servers) {
    if (srv->module<Http2SrvConf>().enable) srv->alpn = net::kAlpnH2Http11;
  }
  return true;
}

/// Whether HTTP/2 with prior knowledge is taken on `ls` (cleartext): the socket's `listen ... http2`, or
/// `http2 on` in its default server (nginx's rule).
bool h2_socket(const config::ListenSocket& ls) {
  return ls.conf.http2 || ls.default_server->module<Http2SrvConf>().enable;
}

bool http2_value(const VariableSource& src, std::string_view, std::string& out) {
  const http::Exchange& ex = src.exchange();
  if (ex.request().version_major != 2) return true;  // HTTP/1.x: empty
  const net::Stream* st = ex.stream();
  out.append(st != nullptr && st->secure() ? "h2" : "h2c");
  return true;
}

constexpr Variable kHttp2Variables[] = {{"http2", &http2_value}};

/// One core's HTTP/2: takes the connections whose first bytes are the preface, or whose TLS handshake chose h2.
class Http2Core final : public http::ModuleCore {
 public:
  explicit Http2Core(http::HttpServer& server) : server_(server) {}
  bool takes_streams() const override { return true; }
  Take take_stream(net::Stream& s, const config::ListenSocket& listen) override {
    if (s.alpn() != "h2") {
      if (!h2_socket(listen)) return Take::kNo;
      const std::span<const char> in = s.input();
      const size_t n = std::min(in.size(), kPrefaceLen);
      if (std::memcmp(in.data(), kPreface, n) != 0) return Take::kNo;
      if (n < kPrefaceLen) return Take::kMore;
    }
    auto* conn = new Http2Connection(server_, s, listen);
    s.set_handler(conn);
    if (!conn->start()) s.close(net::Stream::Close::kAbort);  // on_closed frees the connection
    return Take::kTaken;
  }

 private:
  http::HttpServer& server_;
};

}  // namespace

config::Module& module() {
  static config::Module m{
      .name = "http2",
      .directives = kHttp2Directives,
      .finalize = &finalize,
      .variables = kHttp2Variables,
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        for (const config::ListenSocket& ls : server.core().conf->http.listen_sockets) {
          if (ls.conf.http2) return std::make_unique<Http2Core>(server);
          for (const config::ServerConf* srv : ls.servers) {
            if (srv->module<Http2SrvConf>().enable) return std::make_unique<Http2Core>(server);
          }
        }
        return nullptr;  // no server speaks HTTP/2: no connection is ever asked
      },
  };
  return m;
}

}  // namespace kosoku::http2
