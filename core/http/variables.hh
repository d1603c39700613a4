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
  const Exchange& ex_;
  Response resp_;
  const reactor::Reactor* r_;
};

}  // namespace kosoku::http
