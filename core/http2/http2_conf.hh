// Configuration of the HTTP/2 module (nginx's ngx_http_v2_module): `srv.module<http2::Http2SrvConf>()` and
// `loc.module<http2::Http2LocConf>()`. Connection-wide settings come from the default server of the socket the
// connection arrived on (as nginx takes them from the address's default server before any request names one).
#pragma once

#include <cstdint>

#include "core/config/module_conf.hh"

namespace kosoku::http2 {

struct Http2SrvConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kServer;
  bool enable = false;                  // `http2 on|off` (nginx >= 1.25.1)
  uint32_t max_concurrent_streams = 128;  // `http2_max_concurrent_streams` (SETTINGS_MAX_CONCURRENT_STREAMS)
  /// `http2_recv_buffer_size`: the most input bytes one read step hands to the frame decoder (the rest is
  /// decoded on the loop's next turn), so one connection cannot hold its core for long.
  uint64_t recv_buffer_size = 256 * 1024;
  /// `http2_body_preread_size`: a stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE, RFC 9113 §6.5.2): the
  /// request body bytes a client may send ahead of the handler reading them.
  uint64_t body_preread_size = 64 * 1024;
  /// `http2_idle_timeout` (nginx before 1.19.7), ms; 0: not set, keepalive_timeout applies.
  uint64_t idle_timeout_ms = 0;
};

struct Http2LocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  /// `http2_chunk_size`: the most response body bytes one DATA frame carries (bounded further by the
  /// client's SETTINGS_MAX_FRAME_SIZE and its windows).
  uint64_t chunk_size = 8 * 1024;
};

}  // namespace kosoku::http2
