// The one stats renderer: aggregates the per-core CoreStats blocks (counters.hh) into a Snapshot and renders
// it as text (serial console `stats`, nginx stub_status-compatible head), JSON or Prometheus. Used by the
// `status` location and the serial console; never on the request path.
//
// Reading another core's CoreStats: the fields are plain integers written by their core only; aggregate()
// copies them without synchronisation, so a value may be a few µs stale, and a histogram's buckets may not
// add up exactly to its count (quantile_us() tolerates this). The per-core `disk` vectors must not be resized
// after the loops start (they are sized once from MainConf::disk_queues).
//
// Connection fields, nginx stub_status semantics (https://nginx.org/en/docs/http/ngx_http_stub_status_module.html):
//   accepts  = conn_accepted + conn_rejected  (every accepted socket, including those closed at once because
//                                              worker_connections was reached)
//   handled  = conn_accepted
//   requests = requests
//   Active   = conn_active; Reading = conn_reading; Writing = conn_writing; Waiting = conn_idle.
//   accept_failed = conn_accept_failed (kosoku's: accept() failed for want of a descriptor or memory, EMFILE,
//                   ENFILE, ENOMEM; the clients wait in the listen backlog meanwhile)
//
// Adding a subsystem's numbers (DPDK port stats, proxy cache, ...) without editing this file: after
// aggregate(), push an ExtraSection into Snapshot::extra (and free-form text into Snapshot::info). Each
// ExtraMetric carries its own name, help, type and labels, and all three renderers emit it generically:
//   text        "<section> <name>{k="v",...} <value>" lines after the built-in ones;
//   JSON        "extra": {"<section>": [{"name": ..., "type": ..., "labels": {...}, "value": ...}, ...]};
//   Prometheus  family kosoku_<name> (HELP/TYPE from the first metric of that name), one sample per metric.
// e.g. a DPDK port section: {"dpdk_port", {{"dpdk_rx_packets_total", "Packets received", kCounter,
//      {{"port","0"},{"queue","1"}}, 123}, ...}}.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/stats/counters.hh"

namespace kosoku::stats {

/// One number contributed by a subsystem outside this file.
struct ExtraMetric {
  enum class Type { kCounter, kGauge };
  std::string name;  // [a-z_][a-z0-9_]*, without the "kosoku_" prefix; counters end in "_total"
  std::string help;  // one line, for Prometheus # HELP
  Type type = Type::kGauge;
  std::vector<std::pair<std::string, std::string>> labels;  // e.g. {{"core","0"},{"port","1"}}
  double value = 0;  // integral values (< 2^53) are printed without a fraction
};

/// A named group of extra metrics (JSON object key, text line prefix), e.g. "dpdk_port", "proxy_cache".
struct ExtraSection {
  std::string name;  // [a-z_][a-z0-9_]*
  std::vector<ExtraMetric> metrics;
};

struct Snapshot {
  std::string version;    // KOSOKU_VERSION
  int64_t time_s = 0;     // wall clock (s since the epoch) when the snapshot was taken
  uint64_t uptime_s = 0;  // time_s - earliest non-zero CoreStats::start_time_s (wall clock s); 0 if none
  /// Sums over cores of every counter and gauge; core = -1; `disk` merged by queue name (first-seen order),
  /// latency histograms added bucket by bucket; start_time_s = the earliest core start.
  CoreStats total;
  std::vector<CoreStats> cores;  // copies, in the order given to aggregate()
  /// Free-form "key: value" lines (config file, build options...): text and JSON only.
  std::vector<std::pair<std::string, std::string>> info;
  std::vector<ExtraSection> extra;
};

/// Copies and sums the given per-core blocks (any thread). now_s: wall clock; the overload without it reads
/// CLOCK_REALTIME. Null pointers are skipped.
Snapshot aggregate(std::span<const CoreStats* const> cores);
Snapshot aggregate(std::span<const CoreStats* const> cores, int64_t now_s);

/// Text for the console and `status` (format=text). Lines, '\n'-terminated; the first four are exactly
/// nginx stub_status's (including its trailing spaces):
///   Active connections: N 
///   server accepts handled requests
///    A H R 
///   Reading: x Writing: y Waiting: z 
/// then:
///   version V uptime_s U cores C
///   connections rejected J accept_failed F
///   bytes in I out O
///   responses 1xx a 2xx b 3xx c 4xx d 5xx e other f
///   open_file_cache hits h misses m entries e
///   disk_queue NAME submitted s inline i completed c in_flight f waiting w overflows o errors e
///     latency_us p50 x p90 y p99 z count n sum s          (one line per queue)
///   core K active a reading r writing w waiting z accepted x rejected j requests q bytes_in i bytes_out o
///     loop_iterations l                                   (one line per core)
///   info KEY: VALUE                                       (Snapshot::info)
///   SECTION NAME{label="v",...} VALUE                     (Snapshot::extra)
/// (the indented continuation lines above are on the same line in the output).
std::string render_text(const Snapshot& s);
/// nginx's stub_status page alone: the first four lines of render_text.
std::string render_stub_status(const Snapshot& s);

/// JSON object with stable field names (documented fields are never renamed; new ones may be added):
///   version, time_s, uptime_s,
///   connections {active, reading, writing, waiting, accepts, handled, rejected, accept_failed}, requests,
///   bytes {in, out}, responses {"1xx","2xx","3xx","4xx","5xx","other"},
///   open_file_cache {hits, misses, entries}, shared_buffers {buffers, bytes} (gauges: file data buffers alive,
///   net::SharedBuffer, bytes of capacity), loop_iterations,
///   disk_queues [{name, submitted, inline, completed, in_flight, waiting, overflows, errors,
///                 latency {count, sum_us, p50_us, p90_us, p99_us, buckets [24 counts, bucket i: [2^(i-1), 2^i)
///                 µs, bucket 0: < 1 µs, bucket 23: >= 2^22 µs]}}],
///   cores [{core, <the same fields as the top level from connections to disk_queues>}],
///   info {KEY: VALUE}, extra {SECTION: [{name, type: "counter"|"gauge", labels {..}, value}]}
std::string render_json(const Snapshot& s);

/// Subsystems outside the per-core counters (the DPDK port, the proxy cache...) register a source once at
/// start-up, before the loops run; every renderer's caller then calls add_extra() on its snapshot. Sources
/// run on the reader's thread and must only read (counters, gauges).
using ExtraSource = std::function<void(Snapshot& s)>;
void register_extra_source(ExtraSource source);
/// Runs every registered source on `s` (appends to s.extra / s.info).
void add_extra(Snapshot& s);

/// Prometheus text exposition format 0.0.4. Families (all per core, label core="K"; disk ones also
/// queue="NAME"): kosoku_build_info{version} (gauge 1), kosoku_uptime_seconds, kosoku_connections_accepted_total,
/// kosoku_connections_handled_total, kosoku_connections_rejected_total, kosoku_connections_accept_failed_total,
/// kosoku_connections_active,
/// kosoku_connections_reading, kosoku_connections_writing, kosoku_connections_waiting,
/// kosoku_http_requests_total, kosoku_http_responses_total{code="1xx".."5xx"|"other"},
/// kosoku_received_bytes_total, kosoku_sent_bytes_total, kosoku_open_file_cache_hits_total,
/// kosoku_open_file_cache_misses_total, kosoku_open_file_cache_entries, kosoku_loop_iterations_total,
/// kosoku_disk_queue_{submitted,inline,completed,overflows,errors}_total, kosoku_disk_queue_in_flight,
/// kosoku_disk_queue_waiting, kosoku_disk_queue_latency_seconds (histogram: le = 2^i µs in seconds for
/// i = 0..22, then +Inf; _sum in seconds, exact decimal), then Snapshot::extra. Sum over `core` in PromQL for
/// totals (no unlabelled totals are emitted, so sum() never double counts).
std::string render_prometheus(const Snapshot& s);

inline constexpr std::string_view kTextContentType = "text/plain; charset=utf-8";
inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace kosoku::stats
