#include "core/access_log/access_logger.hh"

#include "core/access_log/log_conf.hh"

#include <time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.hh"
#include "core/http/variables.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::access_log {

AccessLogger::AccessLogger(reactor::Reactor& reactor, const config::MainConf& conf, std::string prefix)
    : reactor_(reactor), conf_(conf), prefix_(std::move(prefix)) {
  // The loader compiled every log_format (the predefined "combined" included).
  for (const LogFormatConf& f : conf.http.module<LogHttpConf>().formats) formats_[f.name] = f.tpl.get();
}

std::string AccessLogger::resolve(const std::string& path) const {
  if (path.empty() || path[0] == '/') return path;
  return prefix_ + path;
}

void AccessLogger::collect(const config::LocationConf& loc) {
  for (const AccessLogConf& a : loc.module<LogLocConf>().logs) {
    // Keyed by the path as written, so the per-request lookup allocates nothing.
    if (!files_.contains(a.path)) files_[a.path] = std::make_unique<AccessLogFile>(reactor_, resolve(a.path));
  }
  for (const config::LocationConf& l : loc.locations) collect(l);
}

int AccessLogger::open(std::string* err) {
  for (const auto& s : conf_.http.servers) {
    collect(s->base);
    for (const config::LocationConf& l : s->locations) collect(l);
  }
  for (auto& [path, f] : files_) {
    int rc = f->open();
    if (rc < 0) {
      if (err) *err = absl::StrCat("open() \"", f->path(), "\" failed (", -rc, ": ", std::strerror(-rc), ")");
      return rc;
    }
  }
  reopen_generation_ = base::log_reopen_generation();
  return 0;
}

void AccessLogger::log(const config::LocationConf& loc, http::Exchange& ex, int status, uint64_t bytes_sent,
                       uint64_t body_bytes_sent, uint64_t request_time_ms) {
  const std::vector<AccessLogConf>& logs = loc.module<LogLocConf>().logs;
  if (logs.empty()) return;  // access_log off
  const http::RequestVariables::Response resp{status, bytes_sent, body_bytes_sent, request_time_ms};
  http::RequestVariables vars(ex, resp, &reactor_);
  for (const AccessLogConf& a : logs) {
    auto f = formats_.find(a.format);
    if (f == formats_.end() || f->second == nullptr) continue;
    line_.clear();
    config::expand(*f->second, vars, line_);
    line_.push_back('\n');
    auto file = files_.find(a.path);
    if (file != files_.end()) {
      file->second->append(line_);
      dirty_ = true;
    }
  }
}

bool AccessLogger::poll() {
  if (!dirty_) return false;
  dirty_ = false;
  for (auto& [path, f] : files_) {
    if (f->buffered_bytes() > 0) f->flush();
  }
  return false;
}

void AccessLogger::tick(uint64_t now_ms) {
  uint64_t gen = base::log_reopen_generation();
  if (gen != reopen_generation_) {
    reopen_generation_ = gen;
    for (auto& [path, f] : files_) f->reopen();
  }
  for (auto& [path, f] : files_) f->flush_if_due(now_ms);
}

void AccessLogger::flush_sync() {
  for (auto& [path, f] : files_) f->flush_sync();
}

}  // namespace kosoku::access_log
