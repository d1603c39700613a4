// The proxy module's descriptor and its per-core part (ProxyModule): its upstream groups and the
// graceful-shutdown poller (proxy_handler.hh). handle()/forward() live next to the
// per-request state they create, in proxy_handler.cc.
#include "core/config/module.hh"
#include "core/proxy/proxy_handler.hh"

namespace kosoku::proxy {

config::Module& module() {
  static config::Module m{
      .name = "proxy",
      .directives = directives(),
      .finalize = &finalize_conf,
      .variables = variables(),
      .content = &ProxyModule::applies,
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        return std::make_unique<ProxyModule>(server);
      },
  };
  return m;
}

ProxyModule::ProxyModule(http::HttpServer& server)
    : server_(server), reactor_(*server.core().reactor), tls_client_(reactor_) {
  for (const auto& up : server.core().conf->http.module<ProxyHttpConf>().upstreams) {
    groups_.push_back(std::make_unique<UpstreamGroup>(*up, reactor_, *server.core().stack));
    groups_.back()->set_tls_client(&tls_client_);
  }
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
