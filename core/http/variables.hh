// Request-time variables ($uri, $host, $http_NAME, $status, ...): nginx's ngx_http_variables for one
// exchange. Used by the log phase (access_log/log_format) and by directives whose values take variables
// (add_header, return). Values that depend on the response (status, bytes) come from RequestVariables::Response.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/config/variables.hh"
#include "core/http/exchange.hh"

namespace kosoku::reactor {
class Reactor;
}

namespace kosoku::http {

/// nginx's ngx_http_arg over a query string ($arg_NAME): the value of the first `name=...` pair (name compared
/// case-insensitively, value as received, not decoded; "" for a bare `name`). False when absent.
bool find_arg(std::string_view query, std::string_view name, std::string_view* value);
/// The value of cookie `name` in one Cookie field value ("a=1; b=2"; $cookie_NAME): case-insensitive name,
/// blanks around items trimmed. False when absent.
bool find_cookie(std::string_view cookie_header, std::string_view name, std::string_view* value);

class RequestVariables final : public config::VariableSource {
 public:
  /// What is known of the response when the variables are read (all zero before the response).
  struct Response {
    int status = 0;
    uint64_t bytes_sent = 0;
    uint64_t body_bytes_sent = 0;
    uint64_t request_time_ms = 0;
  };
  /// `r`: the core's loop, for its cached wall clock; null (tests) reads the clock directly.
  RequestVariables(const Exchange& ex, const Response& resp, const reactor::Reactor* r)
      : ex_(ex), resp_(resp), r_(r) {}

  bool get(config::VarId id, std::string_view suffix, std::string& out) const override;

 private:
  bool upstream_value(config::VarId id, std::string& out) const;

  const Exchange& ex_;
  Response resp_;
  const reactor::Reactor* r_;
};

}  // namespace kosoku::http
