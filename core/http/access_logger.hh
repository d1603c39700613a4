// access_log / log_format for one core: compiles every log_format once, expands it with the finished
// request's variables and appends the line to the core's AccessLogFile for that path (buffered, written
// through io_uring; see access_log.hh). `access_log off` (no entries) costs nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/config/variables.hh"
#include "core/http/access_log.hh"
#include "core/http/connection.hh"

namespace kosoku::http {

class AccessLogger final : public AccessLogSink {
 public:
  AccessLogger(reactor::Reactor& reactor, const config::MainConf& conf, std::string prefix);
  /// Opens every access_log path of every location (relative paths resolve against the prefix).
  /// Returns 0 or -errno with *err = "open() \"PATH\" failed (...)".
  int open(std::string* err);
  void log(const config::LocationConf& loc, Exchange& ex, int status, uint64_t bytes_sent,
           uint64_t body_bytes_sent, uint64_t request_time_ms) override;
  /// Called about once a second: flushes buffers that are due, reopens files after SIGUSR1.
  void tick(uint64_t now_ms);
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
};

}  // namespace kosoku::http
