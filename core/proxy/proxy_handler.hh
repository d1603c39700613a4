// The reverse-proxy content handler (nginx's proxy_pass): forwards the exchange to an upstream group and
// streams the response back, both directions with bounded memory.
//
// Per request (ProxyState, the exchange's ContentState, proxy_state.hh): the request is sent with an
// UpstreamFetch (upstream_fetch.hh: peer choice, keepalive connections, the request head and body, timeouts,
// proxy_next_upstream, the response head and its decoded content; timeouts give 504, other failures 502), built
// from the exchange (proxy_request.hh: the target, proxy_set_header, the client's fields), and the response goes
// back to the client:
//   - its head through build_response_head (hop-by-hop and hidden fields dropped) and proxy_redirect
//     (rewrite_redirects: Location and Refresh);
//   - its content through a ClientRelay (client_relay.hh: proxy_buffering, proxy_buffers,
//     proxy_busy_buffers_size), de-chunked, re-chunked by the client connection when the length is unknown; the
//     upstream is not read while the relay is full, so memory per request is bounded whatever the body size;
//   - content cut off (EOF, reset, read timeout, bad chunk) aborts the client connection, so the client never
//     sees a truncated response as complete. A client that goes away (reset, or FIN while the upstream works:
//     nginx's check_broken_connection) cancels the fetch, which closes the upstream connection (never cached).
// Every try is recorded with the request (upstream_state.hh) for $upstream_addr, $upstream_status,
// $upstream_*_time and $upstream_response_length.
// Pipelined client requests are answered in order: the client connection hands over one request at a time.
//
// The proxy cache (core/cache) is the content handler of its own locations; it fetches with its own
// UpstreamFetch and sink, and hands the requests it does not cache to forward().
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/http/connection.hh"
#include "core/http/exchange.hh"
#include "core/http/response_parser.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/proxy/upstream.hh"
#include "core/reactor/reactor.hh"
#include "core/tls/tls_client.hh"

namespace kosoku::proxy {

/// The expanded `hash` key of `group` for the exchange ("" without `hash`).
std::string upstream_hash_key(const http::Exchange& ex, const ProxyLocationConf& conf, const UpstreamGroup& group);

/// One per core (the proxy module's per-core part, config/module.hh): the proxy content handler, the core's
/// upstream groups and their keepalive caches. A reactor poller closes cached connections when the server
/// shuts down.
class ProxyModule final : public http::ContentHandler, public http::ModuleCore, public reactor::Poller {
 public:
  explicit ProxyModule(http::HttpServer& server);
  ~ProxyModule() override;
  ProxyModule(const ProxyModule&) = delete;
  ProxyModule& operator=(const ProxyModule&) = delete;

  /// The locations this module serves: those with proxy_pass.
  static bool applies(const config::LocationConf& loc) { return loc.module<ProxyLocationConf>().pass; }
  http::ContentHandler* content_handler() override { return this; }

  /// ContentHandler: forward().
  void handle(http::Exchange& ex) override;
  /// Sends the exchange upstream and its response back (what proxy_pass does).
  void forward(http::Exchange& ex);

  UpstreamGroup& group(const UpstreamConf& conf) { return *groups_[conf.index]; }
  reactor::Reactor& reactor() { return reactor_; }

  // reactor::Poller: closes cached connections once the server begins its graceful shutdown.
  bool poll() override;

 private:
  http::HttpServer& server_;
  reactor::Reactor& reactor_;
  tls::TlsClient tls_client_;  // TLS to origins (proxy_pass https://); before the groups, which use it
  std::vector<std::unique_ptr<UpstreamGroup>> groups_;  // by UpstreamConf::index
  bool shut_down_ = false;
};

}  // namespace kosoku::proxy
