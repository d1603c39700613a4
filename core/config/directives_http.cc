// Location-level HTTP directives (allowed in http, server and location unless noted): files, timeouts,
// limits and disk I/O, nginx's ngx_http_core_module. allow/deny are the access module's (core/access/),
// `return` the rewrite module's (core/rewrite/), add_header the headers module's (core/headers/), access_log
// and log_format the log module's (core/access_log/), index the static module's (core/static/).
//
// Inheritance follows nginx's merge functions: a block that sets none of a slot's directives takes the
// enclosing block's value. Not inherited: try_files (as in nginx, it acts only where written).
//
// Accepted for nginx compatibility with no effect (documented no-ops): `sendfile on|off` (kosoku always
// streams files through its disk queues in sendfile_max_chunk pieces), `tcp_nopush on|off`,
// `tcp_nodelay on|off` (the engine always sets TCP_NODELAY; responses are written in one batch per turn).
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/variables.hh"

namespace kosoku::config {

namespace {

// `root PATH;` / `alias PATH;` share one slot (nginx: "alias" directive is duplicate, "root" directive is
// specified before). A trailing '/' of root is dropped (nginx). Variables are not supported in paths.
bool set_root_or_alias(Builder& b, Scope& s, const Directive& d) {
  std::string v = d.args[0].value;
  if (v.empty()) return fail_invalid_value(b, d, 0);
  if (v.find('$') != std::string::npos) {
    return b.fail(d.args[0].loc, absl::StrCat("variables in the ", quoted(d.name), " directive are not supported"));
  }
  if (d.name == "alias") {
    if (s.loc->match == LocationConf::Match::kNamed) {
      return b.fail(d.loc, "the \"alias\" directive cannot be used inside the named location");
    }
    if (s.loc->match == LocationConf::Match::kRegex || s.loc->match == LocationConf::Match::kRegexCaseless) {
      return b.fail(d.loc, "the \"alias\" directive inside a regex location needs captures, which kosoku does not "
                           "support");
    }
    s.loc->alias = v;
    return true;
  }
  if (v.size() > 1 && v.back() == '/') v.pop_back();
  s.loc->root = v;
  s.loc->alias.reset();
  return true;
}

// `try_files FILE... URI|=CODE;` Variables are validated; the strings are stored as written.
bool set_try_files(Builder& b, Scope& s, const Directive& d) {
  for (const Arg& a : d.args) {
    if (!compile_arg(b, a)) return false;
  }
  const Arg& last = d.args.back();
  if (!last.value.empty() && last.value[0] == '=') {
    auto code = parse_number(std::string_view(last.value).substr(1), 999);
    if (!code) return b.fail(last.loc, absl::StrCat("invalid code ", quoted(last.value)));
  }
  s.loc->try_files.clear();
  for (const Arg& a : d.args) s.loc->try_files.push_back(a.value);
  return true;
}

// `error_page CODE... [=[RESPONSE]] URI;` (nginx's texts). Several lines add up in one block.
bool set_error_page(Builder& b, Scope& s, const Directive& d) {
  ErrorPage ep;
  size_t n = d.args.size() - 1;  // the last is the URI
  const Arg& over = d.args[n - 1];
  if (!over.value.empty() && over.value[0] == '=') {
    if (n == 1) return b.fail(d.loc, "invalid number of arguments in \"error_page\" directive");
    if (over.value.size() == 1) {
      ep.overwrite = 0;
    } else {
      auto code = parse_number(std::string_view(over.value).substr(1), 999);
      if (!code || *code < 200 || *code > 599) return b.fail(over.loc, absl::StrCat("invalid value ", quoted(over.value)));
      ep.overwrite = static_cast<int>(*code);
    }
    --n;
  }
  for (size_t i = 0; i < n; ++i) {
    auto code = parse_number(d.args[i].value, 999);
    if (!code) return b.fail(d.args[i].loc, absl::StrCat("invalid value ", quoted(d.args[i].value)));
    if (*code == 499 || *code < 300 || *code > 599) {
      return b.fail(d.args[i].loc, absl::StrCat("value ", quoted(d.args[i].value), " must be between 300 and 599"));
    }
    ep.codes.push_back(static_cast<int>(*code));
  }
  const Arg& uri = d.args.back();
  if (uri.value.empty()) return fail_invalid_value(b, d, d.args.size() - 1);
  ep.uri = compile_arg(b, uri, LogEscape::kUri);
  if (!ep.uri) return false;
  if (!s.seen->has("error_page")) s.loc->error_pages.clear();
  s.loc->error_pages.push_back(std::move(ep));
  return true;
}

// `keepalive_timeout TIME [HEADER_TIME];`
bool set_keepalive_timeout(Builder& b, Scope& s, const Directive& d) {
  auto t = parse_time_ms(d.args[0].value);
  if (!t) return fail_invalid_value(b, d, 0);
  uint64_t header = 0;
  if (d.args.size() == 2) {
    auto h = parse_time_sec(d.args[1].value);
    if (!h) return fail_invalid_value(b, d, 1);
    header = *h;
  }
  s.loc->keepalive_timeout_ms = *t;
  s.loc->keepalive_header_timeout_s = header;
  return true;
}

// `open_file_cache off | max=N [inactive=TIME];` (nginx: "open_file_cache" must have "max" parameter).
bool set_open_file_cache(Builder& b, Scope& s, const Directive& d) {
  OpenFileCacheConf& c = s.loc->open_file_cache;
  if (d.args[0].value == "off" && d.args.size() == 1) {
    c.enabled = false;
    return true;
  }
  uint32_t max = 0;
  uint64_t inactive_ms = 60000;
  for (const Arg& a : d.args) {
    std::string_view v = a.value;
    bool ok = false;
    if (v.rfind("max=", 0) == 0) {
      auto n = parse_number(v.substr(4));
      ok = n && *n > 0;
      if (ok) max = static_cast<uint32_t>(*n);
    } else if (v.rfind("inactive=", 0) == 0) {
      auto n = parse_time_sec(v.substr(9));
      ok = n.has_value();
      if (ok) inactive_ms = *n * 1000;
    }
    if (!ok) return b.fail(a.loc, absl::StrCat("invalid \"open_file_cache\" parameter ", quoted(v)));
  }
  if (max == 0) return b.fail(d.loc, "\"open_file_cache\" must have \"max\" parameter");
  c.enabled = true;
  c.max = max;
  c.inactive_ms = inactive_ms;
  return true;
}

// `server_tokens on|off|build;` (nginx's `build` adds the build name given to its configure script: kosoku has
// none, so `build` is `on`). nginx Plus's free-form string is refused as an invalid value.
bool set_server_tokens(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v != "on" && v != "off" && v != "build") {
    return fail_invalid_value(b, d, 0, ", it must be \"on\", \"off\" or \"build\"");
  }
  s.loc->server_tokens = v != "off";
  return true;
}

// `if_modified_since off|exact|before;`
bool set_if_modified_since(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v == "off") {
    s.loc->if_modified_since = IfModifiedSince::kOff;
  } else if (v == "exact") {
    s.loc->if_modified_since = IfModifiedSince::kExact;
  } else if (v == "before") {
    s.loc->if_modified_since = IfModifiedSince::kBefore;
  } else {
    return fail_invalid_value(b, d, 0, ", it must be \"off\", \"exact\" or \"before\"");
  }
  return true;
}

// `aio io_uring[=QUEUE] | threads[=QUEUE] | on | off;` (`on` = io_uring). QUEUE names a disk_queue
// (checked once the whole file is read: disk_queue lines may follow).
bool set_aio(Builder& b, Scope& s, const Directive& d) {
  std::string_view v = d.args[0].value;
  std::string_view queue = "default";
  size_t eq = v.find('=');
  std::string_view mode = v.substr(0, eq);
  if (eq != std::string_view::npos) {
    queue = v.substr(eq + 1);
    if (queue.empty() || (mode != "io_uring" && mode != "threads")) return fail_invalid_value(b, d, 0);
  }
  if (mode == "io_uring" || mode == "on") {
    s.loc->aio = AioMode::kIoUring;
  } else if (mode == "threads") {
    s.loc->aio = AioMode::kThreads;
  } else if (mode == "off") {
    s.loc->aio = AioMode::kOff;
  } else {
    return fail_invalid_value(b, d, 0, ", it must be \"io_uring\", \"threads\" or \"off\"");
  }
  s.loc->aio_queue = std::string(queue);
  if (eq != std::string_view::npos) b.aio_refs.push_back(NameRef{std::string(queue), d.args[0].loc});
  return true;
}

constexpr DirectiveSpec kHttpDirectives[] = {
    {.name = "root", .contexts = kCtxHttpAny, .args = kTake1, .set = set_root_or_alias,
     .merge_loc = [](LocationConf& c, const LocationConf& p) {
       c.root = p.root;
       c.alias = p.alias;
     },
     .default_value = "html", .slot = "root"},
    {.name = "alias", .contexts = kCtxLocation, .args = kTake1, .set = set_root_or_alias,
     .merge_loc = [](LocationConf& c, const LocationConf& p) {
       c.root = p.root;
       c.alias = p.alias;
     },
     .slot = "root"},
    {.name = "try_files", .contexts = kCtxServerAny, .args = k2More, .set = set_try_files},
    {.name = "internal", .contexts = kCtxLocation, .args = kNoArgs,
     .set = [](Builder&, Scope& s, const Directive&) {
       s.loc->internal = true;
       return true;
     }},
    {.name = "error_page", .contexts = kCtxHttpAny, .args = k2More, .flags = kMulti, .set = set_error_page,
     .merge_loc = inherit<&LocationConf::error_pages>},
    {.name = "default_type", .contexts = kCtxHttpAny, .args = kTake1, .set = set_string<&LocationConf::default_type>,
     .merge_loc = inherit<&LocationConf::default_type>, .default_value = "text/plain"},
    {.name = "keepalive_timeout", .contexts = kCtxHttpAny, .args = kTake12, .set = set_keepalive_timeout,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.keepalive_timeout_ms = p.keepalive_timeout_ms;
           c.keepalive_header_timeout_s = p.keepalive_header_timeout_s;
         },
     .default_value = "75s"},
    {.name = "keepalive_requests", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_number<&LocationConf::keepalive_requests, 0>, .merge_loc = inherit<&LocationConf::keepalive_requests>,
     .default_value = "1000"},
    {.name = "client_body_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_msec<&LocationConf::client_body_timeout_ms>,
     .merge_loc = inherit<&LocationConf::client_body_timeout_ms>, .default_value = "60s"},
    {.name = "send_timeout", .contexts = kCtxHttpAny, .args = kTake1, .set = set_msec<&LocationConf::send_timeout_ms>,
     .merge_loc = inherit<&LocationConf::send_timeout_ms>, .default_value = "60s"},
    {.name = "client_max_body_size", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_size<&LocationConf::client_max_body_size>, .merge_loc = inherit<&LocationConf::client_max_body_size>,
     .default_value = "1m"},
    {.name = "sendfile_max_chunk", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_size<&LocationConf::sendfile_max_chunk>, .merge_loc = inherit<&LocationConf::sendfile_max_chunk>,
     .default_value = "2m"},
    {.name = "open_file_cache", .contexts = kCtxHttpAny, .args = kTake12, .set = set_open_file_cache,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.open_file_cache.enabled = p.open_file_cache.enabled;
           c.open_file_cache.max = p.open_file_cache.max;
           c.open_file_cache.inactive_ms = p.open_file_cache.inactive_ms;
         },
     .default_value = "off"},
    {.name = "open_file_cache_valid", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto v = parse_time_sec(d.args[0].value);
       if (!v) return fail_invalid_value(b, d, 0);
       s.loc->open_file_cache.valid_ms = *v * 1000;
       return true;
     },
     .merge_loc = [](LocationConf& c, const LocationConf& p) { c.open_file_cache.valid_ms = p.open_file_cache.valid_ms; },
     .default_value = "60s"},
    {.name = "open_file_cache_min_uses", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto v = parse_number(d.args[0].value);
       if (!v || *v == 0) return fail_invalid_value(b, d, 0);
       s.loc->open_file_cache.min_uses = static_cast<uint32_t>(*v);
       return true;
     },
     .merge_loc = [](LocationConf& c, const LocationConf& p) { c.open_file_cache.min_uses = p.open_file_cache.min_uses; },
     .default_value = "1"},
    {.name = "open_file_cache_errors", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) { return parse_flag_arg(b, d, 0, &s.loc->open_file_cache.errors); },
     .merge_loc = [](LocationConf& c, const LocationConf& p) { c.open_file_cache.errors = p.open_file_cache.errors; },
     .default_value = "off"},
    {.name = "etag", .contexts = kCtxHttpAny, .args = kTake1, .set = set_flag<&LocationConf::etag>,
     .merge_loc = inherit<&LocationConf::etag>, .default_value = "on"},
    {.name = "if_modified_since", .contexts = kCtxHttpAny, .args = kTake1, .set = set_if_modified_since,
     .merge_loc = inherit<&LocationConf::if_modified_since>, .default_value = "exact"},
    {.name = "aio", .contexts = kCtxHttpAny, .args = kTake1, .set = set_aio,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.aio = p.aio;
           c.aio_queue = p.aio_queue;
         },
     .default_value = "io_uring"},
    {.name = "server_tokens", .contexts = kCtxHttpAny, .args = kTake1, .set = set_server_tokens,
     .merge_loc = inherit<&LocationConf::server_tokens>, .default_value = "on"},
    {.name = "sendfile", .contexts = kCtxHttpAny, .args = kTake1, .set = set_ignored_flag},
    {.name = "tcp_nopush", .contexts = kCtxHttpAny, .args = kTake1, .set = set_ignored_flag},
    {.name = "tcp_nodelay", .contexts = kCtxHttpAny, .args = kTake1, .set = set_ignored_flag},
};

}  // namespace

std::span<const DirectiveSpec> http_directives() { return kHttpDirectives; }

}  // namespace kosoku::config
