// kosoku-loadgen: a seawreck-style HTTP/1.1 load generator on kosoku's own TCP/IP stack over DPDK, so that
// neither side of a benchmark goes through the kernel (issue 4, "Benchmarks"; bench/README.md, bench/run-dpdk).
//
//   kosoku-loadgen --server 10.77.0.1:8080 --address 10.77.0.2/24 -c 64 -d 10 --path /1k.bin
//       [--pipeline 1] [--warmup 1] [--expect-file www/1k.bin] [--cpu 1] [--json]
//       -- -l 1 --no-huge --no-shconf --no-pci --no-telemetry --file-prefix lg
//          --vdev=net_memif0,role=client,socket=/tmp/x/memif.sock,socket-abstract=no
//
// Everything after `--` is rte_eal_init's argv. The port and the per-core stack are built exactly as kosoku
// builds its own (dpdk::start_backend + the DPDK stack factory: the same Port, Queue, Interface and TcpStack),
// then one busy-polling loop on one thread runs: the stack's RX/TX poll and the client's phases every iteration,
// the reactor clock and timers every 32nd (latencies use the TSC). The loop does not go through Reactor::run
// (no io_uring enter per iteration: nothing here uses the ring).
//
// Output: `LOADGEN_PHASE measuring` and `LOADGEN_PHASE done` (flushed) when the measuring phase starts and
// ends, then a human-readable summary and one line `LOADGEN_JSON {...}` with the exact counters (requests/s over
// the measuring phase, latency percentiles in µs, errors by kind). Exit status: 0 when the run completed with
// no error, 1 when it completed with errors, 2 when it could not run (EAL, link, connections).
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <sched.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/loadgen/load_client.hh"
#include "core/config/conf.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"
#include "kernel-bypass/dpdk/backend.hh"

namespace {

using kosoku::loadgen::LoadClient;
using kosoku::loadgen::LoadCounters;
using kosoku::loadgen::LoadOptions;

volatile std::sig_atomic_t g_interrupted = 0;

struct Args {
  LoadOptions load;
  uint32_t address = 0;
  uint8_t prefix_len = 24;
  uint32_t gateway = 0;
  int cpu = -1;
  bool json = false;
  double link_timeout_s = 10;
  std::vector<std::string> eal;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "kosoku-loadgen: %s\n"
               "usage: kosoku-loadgen --server A.B.C.D:PORT --address A.B.C.D/N [-c CONNS] [-d SECONDS]\n"
               "       [--warmup SECONDS] [--pipeline N] [--path /p] [--host H] [--expect-file F] [--gateway G]\n"
               "       [--cpu N] [--link-timeout SECONDS] [--json] -- EAL-ARGS...\n",
               why);
  std::exit(2);
}

bool parse_ipv4(std::string_view text, uint32_t* out) {
  in_addr a{};
  if (inet_pton(AF_INET, std::string(text).c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

double seconds_arg(const char* v) {
  double d = 0;
  if (!absl::SimpleAtod(v, &d) || d < 0) usage(absl::StrCat("bad number of seconds: ", v).c_str());
  return d;
}

uint32_t count_arg(const char* v) {
  uint32_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n == 0) usage(absl::StrCat("bad count: ", v).c_str());
  return n;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool have_server = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view f = argv[i];
    if (f == "--") {
      for (++i; i < argc; ++i) a.eal.emplace_back(argv[i]);
      break;
    }
    if (f == "--json") {
      a.json = true;
      continue;
    }
    if (i + 1 >= argc) usage(absl::StrCat(f, " needs a value").c_str());
    const char* v = argv[++i];
    if (f == "--server") {
      std::pair<std::string, std::string> hp = absl::StrSplit(v, ':');
      uint32_t ip = 0, port = 0;
      if (!parse_ipv4(hp.first, &ip) || !absl::SimpleAtoi(hp.second, &port) || port == 0 || port > 65535) {
        usage("--server wants A.B.C.D:PORT");
      }
      a.load.server.sin_family = AF_INET;
      a.load.server.sin_addr.s_addr = htonl(ip);
      a.load.server.sin_port = htons(static_cast<uint16_t>(port));
      if (a.load.host_header.empty()) a.load.host_header = v;
      have_server = true;
    } else if (f == "--address") {
      std::pair<std::string, std::string> ap = absl::StrSplit(v, '/');
      uint32_t len = 24;
      if (!parse_ipv4(ap.first, &a.address) || (!ap.second.empty() && !absl::SimpleAtoi(ap.second, &len)) ||
          len == 0 || len > 32) {
        usage("--address wants A.B.C.D/N");
      }
      a.prefix_len = static_cast<uint8_t>(len);
    } else if (f == "--gateway") {
      if (!parse_ipv4(v, &a.gateway)) usage("--gateway wants A.B.C.D");
    } else if (f == "-c" || f == "--connections") {
      a.load.connections = count_arg(v);
    } else if (f == "--pipeline") {
      a.load.pipeline = count_arg(v);
      if (a.load.pipeline > 64) usage("--pipeline is at most 64");
    } else if (f == "-d" || f == "--duration") {
      a.load.duration_ms = static_cast<uint64_t>(seconds_arg(v) * 1000);
    } else if (f == "--warmup") {
      a.load.warmup_ms = static_cast<uint64_t>(seconds_arg(v) * 1000);
    } else if (f == "--path") {
      a.load.path = v;
    } else if (f == "--host") {
      a.load.host_header = v;
    } else if (f == "--expect-file") {
      std::ifstream in(v, std::ios::binary);
      if (!in) usage(absl::StrCat("cannot read ", v).c_str());
      a.load.expected_body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      a.load.check_body = true;
    } else if (f == "--cpu") {
      if (!absl::SimpleAtoi(v, &a.cpu) || a.cpu < 0) usage("--cpu wants a CPU number");
    } else if (f == "--link-timeout") {
      a.link_timeout_s = seconds_arg(v);
    } else {
      usage(absl::StrCat("unknown option ", f).c_str());
    }
  }
  if (!have_server) usage("--server is required");
  if (a.address == 0) usage("--address is required");
  if (a.eal.empty()) usage("EAL arguments (after --) are required");
  return a;
}

bool wait_link_up(uint16_t port, double timeout_s) {
  kosoku::reactor::Reactor clock(0, 8);
  const uint64_t deadline = clock.now_ms() + static_cast<uint64_t>(timeout_s * 1000);
  while (g_interrupted == 0) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) return true;
    clock.update_clock();
    if (clock.now_ms() > deadline) return false;
    usleep(10'000);
  }
  return false;
}

void print_report(const LoadClient& c, const Args& a) {
  const LoadCounters& m = c.measured();
  const double secs = static_cast<double>(c.measured_ns()) / 1e9;
  const double rps = secs > 0 ? static_cast<double>(m.responses) / secs : 0;
  const auto& h = c.latency();
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  std::printf("%u connections, pipeline %u, %s, %.3f s measured after %.1f s warm-up\n", a.load.connections,
              a.load.pipeline, a.load.path.c_str(), secs, static_cast<double>(a.load.warmup_ms) / 1000);
  std::printf("  %llu responses, %.0f req/s, %.2f MB/s of bodies\n", static_cast<unsigned long long>(m.responses),
              rps, secs > 0 ? static_cast<double>(m.body_bytes) / secs / 1e6 : 0.0);
  std::printf("  latency us: mean %.1f p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f\n", h.mean_ns() / 1000,
              us(h.quantile(0.5)), us(h.quantile(0.9)), us(h.quantile(0.99)), us(h.quantile(0.999)),
              us(h.max_ns()));
  auto errors = [](const char* what, const LoadCounters& k) {
    std::printf("  %s errors: connect %llu closed %llu parse %llu status %llu body %llu; clean reconnects %llu\n",
                what, static_cast<unsigned long long>(k.err_connect), static_cast<unsigned long long>(k.err_closed),
                static_cast<unsigned long long>(k.err_parse), static_cast<unsigned long long>(k.err_status),
                static_cast<unsigned long long>(k.err_body), static_cast<unsigned long long>(k.reconnects));
  };
  errors("measured", m);
  std::printf("  warm-up: %llu responses\n", static_cast<unsigned long long>(c.warmup().responses));
  errors("warm-up", c.warmup());
  if (!a.json) return;
  std::printf(
      "LOADGEN_JSON {\"connections\":%u,\"pipeline\":%u,\"duration_s\":%.6f,\"responses\":%llu,"
      "\"req_per_s\":%.1f,\"body_bytes\":%llu,\"wire_bytes_in\":%llu,\"lat_mean_us\":%.2f,\"p50_us\":%.2f,"
      "\"p90_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f,\"err_connect\":%llu,\"err_closed\":%llu,"
      "\"err_parse\":%llu,\"err_status\":%llu,\"err_body\":%llu,\"errors\":%llu,\"reconnects\":%llu,"
      "\"warmup_responses\":%llu,\"warmup_errors\":%llu,\"body_checked\":%s}\n",
      a.load.connections, a.load.pipeline, secs, static_cast<unsigned long long>(m.responses), rps,
      static_cast<unsigned long long>(m.body_bytes), static_cast<unsigned long long>(m.wire_bytes_in),
      h.mean_ns() / 1000, us(h.quantile(0.5)), us(h.quantile(0.9)), us(h.quantile(0.99)), us(h.quantile(0.999)),
      us(h.max_ns()), static_cast<unsigned long long>(m.err_connect), static_cast<unsigned long long>(m.err_closed),
      static_cast<unsigned long long>(m.err_parse), static_cast<unsigned long long>(m.err_status),
      static_cast<unsigned long long>(m.err_body), static_cast<unsigned long long>(m.errors()),
      static_cast<unsigned long long>(m.reconnects), static_cast<unsigned long long>(c.warmup().responses),
      static_cast<unsigned long long>(c.warmup().errors()), a.load.check_body ? "true" : "false");
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });

  kosoku::config::MainConf conf;
  conf.worker_processes = 1;
  conf.worker_connections = std::max<uint32_t>(1024, a.load.connections * 2);
  conf.network.backend = kosoku::config::NetworkBackend::kDpdk;
  conf.network.dpdk.present = true;
  conf.network.dpdk.eal = a.eal;
  conf.network.dpdk.address = a.address;
  conf.network.dpdk.prefix_len = a.prefix_len;
  conf.network.dpdk.gateway = a.gateway;

  std::string err;
  std::unique_ptr<kosoku::dpdk::DpdkBackend> backend = kosoku::dpdk::DpdkBackend::start(conf, &err);
  if (backend == nullptr) {
    std::fprintf(stderr, "kosoku-loadgen: %s\n", err.c_str());
    return 2;
  }
  if (a.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("kosoku-loadgen: sched_setaffinity");
  }
  int rc = 2;
  {
    const uint16_t port = rte_eth_find_next_owned_by(0, RTE_ETH_DEV_NO_OWNER);
    if (!wait_link_up(port, a.link_timeout_s)) {
      std::fprintf(stderr, "kosoku-loadgen: port %u link still down after %.1f s (is the server side up?)\n", port,
                   a.link_timeout_s);
      backend->stop();
      return 2;
    }
    kosoku::reactor::Reactor reactor(0, 8);
    kosoku::stats::CoreStats stats;
    std::unique_ptr<kosoku::net::Stack> stack = backend->make_stack(reactor, stats, conf, 0, &err);
    auto* poller = dynamic_cast<kosoku::reactor::Poller*>(stack.get());
    if (stack == nullptr || poller == nullptr) {
      std::fprintf(stderr, "kosoku-loadgen: %s\n", err.c_str());
      backend->stop();
      return 2;
    }
    auto client = std::make_unique<LoadClient>(*stack, a.load);
    // The loop's clock: the TSC (rte_rdtsc, ~25 cycles) for the client's latencies, and the reactor's
    // clock_gettime-based clock (which the TCP stack's timers and RTT samples read) refreshed every
    // kClockEvery iterations only: two clock_gettime per iteration were most of an empty iteration's cost.
    constexpr unsigned kClockEvery = 32;
    const double ns_per_tick = 1e9 / static_cast<double>(rte_get_tsc_hz());
    reactor.update_clock();
    const uint64_t tsc0 = rte_rdtsc();
    const uint64_t ns0 = reactor.now_ns();
    unsigned since_clock = 0;
    auto now_ns = [&] { return ns0 + static_cast<uint64_t>(static_cast<double>(rte_rdtsc() - tsc0) * ns_per_tick); };
    auto iterate = [&] {
      if (++since_clock == kClockEvery) {
        since_clock = 0;
        reactor.update_clock();
        reactor.timers().expire(reactor.now_ms());
      }
      poller->poll();
    };
    if (!client->start(now_ns(), &err)) {
      std::fprintf(stderr, "kosoku-loadgen: connect: %s\n", err.c_str());
    } else {
      LoadClient::Phase shown = client->phase();
      while (g_interrupted == 0 && client->phase() != LoadClient::Phase::kDone &&
             client->phase() != LoadClient::Phase::kFailed) {
        iterate();
        client->tick(now_ns());
        if (client->phase() != shown) {  // markers for scripts that sample the server's CPU time per phase
          shown = client->phase();
          if (shown == LoadClient::Phase::kMeasuring || shown == LoadClient::Phase::kDone) {
            std::printf("LOADGEN_PHASE %s\n", shown == LoadClient::Phase::kMeasuring ? "measuring" : "done");
            std::fflush(stdout);
          }
        }
      }
      client->close_all();
      const uint64_t drain_until = reactor.now_ms() + 100;  // let the RSTs leave
      while (reactor.now_ms() < drain_until) iterate();
      if (client->phase() == LoadClient::Phase::kDone) {
        print_report(*client, a);
        rc = client->measured().errors() == 0 ? 0 : 1;
      } else {
        std::fprintf(stderr, "kosoku-loadgen: run %s: %s\n",
                     g_interrupted != 0 ? "interrupted" : "failed", client->failure().c_str());
      }
    }
    stack.reset();  // frees the TCBs while their handlers (the client's connections) still exist
    client.reset();
  }
  backend->stop();
  return rc;
}
