// The cache module's variables and template helpers: split_clients' variables (declared while loading, one per
// split_clients block) and nginx's predicate over proxy_cache_bypass / proxy_no_cache templates. Every
// template of the cache (proxy_cache $var, proxy_cache_key, the predicates, proxy_cache_purge KEY,
// split_clients' source) expands against http::RequestVariables, so every registered variable works in it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/variables.hh"
#include "core/http/exchange.hh"

namespace kosoku::cache {

/// The value of split_clients variable `name` for the request (split_clients.hh): the part its source string
/// falls in. The getter declare_variable() is given for each split_clients block.
bool split_clients_value(const config::VariableSource& src, std::string_view name, std::string& out);

/// nginx's predicate (proxy_cache_bypass / proxy_no_cache): true if any template expands to a value that is
/// neither empty nor "0".
bool any_predicate(const std::vector<std::shared_ptr<const config::Template>>& list, const http::Exchange& ex);

}  // namespace kosoku::cache
