// access_log / log_format for one core: expands the (pre-compiled) log_format with the finished request's
// variables and appends the line to the core's AccessLogFile for that path. Lines of one loop iteration are
// written together, through io_uring, at the end of the iteration (nginx writes each line at once; this
// keeps that promptness with one write per iteration). `access_log off` (no entries) costs nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/config/variables.hh"
#include "core/access_log/access_log.hh"
#include "core/http/connection.hh"

namespace kosoku::access_log {

class AccessLogger final : public http::AccessLogSink, public reactor::Poller {
 public:
  AccessLogger(reactor::Reactor& reactor, const config::MainConf& conf, std::string prefix);
  /// Opens every access_log path of every location (relative paths resolve against the prefix).
  /// Returns 0 or -errno with *err = "open() \"PATH\" failed (...)".
  int open(std::string* err);
  void log(const config::LocationConf& loc, http::Exchange& ex, int status, uint64_t bytes_sent,
           uint64_t body_bytes_sent, uint64_t request_time_ms) override;
  /// Called about once a second: reopens files after SIGUSR1.
  void tick(uint64_t now_ms);
  /// Poller: starts the write of what this iteration logged.
  bool poll() override;
  /// Writes everything buffered (shutdown).
  void flush_sync();

 private:
  void collect(const config::LocationConf& loc);
  std::string resolve(const std::string& path) const;

  reactor::Reactor& reactor_;
  const config::MainConf& conf_;
  std::string prefix_;
  absl::flat_hash_map<std::string, const config::Template*> formats_;  // owned by the MainConf
  absl::flat_hash_map<std::string, std::unique_ptr<AccessLogFile>> files_;
  uint64_t reopen_generation_ = 0;
  std::string line_;
  bool dirty_ = false;
};

}  // namespace kosoku::access_log
