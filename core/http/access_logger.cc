#include "core/http/access_logger.hh"

#include <time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::http {

namespace {

// nginx's predefined format.
constexpr std::string_view kCombined =
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" "
    "\"$http_user_agent\"";

// The variables of one finished request (nginx's ngx_http_variables, for the log phase).
class LogVariables final : public config::VariableSource {
 public:
  LogVariables(Exchange& ex, int status, uint64_t bytes_sent, uint64_t body_bytes_sent, uint64_t request_time_ms,
               const reactor::Reactor& r)
      : ex_(ex), status_(status), bytes_(bytes_sent), body_bytes_(body_bytes_sent), ms_(request_time_ms), r_(r) {}

  bool get(config::VarId id, std::string_view suffix, std::string& out) const override {
    using config::VarId;
    const Request& req = ex_.request();
    switch (id) {
      case VarId::kRemoteAddr:
        out.append(ex_.remote_addr());
        return true;
      case VarId::kRemoteUser:
        return false;
      case VarId::kTimeLocal:
      case VarId::kTimeIso8601: {
        time_t t = r_.wall_time();
        tm lt;
        localtime_r(&t, &lt);
        char buf[64];
        long off = lt.tm_gmtoff / 60;
        char sign = off < 0 ? '-' : '+';
        if (off < 0) off = -off;
        if (id == VarId::kTimeLocal) {
          static const char* kMon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
          snprintf(buf, sizeof(buf), "%02d/%s/%04d:%02d:%02d:%02d %c%02ld%02ld", lt.tm_mday, kMon[lt.tm_mon],
                   lt.tm_year + 1900, lt.tm_hour, lt.tm_min, lt.tm_sec, sign, off / 60, off % 60);
        } else {
          snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", lt.tm_year + 1900,
                   lt.tm_mon + 1, lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec, sign, off / 60, off % 60);
        }
        out.append(buf);
        return true;
      }
      case VarId::kRequest:
        if (req.method_text.empty()) return false;
        absl::StrAppend(&out, req.method_text, " ", req.target, " HTTP/1.", req.version_minor);
        return true;
      case VarId::kRequestMethod:
        out.append(req.method_text);
        return !req.method_text.empty();
      case VarId::kRequestUri:
        out.append(req.target);
        return !req.target.empty();
      case VarId::kUri:
        out.append(ex_.uri());
        return true;
      case VarId::kArgs:
      case VarId::kQueryString:
        out.append(ex_.args());
        return true;
      case VarId::kIsArgs:
        if (req.has_query) out.push_back('?');
        return true;
      case VarId::kStatus:
        absl::StrAppend(&out, absl::Dec(status_, absl::kZeroPad3));
        return true;
      case VarId::kBodyBytesSent:
        absl::StrAppend(&out, body_bytes_);
        return true;
      case VarId::kBytesSent:
        absl::StrAppend(&out, bytes_);
        return true;
      case VarId::kHttp: {
        for (const HeaderField& f : req.headers()) {
          if (config::http_var_name_matches(f.name, suffix)) {
            out.append(f.value);
            return true;
          }
        }
        return false;
      }
      case VarId::kSentHttp: {
        ResponseHead& h = ex_.head();
        if (suffix == "content_type" && !h.content_type.empty()) {
          out.append(h.content_type);
        } else if (suffix == "content_length" && h.content_length >= 0) {
          absl::StrAppend(&out, h.content_length);
        } else if (suffix == "etag" && !h.etag.empty()) {
          out.append(h.etag);
        } else if (suffix == "location" && !h.location.empty()) {
          out.append(h.location);
        } else {
          return false;
        }
        return true;
      }
      case VarId::kHost:
        if (!ex_.host().empty()) {
          out.append(ex_.host());
        } else if (!ex_.server().server_names.empty()) {
          out.append(ex_.server().server_names[0]);
        }
        return true;
      case VarId::kServerName:
        if (!ex_.server().server_names.empty()) out.append(ex_.server().server_names[0]);
        return true;
      case VarId::kServerPort:
        absl::StrAppend(&out, ex_.server_port());
        return true;
      case VarId::kServerProtocol:
        if (req.method_text.empty()) return false;
        absl::StrAppend(&out, "HTTP/1.", req.version_minor);
        return true;
      case VarId::kScheme:
        out.append("http");
        return true;
      case VarId::kRequestTime:
        absl::StrAppend(&out, ms_ / 1000, ".", absl::Dec(ms_ % 1000, absl::kZeroPad3));
        return true;
      case VarId::kRequestLength:
        absl::StrAppend(&out, ex_.request_length());
        return true;
      case VarId::kMsec: {
        timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        absl::StrAppend(&out, ts.tv_sec, ".", absl::Dec(ts.tv_nsec / 1000000, absl::kZeroPad3));
        return true;
      }
      case VarId::kConnection:
        absl::StrAppend(&out, ex_.connection_id());
        return true;
      case VarId::kConnectionRequests:
        absl::StrAppend(&out, ex_.connection_requests());
        return true;
      case VarId::kUpstreamCacheStatus:
        return false;  // set by the proxy cache (not in this build's request path yet)
      case VarId::kDocumentRoot:
      case VarId::kRealpathRoot:
        out.append(ex_.location().root);
        return true;
      case VarId::kContentType:
        if (const HeaderField* f = req.find(HeaderToken::kContentType)) {
          out.append(f->value);
          return true;
        }
        return false;
      case VarId::kContentLength:
        if (req.content_length.has_value()) {
          absl::StrAppend(&out, *req.content_length);
          return true;
        }
        return false;
      case VarId::kPid:
        absl::StrAppend(&out, getpid());
        return true;
      case VarId::kHostname: {
        char h[256] = {};
        gethostname(h, sizeof(h) - 1);
        out.append(h);
        return true;
      }
    }
    return false;
  }

 private:
  Exchange& ex_;
  int status_;
  uint64_t bytes_, body_bytes_, ms_;
  const reactor::Reactor& r_;
};

}  // namespace

AccessLogger::AccessLogger(reactor::Reactor& reactor, const config::MainConf& conf, std::string prefix)
    : reactor_(reactor), conf_(conf), prefix_(std::move(prefix)) {
  std::string err;
  formats_["combined"] = config::compile(kCombined, config::SourceLoc{}, &err);
  for (const config::LogFormatConf& f : conf.http.log_formats) {
    config::Template t = config::compile(f.format, f.loc, &err);  // validated by the loader already
    formats_[f.name] = std::move(t);
  }
}

std::string AccessLogger::resolve(const std::string& path) const {
  if (path.empty() || path[0] == '/') return path;
  return prefix_ + path;
}

void AccessLogger::collect(const config::LocationConf& loc) {
  for (const config::AccessLogConf& a : loc.access_log) {
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

void AccessLogger::log(const config::LocationConf& loc, Exchange& ex, int status, uint64_t bytes_sent,
                       uint64_t body_bytes_sent, uint64_t request_time_ms) {
  LogVariables vars(ex, status, bytes_sent, body_bytes_sent, request_time_ms, reactor_);
  for (const config::AccessLogConf& a : loc.access_log) {
    auto f = formats_.find(a.format);
    if (f == formats_.end()) continue;
    line_.clear();
    config::expand(f->second, vars, line_);
    line_.push_back('\n');
    auto file = files_.find(a.path);
    if (file != files_.end()) file->second->append(line_);
  }
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

}  // namespace kosoku::http
