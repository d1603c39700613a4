// Main and events directives (nginx's ngx_core_module, ngx_events_module, ngx_event_core_module, plus
// kosoku's disk_queue, the analogue of nginx's `thread_pool`).
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"

namespace kosoku::config {

namespace {

bool set_events(Builder& b, Scope& s, const Directive& d) {
  Scope inner;
  inner.ctx = kCtxEvents;
  inner.main = s.main;
  inner.seen = &b.events_seen;
  return b.walk(inner, d.children);
}

bool set_http(Builder& b, Scope& s, const Directive& d) {
  b.http_present = true;
  Scope inner;
  inner.ctx = kCtxHttp;
  inner.main = s.main;
  inner.srv = &b.http_srv;
  inner.loc = &b.http_loc.conf;
  inner.loc_node = &b.http_loc;
  inner.seen = &b.http_loc.seen;
  return b.walk(inner, d.children);
}

// `worker_processes N | auto;` auto: online CPUs (sysconf(_SC_NPROCESSORS_ONLN)).
bool set_worker_processes(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v == "auto") {
    long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    s.main->worker_processes = n > 0 ? static_cast<int>(n) : 1;
    return true;
  }
  auto n = parse_number(v, 4096);
  if (!n || *n == 0) return fail_invalid_value(b, d, 0);
  s.main->worker_processes = static_cast<int>(*n);
  return true;
}

// A binary CPU mask, most significant CPU first ("0101" = CPUs 0 and 2), at most 64 CPUs.
bool parse_mask(std::string_view v, uint64_t* mask) {
  if (v.empty() || v.size() > 64) return false;
  uint64_t m = 0;
  for (char c : v) {
    if (c != '0' && c != '1') return false;
    m = (m << 1) | static_cast<uint64_t>(c - '0');
  }
  *mask = m;
  return m != 0;
}

// `worker_cpu_affinity auto [MASK] | MASK...;` kosoku pins each worker to one CPU, so an explicit mask must
// name exactly one CPU; `auto MASK` spreads the workers over MASK's CPUs. Expanded to one CPU per worker in
// finalize (needs worker_processes, which may come later in the file).
bool set_worker_cpu_affinity(Builder& b, Scope&, const Directive& d) {
  b.affinity_loc = d.loc;
  size_t i = 0;
  if (d.args[0].value == "auto") {
    b.affinity_auto = true;
    if (d.args.size() > 2) return b.fail(d.args[2].loc, absl::StrCat("invalid parameter ", quoted(d.args[2].value)));
    i = 1;
  }
  for (; i < d.args.size(); ++i) {
    uint64_t mask;
    if (!parse_mask(d.args[i].value, &mask)) {
      return b.fail(d.args[i].loc, absl::StrCat("invalid character in \"worker_cpu_affinity\" mask ",
                                                quoted(d.args[i].value)));
    }
    if (!b.affinity_auto && (mask & (mask - 1)) != 0) {
      return b.fail(d.args[i].loc, absl::StrCat("\"worker_cpu_affinity\" mask ", quoted(d.args[i].value),
                                                " names more than one CPU: kosoku pins each worker to one CPU"));
    }
    b.affinity_masks.push_back(mask);
  }
  return true;
}

// `error_log PATH|stderr [LEVEL];` main context only. LEVEL omitted → error (nginx); the directive absent →
// conf.hh's default (logs/error.log, warn).
bool set_error_log(Builder& b, Scope& s, const Directive& d) {
  const std::string& path = d.args[0].value;
  if (path.empty()) return fail_invalid_value(b, d, 0);
  if (path.rfind("syslog:", 0) == 0 || path.rfind("memory:", 0) == 0) {
    return b.fail(d.args[0].loc, absl::StrCat("\"error_log\" target ", quoted(path), " is not supported"));
  }
  static constexpr std::string_view kLevels[] = {"emerg", "alert", "crit", "error",
                                                 "warn",  "notice", "info", "debug"};
  int level = 3;
  if (d.args.size() == 2) {
    level = -1;
    for (int i = 0; i < 8; ++i) {
      if (d.args[1].value == kLevels[i]) level = i;
    }
    if (level < 0) return b.fail(d.args[1].loc, absl::StrCat("invalid log level ", quoted(d.args[1].value)));
  }
  s.main->error_log_path = path;
  s.main->error_log_level = level;
  return true;
}

// `disk_queue NAME [depth=N] [max_queue=M];` A second "NAME" is an error; redefining "default" replaces
// the built-in one (finalize adds "default" when it is not declared).
bool set_disk_queue(Builder& b, Scope& s, const Directive& d) {
  DiskQueueConf q;
  q.name = d.args[0].value;
  if (q.name.empty() || q.name.find('=') != std::string::npos) return fail_invalid_value(b, d, 0);
  for (const DiskQueueConf& other : s.main->disk_queues) {
    if (other.name == q.name) return b.fail(d.args[0].loc, absl::StrCat("duplicate disk_queue ", quoted(q.name)));
  }
  for (size_t i = 1; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    if (v.rfind("depth=", 0) == 0) {
      auto n = parse_number(v.substr(6), 1u << 20);
      if (!n || *n == 0) return b.fail(d.args[i].loc, absl::StrCat("invalid depth value ", quoted(v)));
      q.depth = static_cast<uint32_t>(*n);
    } else if (v.rfind("max_queue=", 0) == 0) {
      auto n = parse_number(v.substr(10), UINT32_MAX);
      if (!n) return b.fail(d.args[i].loc, absl::StrCat("invalid max_queue value ", quoted(v)));
      q.max_queue = static_cast<uint32_t>(*n);
    } else {
      return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
    }
  }
  s.main->disk_queues.push_back(std::move(q));
  b.disk_queue_locs.push_back(d.loc);
  return true;
}

constexpr DirectiveSpec kCoreDirectives[] = {
    {.name = "worker_processes", .contexts = kCtxMain, .args = kTake1, .set = set_worker_processes,
     .default_value = "1"},
    {.name = "worker_cpu_affinity", .contexts = kCtxMain, .args = k1More, .set = set_worker_cpu_affinity},
    {.name = "worker_rlimit_nofile", .contexts = kCtxMain, .args = kTake1,
     .set = set_number<&MainConf::worker_rlimit_nofile>},
    {.name = "error_log", .contexts = kCtxMain, .args = kTake12, .set = set_error_log,
     .default_value = "logs/error.log warn"},
    {.name = "pid", .contexts = kCtxMain, .args = kTake1, .set = set_string<&MainConf::pid_path>},
    {.name = "disk_queue", .contexts = kCtxMain, .args = kTake123, .flags = kMulti, .set = set_disk_queue},
    {.name = "events", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_events},
    {.name = "worker_connections", .contexts = kCtxEvents, .args = kTake1,
     .set = set_number<&MainConf::worker_connections>, .default_value = "512"},
    {.name = "http", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_http},
};

}  // namespace

std::span<const DirectiveSpec> core_directives() { return kCoreDirectives; }

}  // namespace kosoku::config
