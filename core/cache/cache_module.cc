// The cache module's descriptor (config/module.hh): the proxy_cache* directives, the zone checks once the file
// is read, and one CacheModule per core: the content handler of purge locations and of proxy_pass locations
// with proxy_cache (it comes before the proxy in the registry; what it does not cache it hands to the same
// core's proxy module).
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
      .content = &CacheModule::serves,
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        return std::make_unique<CacheModule>(server, registry());
      },
  };
  return m;
}

}  // namespace kosoku::cache
