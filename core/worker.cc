#include "core/worker.hh"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/disk/disk_queue.hh"
#include "core/disk/open_file_cache.hh"
#include "core/access_log/access_logger.hh"
#include "core/http/connection.hh"
#include "core/net/shared_buffer.hh"
#include "core/net/stack_factory.hh"
#include "core/reactor/reactor.hh"

namespace kosoku {

namespace {

// Periodic per-core housekeeping: open_file_cache expiry, access-log flushes, shutdown.
class Housekeeping final : public reactor::Poller, public reactor::Timer {
 public:
  Housekeeping(reactor::Reactor& r, stats::CoreStats& stats, std::atomic<bool>& stop, std::atomic<uint64_t>& drain_ms, net::Stack& stack,
               http::HttpServer& server, disk::OpenFileCache& ofc, access_log::AccessLogger& logs)
      : r_(r), stats_(stats), stop_(stop), drain_ms_(drain_ms), stack_(stack), server_(server), ofc_(ofc), logs_(logs) {
    r_.timers().arm(*this, r_.now_ms() + 1000);
  }
  bool poll() override {
    stats_.loop_iterations = r_.iterations();
    if (stop_.load(std::memory_order_relaxed)) {
      if (!stopping_) {
        stopping_ = true;
        deadline_ = r_.now_ms() + drain_ms_.load();
        stack_.stop_accepting();
        server_.begin_shutdown();
      }
      if (stack_.open_streams() == 0 || r_.now_ms() >= deadline_) {
        logs_.flush_sync();
        r_.stop();
      }
    }
    return false;
  }
  void fire() override {
    ofc_.expire();
    logs_.tick(r_.now_ms());
    r_.timers().arm(*this, r_.now_ms() + (stopping_ ? 100 : 1000));
  }

 private:
  reactor::Reactor& r_;
  stats::CoreStats& stats_;
  std::atomic<bool>& stop_;
  std::atomic<uint64_t>& drain_ms_;
  net::Stack& stack_;
  http::HttpServer& server_;
  disk::OpenFileCache& ofc_;
  access_log::AccessLogger& logs_;
  bool stopping_ = false;
  uint64_t deadline_ = 0;
};

struct Queues {
  absl::flat_hash_map<std::string, std::unique_ptr<disk::DiskQueue>> by_name;
  static disk::DiskQueue* find(void* self, std::string_view name) {
    auto& m = static_cast<Queues*>(self)->by_name;
    auto it = m.find(name);
    return it == m.end() ? m.find("default")->second.get() : it->second.get();
  }
};

}  // namespace

Worker::Worker(int core, int cpu, const config::MainConf& conf, const net::StackFactory& stacks, std::string prefix,
               const std::vector<const stats::CoreStats*>* all_stats)
    : core_(core), cpu_(cpu), conf_(conf), stacks_(stacks), prefix_(std::move(prefix)), all_stats_(all_stats) {
  stats_.core = core;
  stats_.disk.resize(conf.disk_queues.size());
  for (size_t i = 0; i < conf.disk_queues.size(); ++i) stats_.disk[i].name = conf.disk_queues[i].name;
}

Worker::~Worker() { join(); }

int Worker::start(std::string* err) {
  thread_ = std::thread([this] { run(); });
  while (state_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int s = state_.load();
  if (s < 0) {
    if (err) *err = error_;
    return s;
  }
  return 0;
}

void Worker::request_stop(uint64_t drain_ms) {
  drain_ms_.store(drain_ms);
  stop_requested_.store(true);
  if (void* r = reactor_.load()) static_cast<reactor::Reactor*>(r)->wake();
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::run() {
  base::set_log_core(core_);
  net::SharedBuffer::set_stats(&stats_.shared_buffers, &stats_.shared_buffer_bytes);
  if (cpu_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      KOSOKU_LOG(kWarn, "sched_setaffinity(cpu %d) failed (%d: %s)", cpu_, errno, std::strerror(errno));
    }
  }
  try {
    reactor::Reactor reactor(core_, 4096);
    reactor.update_clock();
    stats_.start_time_s = static_cast<uint64_t>(reactor.wall_time());
    Queues queues;
    for (size_t i = 0; i < conf_.disk_queues.size(); ++i) {
      queues.by_name[conf_.disk_queues[i].name] =
          std::make_unique<disk::DiskQueue>(reactor, conf_.disk_queues[i], stats_.disk[i]);
    }
    disk::OpenFileCache ofc(reactor, stats_);
    http::CoreContext ctx;
    ctx.reactor = &reactor;
    ctx.stats = &stats_;
    ctx.conf = &conf_;
    ctx.open_file_cache = &ofc;
    ctx.prefix = prefix_;
    ctx.find_queue = &Queues::find;
    ctx.queue_owner = &queues;
    ctx.all_stats = all_stats_;
    // The core's network stack, from the backend `network kernel|dpdk` names (core/net/stack_factory.hh).
    std::unique_ptr<net::Stack> stack_owner = stacks_.make(reactor, stats_, conf_, core_, &error_);
    if (stack_owner == nullptr) {
      state_.store(-ENODEV);
      return;
    }
    net::Stack& stack = *stack_owner;
    ctx.stack = &stack;
    http::HttpServer server(ctx);
    if (!server.init_modules(&error_)) {  // every module's per-core part (core/modules.cc)
      state_.store(-EINVAL);
      return;
    }
    access_log::AccessLogger logs(reactor, conf_, prefix_);
    int rc = logs.open(&error_);
    if (rc < 0) {
      state_.store(rc);
      return;
    }
    server.access_log = &logs;
    rc = stack.listen(conf_.http.listen_sockets, server, &error_);
    if (rc < 0) {
      state_.store(rc);
      return;
    }
    Housekeeping hk(reactor, stats_, stop_requested_, drain_ms_, stack, server, ofc, logs);
    reactor.add_poller(&hk);
    reactor.add_poller(&logs);
    reactor_.store(&reactor);
    state_.store(1);
    reactor.run();
    reactor_.store(nullptr);
    stats_.loop_iterations = reactor.iterations();
  } catch (const std::system_error& e) {
    error_ = absl::StrCat("worker ", core_, ": ", e.what());
    state_.store(-e.code().value() ? -e.code().value() : -1);
  }
}

}  // namespace kosoku
