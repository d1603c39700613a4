// The cache module's descriptor (config/module.hh): the proxy_cache* directives, the zone checks once the file
// is read, the content handler of `proxy_cache_purge ZONE KEY` locations, and one CacheModule per core, which
// hooks itself into the same core's proxy module (it comes after it in the registry).
#include <memory>
#include <string>

#include "core/cache/cache_conf.hh"
#include "core/cache/cache_handler.hh"
#include "core/config/module.hh"

namespace kosoku::cache {

config::Module& module() {
  static config::Module m{
      .name = "cache",
      .directives = directives(),
      .finalize = &finalize_conf,
      .content = &CacheModule::is_purge_location,
      .init_core = [](http::HttpServer& server, std::string* error) -> std::unique_ptr<http::ModuleCore> {
        auto* proxy = static_cast<proxy::ProxyModule*>(server.module_core(proxy::module()));
        if (proxy == nullptr) {
          *error = "the proxy module must come before the cache module";
          return nullptr;
        }
        return std::make_unique<CacheModule>(server, *proxy, registry());
      },
  };
  return m;
}

}  // namespace kosoku::cache
