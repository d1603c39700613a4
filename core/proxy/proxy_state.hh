// ProxyState: one proxied request, the exchange's ContentState (the contract is in proxy_handler.hh). Internal
// to core/proxy. The request goes upstream through an UpstreamFetch (upstream_fetch.hh) built from the
// exchange (this state is its UpstreamRequest), and the response comes back to this state as the fetch's
// UpstreamSink, which passes it to the client through a ClientRelay (client_relay.hh).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/proxy/client_relay.hh"
#include "core/proxy/proxy_handler.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/upstream_fetch.hh"

namespace kosoku::proxy {

// One proxied request.
//
// Re-entrancy rule: Exchange::finish(), respond() and abort_response() end the request; the connection may then
// go on with the client's next one. They are called only from the fetch's last sink calls (on_upstream_end,
// on_upstream_error) or from client events, last, and every such path returns straight up.
class ProxyState final : public http::ContentState, public UpstreamRequest, public UpstreamSink {
 public:
  ProxyState(ProxyModule& m, http::Exchange& ex) : mod_(m), ex_(ex) {}

  void start();  // may end the exchange

  // ContentState
  void on_abort() override;
  void on_writable() override;
  /// A client gone while the upstream works abandons the request, unless proxy_ignore_client_abort is on.
  bool abort_on_peer_close() const override {
    return !(conf_ != nullptr && conf_->ignore_client_abort) && phase_ != Phase::kDraining && phase_ != Phase::kDone;
  }
  // UpstreamRequest
  void build_head(BodyFraming framing, uint64_t content_length, std::string& out) override {
    build_request_head(ex_, *conf_, framing, content_length, out);
  }
  std::string log_context(std::string_view upstream) const override { return upstream_log_context(ex_, upstream); }
  void read_body(http::BodySink* sink) override { ex_.read_body(sink); }
  void pause_body(bool paused) override { ex_.pause_body(paused); }
  // UpstreamSink
  void on_upstream_head(const http::ParsedResponse& resp) override;
  size_t upstream_room() override { return relay_.room(); }
  void on_upstream_data(const std::string_view* spans, size_t count, bool last) override {
    relay_.deliver(spans, count, last);
  }
  void on_upstream_end() override;
  void on_upstream_error(int status) override;
  void on_upstream_cancelled() override { ex_.release(); }

 private:
  enum class Phase { kIdle, kFetching, kBody, kDraining, kDone };

  ProxyModule& mod_;
  http::Exchange& ex_;
  const ProxyLocationConf* conf_ = nullptr;
  Phase phase_ = Phase::kIdle;
  UpstreamFetch fetch_;
  ClientRelay relay_;
};

}  // namespace kosoku::proxy
