// Stats: histogram buckets and quantiles, aggregation of two cores, text (stub_status head), JSON (parsed by
// python3) and Prometheus 0.0.4 (every line checked by a regex, families contiguous, histograms consistent).
#include "core/stats/export.hh"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kosoku::stats {
namespace {

TEST(LatencyHistogram, BucketsArePowersOfTwoMicroseconds) {
  LatencyHistogram h;
  h.record_ns(0);           // < 1 µs → bucket 0
  h.record_ns(999);         // < 1 µs → bucket 0
  h.record_ns(1000);        // 1 µs → [1, 2) → bucket 1
  h.record_ns(1999);        // 1 µs → bucket 1
  h.record_ns(2000);        // 2 µs → [2, 4) → bucket 2
  h.record_ns(10000);       // 10 µs → [8, 16) → bucket 4
  h.record_ns(4194303000);  // 4194303 µs → [2^21, 2^22) → bucket 22
  h.record_ns(4194304000);  // 2^22 µs → bucket 23 (the open-ended last one)
  h.record_ns(60000000000); // 60 s → bucket 23
  EXPECT_EQ(h.count, 9u);
  EXPECT_EQ(h.buckets[0], 2u);
  EXPECT_EQ(h.buckets[1], 2u);
  EXPECT_EQ(h.buckets[2], 1u);
  EXPECT_EQ(h.buckets[3], 0u);
  EXPECT_EQ(h.buckets[4], 1u);
  EXPECT_EQ(h.buckets[22], 1u);
  EXPECT_EQ(h.buckets[23], 2u);
  EXPECT_EQ(h.sum_us, 0u + 0 + 1 + 1 + 2 + 10 + 4194303 + 4194304 + 60000000);
}

TEST(LatencyHistogram, QuantilesAreBucketUpperBounds) {
  LatencyHistogram empty;
  EXPECT_EQ(empty.quantile_us(0.5), 0u);
  LatencyHistogram h;
  for (int i = 0; i < 50; ++i) h.record_ns(10 * 1000);    // bucket 4, upper bound 16 µs
  for (int i = 0; i < 40; ++i) h.record_ns(100 * 1000);   // bucket 7, upper bound 128 µs
  for (int i = 0; i < 10; ++i) h.record_ns(5000 * 1000);  // bucket 13, upper bound 8192 µs
  EXPECT_EQ(h.quantile_us(0.0), 16u);
  EXPECT_EQ(h.quantile_us(0.01), 16u);
  EXPECT_EQ(h.quantile_us(0.5), 16u);   // rank 50
  EXPECT_EQ(h.quantile_us(0.51), 128u); // rank 51
  EXPECT_EQ(h.quantile_us(0.9), 128u);  // rank 90
  EXPECT_EQ(h.quantile_us(0.91), 8192u);
  EXPECT_EQ(h.quantile_us(0.99), 8192u);
  EXPECT_EQ(h.quantile_us(1.0), 8192u);
  EXPECT_EQ(h.quantile_us(2.0), 8192u);  // clamped
  LatencyHistogram sub;
  sub.record_ns(500);
  EXPECT_EQ(sub.quantile_us(0.5), 1u);
  LatencyHistogram huge;
  huge.record_ns(100000000000ull);
  EXPECT_EQ(huge.quantile_us(0.5), 1u << 23);
}

// Two cores with distinct, hand-checked values.
struct TwoCores {
  CoreStats c0, c1;
  TwoCores() {
    c0.core = 0;
    c0.conn_accepted = 10;
    c0.conn_rejected = 1;
    c0.conn_active = 3;
    c0.conn_reading = 1;
    c0.conn_writing = 1;
    c0.conn_idle = 1;
    c0.requests = 25;
    c0.bytes_in = 1000;
    c0.bytes_out = 20000;
    c0.responses = {0, 0, 20, 2, 2, 1};
    c0.ofc_hits = 5;
    c0.ofc_misses = 2;
    c0.ofc_entries = 2;
    c0.loop_iterations = 100;
    c0.http2.streams = 7;
    c0.http2.streams_active = 2;
    c0.http2.goaway_enhance_your_calm = 1;
    c0.start_time_s = 1000;
    c0.disk.resize(2);
    c0.disk[0].name = "default";
    c0.disk[0].submitted = 10;
    c0.disk[0].inline_done = 8;
    c0.disk[0].completed = 2;
    c0.disk[0].latency.record_ns(10 * 1000);
    c0.disk[0].latency.record_ns(100 * 1000);
    c0.disk[1].name = "slow";
    c0.disk[1].submitted = 1;
    c0.disk[1].in_flight = 1;
    c0.disk[1].overflows = 2;

    c1.core = 1;
    c1.conn_accepted = 5;
    c1.conn_active = 2;
    c1.conn_writing = 1;
    c1.conn_idle = 1;
    c1.requests = 7;
    c1.bytes_in = 500;
    c1.bytes_out = 7000;
    c1.responses = {1, 1, 4, 1, 0, 0};
    c1.ofc_hits = 1;
    c1.ofc_misses = 1;
    c1.ofc_entries = 1;
    c1.loop_iterations = 50;
    c1.start_time_s = 990;
    c1.disk.resize(1);
    c1.disk[0].name = "default";
    c1.disk[0].submitted = 4;
    c1.disk[0].inline_done = 3;
    c1.disk[0].completed = 1;
    c1.disk[0].latency.record_ns(5000 * 1000);
  }
  Snapshot snapshot() const {
    const CoreStats* ptrs[] = {&c0, nullptr, &c1};
    Snapshot s = aggregate(ptrs, 2000);
    s.info.emplace_back("config", "/etc/kosoku/kosoku.conf");
    ExtraSection dpdk;
    dpdk.name = "dpdk_port";
    dpdk.metrics.push_back({"dpdk_rx_packets_total", "Packets received", ExtraMetric::Type::kCounter,
                            {{"port", "0"}, {"queue", "1"}}, 123});
    dpdk.metrics.push_back({"dpdk_rx_packets_total", "Packets received", ExtraMetric::Type::kCounter,
                            {{"port", "0"}, {"queue", "0"}}, 77});
    ExtraSection cache;
    cache.name = "proxy_cache";
    cache.metrics.push_back({"proxy_cache_hit_ratio", "Hits per lookup", ExtraMetric::Type::kGauge, {}, 0.75});
    // Same family name as the dpdk section: rendered as one Prometheus family.
    cache.metrics.push_back({"dpdk_rx_packets_total", "Packets received", ExtraMetric::Type::kCounter,
                             {{"port", "1"}, {"queue", "0"}}, 5});
    s.extra.push_back(dpdk);
    s.extra.push_back(cache);
    return s;
  }
};

TEST(StatsExport, AggregatesTwoCores) {
  TwoCores tc;
  const CoreStats* ptrs[] = {&tc.c0, &tc.c1};
  Snapshot s = aggregate(ptrs, 2000);
  EXPECT_EQ(s.version, KOSOKU_VERSION);
  EXPECT_EQ(s.time_s, 2000);
  EXPECT_EQ(s.uptime_s, 1010u);  // since the earliest core start (990)
  ASSERT_EQ(s.cores.size(), 2u);
  EXPECT_EQ(s.cores[0].core, 0);
  EXPECT_EQ(s.cores[1].core, 1);
  EXPECT_EQ(s.cores[1].requests, 7u);
  const CoreStats& t = s.total;
  EXPECT_EQ(t.core, -1);
  EXPECT_EQ(t.conn_accepted, 15u);
  EXPECT_EQ(t.conn_rejected, 1u);
  EXPECT_EQ(t.conn_active, 5u);
  EXPECT_EQ(t.conn_reading, 1u);
  EXPECT_EQ(t.conn_writing, 2u);
  EXPECT_EQ(t.conn_idle, 2u);
  EXPECT_EQ(t.requests, 32u);
  EXPECT_EQ(t.bytes_in, 1500u);
  EXPECT_EQ(t.bytes_out, 27000u);
  EXPECT_EQ(t.responses, (std::array<uint64_t, 6>{1, 1, 24, 3, 2, 1}));
  EXPECT_EQ(t.ofc_hits, 6u);
  EXPECT_EQ(t.ofc_misses, 3u);
  EXPECT_EQ(t.ofc_entries, 3u);
  EXPECT_EQ(t.loop_iterations, 150u);
  EXPECT_EQ(t.start_time_s, 990u);
  ASSERT_EQ(t.disk.size(), 2u);
  EXPECT_EQ(t.disk[0].name, "default");
  EXPECT_EQ(t.disk[0].submitted, 14u);
  EXPECT_EQ(t.disk[0].inline_done, 11u);
  EXPECT_EQ(t.disk[0].completed, 3u);
  EXPECT_EQ(t.disk[0].latency.count, 3u);
  EXPECT_EQ(t.disk[0].latency.sum_us, 5110u);
  EXPECT_EQ(t.disk[0].latency.buckets[4], 1u);
  EXPECT_EQ(t.disk[0].latency.buckets[7], 1u);
  EXPECT_EQ(t.disk[0].latency.buckets[13], 1u);
  EXPECT_EQ(t.disk[0].latency.quantile_us(0.5), 128u);
  EXPECT_EQ(t.disk[0].latency.quantile_us(0.99), 8192u);
  EXPECT_EQ(t.disk[1].name, "slow");
  EXPECT_EQ(t.disk[1].in_flight, 1u);
  EXPECT_EQ(t.disk[1].overflows, 2u);

  Snapshot none = aggregate(std::span<const CoreStats* const>(), 5);
  EXPECT_EQ(none.uptime_s, 0u);
  EXPECT_EQ(none.total.requests, 0u);
  Snapshot live = aggregate(ptrs);  // real clock
  EXPECT_GT(live.time_s, 1700000000);
}

TEST(StatsExport, TextStartsWithStubStatusAndIsExact) {
  Snapshot s = TwoCores().snapshot();
  std::string expected = absl::StrCat(
      "Active connections: 5 \n"
      "server accepts handled requests\n"
      " 16 15 32 \n"
      "Reading: 1 Writing: 2 Waiting: 2 \n"
      "version ", KOSOKU_VERSION, " uptime_s 1010 cores 2\n"
      "connections rejected 1 accept_failed 0\n"
      "bytes in 1500 out 27000\n"
      "responses 1xx 1 2xx 24 3xx 3 4xx 2 5xx 1 other 1\n"
      "open_file_cache hits 6 misses 3 entries 3\n"
      "tls handshakes 0 failed 0 reused 0 plain_http 0 waiting 0\n"
      "http2 connections 0 streams 7 streams_active 2 rst_received 0 rst_sent 0 goaway_no_error 0 "
      "goaway_protocol_error 0 goaway_enhance_your_calm 1 goaway_other 0 rapid_reset 0 flood 0\n"
      "disk_queue default submitted 14 inline 11 completed 3 in_flight 0 waiting 0 overflows 0 errors 0 "
      "latency_us p50 128 p90 8192 p99 8192 count 3 sum 5110\n"
      "disk_queue slow submitted 1 inline 0 completed 0 in_flight 1 waiting 0 overflows 2 errors 0 "
      "latency_us p50 0 p90 0 p99 0 count 0 sum 0\n"
      "core 0 active 3 reading 1 writing 1 waiting 1 accepted 10 rejected 1 requests 25 bytes_in 1000 "
      "bytes_out 20000 loop_iterations 100\n"
      "core 1 active 2 reading 0 writing 1 waiting 1 accepted 5 rejected 0 requests 7 bytes_in 500 "
      "bytes_out 7000 loop_iterations 50\n"
      "info config: /etc/kosoku/kosoku.conf\n"
      "dpdk_port dpdk_rx_packets_total{port=\"0\",queue=\"1\"} 123\n"
      "dpdk_port dpdk_rx_packets_total{port=\"0\",queue=\"0\"} 77\n"
      "proxy_cache proxy_cache_hit_ratio 0.75\n"
      "proxy_cache dpdk_rx_packets_total{port=\"1\",queue=\"0\"} 5\n");
  EXPECT_EQ(render_text(s), expected);

  // The stub_status head as parsed by its usual consumers (regex from nginx docs' field layout).
  std::regex stub(R"(^Active connections: (\d+) \nserver accepts handled requests\n (\d+) (\d+) (\d+) \nReading: (\d+) Writing: (\d+) Waiting: (\d+) \n)");
  std::smatch m;
  std::string text = render_text(s);
  ASSERT_TRUE(std::regex_search(text, m, stub));
  EXPECT_EQ(m[1].str(), "5");
  EXPECT_EQ(m[2].str(), "16");
  EXPECT_EQ(m[3].str(), "15");
  EXPECT_EQ(m[4].str(), "32");
}

// Runs python3 on the JSON (written to a temp file) and returns what the script prints.
std::string python_json(const std::string& json, const std::string& script) {
  char path[] = "/tmp/kosoku-stats-json-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, json.data(), json.size()), static_cast<ssize_t>(json.size()));
  close(fd);
  std::string cmd = absl::StrCat("python3 -c '", script, "' ", path, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  unlink(path);
  return out;
}

TEST(StatsExport, JsonParsesWithStableFieldNames) {
  Snapshot s = TwoCores().snapshot();
  s.info.emplace_back("quote\"d", "line1\nline2\\ \x01");
  std::string json = render_json(s);
  ASSERT_TRUE(json.ends_with("}\n"));
  std::string out = python_json(json, R"PY(
import json, sys
d = json.load(open(sys.argv[1]))
print(sorted(d.keys()))
print(d["version"], d["time_s"], d["uptime_s"])
c = d["connections"]
print(c["active"], c["reading"], c["writing"], c["waiting"], c["accepts"], c["handled"], c["rejected"])
print(d["requests"], d["bytes"]["in"], d["bytes"]["out"], d["loop_iterations"])
r = d["responses"]
print(r["1xx"], r["2xx"], r["3xx"], r["4xx"], r["5xx"], r["other"])
o = d["open_file_cache"]
print(o["hits"], o["misses"], o["entries"])
q = d["disk_queues"][0]
print(q["name"], q["submitted"], q["inline"], q["completed"], q["in_flight"], q["waiting"], q["overflows"], q["errors"])
l = q["latency"]
print(l["count"], l["sum_us"], l["p50_us"], l["p90_us"], l["p99_us"], len(l["buckets"]), l["buckets"][4], l["buckets"][7], l["buckets"][13])
print(d["disk_queues"][1]["name"], d["disk_queues"][1]["overflows"])
print(len(d["cores"]), d["cores"][0]["core"], d["cores"][1]["core"], d["cores"][0]["requests"], d["cores"][1]["connections"]["accepts"])
print(d["cores"][1]["disk_queues"][0]["latency"]["p50_us"], sorted(d["cores"][0].keys()) == sorted(["core"] + [k for k in d.keys() if k not in ("version", "time_s", "uptime_s", "cores", "info", "extra")]))
print(d["info"]["config"], repr(d["info"]["quote\"d"]))
e = d["extra"]
print(sorted(e.keys()), e["dpdk_port"][0]["name"], e["dpdk_port"][0]["type"], e["dpdk_port"][0]["labels"], e["dpdk_port"][0]["value"])
print(e["proxy_cache"][0]["value"], e["proxy_cache"][0]["type"], e["proxy_cache"][0]["labels"])
)PY");
  std::string expected = absl::StrCat(
      "['bytes', 'connections', 'cores', 'disk_queues', 'extra', 'http2', 'info', 'loop_iterations', "
      "'open_file_cache', 'requests', 'responses', 'shared_buffers', 'time_s', 'tls', 'uptime_s', 'version']\n",
      KOSOKU_VERSION, " 2000 1010\n",
      "5 1 2 2 16 15 1\n"
      "32 1500 27000 150\n"
      "1 24 3 2 1 1\n"
      "6 3 3\n"
      "default 14 11 3 0 0 0 0\n"
      "3 5110 128 8192 8192 24 1 1 1\n"
      "slow 2\n"
      "2 0 1 25 5\n"
      "8192 True\n"
      "/etc/kosoku/kosoku.conf 'line1\\nline2\\\\ \\x01'\n"
      "['dpdk_port', 'proxy_cache'] dpdk_rx_packets_total counter {'port': '0', 'queue': '1'} 123\n"
      "0.75 gauge {}\n");
  EXPECT_EQ(out, expected);
}

struct PromLine {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// Validates every line of a 0.0.4 exposition and returns the samples. Checks: each line is a HELP, TYPE or
// sample line; HELP and TYPE come once per family, HELP first, before its samples; the samples of a family
// are contiguous; histogram samples are NAME_bucket (with le), NAME_sum, NAME_count.
std::vector<PromLine> parse_prometheus(const std::string& text) {
  static const std::regex help(R"(^# HELP (kosoku_[a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]*$)");
  static const std::regex type(R"(^# TYPE (kosoku_[a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex sample(
      R"(^(kosoku_[a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")*\})? (-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|\+Inf|-Inf|NaN)$)");
  static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((\\[\\"n]|[^"\\\n])*)\")");
  std::vector<PromLine> out;
  std::set<std::string> seen_families;
  std::string family, family_type, helped;
  EXPECT_TRUE(text.ends_with("\n"));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.pop_back();
  for (const std::string& l : lines) {
    std::smatch m;
    if (std::regex_match(l, m, help)) {
      EXPECT_EQ(seen_families.count(m[1].str()), 0u) << "family repeated: " << l;
      helped = m[1].str();
      continue;
    }
    if (std::regex_match(l, m, type)) {
      EXPECT_EQ(helped, m[1].str()) << "TYPE without HELP first: " << l;
      EXPECT_TRUE(seen_families.insert(m[1].str()).second) << "family repeated: " << l;
      family = m[1].str();
      family_type = m[2].str();
      continue;
    }
    EXPECT_TRUE(std::regex_match(l, m, sample)) << "bad line: " << l;
    if (m.empty()) continue;
    PromLine p{m[1].str(), {}, m[7].str()};
    std::string labels = m[2].str();
    for (std::sregex_iterator it(labels.begin(), labels.end(), label), end; it != end; ++it) {
      EXPECT_TRUE(p.labels.emplace((*it)[1].str(), (*it)[2].str()).second) << "duplicate label: " << l;
    }
    if (family_type == "histogram") {
      EXPECT_TRUE(p.name == family + "_bucket" || p.name == family + "_sum" || p.name == family + "_count") << l;
      EXPECT_EQ(p.labels.count("le"), p.name == family + "_bucket" ? 1u : 0u) << l;
    } else {
      EXPECT_EQ(p.name, family) << "sample outside its family: " << l;
    }
    out.push_back(std::move(p));
  }
  return out;
}

TEST(StatsExport, PrometheusExpositionIsValidAndExact) {
  Snapshot s = TwoCores().snapshot();
  std::string text = render_prometheus(s);
  std::vector<PromLine> samples = parse_prometheus(text);
  ASSERT_FALSE(samples.empty());

  auto has = [&](const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; };
  EXPECT_TRUE(text.starts_with("# HELP kosoku_build_info "));
  EXPECT_TRUE(has(absl::StrCat("kosoku_build_info{version=\"", KOSOKU_VERSION, "\"} 1")));
  EXPECT_TRUE(has("kosoku_uptime_seconds 1010"));
  EXPECT_TRUE(has("# TYPE kosoku_http_requests_total counter"));
  EXPECT_TRUE(has("kosoku_http_requests_total{core=\"0\"} 25"));
  EXPECT_TRUE(has("kosoku_http_requests_total{core=\"1\"} 7"));
  EXPECT_TRUE(has("kosoku_connections_accepted_total{core=\"0\"} 11"));
  EXPECT_TRUE(has("kosoku_connections_handled_total{core=\"0\"} 10"));
  EXPECT_TRUE(has("# TYPE kosoku_connections_active gauge"));
  EXPECT_TRUE(has("kosoku_connections_active{core=\"1\"} 2"));
  EXPECT_TRUE(has("kosoku_connections_waiting{core=\"0\"} 1"));
  EXPECT_TRUE(has("kosoku_http_responses_total{core=\"0\",code=\"2xx\"} 20"));
  EXPECT_TRUE(has("kosoku_http_responses_total{core=\"1\",code=\"other\"} 1"));
  EXPECT_TRUE(has("kosoku_sent_bytes_total{core=\"0\"} 20000"));
  EXPECT_TRUE(has("kosoku_open_file_cache_entries{core=\"1\"} 1"));
  EXPECT_TRUE(has("# TYPE kosoku_http2_streams_total counter"));
  EXPECT_TRUE(has("kosoku_http2_streams_total{core=\"0\"} 7"));
  EXPECT_TRUE(has("# TYPE kosoku_http2_streams_active gauge"));
  EXPECT_TRUE(has("kosoku_http2_streams_active{core=\"0\"} 2"));
  EXPECT_TRUE(has("kosoku_http2_goaway_enhance_your_calm_total{core=\"1\"} 0"));
  EXPECT_TRUE(has("kosoku_disk_queue_submitted_total{core=\"0\",queue=\"default\"} 10"));
  EXPECT_TRUE(has("kosoku_disk_queue_overflows_total{core=\"0\",queue=\"slow\"} 2"));
  EXPECT_TRUE(has("kosoku_disk_queue_in_flight{core=\"0\",queue=\"slow\"} 1"));
  EXPECT_TRUE(has("# TYPE kosoku_disk_queue_latency_seconds histogram"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"0.000001\"} 0"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"0.000008\"} 0"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"0.000016\"} 1"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"0.000128\"} 2"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"4.194304\"} 2"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"0\",queue=\"default\",le=\"+Inf\"} 2"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_sum{core=\"0\",queue=\"default\"} 0.00011"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_count{core=\"0\",queue=\"default\"} 2"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"1\",queue=\"default\",le=\"0.004096\"} 0"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_bucket{core=\"1\",queue=\"default\",le=\"0.008192\"} 1"));
  EXPECT_TRUE(has("kosoku_disk_queue_latency_seconds_sum{core=\"1\",queue=\"default\"} 0.005"));
  // Extra sections: one family across sections, HELP/TYPE once.
  EXPECT_TRUE(has("# TYPE kosoku_dpdk_rx_packets_total counter"));
  EXPECT_TRUE(has("kosoku_dpdk_rx_packets_total{port=\"0\",queue=\"1\"} 123\n"
                  "kosoku_dpdk_rx_packets_total{port=\"0\",queue=\"0\"} 77\n"
                  "kosoku_dpdk_rx_packets_total{port=\"1\",queue=\"0\"} 5"));
  EXPECT_TRUE(has("# TYPE kosoku_proxy_cache_hit_ratio gauge"));
  EXPECT_TRUE(has("kosoku_proxy_cache_hit_ratio 0.75"));

  // Every histogram: le ascending, cumulative counts non-decreasing, +Inf == _count, 24 buckets per series.
  std::map<std::string, std::vector<std::pair<double, uint64_t>>> series;
  std::map<std::string, uint64_t> counts;
  for (const PromLine& p : samples) {
    if (p.name == "kosoku_disk_queue_latency_seconds_bucket") {
      std::string key = p.labels.at("core") + "/" + p.labels.at("queue");
      double le = p.labels.at("le") == "+Inf" ? INFINITY : std::stod(p.labels.at("le"));
      series[key].emplace_back(le, std::stoull(p.value));
    } else if (p.name == "kosoku_disk_queue_latency_seconds_count") {
      counts[p.labels.at("core") + "/" + p.labels.at("queue")] = std::stoull(p.value);
    }
  }
  ASSERT_EQ(series.size(), 3u);  // 0/default, 0/slow, 1/default
  for (const auto& [key, buckets] : series) {
    ASSERT_EQ(buckets.size(), 24u) << key;
    for (size_t i = 1; i < buckets.size(); ++i) {
      EXPECT_LT(buckets[i - 1].first, buckets[i].first) << key;
      EXPECT_LE(buckets[i - 1].second, buckets[i].second) << key;
    }
    EXPECT_TRUE(std::isinf(buckets.back().first));
    EXPECT_EQ(buckets.back().second, counts.at(key)) << key;
  }
  // Per-core only: summing a family over `core` gives the totals.
  uint64_t requests = 0;
  for (const PromLine& p : samples) {
    if (p.name == "kosoku_http_requests_total") requests += std::stoull(p.value);
  }
  EXPECT_EQ(requests, 32u);
}

TEST(StatsExport, PrometheusEscapesLabelValuesAndHelp) {
  Snapshot s;
  s.version = "1.0";
  ExtraSection sec{"weird", {{"weird_total", "help with \\ and\nnewline", ExtraMetric::Type::kCounter,
                              {{"path", "a\"b\\c\nd"}}, 1e20}}};
  s.extra.push_back(sec);
  std::string text = render_prometheus(s);
  parse_prometheus(text);
  EXPECT_NE(text.find("# HELP kosoku_weird_total help with \\\\ and\\nnewline\n"), std::string::npos);
  EXPECT_NE(text.find("kosoku_weird_total{path=\"a\\\"b\\\\c\\nd\"} 1e+20\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace kosoku::stats
