// `$cache_rule` for the request-time variable sources (http/variables.cc, proxy/proxy_request.cc): a light
// header, so they need not include the rules module. Defined in rules_core.cc.
#pragma once

#include <string_view>

namespace kosoku::http {
class Exchange;
}

namespace kosoku::rules {

/// `$cache_rule` for a request: "1" when it must not be cached (proxy_cache_bypass / proxy_no_cache treat a
/// non-empty value other than "0" as true), "" otherwise. Uses the calling loop's RulesCore (the request's
/// $host and $uri against the host's patterns); on a thread without one, cache_rules_default alone.
std::string_view cache_rule_value(const http::Exchange& ex);

}  // namespace kosoku::rules
