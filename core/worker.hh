// A worker: one pinned thread running one Reactor with everything it owns (shared-nothing): the network
// stack, the disk queues, the open_file_cache, the HTTP server, the access logs and the counters.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/config/conf.hh"
#include "core/stats/counters.hh"

namespace kosoku {

namespace net {
class StackFactory;
}

class Worker {
 public:
  /// core: 0..N-1; cpu: the CPU to pin to (-1: no pinning). `stacks` builds the worker's network stack (it
  /// outlives the worker). `all_stats` lists every worker's counters.
  Worker(int core, int cpu, const config::MainConf& conf, const net::StackFactory& stacks, std::string prefix,
         const std::vector<const stats::CoreStats*>* all_stats);
  ~Worker();

  /// Starts the thread; returns once it listens (0) or failed (-errno, with *err set).
  int start(std::string* err);
  /// Graceful stop: stop accepting, close idle connections, let busy ones finish (bounded by drain_ms),
  /// then return from the loop. Any thread.
  void request_stop(uint64_t drain_ms);
  void join();

  stats::CoreStats& stats() { return stats_; }

 private:
  void run();

  int core_;
  int cpu_;
  const config::MainConf& conf_;
  const net::StackFactory& stacks_;
  std::string prefix_;
  const std::vector<const stats::CoreStats*>* all_stats_;
  stats::CoreStats stats_;
  std::thread thread_;
  std::atomic<int> state_{0};  // 0 starting, 1 running, -errno failed
  std::string error_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> drain_ms_{0};
  std::atomic<void*> reactor_{nullptr};
};

}  // namespace kosoku
