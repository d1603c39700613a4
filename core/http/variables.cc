#include "core/http/variables.hh"

#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "core/reactor/reactor.hh"
#include "core/rules/cache_rule.hh"

namespace kosoku::http {

bool find_arg(std::string_view query, std::string_view name, std::string_view* value) {
  for (std::string_view pair : absl::StrSplit(query, '&')) {
    const size_t eq = pair.find('=');
    if (absl::EqualsIgnoreCase(pair.substr(0, eq), name)) {
      *value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      return true;
    }
  }
  return false;
}

bool find_cookie(std::string_view header, std::string_view name, std::string_view* value) {
  for (std::string_view item : absl::StrSplit(header, ';')) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(absl::StripTrailingAsciiWhitespace(item.substr(0, eq)), name)) {
      *value = absl::StripAsciiWhitespace(item.substr(eq + 1));
      return true;
    }
  }
  return false;
}

namespace {

// nginx's "%T.%03M": seconds with millisecond resolution.
void append_seconds(int64_t ms, std::string& out) {
  absl::StrAppend(&out, ms / 1000, ".", absl::Dec(ms % 1000, absl::kZeroPad3));
}

}  // namespace

// The $upstream_* variables (ngx_http_upstream_module): one value per try, joined by ", " (nginx's separator
// between the servers of one upstream group); not set when the request went to no upstream. A try that is
// still running reports the time so far as its response time.
bool RequestVariables::upstream_value(config::VarId id, std::string& out) const {
  using config::VarId;
  const UpstreamState& st = ex_.head().upstream;
  if (st.count == 0) return false;
  for (size_t i = 0; i < st.count; ++i) {
    const UpstreamTry& t = st.tries[i];
    if (i > 0) out.append(", ");
    int64_t ms = -1;
    switch (id) {
      case VarId::kUpstreamAddr:
        out.append(t.addr);
        continue;
      case VarId::kUpstreamStatus:
        if (t.status != 0) {
          absl::StrAppend(&out, t.status);
        } else {
          out.push_back('-');
        }
        continue;
      case VarId::kUpstreamResponseLength:
        absl::StrAppend(&out, t.length);
        continue;
      case VarId::kUpstreamConnectTime:
        ms = t.connect_ms;
        break;
      case VarId::kUpstreamHeaderTime:
        ms = t.header_ms;
        break;
      default:  // kUpstreamResponseTime
        ms = t.response_ms;
        if (ms < 0 && r_ != nullptr) ms = static_cast<int64_t>(r_->now_ms() - t.start_ms);
        break;
    }
    if (ms >= 0) {
      append_seconds(ms, out);
    } else {
      out.push_back('-');
    }
  }
  return true;
}

bool RequestVariables::get(config::VarId id, std::string_view suffix, std::string& out) const {
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
      time_t t = r_ != nullptr ? r_->wall_time() : time(nullptr);
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
      absl::StrAppend(&out, absl::Dec(resp_.status, absl::kZeroPad3));
      return true;
    case VarId::kBodyBytesSent:
      absl::StrAppend(&out, resp_.body_bytes_sent);
      return true;
    case VarId::kBytesSent:
      absl::StrAppend(&out, resp_.bytes_sent);
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
      const ResponseHead& h = ex_.head();
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
      append_seconds(static_cast<int64_t>(resp_.request_time_ms), out);
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
      if (ex_.head().cache_status.empty()) return false;
      out.append(ex_.head().cache_status);  // set by the proxy cache (core/cache)
      return true;
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
    case VarId::kArg: {  // $arg_NAME: the first NAME=value in the query, undecoded (nginx)
      std::string_view v;
      if (!find_arg(ex_.args(), suffix, &v)) return false;
      out.append(v);
      return true;
    }
    case VarId::kCookie:  // $cookie_NAME: the value of cookie NAME in the Cookie fields
      for (const HeaderField& f : req.headers()) {
        std::string_view v;
        if (f.token == HeaderToken::kCookie && find_cookie(f.value, suffix, &v)) {
          out.append(v);
          return true;
        }
      }
      return false;
    case VarId::kProxyHost:  // set by the proxy's own source (core/proxy/proxy_request.hh)
    case VarId::kProxyPort:
    case VarId::kProxyAddXForwardedFor:
    case VarId::kDeclared:   // split_clients: resolved by the cache's source (core/cache/cache_variables.cc)
      return false;
    case VarId::kCacheRule:  // core/rules: "1" = do not cache
      out.append(rules::cache_rule_value(ex_));
      return true;
    case VarId::kUpstreamAddr:
    case VarId::kUpstreamStatus:
    case VarId::kUpstreamResponseTime:
    case VarId::kUpstreamConnectTime:
    case VarId::kUpstreamHeaderTime:
    case VarId::kUpstreamResponseLength:
      return upstream_value(id, out);
  }
  return false;
}

}  // namespace kosoku::http
