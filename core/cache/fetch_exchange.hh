// The exchange the cache gives to proxy::ProxyModule::forward() when it goes to the origin — nginx's upstream
// request in proxy_cache mode, built like a subrequest. The proxy runs on it unchanged (its ProxyState lives in
// this exchange's state slot); what it would send to the client comes to a FetchSink instead, and the cache
// decides per response: pass it through to the client (teeing it into the store), or take over and answer
// from the cache (a 304 revalidation, a stale copy on an origin error).
//
// The request the origin sees is the client's, rebuilt and parsed again (so every view is ours), with the
// cache's changes (nginx's ngx_http_proxy_cache_headers): If-Modified-Since, If-Unmodified-Since,
// If-None-Match, If-Match, Range and If-Range removed (the cache fetches whole representations and answers
// the client's conditionals and ranges itself), HEAD sent as GET with proxy_cache_convert_head, and the
// revalidation fields added (If-None-Match / If-Modified-Since from the stored validators, RFC 9111 §4.3.1).
//
// Attached to a client: request details (uri, host, location...) come from the client exchange, the body is
// the client's, flow control (pending_output, low water) is the client's. Detached (background update,
// proxy_cache_background_update): everything is copied, nothing reaches a client, and the exchange outlives
// the client's request.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/http/response_parser.hh"

namespace kosoku::cache {

/// What the proxy produces on a FetchExchange.
class FetchSink {
 public:
  /// The final origin response head (all fields), before the proxy's send_head(); views valid during the call.
  virtual void on_fetch_response(const http::ParsedResponse& resp) = 0;
  /// The proxy's send_head(): `head` is the client-ready head the proxy built.
  virtual void on_fetch_head(http::ResponseHead& head) = 0;
  /// Content bytes (de-chunked). `by_ref`: the bytes stay valid until the client's pending output drops past
  /// them (the proxy's ring), so they may be handed to the client with write_ref.
  virtual void on_fetch_data(const char* data, size_t len, bool by_ref) = 0;
  /// The observer's end: `complete` only if all content arrived with valid framing.
  virtual void on_fetch_end(bool complete) = 0;
  /// The proxy's finish() (the response is done) — possibly right after on_fetch_end.
  virtual void on_fetch_finish() = 0;
  /// The proxy's abort_response(): the response was cut off after its head.
  virtual void on_fetch_abort() = 0;
  /// The proxy's own answer (respond()): the origin gave no usable response (502 error, 504 timeout, ...).
  virtual void on_fetch_error(int status) = 0;
  /// The proxy's release() after an abort: nothing of the fetch is in flight any more.
  virtual void on_fetch_released() = 0;
  /// Back-pressure: true while the sink's cache writer is too far behind the origin (StoreWriter::backlogged);
  /// `ready` is called once it has caught up.
  virtual bool fetch_holding(const std::function<void()>& ready) = 0;

 protected:
  ~FetchSink() = default;
};

class FetchExchange final : public http::Exchange {
 public:
  struct Options {
    bool head_to_get = false;   // proxy_cache_convert_head for a HEAD request
    std::string extra_fields;   // "Name: value\r\n" lines added (revalidation)
  };

  /// Attached to `client` (detached = false) or a copy of its request (detached = true).
  FetchExchange(http::Exchange& client, const Options& opts, FetchSink* sink, bool detached);
  ~FetchExchange();

  /// Stops delivering to the sink (the cache took over or moved on); the proxy may finish on its own.
  void detach_sink() {
    sink_ = nullptr;
    passthrough_ = false;
  }
  /// The client went away but the fetch goes on for the cache (nginx keeps a cacheable upstream request when
  /// the client closes): from now on nothing refers to the client, and `sink` gets the rest.
  void detach_client(FetchSink* sink) {
    client_ = nullptr;
    passthrough_ = false;
    sink_ = sink;
  }
  /// Whether writes go on to the client's connection (pending_output and low water are the client's then).
  void set_passthrough(bool on) { passthrough_ = on && client_ != nullptr; }
  /// finish(), abort_response(), respond() or release() happened: the proxy is done with this exchange.
  bool done() const { return done_; }
  /// The parsed request the origin is sent (valid while this exchange lives).
  const http::Request& fetch_request() const { return req_; }
  /// A client request could not be rebuilt (never expected: it parsed once already).
  bool valid() const { return valid_; }

  // ---- http::Exchange
  const http::Request& request() const override { return req_; }
  std::string_view uri() const override { return uri_; }
  std::string_view args() const override { return req_.query; }
  const config::ServerConf& server() const override { return *server_; }
  const config::LocationConf& location() const override { return *location_; }
  const http::CoreContext& core() const override { return *core_; }
  std::string_view remote_addr() const override { return remote_addr_; }
  uint16_t server_port() const override { return server_port_; }
  uint64_t connection_id() const override { return connection_id_; }
  uint64_t connection_requests() const override { return connection_requests_; }
  std::string_view host() const override { return host_; }
  uint64_t request_length() const override { return request_length_; }
  http::ResponseHead& head() override { return head_; }
  const http::ResponseHead& head() const override { return head_; }
  void send_head() override;
  void respond(int status, std::string_view body, std::string_view content_type) override;
  void redirect(int status, std::string_view location) override { respond(status, {}, {}); }
  void write(std::string_view data) override;
  void write_ref(const char* data, size_t len) override;
  size_t pending_output() const override;
  void set_low_water(size_t bytes) override;
  void finish() override;
  void abort_response() override;
  void release() override;
  void read_body(http::BodySink* sink) override;
  void pause_body(bool paused) override;
  std::unique_ptr<http::ContentState>& state() override { return state_; }

  /// The observer the proxy asks for through ProxyHooks::observe (cache_handler.cc).
  std::unique_ptr<class FetchObserver> make_observer();

 private:
  friend class FetchObserver;
  bool rebuild(const http::Request& client_req, const Options& opts);

  http::Exchange* client_ = nullptr;  // null when detached
  FetchSink* sink_;
  bool passthrough_ = false;
  bool done_ = false;
  bool valid_ = false;
  bool head_sent_ = false;

  std::string head_text_;             // the rebuilt request head
  http::HeaderField fields_[128];
  http::Request req_;
  std::string uri_;
  std::string host_;
  std::string remote_addr_;
  const config::ServerConf* server_ = nullptr;
  const config::LocationConf* location_ = nullptr;
  const http::CoreContext* core_ = nullptr;
  uint16_t server_port_ = 0;
  uint64_t connection_id_ = 0;
  uint64_t connection_requests_ = 0;
  uint64_t request_length_ = 0;
  http::ResponseHead head_;
  std::unique_ptr<http::ContentState> state_;
};

}  // namespace kosoku::cache
