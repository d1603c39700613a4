// The variables of the proxy cache's templates (proxy_cache $var, proxy_cache_key, proxy_cache_bypass,
// proxy_no_cache, proxy_cache_purge KEY, split_clients' source string): nginx's request variables and the
// proxy's ($proxy_host, ...) through proxy::ProxyVariables, plus $arg_NAME, $cookie_NAME and split_clients
// variables.
//   $arg_NAME     the first NAME=value of the query (nginx ngx_http_arg: name compared case-insensitively,
//                 value as received, not decoded); not set when absent
//   $cookie_NAME  the value of cookie NAME in the Cookie fields (nginx: case-insensitive name, value up to ';')
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
  explicit CacheVariables(const http::Exchange& ex) : ex_(ex), proxy_(ex, ex.location().proxy) {}
  bool get(config::VarId id, std::string_view suffix, std::string& out) const override;

 private:
  const http::Exchange& ex_;
  proxy::ProxyVariables proxy_;
  mutable int depth_ = 0;  // split_clients sources may use variables: bounded recursion
};

/// nginx's ngx_http_arg over a query string: the value of the first `name=...` (case-insensitive name).
bool find_arg(std::string_view query, std::string_view name, std::string_view* value);
/// The value of cookie `name` in a Cookie field value ("a=1; b=2").
bool find_cookie(std::string_view cookie_header, std::string_view name, std::string_view* value);

/// nginx's predicate (proxy_cache_bypass / proxy_no_cache): true if any template expands to a value that is
/// neither empty nor "0".
bool any_predicate(const std::vector<std::shared_ptr<const config::Template>>& list, const http::Exchange& ex);

}  // namespace kosoku::cache
