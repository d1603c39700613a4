// The variables of the proxy cache's templates (proxy_cache $var, proxy_cache_key, proxy_cache_bypass,
// proxy_no_cache, proxy_cache_purge KEY, split_clients' source string): nginx's request variables (among them
// $arg_NAME and $cookie_NAME: http/variables.hh, the one definition) and the proxy's ($proxy_host, ...) through
// proxy::ProxyVariables, plus split_clients variables:
//   $VAR of split_clients: its value for this request (split_clients.hh)
#pragma once

#include <string>
#include <string_view>

#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/proxy/proxy_request.hh"

namespace kosoku::cache {

class CacheVariables final : public config::VariableSource {
 public:
  explicit CacheVariables(const http::Exchange& ex) : ex_(ex), proxy_(ex, ex.location().module<proxy::ProxyLocationConf>()) {}
  bool get(config::VarId id, std::string_view suffix, std::string& out) const override;

 private:
  const http::Exchange& ex_;
  proxy::ProxyVariables proxy_;
  mutable int depth_ = 0;  // split_clients sources may use variables: bounded recursion
};

/// nginx's predicate (proxy_cache_bypass / proxy_no_cache): true if any template expands to a value that is
/// neither empty nor "0".
bool any_predicate(const std::vector<std::shared_ptr<const config::Template>>& list, const http::Exchange& ex);

}  // namespace kosoku::cache
