// The module registry (config/module.hh): every module of the binary, in order, as nginx's generated
// objs/ngx_modules.c. The order is the order of finalize hooks and of per-core start, and decides which
// module serves a location when several would (the first whose content predicate accepts it): the rules
// admin API, a cached or purge location, proxy_pass, the status page, and static files for everything else.
#include <array>

#include "core/access_log/log_conf.hh"
#include "core/access/access_conf.hh"
#include "core/cache/cache_conf.hh"
#include "core/certs/cert_cache.hh"
#include "core/charset/charset_conf.hh"
#include "core/config/module.hh"
#include "core/headers/headers_conf.hh"
#include "core/http/variables.hh"
#include "core/http2/http2_module.hh"
#include "core/map/map_conf.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/rewrite/rewrite_conf.hh"
#include "core/rules/rules_core.hh"
#include "core/static/static_handler.hh"
#include "core/tls/tls_conf.hh"
#include "core/stats/status_module.hh"

namespace kosoku::config {

std::span<Module* const> modules() {
  static const std::array<Module*, 21> kModules = [] {
    std::array<Module*, 21> list = {
        &core_module(),       // main context: workers, error_log, disk_queue, events, http
        &appliance_module(),  // appliance { }
        &http_core_module(),  // server, listen, server_name, location, client_* limits
        &http_module(),       // root, alias, try_files, types, timeouts, open_file_cache, aio, ...
        &no_effect_module(),  // nginx's internal tuning (hash sizes, accept loop): accepted with a notice
        &http::variables_module(),  // $uri, $host, $http_NAME, $status, ...
        &map::module(),       // map { } (its variables resolve in every template after it)
        &tls::module(),       // listen ... ssl, ssl_* (TLS under the HTTP framing), $https, $ssl_*
        &http2::module(),     // http2, listen ... http2, http2_* (HTTP/2 connections), $http2
        &access_log::module(),  // access_log, log_format
        &rewrite::module(),   // return, rewrite, set, if, break (SERVER_REWRITE, REWRITE phases)
        &access::module(),    // allow, deny (ACCESS phase)
        &headers::module(),   // expires, add_header (response head filters)
        &charset::module(),   // charset, charset_types (a response head filter)
        &rules::module(),
        &certs::module(),     // ssl_certificate_store, ssl_certificate_admin (before the proxy: the admin API)
        &cache::module(),     // before the proxy: it serves the proxy_pass locations with proxy_cache
        &proxy::module(),     // proxy_pass, upstream { }, $proxy_*, $upstream_*
        &network_module(),    // network kernel|dpdk, dpdk { } (checked once the listen addresses are final)
        &stats::status_module(),
        &static_files::module(),  // index; static files for every location no other module serves
    };
    for (size_t i = 0; i < list.size(); ++i) list[i]->index = i;
    return list;
  }();
  return kModules;
}

}  // namespace kosoku::config
