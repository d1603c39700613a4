// The record of a request's upstream tries, kept by the proxy with the request (its RequestCtx) as nginx keeps
// ngx_http_upstream_state_t: one entry per try with the server's address, its status (502/504 for a try that
// failed without one), and the connect, header and response times (ms since the try began) and body bytes
// received. proxy_variables.cc formats them as $upstream_addr, $upstream_status, $upstream_connect_time,
// $upstream_header_time, $upstream_response_time and $upstream_response_length.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/http/exchange.hh"

namespace kosoku::proxy {

/// One try of an upstream server for a request (nginx's ngx_http_upstream_state_t). Times are milliseconds on
/// the loop's clock; -1: not (yet) known.
struct UpstreamTry {
  std::string_view addr;      // "127.0.0.1:8081" / "[::1]:8081": text owned by the configuration
  int status = 0;             // the response's status; 502/504 for a try that failed without one; 0: none yet
  uint64_t start_ms = 0;      // when the try began
  int64_t connect_ms = -1;    // connection established (0 for a cached keepalive connection)
  int64_t header_ms = -1;     // the response head received
  int64_t response_ms = -1;   // the try ended
  uint64_t length = 0;        // response body bytes received from the upstream
};

/// The upstream tries of one request, in order (proxy_next_upstream makes several). Past kMaxTries the last
/// slot is reused.
struct UpstreamState {
  static constexpr size_t kMaxTries = 8;
  UpstreamTry tries[kMaxTries];
  uint8_t count = 0;
};

/// The request's record, created on first use (the proxy module's RequestCtx), and the record if there is one.
UpstreamState& upstream_state(http::Exchange& ex);
const UpstreamState* upstream_state(const http::Exchange& ex);

/// The try in progress (the last one), or null before the first.
inline UpstreamTry* current_try(UpstreamState& st) {
  return st.count == 0 ? nullptr : &st.tries[st.count - 1];
}

/// Starts a try of the server at `addr` (text that outlives the request) at `now_ms`.
inline void begin_try(UpstreamState& st, std::string_view addr, uint64_t now_ms) {
  if (st.count < UpstreamState::kMaxTries) ++st.count;
  UpstreamTry& t = st.tries[st.count - 1];
  t = UpstreamTry{};
  t.addr = addr;
  t.start_ms = now_ms;
}

/// Milliseconds since the try began.
inline int64_t try_elapsed(const UpstreamTry& t, uint64_t now_ms) {
  return static_cast<int64_t>(now_ms - t.start_ms);
}

/// Ends the current try (once): `status` is recorded when the upstream gave none (502, 504; 0 keeps none).
inline void end_try(UpstreamState& st, int status, uint64_t now_ms) {
  UpstreamTry* t = current_try(st);
  if (t == nullptr || t->response_ms >= 0) return;
  if (t->status == 0) t->status = status;
  t->response_ms = try_elapsed(*t, now_ms);
}

}  // namespace kosoku::proxy
