#include "core/http/variables.hh"

#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "core/config/module.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"

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

using Src = const config::VariableSource&;

// nginx's "%T.%03M": seconds with millisecond resolution.
void append_seconds(int64_t ms, std::string& out) {
  absl::StrAppend(&out, ms / 1000, ".", absl::Dec(ms % 1000, absl::kZeroPad3));
}

// $time_local / $time_iso8601.
template <bool Iso>
bool time_value(Src src, std::string_view, std::string& out) {
  time_t t = src.reactor() != nullptr ? src.reactor()->wall_time() : time(nullptr);
  tm lt;
  localtime_r(&t, &lt);
  char buf[64];
  long off = lt.tm_gmtoff / 60;
  char sign = off < 0 ? '-' : '+';
  if (off < 0) off = -off;
  if (!Iso) {
    static const char* kMon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(buf, sizeof(buf), "%02d/%s/%04d:%02d:%02d:%02d %c%02ld%02ld", lt.tm_mday, kMon[lt.tm_mon],
             lt.tm_year + 1900, lt.tm_hour, lt.tm_min, lt.tm_sec, sign, off / 60, off % 60);
  } else {
    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", lt.tm_year + 1900, lt.tm_mon + 1,
             lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec, sign, off / 60, off % 60);
  }
  out.append(buf);
  return true;
}

// $status, $bytes_sent, $body_bytes_sent, $request_time: set once a response exists.
bool status_value(Src src, std::string_view, std::string& out) {
  if (src.response() == nullptr) return false;
  absl::StrAppend(&out, absl::Dec(src.response()->status, absl::kZeroPad3));
  return true;
}

// $sent_http_NAME: the response head's fields that the engine keeps by name.
bool sent_http_value(Src src, std::string_view suffix, std::string& out) {
  if (src.response() == nullptr) return false;
  const ResponseHead& h = src.exchange().head();
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

// $http_NAME: the first request field whose name matches.
bool http_value(Src src, std::string_view suffix, std::string& out) {
  for (const HeaderField& f : src.exchange().request().headers()) {
    if (config::http_var_name_matches(f.name, suffix)) {
      out.append(f.value);
      return true;
    }
  }
  return false;
}

bool host_value(Src src, std::string_view, std::string& out) {
  const Exchange& ex = src.exchange();
  if (!ex.host().empty()) {
    out.append(ex.host());
  } else if (!ex.server().server_names.empty()) {
    out.append(ex.server().server_names[0]);
  }
  return true;
}

bool server_name_value(Src src, std::string_view, std::string& out) {
  const Exchange& ex = src.exchange();
  if (!ex.server().server_names.empty()) out.append(ex.server().server_names[0]);
  return true;
}

bool msec_value(Src, std::string_view, std::string& out) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  absl::StrAppend(&out, ts.tv_sec, ".", absl::Dec(ts.tv_nsec / 1000000, absl::kZeroPad3));
  return true;
}

bool hostname_value(Src, std::string_view, std::string& out) {
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  out.append(h);
  return true;
}

// $arg_NAME: the first NAME=value in the query, undecoded (nginx).
bool arg_value(Src src, std::string_view suffix, std::string& out) {
  std::string_view v;
  if (!find_arg(src.exchange().args(), suffix, &v)) return false;
  out.append(v);
  return true;
}

// $cookie_NAME: the value of cookie NAME in the Cookie fields.
bool cookie_value(Src src, std::string_view suffix, std::string& out) {
  for (const HeaderField& f : src.exchange().request().headers()) {
    std::string_view v;
    if (f.token == HeaderToken::kCookie && find_cookie(f.value, suffix, &v)) {
      out.append(v);
      return true;
    }
  }
  return false;
}

// nginx's names and meanings (ngx_http_variables.c, ngx_http_log_module.c, ngx_http_upstream_module).
// $1..$9: the groups of the regex that chose the location (Exchange::regex_capture).
template <char kDigit>
bool capture_value(Src s, std::string_view, std::string& out) {
  static constexpr char kName[2] = {kDigit, 0};
  std::string_view v;
  if (!s.exchange().regex_capture(std::string_view(kName, 1), &v)) return false;
  out.append(v);
  return true;
}

constexpr config::Variable kHttpVariables[] = {
    {"1", &capture_value<'1'>}, {"2", &capture_value<'2'>}, {"3", &capture_value<'3'>},
    {"4", &capture_value<'4'>}, {"5", &capture_value<'5'>}, {"6", &capture_value<'6'>},
    {"7", &capture_value<'7'>}, {"8", &capture_value<'8'>}, {"9", &capture_value<'9'>},
    {"remote_addr", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().remote_addr()); return true; }},
    {"remote_user", [](Src, std::string_view, std::string&) { return false; }},
    {"time_local", &time_value<false>},
    {"time_iso8601", &time_value<true>},
    {"request",
     [](Src s, std::string_view, std::string& out) {
       const Request& req = s.exchange().request();
       if (req.method_text.empty()) return false;
       absl::StrAppend(&out, req.method_text, " ", req.target, " ", req.protocol_text());
       return true;
     }},
    {"request_method",
     [](Src s, std::string_view, std::string& out) {
       out.append(s.exchange().request().method_text);
       return !s.exchange().request().method_text.empty();
     }},
    {"request_uri",
     [](Src s, std::string_view, std::string& out) {
       out.append(s.exchange().request().target);
       return !s.exchange().request().target.empty();
     }},
    {"uri", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().uri()); return true; }},
    {"args", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().args()); return true; }},
    {"query_string", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().args()); return true; }},
    {"is_args",
     [](Src s, std::string_view, std::string& out) {
       if (s.exchange().request().has_query) out.push_back('?');
       return true;
     }},
    {"status", &status_value},
    {"body_bytes_sent",
     [](Src s, std::string_view, std::string& out) {
       if (s.response() == nullptr) return false;
       absl::StrAppend(&out, s.response()->body_bytes_sent);
       return true;
     }},
    {"bytes_sent",
     [](Src s, std::string_view, std::string& out) {
       if (s.response() == nullptr) return false;
       absl::StrAppend(&out, s.response()->bytes_sent);
       return true;
     }},
    {"request_time",
     [](Src s, std::string_view, std::string& out) {
       if (s.response() == nullptr) return false;
       append_seconds(static_cast<int64_t>(s.response()->request_time_ms), out);
       return true;
     }},
    {"http_", &http_value, true},
    {"sent_http_", &sent_http_value, true},
    {"arg_", &arg_value, true},
    {"cookie_", &cookie_value, true},
    {"host", &host_value},
    {"server_name", &server_name_value},
    {"server_port", [](Src s, std::string_view, std::string& out) { absl::StrAppend(&out, s.exchange().server_port()); return true; }},
    {"server_protocol",
     [](Src s, std::string_view, std::string& out) {
       const Request& req = s.exchange().request();
       if (req.method_text.empty()) return false;
       out.append(req.protocol_text());
       return true;
     }},
    {"scheme",
     [](Src s, std::string_view, std::string& out) {
       const net::Stream* st = s.exchange().stream();
       out.append(st != nullptr && st->secure() ? "https" : "http");
       return true;
     }},
    {"request_length", [](Src s, std::string_view, std::string& out) { absl::StrAppend(&out, s.exchange().request_length()); return true; }},
    {"msec", &msec_value},
    {"connection", [](Src s, std::string_view, std::string& out) { absl::StrAppend(&out, s.exchange().connection_id()); return true; }},
    {"connection_requests",
     [](Src s, std::string_view, std::string& out) { absl::StrAppend(&out, s.exchange().connection_requests()); return true; }},
    {"document_root", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().location().root); return true; }},
    {"realpath_root", [](Src s, std::string_view, std::string& out) { out.append(s.exchange().location().root); return true; }},
    {"content_type",
     [](Src s, std::string_view, std::string& out) {
       const HeaderField* f = s.exchange().request().find(HeaderToken::kContentType);
       if (f == nullptr) return false;
       out.append(f->value);
       return true;
     }},
    {"content_length",
     [](Src s, std::string_view, std::string& out) {
       const Request& req = s.exchange().request();
       if (!req.content_length.has_value()) return false;
       absl::StrAppend(&out, *req.content_length);
       return true;
     }},
    {"pid", [](Src, std::string_view, std::string& out) { absl::StrAppend(&out, getpid()); return true; }},
    {"hostname", &hostname_value},
};

}  // namespace

config::Module& variables_module() {
  static config::Module m{.name = "http_variables", .variables = kHttpVariables};
  return m;
}

}  // namespace kosoku::http
