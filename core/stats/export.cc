#include "core/stats/export.hh"

#include <time.h>

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#ifndef KOSOKU_VERSION
#define KOSOKU_VERSION "unknown"
#endif

namespace kosoku::stats {

namespace {

// Debian's Abseil is built with its own absl::string_view (not std::string_view).
absl::string_view av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kResponseClass[6] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
// Text/JSON order of the response classes: 1xx..5xx, then other.
constexpr int kResponseOrder[6] = {1, 2, 3, 4, 5, 0};

// The HTTP/2 counters, once for every format: the text line, the JSON object and the Prometheus families
// (kosoku_http2_NAME_total, or kosoku_http2_NAME for a gauge).
struct Http2Field {
  std::string_view name;
  uint64_t Http2Counters::*member;
  std::string_view help;
  bool gauge = false;
};
constexpr Http2Field kHttp2Fields[] = {
    {"connections", &Http2Counters::connections, "Connections that became HTTP/2"},
    {"streams", &Http2Counters::streams, "HTTP/2 streams opened by clients"},
    {"streams_active", &Http2Counters::streams_active, "HTTP/2 streams open now", true},
    {"rst_received", &Http2Counters::rst_received, "HTTP/2 RST_STREAM frames received"},
    {"rst_sent", &Http2Counters::rst_sent, "HTTP/2 RST_STREAM frames sent"},
    {"goaway_no_error", &Http2Counters::goaway_no_error, "HTTP/2 GOAWAY sent: NO_ERROR"},
    {"goaway_protocol_error", &Http2Counters::goaway_protocol_error,
     "HTTP/2 GOAWAY sent: PROTOCOL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR, FLOW_CONTROL_ERROR"},
    {"goaway_enhance_your_calm", &Http2Counters::goaway_enhance_your_calm, "HTTP/2 GOAWAY sent: ENHANCE_YOUR_CALM"},
    {"goaway_other", &Http2Counters::goaway_other, "HTTP/2 GOAWAY sent with another code"},
    {"rapid_reset", &Http2Counters::rapid_reset, "HTTP/2 connections closed for resetting streams too fast"},
    {"flood", &Http2Counters::flood, "HTTP/2 connections closed for a frame flood"},
};

void add_histogram(LatencyHistogram& dst, const LatencyHistogram& src) {
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) dst.buckets[i] += src.buckets[i];
  dst.count += src.count;
  dst.sum_us += src.sum_us;
}

void add_disk(DiskQueueStats& dst, const DiskQueueStats& src) {
  dst.submitted += src.submitted;
  dst.inline_done += src.inline_done;
  dst.completed += src.completed;
  dst.in_flight += src.in_flight;
  dst.waiting += src.waiting;
  dst.overflows += src.overflows;
  dst.errors += src.errors;
  add_histogram(dst.latency, src.latency);
}

void add_core(CoreStats& dst, const CoreStats& src) {
  dst.conn_accepted += src.conn_accepted;
  dst.conn_rejected += src.conn_rejected;
  dst.conn_accept_failed += src.conn_accept_failed;
  dst.conn_active += src.conn_active;
  dst.conn_reading += src.conn_reading;
  dst.conn_writing += src.conn_writing;
  dst.conn_idle += src.conn_idle;
  dst.requests += src.requests;
  dst.bytes_in += src.bytes_in;
  dst.bytes_out += src.bytes_out;
  for (size_t i = 0; i < dst.responses.size(); ++i) dst.responses[i] += src.responses[i];
  dst.ofc_hits += src.ofc_hits;
  dst.ofc_misses += src.ofc_misses;
  dst.ofc_entries += src.ofc_entries;
  dst.loop_iterations += src.loop_iterations;
  dst.shared_buffers += src.shared_buffers;
  dst.shared_buffer_bytes += src.shared_buffer_bytes;
  dst.tls.handshakes += src.tls.handshakes;
  dst.tls.handshakes_failed += src.tls.handshakes_failed;
  dst.tls.sessions_reused += src.tls.sessions_reused;
  dst.tls.plain_http += src.tls.plain_http;
  dst.tls.handshakes_waiting += src.tls.handshakes_waiting;
  for (const Http2Field& f : kHttp2Fields) dst.http2.*f.member += src.http2.*f.member;
  if (src.start_time_s != 0 && (dst.start_time_s == 0 || src.start_time_s < dst.start_time_s)) {
    dst.start_time_s = src.start_time_s;
  }
  for (const DiskQueueStats& q : src.disk) {
    DiskQueueStats* d = nullptr;
    for (DiskQueueStats& e : dst.disk) {
      if (e.name == q.name) {
        d = &e;
        break;
      }
    }
    if (d == nullptr) {
      d = &dst.disk.emplace_back();
      d->name = q.name;
    }
    add_disk(*d, q);
  }
}

// Shortest representation that reads back to the same double; integers without a fraction.
std::string format_number(double v, bool json) {
  if (std::isnan(v)) return json ? "null" : "NaN";
  if (std::isinf(v)) return json ? "null" : (v > 0 ? "+Inf" : "-Inf");
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Exact decimal seconds for a microsecond count: 1500000 → "1.5", 1 → "0.000001", 0 → "0".
std::string us_to_seconds(uint64_t us) {
  uint64_t whole = us / 1000000;
  uint64_t frac = us % 1000000;
  if (frac == 0) return absl::StrCat(whole);
  std::string f = absl::StrFormat("%06d", frac);
  while (f.back() == '0') f.pop_back();
  return absl::StrCat(whole, ".", f);
}

void json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

// Prometheus label value escaping: backslash, double quote, newline.
void prom_label_value(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
}

// HELP text escaping: backslash and newline.
std::string prom_help(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

void prom_labels(std::string& out, const Labels& labels) {
  if (labels.empty()) return;
  out.push_back('{');
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out.push_back(',');
    first = false;
    absl::StrAppend(&out, av(k), "=\"");
    prom_label_value(out, v);
    out.push_back('"');
  }
  out.push_back('}');
}

void prom_header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  absl::StrAppend(&out, "# HELP kosoku_", av(name), " ", prom_help(help), "\n# TYPE kosoku_", av(name), " ", av(type), "\n");
}

void prom_sample(std::string& out, std::string_view name, const Labels& labels, std::string_view value) {
  absl::StrAppend(&out, "kosoku_", av(name));
  prom_labels(out, labels);
  absl::StrAppend(&out, " ", av(value), "\n");
}

// One family with one sample per core.
template <typename Get>
void prom_core_family(std::string& out, const Snapshot& s, std::string_view name, std::string_view help,
                      std::string_view type, Get get) {
  prom_header(out, name, help, type);
  for (const CoreStats& c : s.cores) {
    std::string core = absl::StrCat(c.core);
    prom_sample(out, name, {{"core", core}}, absl::StrCat(get(c)));
  }
}

// One family with one sample per (core, disk queue).
template <typename Get>
void prom_disk_family(std::string& out, const Snapshot& s, std::string_view name, std::string_view help,
                      std::string_view type, Get get) {
  prom_header(out, name, help, type);
  for (const CoreStats& c : s.cores) {
    std::string core = absl::StrCat(c.core);
    for (const DiskQueueStats& q : c.disk) {
      prom_sample(out, name, {{"core", core}, {"queue", q.name}}, absl::StrCat(get(q)));
    }
  }
}

void json_histogram(std::string& out, const LatencyHistogram& h) {
  absl::StrAppend(&out, "{\"count\":", h.count, ",\"sum_us\":", h.sum_us, ",\"p50_us\":", h.quantile_us(0.5),
                  ",\"p90_us\":", h.quantile_us(0.9), ",\"p99_us\":", h.quantile_us(0.99), ",\"buckets\":[");
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, h.buckets[i]);
  }
  out += "]}";
}

// The fields shared by the top level (totals) and each element of "cores".
void json_body(std::string& out, const CoreStats& c) {
  absl::StrAppend(&out, "\"connections\":{\"active\":", c.conn_active, ",\"reading\":", c.conn_reading,
                  ",\"writing\":", c.conn_writing, ",\"waiting\":", c.conn_idle,
                  ",\"accepts\":", c.conn_accepted + c.conn_rejected, ",\"handled\":", c.conn_accepted,
                  ",\"rejected\":", c.conn_rejected, ",\"accept_failed\":", c.conn_accept_failed,
                  "},\"requests\":", c.requests, ",\"bytes\":{\"in\":", c.bytes_in, ",\"out\":", c.bytes_out,
                  "},\"responses\":{");
  for (int k = 0; k < 6; ++k) {
    int i = kResponseOrder[k];
    if (k > 0) out.push_back(',');
    absl::StrAppend(&out, "\"", av(kResponseClass[i]), "\":", c.responses[i]);
  }
  absl::StrAppend(&out, "},\"open_file_cache\":{\"hits\":", c.ofc_hits, ",\"misses\":", c.ofc_misses,
                  ",\"entries\":", c.ofc_entries, "},\"shared_buffers\":{\"buffers\":", c.shared_buffers,
                  ",\"bytes\":", c.shared_buffer_bytes, "},\"tls\":{\"handshakes\":", c.tls.handshakes,
                  ",\"handshakes_failed\":", c.tls.handshakes_failed, ",\"sessions_reused\":",
                  c.tls.sessions_reused, ",\"plain_http\":", c.tls.plain_http, ",\"handshakes_waiting\":",
                  c.tls.handshakes_waiting, "},\"http2\":{");
  for (const Http2Field& f : kHttp2Fields) {
    absl::StrAppend(&out, &f == kHttp2Fields ? "\"" : ",\"", av(f.name), "\":", c.http2.*f.member);
  }
  absl::StrAppend(&out, "},\"loop_iterations\":", c.loop_iterations, ",\"disk_queues\":[");
  bool first = true;
  for (const DiskQueueStats& q : c.disk) {
    if (!first) out.push_back(',');
    first = false;
    out += "{\"name\":";
    json_string(out, q.name);
    absl::StrAppend(&out, ",\"submitted\":", q.submitted, ",\"inline\":", q.inline_done, ",\"completed\":",
                    q.completed, ",\"in_flight\":", q.in_flight, ",\"waiting\":", q.waiting, ",\"overflows\":",
                    q.overflows, ",\"errors\":", q.errors, ",\"latency\":");
    json_histogram(out, q.latency);
    out.push_back('}');
  }
  out.push_back(']');
}

std::string_view type_name(ExtraMetric::Type t) { return t == ExtraMetric::Type::kCounter ? "counter" : "gauge"; }

void text_labels(std::string& out, const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return;
  out.push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, labels[i].first, "=\"");
    prom_label_value(out, labels[i].second);
    out.push_back('"');
  }
  out.push_back('}');
}

}  // namespace

Snapshot aggregate(std::span<const CoreStats* const> cores) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return aggregate(cores, ts.tv_sec);
}

Snapshot aggregate(std::span<const CoreStats* const> cores, int64_t now_s) {
  Snapshot s;
  s.version = KOSOKU_VERSION;
  s.time_s = now_s;
  s.total.core = -1;
  s.cores.reserve(cores.size());
  for (const CoreStats* c : cores) {
    if (c == nullptr) continue;
    s.cores.push_back(*c);
    add_core(s.total, s.cores.back());  // from the copy, so totals equal the sum of the listed cores
  }
  if (s.total.start_time_s != 0 && now_s > static_cast<int64_t>(s.total.start_time_s)) {
    s.uptime_s = static_cast<uint64_t>(now_s) - s.total.start_time_s;
  }
  return s;
}

namespace {

// nginx stub_status, byte for byte (ngx_http_stub_status_module.c).
void append_stub_status(const CoreStats& t, std::string& out) {
  absl::StrAppend(&out, "Active connections: ", t.conn_active, " \n");
  out += "server accepts handled requests\n";
  absl::StrAppend(&out, " ", t.conn_accepted + t.conn_rejected, " ", t.conn_accepted, " ", t.requests, " \n");
  absl::StrAppend(&out, "Reading: ", t.conn_reading, " Writing: ", t.conn_writing, " Waiting: ", t.conn_idle,
                  " \n");
}

}  // namespace

std::string render_stub_status(const Snapshot& s) {
  std::string out;
  append_stub_status(s.total, out);
  return out;
}

std::string render_text(const Snapshot& s) {
  const CoreStats& t = s.total;
  std::string out;
  out.reserve(1024 + 256 * s.cores.size());
  append_stub_status(t, out);
  // kosoku's lines: "key value" pairs.
  absl::StrAppend(&out, "version ", s.version, " uptime_s ", s.uptime_s, " cores ", s.cores.size(), "\n");
  absl::StrAppend(&out, "connections rejected ", t.conn_rejected, " accept_failed ", t.conn_accept_failed, "\n");
  absl::StrAppend(&out, "bytes in ", t.bytes_in, " out ", t.bytes_out, "\n");
  out += "responses";
  for (int k = 0; k < 6; ++k) {
    int i = kResponseOrder[k];
    absl::StrAppend(&out, " ", av(kResponseClass[i]), " ", t.responses[i]);
  }
  out += "\n";
  absl::StrAppend(&out, "open_file_cache hits ", t.ofc_hits, " misses ", t.ofc_misses, " entries ", t.ofc_entries,
                  "\n");
  absl::StrAppend(&out, "tls handshakes ", t.tls.handshakes, " failed ", t.tls.handshakes_failed, " reused ",
                  t.tls.sessions_reused, " plain_http ", t.tls.plain_http, " waiting ", t.tls.handshakes_waiting, "\n");
  out += "http2";
  for (const Http2Field& f : kHttp2Fields) absl::StrAppend(&out, " ", av(f.name), " ", t.http2.*f.member);
  out += "\n";
  for (const DiskQueueStats& q : t.disk) {
    absl::StrAppend(&out, "disk_queue ", q.name, " submitted ", q.submitted, " inline ", q.inline_done,
                    " completed ", q.completed, " in_flight ", q.in_flight, " waiting ", q.waiting, " overflows ",
                    q.overflows, " errors ", q.errors, " latency_us p50 ", q.latency.quantile_us(0.5), " p90 ",
                    q.latency.quantile_us(0.9), " p99 ", q.latency.quantile_us(0.99), " count ", q.latency.count,
                    " sum ", q.latency.sum_us, "\n");
  }
  for (const CoreStats& c : s.cores) {
    absl::StrAppend(&out, "core ", c.core, " active ", c.conn_active, " reading ", c.conn_reading, " writing ",
                    c.conn_writing, " waiting ", c.conn_idle, " accepted ", c.conn_accepted, " rejected ",
                    c.conn_rejected, " requests ", c.requests, " bytes_in ", c.bytes_in, " bytes_out ", c.bytes_out,
                    " loop_iterations ", c.loop_iterations, "\n");
  }
  for (const auto& [k, v] : s.info) absl::StrAppend(&out, "info ", k, ": ", v, "\n");
  for (const ExtraSection& sec : s.extra) {
    for (const ExtraMetric& m : sec.metrics) {
      absl::StrAppend(&out, sec.name, " ", m.name);
      text_labels(out, m.labels);
      absl::StrAppend(&out, " ", format_number(m.value, false), "\n");
    }
  }
  return out;
}

std::string render_json(const Snapshot& s) {
  std::string out;
  out.reserve(2048 + 1024 * s.cores.size());
  out += "{\"version\":";
  json_string(out, s.version);
  absl::StrAppend(&out, ",\"time_s\":", s.time_s, ",\"uptime_s\":", s.uptime_s, ",");
  json_body(out, s.total);
  out += ",\"cores\":[";
  for (size_t i = 0; i < s.cores.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, "{\"core\":", s.cores[i].core, ",");
    json_body(out, s.cores[i]);
    out.push_back('}');
  }
  out += "],\"info\":{";
  for (size_t i = 0; i < s.info.size(); ++i) {
    if (i > 0) out.push_back(',');
    json_string(out, s.info[i].first);
    out.push_back(':');
    json_string(out, s.info[i].second);
  }
  out += "},\"extra\":{";
  for (size_t i = 0; i < s.extra.size(); ++i) {
    const ExtraSection& sec = s.extra[i];
    if (i > 0) out.push_back(',');
    json_string(out, sec.name);
    out += ":[";
    for (size_t j = 0; j < sec.metrics.size(); ++j) {
      const ExtraMetric& m = sec.metrics[j];
      if (j > 0) out.push_back(',');
      out += "{\"name\":";
      json_string(out, m.name);
      absl::StrAppend(&out, ",\"type\":\"", av(type_name(m.type)), "\",\"labels\":{");
      for (size_t k = 0; k < m.labels.size(); ++k) {
        if (k > 0) out.push_back(',');
        json_string(out, m.labels[k].first);
        out.push_back(':');
        json_string(out, m.labels[k].second);
      }
      absl::StrAppend(&out, "},\"value\":", format_number(m.value, true), "}");
    }
    out.push_back(']');
  }
  out += "}}\n";
  return out;
}

std::string render_prometheus(const Snapshot& s) {
  std::string out;
  out.reserve(8192 + 4096 * s.cores.size());
  prom_header(out, "build_info", "kosoku version; always 1", "gauge");
  prom_sample(out, "build_info", {{"version", s.version}}, "1");
  prom_header(out, "uptime_seconds", "Seconds since the first loop started", "gauge");
  prom_sample(out, "uptime_seconds", {}, absl::StrCat(s.uptime_s));

  prom_core_family(out, s, "connections_accepted_total", "Client connections accepted (stub_status accepts)",
                   "counter", [](const CoreStats& c) { return c.conn_accepted + c.conn_rejected; });
  prom_core_family(out, s, "connections_handled_total", "Client connections handled (stub_status handled)",
                   "counter", [](const CoreStats& c) { return c.conn_accepted; });
  prom_core_family(out, s, "connections_rejected_total",
                   "Client connections closed because worker_connections was reached", "counter",
                   [](const CoreStats& c) { return c.conn_rejected; });
  prom_core_family(out, s, "connections_accept_failed_total",
                   "accept() failures for want of a resource (EMFILE, ENFILE, ENOMEM...): accepting pauses 500 ms",
                   "counter", [](const CoreStats& c) { return c.conn_accept_failed; });
  prom_core_family(out, s, "connections_active", "Open client connections", "gauge",
                   [](const CoreStats& c) { return c.conn_active; });
  prom_core_family(out, s, "connections_reading", "Connections reading a request", "gauge",
                   [](const CoreStats& c) { return c.conn_reading; });
  prom_core_family(out, s, "connections_writing", "Connections writing a response", "gauge",
                   [](const CoreStats& c) { return c.conn_writing; });
  prom_core_family(out, s, "connections_waiting", "Idle keep-alive connections", "gauge",
                   [](const CoreStats& c) { return c.conn_idle; });
  prom_core_family(out, s, "http_requests_total", "HTTP requests", "counter",
                   [](const CoreStats& c) { return c.requests; });

  prom_header(out, "http_responses_total", "HTTP responses by status class", "counter");
  for (const CoreStats& c : s.cores) {
    std::string core = absl::StrCat(c.core);
    for (int k = 0; k < 6; ++k) {
      int i = kResponseOrder[k];
      prom_sample(out, "http_responses_total", {{"core", core}, {"code", kResponseClass[i]}},
                  absl::StrCat(c.responses[i]));
    }
  }

  prom_core_family(out, s, "received_bytes_total", "Bytes received from clients", "counter",
                   [](const CoreStats& c) { return c.bytes_in; });
  prom_core_family(out, s, "sent_bytes_total", "Bytes sent to clients", "counter",
                   [](const CoreStats& c) { return c.bytes_out; });
  prom_core_family(out, s, "open_file_cache_hits_total", "open_file_cache hits", "counter",
                   [](const CoreStats& c) { return c.ofc_hits; });
  prom_core_family(out, s, "open_file_cache_misses_total", "open_file_cache misses", "counter",
                   [](const CoreStats& c) { return c.ofc_misses; });
  prom_core_family(out, s, "open_file_cache_entries", "open_file_cache entries", "gauge",
                   [](const CoreStats& c) { return c.ofc_entries; });
  prom_core_family(out, s, "tls_handshakes_total", "TLS handshakes completed", "counter",
                   [](const CoreStats& c) { return c.tls.handshakes; });
  prom_core_family(out, s, "tls_handshakes_failed_total", "TLS handshakes failed or refused", "counter",
                   [](const CoreStats& c) { return c.tls.handshakes_failed; });
  prom_core_family(out, s, "tls_sessions_reused_total", "TLS handshakes that resumed a session", "counter",
                   [](const CoreStats& c) { return c.tls.sessions_reused; });
  prom_core_family(out, s, "tls_plain_http_total", "Plain HTTP sent to a TLS socket", "counter",
                   [](const CoreStats& c) { return c.tls.plain_http; });
  prom_core_family(out, s, "tls_handshakes_waiting", "TLS handshakes waiting for a certificate", "gauge",
                   [](const CoreStats& c) { return c.tls.handshakes_waiting; });
  for (const Http2Field& f : kHttp2Fields) {
    const uint64_t Http2Counters::*m = f.member;
    prom_core_family(out, s, absl::StrCat("http2_", av(f.name), f.gauge ? "" : "_total"), f.help,
                     f.gauge ? "gauge" : "counter", [m](const CoreStats& c) { return c.http2.*m; });
  }
  prom_core_family(out, s, "loop_iterations_total", "Event loop iterations", "counter",
                   [](const CoreStats& c) { return c.loop_iterations; });

  prom_disk_family(out, s, "disk_queue_submitted_total", "Disk ops accepted by the queue", "counter",
                   [](const DiskQueueStats& q) { return q.submitted; });
  prom_disk_family(out, s, "disk_queue_inline_total", "Disk ops completed inline (page cache hits)", "counter",
                   [](const DiskQueueStats& q) { return q.inline_done; });
  prom_disk_family(out, s, "disk_queue_completed_total", "Disk ops completed after waiting", "counter",
                   [](const DiskQueueStats& q) { return q.completed; });
  prom_disk_family(out, s, "disk_queue_overflows_total", "Disk ops refused because max_queue was reached",
                   "counter", [](const DiskQueueStats& q) { return q.overflows; });
  prom_disk_family(out, s, "disk_queue_errors_total", "Disk ops completed with an error", "counter",
                   [](const DiskQueueStats& q) { return q.errors; });
  prom_disk_family(out, s, "disk_queue_in_flight", "Disk ops in the kernel or the pool", "gauge",
                   [](const DiskQueueStats& q) { return q.in_flight; });
  prom_disk_family(out, s, "disk_queue_waiting", "Disk ops waiting for a free depth slot", "gauge",
                   [](const DiskQueueStats& q) { return q.waiting; });

  // Histogram: bucket i of LatencyHistogram holds [2^(i-1), 2^i) µs, so cumulative buckets 0..i are the
  // samples < 2^i µs; the last bucket is open-ended and only appears in +Inf.
  prom_header(out, "disk_queue_latency_seconds", "Disk op latency, submit to completion, queued ops only",
              "histogram");
  for (const CoreStats& c : s.cores) {
    std::string core = absl::StrCat(c.core);
    for (const DiskQueueStats& q : c.disk) {
      uint64_t cum = 0;
      for (int i = 0; i < LatencyHistogram::kBuckets - 1; ++i) {
        cum += q.latency.buckets[i];
        std::string le = us_to_seconds(uint64_t{1} << i);
        prom_sample(out, "disk_queue_latency_seconds_bucket", {{"core", core}, {"queue", q.name}, {"le", le}},
                    absl::StrCat(cum));
      }
      cum += q.latency.buckets[LatencyHistogram::kBuckets - 1];
      // +Inf and _count both use the bucket total so they always agree, even on a torn read.
      prom_sample(out, "disk_queue_latency_seconds_bucket", {{"core", core}, {"queue", q.name}, {"le", "+Inf"}},
                  absl::StrCat(cum));
      prom_sample(out, "disk_queue_latency_seconds_sum", {{"core", core}, {"queue", q.name}},
                  us_to_seconds(q.latency.sum_us));
      prom_sample(out, "disk_queue_latency_seconds_count", {{"core", core}, {"queue", q.name}}, absl::StrCat(cum));
    }
  }

  // Extra metrics, grouped into families by name (first-seen order), so each family is contiguous.
  std::vector<std::pair<std::string_view, std::vector<const ExtraMetric*>>> families;
  for (const ExtraSection& sec : s.extra) {
    for (const ExtraMetric& m : sec.metrics) {
      auto it = families.begin();
      while (it != families.end() && it->first != m.name) ++it;
      if (it == families.end()) {
        families.emplace_back(m.name, std::vector<const ExtraMetric*>{});
        it = families.end() - 1;
      }
      it->second.push_back(&m);
    }
  }
  for (const auto& [name, metrics] : families) {
    prom_header(out, name, metrics.front()->help, type_name(metrics.front()->type));
    for (const ExtraMetric* m : metrics) {
      Labels labels;
      for (const auto& [k, v] : m->labels) labels.emplace_back(k, v);
      prom_sample(out, name, labels, format_number(m->value, false));
    }
  }
  return out;
}

namespace {
std::vector<ExtraSource>& extra_sources() {
  static std::vector<ExtraSource> sources;  // written before the loops start, read-only afterwards
  return sources;
}
}  // namespace

void register_extra_source(ExtraSource source) { extra_sources().push_back(std::move(source)); }

void add_extra(Snapshot& s) {
  for (const ExtraSource& src : extra_sources()) src(s);
}

}  // namespace kosoku::stats
