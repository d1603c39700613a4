// ProxyModule's per-core part: its upstream groups, its registration as the content handler of proxy_pass
// locations, and the graceful-shutdown poller (proxy_handler.hh). handle()/forward() live next to the
// per-request state they create, in proxy_handler.cc.
#include "core/proxy/proxy_handler.hh"

namespace kosoku::proxy {

ProxyModule::ProxyModule(http::HttpServer& server) : server_(server), reactor_(*server.core().reactor) {
  for (const auto& up : server.core().conf->http.proxy.upstreams) {
    groups_.push_back(std::make_unique<UpstreamGroup>(*up, reactor_, *server.core().stack));
  }
  server.add_content_handler(&ProxyModule::applies, this);
  reactor_.add_poller(this);
}

ProxyModule::~ProxyModule() = default;

bool ProxyModule::poll() {
  if (!shut_down_ && server_.shutting_down()) {
    shut_down_ = true;
    for (auto& g : groups_) g->shutdown();
  }
  return false;
}

}  // namespace kosoku::proxy
