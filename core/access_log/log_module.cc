// The log module (nginx's ngx_http_log_module): the access_log and log_format directives, the predefined
// "combined" format and the check of the names access_log uses (finalize), and a REWRITE-phase handler that
// keeps the client's address of a logged request (the line may be written after the client reset). The lines
// themselves are written per core by AccessLogger (access_logger.hh), the server's access-log sink.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/access_log/log_conf.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"

namespace kosoku::access_log {

namespace {

using namespace config;  // the directive-table vocabulary

// nginx's predefined format, verbatim.
constexpr std::string_view kCombined =
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" "
    "\"$http_user_agent\"";

// The format names access_log lines use, checked once the whole file is read (log_format may come later).
struct LogBuildState {
  static constexpr ConfLevel kLevel = ConfLevel::kMain;  // kept in Builder::scratch
  std::vector<NameRef> format_refs;
};

// `access_log off | PATH [FORMAT [buffer=SIZE] [flush=TIME]];` buffer= and flush= are validated and not
// stored (kosoku's log writer has its own per-core buffering); gzip= and if= are refused. `off` in a block
// turns the block's logging off whatever other access_log lines it has (nginx).
bool set_access_log(Builder& b, Scope& s, const Directive& d) {
  std::vector<AccessLogConf>& logs = s.loc->module<LogLocConf>().logs;
  const std::string& path = d.args[0].value;
  if (path == "off") {
    if (d.args.size() > 1) return b.fail(d.args[1].loc, absl::StrCat("invalid parameter ", quoted(d.args[1].value)));
    logs.clear();
    s.seen->mark("access_log off", "access_log");
    return true;
  }
  if (path.empty()) return fail_invalid_value(b, d, 0);
  if (path.rfind("syslog:", 0) == 0) {
    return b.fail(d.args[0].loc, absl::StrCat("\"access_log\" target ", quoted(path), " is not supported"));
  }
  AccessLogConf log;
  log.path = path;
  size_t i = 1;
  if (d.args.size() > 1 && d.args[1].value.find('=') == std::string::npos) {
    log.format = d.args[1].value;
    b.scratch.get<LogBuildState>().format_refs.push_back(NameRef{log.format, d.args[1].loc});
    i = 2;
  }
  for (; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    bool ok;
    if (v.rfind("buffer=", 0) == 0) {
      ok = parse_size(v.substr(7)).has_value();
    } else if (v.rfind("flush=", 0) == 0) {
      ok = parse_time_ms(v.substr(6)).has_value();
    } else {
      return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
    }
    if (!ok) return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
  }
  if (!s.seen->has("access_log off")) logs.push_back(std::move(log));
  return true;
}

// `log_format NAME [escape=default|json|none] STRING...;` (http). The strings are concatenated; each is
// compiled on its own so an unknown variable is reported where it is written.
bool set_log_format(Builder& b, Scope& s, const Directive& d) {
  std::vector<LogFormatConf>& formats = s.main->http.module<LogHttpConf>().formats;
  LogFormatConf f;
  f.name = d.args[0].value;
  f.loc = d.loc;
  if (f.name.empty()) return fail_invalid_value(b, d, 0);
  if (f.name == "combined") return b.fail(d.args[0].loc, "duplicate \"log_format\" name \"combined\"");
  for (const LogFormatConf& other : formats) {
    if (other.name == f.name) return b.fail(d.args[0].loc, absl::StrCat("duplicate \"log_format\" name ", quoted(f.name)));
  }
  size_t i = 1;
  std::string_view esc = d.args[1].value;
  if (esc.rfind("escape=", 0) == 0) {
    esc.remove_prefix(7);
    if (esc == "default") {
      f.escape = LogEscape::kDefault;
    } else if (esc == "json") {
      f.escape = LogEscape::kJson;
    } else if (esc == "none") {
      f.escape = LogEscape::kNone;
    } else {
      return b.fail(d.args[1].loc, absl::StrCat("unknown log format escaping ", quoted(esc)));
    }
    i = 2;
    if (d.args.size() < 3) return b.fail(d.loc, "invalid number of arguments in \"log_format\" directive");
  }
  Template all;
  for (; i < d.args.size(); ++i) {
    auto t = compile_arg(b, d.args[i]);
    if (!t) return false;
    f.format += d.args[i].value;
    for (const TemplateSegment& seg : t->segments) {
      if (!seg.is_variable && !all.segments.empty() && !all.segments.back().is_variable) {
        all.segments.back().text += seg.text;  // adjacent strings join into one literal
      } else {
        all.segments.push_back(seg);
      }
    }
  }
  all.escape = f.escape;
  all.loc = d.loc;
  f.tpl = std::make_shared<const Template>(std::move(all));
  formats.push_back(std::move(f));
  return true;
}

constexpr DirectiveSpec kLogDirectives[] = {
    {.name = "access_log", .contexts = kCtxHttpAny, .args = k1More, .flags = kMulti, .set = set_access_log,
     .merge_loc = inherit<&LogLocConf::logs>},
    {.name = "log_format", .contexts = kCtxHttp, .args = k2More, .flags = kMulti, .set = set_log_format},
};

// The predefined "combined" format goes first; every name an access_log line uses must exist.
bool finalize_conf(Builder& b) {
  LogFormatConf combined;
  combined.name = "combined";
  combined.format = std::string(kCombined);
  combined.loc = SourceLoc{"<built-in>", 0, 0};
  Template t = compile(kCombined, combined.loc, nullptr);
  t.escape = LogEscape::kDefault;
  combined.tpl = std::make_shared<const Template>(std::move(t));
  LogHttpConf& http = b.main->http.module<LogHttpConf>();
  http.formats.insert(http.formats.begin(), std::move(combined));
  for (const NameRef& r : b.scratch.get<LogBuildState>().format_refs) {
    if (http.find(r.name) == nullptr) return b.fail(r.loc, absl::StrCat("unknown log format ", quoted(r.name)));
  }
  return true;
}

// A logged request keeps its client address even if the client resets before the response is done.
http::PhaseResult keep_client_address(http::Exchange& ex) {
  if (!ex.location().module<LogLocConf>().logs.empty()) ex.remote_addr();
  return http::PhaseResult::kNext;
}

constexpr http::PhaseHandler kLogPhases[] = {
    {.phase = http::Phase::kRewrite, .run = &keep_client_address},
};

}  // namespace

config::Module& module() {
  static config::Module m{
      .name = "log",
      .directives = kLogDirectives,
      .finalize = &finalize_conf,
      .phases = kLogPhases,
  };
  return m;
}

}  // namespace kosoku::access_log
