// The record of a request's upstream tries (http::UpstreamState in its response head), kept by the proxy as
// nginx keeps ngx_http_upstream_state_t: one entry per try with the server's address, its status (502/504
// for a try that failed without one), and the connect, header and response times (ms since the try began)
// and body bytes received. core/http/variables.cc formats them as $upstream_addr, $upstream_status,
// $upstream_connect_time, $upstream_header_time, $upstream_response_time and $upstream_response_length.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/http/exchange.hh"

namespace kosoku::proxy {

/// The try in progress (the last one), or null before the first.
inline http::UpstreamTry* current_try(http::UpstreamState& st) {
  return st.count == 0 ? nullptr : &st.tries[st.count - 1];
}

/// Starts a try of the server at `addr` (text that outlives the request) at `now_ms`.
inline void begin_try(http::UpstreamState& st, std::string_view addr, uint64_t now_ms) {
  if (st.count < http::UpstreamState::kMaxTries) ++st.count;
  http::UpstreamTry& t = st.tries[st.count - 1];
  t = http::UpstreamTry{};
  t.addr = addr;
  t.start_ms = now_ms;
}

/// Milliseconds since the try began.
inline int64_t try_elapsed(const http::UpstreamTry& t, uint64_t now_ms) {
  return static_cast<int64_t>(now_ms - t.start_ms);
}

/// Ends the current try (once): `status` is recorded when the upstream gave none (502, 504; 0 keeps none).
inline void end_try(http::UpstreamState& st, int status, uint64_t now_ms) {
  http::UpstreamTry* t = current_try(st);
  if (t == nullptr || t->response_ms >= 0) return;
  if (t->status == 0) t->status = status;
  t->response_ms = try_elapsed(*t, now_ms);
}

}  // namespace kosoku::proxy
