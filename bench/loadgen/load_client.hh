// The load generator's HTTP/1.1 client, seawreck-style: C keep-alive connections on one net::Stack (kosoku's
// own TCP stack over DPDK in kosoku-loadgen, but any net::Stack works), each sending the same GET and keeping
// `pipeline` requests in flight (1 = one request at a time, the default). Responses are parsed with the
// proxy's response-head parser (core/http/response_parser.hh); bodies must be Content-Length framed and, when
// an expected body is given, byte-identical to it. Single thread, driven by the owner's loop: tick() once per
// iteration with the current time.
//
// Phases: connecting → warm-up (responses counted apart) → measuring (`duration`) → done. Only responses
// completed while measuring count toward the rate and the latency histogram (latency = time from the
// iteration that wrote the request to the iteration that completed its response; the loop's iteration time
// is the resolution). A connection the server closes cleanly after a response (Connection: close, or
// keepalive_requests reached) is reopened and not counted as an error; any other close with requests in
// flight, a parse error, a non-200 status, a wrong body or a failed connect is an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <netinet/in.h>

#include "bench/loadgen/latency_histogram.hh"
#include "core/net/stream.hh"

namespace kosoku::loadgen {

struct LoadOptions {
  sockaddr_in server{};            // kosoku's address and port
  std::string host_header;         // Host field value ("10.0.0.1:8080")
  std::string path = "/1k.bin";    // request-target (origin-form)
  uint32_t connections = 16;       // C
  uint32_t pipeline = 1;           // requests in flight per connection (1..64)
  uint64_t warmup_ms = 1000;
  uint64_t duration_ms = 5000;
  uint64_t connect_timeout_ms = 10000;  // all connections must be up by then, else the run fails
  std::string expected_body;       // empty: only the framing and the status are checked
  bool check_body = false;
};

/// Totals of one phase.
struct LoadCounters {
  uint64_t responses = 0;          // complete 200 responses (body checked if asked)
  uint64_t body_bytes = 0;
  uint64_t wire_bytes_in = 0;      // head + body bytes
  uint64_t err_connect = 0;        // connect() refused or handshake failed
  uint64_t err_closed = 0;         // closed by the server with requests in flight
  uint64_t err_parse = 0;          // invalid response head, or framing other than Content-Length
  uint64_t err_status = 0;         // status other than 200
  uint64_t err_body = 0;           // body differs from the expected one
  uint64_t reconnects = 0;         // clean server closes after a response (not errors)
  uint64_t errors() const { return err_connect + err_closed + err_parse + err_status + err_body; }
};

class LoadClient {
 public:
  enum class Phase { kConnecting, kWarmup, kMeasuring, kDone, kFailed };

  LoadClient(net::Stack& stack, const LoadOptions& opts);
  ~LoadClient();
  LoadClient(const LoadClient&) = delete;
  LoadClient& operator=(const LoadClient&) = delete;

  /// Opens the connections (their requests go out as soon as each handshake completes).
  /// Returns false with *err if the stack refused a connect() outright.
  bool start(uint64_t now_ns, std::string* err);
  /// Advances the phases; call once per loop iteration after the stack's poll.
  void tick(uint64_t now_ns);
  /// Closes every connection (RST: the server frees them at once). Call once, after kDone or kFailed.
  void close_all();

  Phase phase() const { return phase_; }
  const std::string& failure() const { return failure_; }
  const LoadCounters& warmup() const { return warmup_; }
  const LoadCounters& measured() const { return measured_; }
  const LatencyHistogram& latency() const { return latency_; }
  /// Length of the measuring phase actually run, ns.
  uint64_t measured_ns() const { return measure_end_ns_ - measure_start_ns_; }
  uint32_t connected() const { return connected_; }

 private:
  class Conn;
  friend class Conn;
  LoadCounters& counters() { return phase_ == Phase::kMeasuring ? measured_ : warmup_; }
  void open(size_t slot);
  uint64_t now_ns() const { return now_ns_; }

  net::Stack& stack_;
  LoadOptions opts_;
  std::string request_;            // one request, pipeline copies written back to back
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<size_t> reopen_;     // slots to reconnect on the next tick (never inside a callback)
  Phase phase_ = Phase::kConnecting;
  std::string failure_;
  uint64_t now_ns_ = 0;
  uint64_t phase_start_ns_ = 0;
  uint64_t measure_start_ns_ = 0, measure_end_ns_ = 0;
  uint32_t connected_ = 0;
  bool closing_all_ = false;
  LoadCounters warmup_, measured_;
  LatencyHistogram latency_;
};

}  // namespace kosoku::loadgen
