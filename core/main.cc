// kosoku: the entry point. Parses flags, loads and validates the configuration (the same code as `-t` and
// `make image`), starts one pinned Worker per core (worker_processes), then waits for signals:
//   SIGTERM, SIGINT  stop accepting, drain in-flight requests (bounded: 10 s), exit 0
//   SIGUSR1          reopen the error log and access logs (logrotate)
//   SIGHUP           no-op with a log line: kosoku reads its configuration once; the appliance re-flashes
//                    its image to change it (documented in README.md)
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_conf.hh"
#include "core/cache/cache_paths.hh"
#include "core/cache/cache_stats.hh"
#include "core/cache/purge.hh"
#include "core/config/check.hh"
#include "core/config/loader.hh"
#include "core/disk/disk_queue.hh"
#include "core/net/kernel_stack.hh"
#include "core/net/stack_factory.hh"
#include "core/certs/certs_conf.hh"
#include "core/certs/console.hh"
#include "core/certs/store.hh"
#include "core/rules/rules_conf.hh"
#include "core/rules/store.hh"
#include "core/worker.hh"
#include "image/console.hh"
#include "image/pid1.hh"
#include "kernel-bypass/dpdk/backend.hh"
#include "kernel-bypass/dpdk/eal.hh"

#ifdef KOSOKU_MIMALLOC
#include <mimalloc.h>
#endif

namespace {

constexpr uint64_t kDrainMs = 10000;

// Set by the serial console's poweroff (1) / reboot (2) before it raises SIGTERM: PID 1 drains the loops,
// then powers off or reboots.
std::atomic<int> g_power_request{0};

void usage(FILE* out) {
  std::fprintf(out,
               "Usage: kosoku [-?hvVt] [-c filename] [-p prefix]\n\n"
               "Options:\n"
               "  -?,-h         : this help\n"
               "  -v            : show version and exit\n"
               "  -V            : show version and build options and exit\n"
               "  -t            : test configuration and exit\n"
               "  -c filename   : set configuration file (default: conf/default.conf)\n"
               "  -p prefix     : set prefix path for relative paths (default: the configuration file's "
               "directory)\n");
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "./";
  return path.substr(0, slash + 1);
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) cpus.push_back(i);
    }
  }
  return cpus;
}

// The descriptor limit. On `network kernel` every connection, a client's or an upstream's, is a descriptor, and
// the workers are threads of one process, so they share one descriptor table: worker_processes ×
// worker_connections of them, plus listeners, rings, logs and open files (nginx's workers are processes, each
// with worker_connections). `worker_rlimit_nofile N` sets both limits to N, as nginx does; a process without
// the privilege to raise the hard limit gets the soft one raised as far as the hard one. Without the
// directive, a soft limit below what the connections need is raised to the hard limit (kosoku has no
// select(2) that a large limit could break). Then, as nginx warns at start, "N worker_connections exceed open
// file resource limit: L" if they still do not fit: past it accept() fails with EMFILE (kernel_stack.hh).
void set_nofile_limit(const kosoku::config::MainConf& conf) {
  const bool kernel_sockets = conf.network.backend != kosoku::config::NetworkBackend::kDpdk;
  const uint64_t need = static_cast<uint64_t>(conf.worker_processes) * conf.worker_connections;
  if (conf.worker_rlimit_nofile > 0) {
    rlimit rl{conf.worker_rlimit_nofile, conf.worker_rlimit_nofile};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      KOSOKU_LOG(kAlert, "setrlimit(RLIMIT_NOFILE, %d) failed (%d: %s)", conf.worker_rlimit_nofile, errno,
                 std::strerror(errno));
    }
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = rl.rlim_cur;
  if (conf.worker_rlimit_nofile > 0) {
    want = conf.worker_rlimit_nofile;
  } else if (kernel_sockets && rl.rlim_cur < need) {
    want = rl.rlim_max != RLIM_INFINITY ? rl.rlim_max : need;
  }
  if (want > rl.rlim_max) want = rl.rlim_max;
  if (want > rl.rlim_cur) {
    const rlim_t from = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      KOSOKU_LOG(kNotice, "RLIMIT_NOFILE soft limit raised from %d to %d", from, want);
    } else {
      KOSOKU_LOG(kAlert, "setrlimit(RLIMIT_NOFILE, %d) failed (%d: %s)", want, errno, std::strerror(errno));
      rl.rlim_cur = from;
    }
  }
  if (kernel_sockets && need > rl.rlim_cur) {
    KOSOKU_LOG(kWarn, "%d worker_connections exceed open file resource limit: %d (%d worker_processes × %d "
               "worker_connections; set worker_rlimit_nofile or raise the limit)",
               need, rl.rlim_cur, conf.worker_processes, conf.worker_connections);
  }
}

// The pid file written at start: removed when main returns.
struct PidFile {
  std::string path;  // empty: none written
  PidFile() = default;
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;
  ~PidFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// Writes "PID\n" to `path` (created 0644 or truncated). 0, or -errno.
int write_pid_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  std::string text = absl::StrCat(getpid(), "\n");
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return n < 0 ? -e : -EIO;
  return 0;
}

// `-t`: opens (creating it, as the start would) the error log the start opens, relative to `prefix`; false
// with the start's message in *error when it cannot.
bool open_error_log_for_test(const kosoku::config::MainConf& conf, const std::string& prefix, std::string* error) {
  std::string path = conf.error_log_path;
  if (path.empty() || path == "stderr") return true;
  if (path[0] != '/') path = prefix + path;
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    *error = absl::StrCat("open() \"", path, "\" failed (", e, ": ", std::strerror(e), ")");
    return false;
  }
  ::close(fd);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string conf_path = "conf/default.conf";
  std::string prefix;
  bool test_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-t") {
      test_only = true;
    } else if (a == "-v" || a == "-V") {
      std::printf("kosoku version: kosoku/%s\n", KOSOKU_VERSION);
      if (a == "-V") {
        std::printf("built with g++ %s, C++20\nbuild options: %s; io_uring (liburing), Abseil, RE2", __VERSION__,
                    KOSOKU_BUILD_OPTIONS);
#ifdef KOSOKU_MIMALLOC
        std::printf(", mimalloc %d", mi_version());
#endif
        std::printf("\nnetwork backends: kernel (io_uring sockets), dpdk (%s, own TCP/IP stack)\n",
                    kosoku::dpdk::version().c_str());
      }
      return 0;
    } else if ((a == "-c" || a == "-p") && i + 1 < argc) {
      (a == "-c" ? conf_path : prefix) = argv[++i];
    } else if (a == "-h" || a == "-?") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "kosoku: invalid option: \"%s\"\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }

  if (test_only) {
    // The files the start opens are checked as the start opens them (same messages): the error log (as
    // `nginx -t` opens its logs; not an appliance's, which lives in the VM) and the modules' data files.
    auto check_data = [&](const kosoku::config::MainConf& conf, std::string* error) {
      std::string p = prefix.empty() ? dir_of(conf_path) : prefix;
      if (p.back() != '/') p.push_back('/');
      if (!conf.appliance.present && !open_error_log_for_test(conf, p, error)) return false;
      return kosoku::rules::check_rules_file(conf.http.module<kosoku::rules::RulesConf>(), p, error) &&
             kosoku::certs::check_store(conf.http.module<kosoku::certs::CertsConf>(), p, error);
    };
    return kosoku::config::test_config(conf_path, std::cout, std::cerr, check_data);
  }

  // As PID 1 of the appliance, kosoku is also init (image/pid1.hh): it mounts the basics first and reads
  // only the configuration flashed into the image.
  namespace appliance = kosoku::appliance;
  const bool pid1 = appliance::is_pid1();
  if (pid1) {
    appliance::early_init();
    conf_path = appliance::kFlashedConfigPath;
  }

  kosoku::config::LoadResult loaded = kosoku::config::load(conf_path);
  if (!loaded.conf) {
    if (pid1) appliance::fatal(loaded.error.message);
    std::fprintf(stderr, "kosoku: [emerg] %s\n", loaded.error.message.c_str());
    return 1;
  }
  for (const std::string& n : loaded.notices) std::fprintf(stderr, "kosoku: [notice] %s\n", n.c_str());
  for (const std::string& w : loaded.warnings) std::fprintf(stderr, "kosoku: [warn] %s\n", w.c_str());
  const kosoku::config::MainConf& conf = *loaded.conf;
  // Modules, NIC, network and the data disk come first: the error log may live on the data disk.
  if (pid1) appliance::init_system(conf.appliance);
  if (prefix.empty()) prefix = dir_of(conf_path);
  if (prefix.back() != '/') prefix.push_back('/');

  // Error log.
  auto& elog = kosoku::base::ErrorLog::global();
  std::string elog_path = conf.error_log_path;
  if (elog_path != "stderr" && !elog_path.empty() && elog_path[0] != '/') elog_path = prefix + elog_path;
  if (int rc = elog.open(elog_path, static_cast<kosoku::base::LogLevel>(conf.error_log_level)); rc < 0) {
    if (pid1) appliance::fatal(absl::StrCat("open() \"", elog_path, "\" failed: ", std::strerror(-rc)));
    std::fprintf(stderr, "kosoku: [emerg] open() \"%s\" failed (%d: %s)\n", elog_path.c_str(), -rc,
                 std::strerror(-rc));
    return 1;
  }
  kosoku::disk::set_disk_log_hook([](int level, std::string_view msg) {
    auto lvl = static_cast<kosoku::base::LogLevel>(level);
    auto& log = kosoku::base::ErrorLog::global();
    if (log.enabled(lvl)) log.write(lvl, msg);
  });
  set_nofile_limit(conf);

  // Signals are taken synchronously by this thread (sigwait); the loops never see them.
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGQUIT, SIGPWR}) sigaddset(&sigs, s);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const bool dpdk = conf.network.backend == kosoku::config::NetworkBackend::kDpdk;
  for (const kosoku::config::ListenSocket& ls : conf.http.listen_sockets) {
    if (dpdk) break;  // `network dpdk`: the listen addresses are the DPDK stack's, not the kernel's
    std::string err;
    if (kosoku::net::probe_listen_address(ls.conf, &err) < 0) {
      if (pid1) appliance::fatal(err);
      std::fprintf(stderr, "kosoku: [emerg] %s\n", err.c_str());
      KOSOKU_LOG(kEmerg, "%s", err);
      return 1;
    }
  }

  // `pid FILE;`: written once the configuration and the listen addresses are known good, removed on every
  // way out of main (a failed start included).
  PidFile pid_file;
  if (!pid1 && !conf.pid_path.empty()) {
    const std::string pid_path = conf.pid_path[0] == '/' ? conf.pid_path : prefix + conf.pid_path;
    if (int rc = write_pid_file(pid_path); rc < 0) {
      std::fprintf(stderr, "kosoku: [emerg] open() \"%s\" failed (%d: %s)\n", pid_path.c_str(), -rc,
                   std::strerror(-rc));
      KOSOKU_LOG(kEmerg, "open() \"%s\" failed (%d: %s)", pid_path, -rc, std::strerror(-rc));
      return 1;
    }
    pid_file.path = pid_path;
  }

  std::vector<int> cpus = allowed_cpus();
  int n = conf.worker_processes;

  // The proxy caches (core/cache/cache_paths.hh): directories and keys zones, shared by every loop.
  std::unique_ptr<kosoku::cache::CacheRegistry> caches;
  if (!conf.http.module<kosoku::cache::CacheHttpConf>().paths.empty()) {
    std::string err;
    caches = kosoku::cache::CacheRegistry::create(conf, prefix, n, time(nullptr), &err);
    if (caches == nullptr) {
      if (pid1) appliance::fatal(err);
      std::fprintf(stderr, "kosoku: [emerg] %s\n", err.c_str());
      KOSOKU_LOG(kEmerg, "%s", err);
      return 1;
    }
    kosoku::cache::set_registry(caches.get());
    kosoku::cache::register_stats(caches.get());  // the `proxy_cache` section of status and the console
  }
  // The workers' network stacks (core/net/stack_factory.hh): the kernel-socket backend, and with `network dpdk`
  // the DPDK backend (kernel-bypass/dpdk/backend.hh: EAL and the port, once, before the workers), which
  // outlives them.
  kosoku::net::StackFactory stacks;
  std::unique_ptr<kosoku::dpdk::DpdkBackend> dpdk_backend;
  if (dpdk) {
    std::string err, note;
    dpdk_backend = kosoku::dpdk::DpdkBackend::start(conf, &err, &note);
    if (dpdk_backend == nullptr) {
      if (pid1) appliance::fatal(err);
      std::fprintf(stderr, "kosoku: [emerg] network dpdk: %s\n", err.c_str());
      KOSOKU_LOG(kEmerg, "network dpdk: %s", err);
      return 1;
    }
    KOSOKU_LOG(kNotice, "network dpdk: %s", note);
    stacks.add(kosoku::config::NetworkBackend::kDpdk, dpdk_backend.get());
    // The port's counters (rte_eth_stats, queues) next to the per-core ones in `status` and the console.
    kosoku::stats::register_extra_source([backend = dpdk_backend.get()](kosoku::stats::Snapshot& s) {
      s.extra.push_back(backend->stats_section());
    });
  }

  std::vector<std::unique_ptr<kosoku::Worker>> workers;
  std::vector<const kosoku::stats::CoreStats*> all_stats;
  for (int i = 0; i < n; ++i) {
    int cpu = -1;
    if (!conf.worker_cpu_affinity.empty()) {
      cpu = conf.worker_cpu_affinity[static_cast<size_t>(i) % conf.worker_cpu_affinity.size()];
    } else if (!cpus.empty()) {
      cpu = cpus[static_cast<size_t>(i) % cpus.size()];
    }
    workers.push_back(std::make_unique<kosoku::Worker>(i, cpu, conf, stacks, prefix, &all_stats));
    all_stats.push_back(&workers.back()->stats());
  }
  for (auto& w : workers) {
    std::string err;
    if (int rc = w->start(&err); rc < 0) {
      std::fprintf(stderr, "kosoku: [emerg] %s\n", err.c_str());
      KOSOKU_LOG(kEmerg, "%s", err);
      for (auto& o : workers) o->request_stop(0);
      for (auto& o : workers) o->join();
      if (pid1) appliance::fatal(err);
      return 1;
    }
  }

  // The serial console of the appliance (image/console.hh): a thread of its own that only reads counters.
  kosoku::appliance::Console console(conf, [&all_stats] { return all_stats; });
  if (pid1) {
    console.set_power_action([](bool reboot) {
      g_power_request.store(reboot ? 2 : 1);
      kill(getpid(), SIGTERM);
    });
    console.add_command("certs", "certs list [OFFSET] [LIMIT] | certs show HOST | certs count",
                        [](std::string_view line) { return kosoku::certs::console_command(line); });
    console.add_command("cache", "cache stats | cache purge ZONE KEY|PATTERN*|*", &kosoku::cache::console_command);
    std::string cerr = console.start("/dev/" + conf.appliance.console, conf.appliance.console_baud);
    if (!cerr.empty()) KOSOKU_LOG(kError, "serial console: %s", cerr);
  }
  KOSOKU_LOG(kNotice, "kosoku/%s started: %d worker(s), configuration \"%s\"", KOSOKU_VERSION, n, conf_path);

  for (;;) {
    int sig = 0;
    if (sigwait(&sigs, &sig) != 0) continue;
    if (sig == SIGUSR1) {
      kosoku::base::request_log_reopen();
      elog.reopen();
      KOSOKU_LOG(kNotice, "reopening logs");
      continue;
    }
    if (sig == SIGHUP) {
      KOSOKU_LOG(kNotice, "SIGHUP ignored: kosoku reads its configuration only at start "
                          "(restart it, or re-flash the appliance image, to change it)");
      continue;
    }
    KOSOKU_LOG(kNotice, "signal %d received, shutting down gracefully", sig);
    if (pid1 && sig == SIGINT && g_power_request.load() == 0) g_power_request.store(2);  // Ctrl-Alt-Del
    break;
  }
  for (auto& w : workers) w->request_stop(pid1 ? 2000 : kDrainMs);
  for (auto& w : workers) w->join();
  if (dpdk_backend != nullptr) dpdk_backend->stop();  // the object stays: the stats source above points to it
  KOSOKU_LOG(kNotice, "exit");
  if (pid1) {
    console.stop();
    appliance::power_off(g_power_request.load() == 2);  // PID 1 never returns from main
  }
  return 0;
}
