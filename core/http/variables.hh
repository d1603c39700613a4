// Request-time variables ($uri, $host, $http_NAME, $status, ...): nginx's ngx_http_variables, and
// the source every template is expanded against (config/variables.hh). Values that depend on the response
// (status, bytes) come from RequestVariables::Response; without one they are not set.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/config/variables.hh"
#include "core/http/exchange.hh"

namespace kosoku::reactor {
class Reactor;
}
namespace kosoku::config {
struct Module;
}

namespace kosoku::http {

/// nginx's ngx_http_arg over a query string ($arg_NAME): the value of the first `name=...` pair (name compared
/// case-insensitively, value as received, not decoded; "" for a bare `name`). False when absent.
bool find_arg(std::string_view query, std::string_view name, std::string_view* value);
/// The value of cookie `name` in one Cookie field value ("a=1; b=2"; $cookie_NAME): case-insensitive name,
/// blanks around items trimmed. False when absent.
bool find_cookie(std::string_view cookie_header, std::string_view name, std::string_view* value);

/// The engine's variable source: one exchange, and what is known of its response.
class RequestVariables final : public config::VariableSource {
 public:
  using Response = config::VariableSource::Response;
  /// With the response's figures (the log phase; add_header and `return`, whose response is being made).
  /// `r`: the core's loop, for its cached wall clock; null (tests) reads the clock directly.
  RequestVariables(const Exchange& ex, const Response& resp, const reactor::Reactor* r)
      : VariableSource(&ex, &resp, r) {}
  /// Before any response exists (the upstream request, cache keys and predicates): the response variables
  /// are not set.
  RequestVariables(const Exchange& ex, const reactor::Reactor* r) : VariableSource(&ex, nullptr, r) {}
};

/// The HTTP core's variables as a module of their own (core/modules.cc).
config::Module& variables_module();

}  // namespace kosoku::http
