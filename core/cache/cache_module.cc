// The cache module's descriptor (config/module.hh): the proxy_cache* directives, the zone checks once the file
// is read, and one CacheModule per core: the content handler of purge locations and of proxy_pass locations
// with proxy_cache (it comes before the proxy in the registry; what it does not cache it hands to the same
// core's proxy module).
#include <memory>
#include <string>

#include "core/cache/cache_conf.hh"
#include "core/cache/cache_handler.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"

namespace kosoku::cache {

namespace {

using Src = const config::VariableSource&;

// What the cache said of the request's response: $upstream_cache_status.
struct CacheStatusCtx final : http::RequestCtx {
  std::string_view status;  // a static string (cache_status_name)
};

constexpr config::Variable kCacheVariables[] = {
    {"upstream_cache_status",
     [](Src s, std::string_view, std::string& out) {
       const CacheStatusCtx* c = http::module_ctx<CacheStatusCtx>(s.exchange(), module());
       if (s.response() == nullptr || c == nullptr || c->status.empty()) return false;
       out.append(c->status);
       return true;
     }},
};

}  // namespace

void set_cache_status(http::Exchange& ex, CacheStatus status) {
  http::module_ctx<CacheStatusCtx>(ex, module()).status = cache_status_name(status);
}

config::Module& module() {
  static config::Module m{
      .name = "cache",
      .directives = directives(),
      .finalize = &finalize_conf,
      .variables = kCacheVariables,
      .content = &CacheModule::serves,
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        return std::make_unique<CacheModule>(server, registry());
      },
  };
  return m;
}

}  // namespace kosoku::cache
