// Per-core counters: plain fields written only by their core (no atomics on the hot path), read by other
// threads on demand (a reader may see a slightly stale value; 64-bit aligned stores do not tear on x86-64).
// One CoreStats per loop; stats/export.hh aggregates and renders them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kosoku::stats {

/// Latency histogram with power-of-two microsecond buckets: bucket i counts samples in [2^(i-1), 2^i) µs,
/// bucket 0 counts < 1 µs, the last bucket counts everything above.
struct LatencyHistogram {
  static constexpr int kBuckets = 24;  // up to ~8.4 s
  std::array<uint64_t, kBuckets> buckets{};
  uint64_t count = 0;
  uint64_t sum_us = 0;
  void record_ns(uint64_t ns);
  /// Upper bound (µs) of the bucket holding quantile q (0..1) of the samples; 0 when empty.
  uint64_t quantile_us(double q) const;
};

struct DiskQueueStats {
  std::string name;
  uint64_t submitted = 0;   // ops accepted (inline + queued)
  uint64_t inline_done = 0; // completed without waiting (page-cache hits via RWF_NOWAIT / cached dentries)
  uint64_t completed = 0;   // ops completed after waiting in the queue or in the kernel
  uint64_t in_flight = 0;   // gauge: ops submitted to the kernel / pool and not yet completed
  uint64_t waiting = 0;     // gauge: ops waiting for a free depth slot
  uint64_t overflows = 0;   // ops refused because max_queue was reached (→ 503)
  uint64_t errors = 0;      // ops completed with an error
  LatencyHistogram latency; // submit → completion, queued ops only
};

/// TLS handshakes on a core's `listen ... ssl` sockets (core/tls/).
struct TlsCounters {
  uint64_t handshakes = 0;          // completed
  uint64_t handshakes_failed = 0;   // failed, refused or cut before completion
  uint64_t sessions_reused = 0;     // completed handshakes that resumed a session (ticket or cache)
  uint64_t plain_http = 0;          // connections that sent plain HTTP to a TLS socket
  uint64_t handshakes_waiting = 0;  // gauge: handshakes suspended while a certificate is read
};

struct Http2Counters {
  uint64_t connections = 0;        // connections that became HTTP/2 (preface or ALPN h2)
  uint64_t streams = 0;            // streams (requests) opened by clients
  uint64_t streams_active = 0;     // gauge: streams open now
  uint64_t rst_received = 0;       // RST_STREAM frames from clients
  uint64_t rst_sent = 0;           // RST_STREAM frames sent (malformed requests, send_timeout, aborts)
  uint64_t goaway_no_error = 0;    // GOAWAY sent: graceful (shutdown, idle, keepalive_requests)
  uint64_t goaway_protocol_error = 0;  // GOAWAY sent: PROTOCOL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR...
  uint64_t goaway_enhance_your_calm = 0;  // GOAWAY sent: ENHANCE_YOUR_CALM (an abusive peer)
  uint64_t goaway_other = 0;       // GOAWAY sent with another code
  uint64_t rapid_reset = 0;        // connections closed for resetting streams too fast (CVE-2023-44487)
  uint64_t flood = 0;              // connections closed for a frame flood (control frames, CONTINUATION, acks)
};

struct CoreStats {
  int core = 0;
  // connections
  uint64_t conn_accepted = 0;
  uint64_t conn_rejected = 0;  // refused because worker_connections was reached
  uint64_t conn_accept_failed = 0;  // accept failures other than an aborted connection (EMFILE, ENFILE, ENOMEM...)
  uint64_t conn_active = 0;    // gauge
  uint64_t conn_reading = 0;   // gauge: reading a request header or body
  uint64_t conn_writing = 0;   // gauge: producing or sending a response
  uint64_t conn_idle = 0;      // gauge: keep-alive, waiting for the next request
  // requests and bytes
  uint64_t requests = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  std::array<uint64_t, 6> responses{};  // [0]=other, [1]=1xx .. [5]=5xx
  // open_file_cache
  uint64_t ofc_hits = 0;
  uint64_t ofc_misses = 0;
  uint64_t ofc_entries = 0;  // gauge
  // disk queues, one per configured disk_queue, in MainConf::disk_queues order
  std::vector<DiskQueueStats> disk;
  // net::SharedBuffers made on this core and alive (file data read for the network and not yet sent and
  // acknowledged): gauges
  uint64_t shared_buffers = 0;
  uint64_t shared_buffer_bytes = 0;
  TlsCounters tls;
  Http2Counters http2;
  // loop
  uint64_t loop_iterations = 0;
  uint64_t start_time_s = 0;

  void count_response(int status) { responses[(status >= 100 && status < 600) ? status / 100 : 0]++; }
};

}  // namespace kosoku::stats
