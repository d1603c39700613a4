// The client proxy path (proxy_handler.hh): the exchange's request goes upstream through an UpstreamFetch and
// its response comes back through a ClientRelay. ProxyModule::handle and forward; the module itself is in
// proxy_module.cc.
#include "core/proxy/proxy_handler.hh"

#include "core/config/variables.hh"
#include "core/http/variables.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/proxy_state.hh"

namespace kosoku::proxy {

std::string upstream_hash_key(const http::Exchange& ex, const ProxyLocationConf&, const UpstreamGroup& group) {
  std::string key;
  if (group.conf().hash_key != nullptr) {
    http::RequestVariables vars(ex, ex.core().reactor);
    config::expand(*group.conf().hash_key, vars, key);
  }
  return key;
}

void ProxyState::start() {
  conf_ = &ex_.location().module<ProxyLocationConf>();
  UpstreamGroup& group = mod_.group(*conf_->upstream);
  const http::Request& req = ex_.request();
  phase_ = Phase::kFetching;
  const std::string key = upstream_hash_key(ex_, *conf_, group);
  UpstreamFetch::Plan plan;
  plan.conf = conf_;
  plan.hash_key = key;
  plan.host = ex_.host();
  plan.idempotent = idempotent(req);
  plan.head = req.method == http::Method::kHead;
  plan.body = req.body;
  plan.content_length = req.content_length.value_or(0);
  relay_.reset(ex_, *conf_);
  fetch_.start(group, plan, *this, *this, upstream_state(ex_));
}

void ProxyState::on_upstream_head(const http::ParsedResponse& resp) {
  build_response_head(resp, *conf_, ex_.head());
  rewrite_redirects(ex_, *conf_, ex_.head());
  phase_ = Phase::kBody;
  relay_.send_head();  // the head's views into `resp` are copied into the client's output here
}

void ProxyState::on_upstream_end() {
  phase_ = Phase::kDraining;
  if (!relay_.flush()) return;  // on_writable finishes once the client has taken the ring's bytes
  phase_ = Phase::kDone;
  ex_.finish();
}

void ProxyState::on_upstream_error(int status) {
  const bool head_sent = phase_ == Phase::kBody;
  phase_ = Phase::kDone;
  if (status == 0 || head_sent) {
    ex_.abort_response();  // the client never sees a truncated response as complete
    return;
  }
  ex_.respond(status);
}

void ProxyState::on_writable() {
  if (phase_ == Phase::kDraining) {
    if (relay_.drained()) {
      phase_ = Phase::kDone;
      ex_.finish();
    }
    return;
  }
  if (phase_ == Phase::kBody) fetch_.resume();
}

void ProxyState::on_abort() {
  phase_ = Phase::kDone;
  if (!fetch_.cancel()) return;  // on_upstream_cancelled releases
  ex_.release();
}

// ---- ProxyModule (the per-request part) ----

void ProxyModule::handle(http::Exchange& ex) { forward(ex); }

void ProxyModule::forward(http::Exchange& ex) {
  auto st = std::make_unique<ProxyState>(*this, ex);
  ProxyState* s = st.get();
  ex.state() = std::move(st);
  s->start();
}

}  // namespace kosoku::proxy
