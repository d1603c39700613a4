// Proxy-cache directives (cache/cache_conf.hh): nginx's proxy_cache_path and proxy_cache_* of
// ngx_http_proxy_module / ngx_http_file_cache, proxy_ignore_headers, split_clients
// (ngx_http_split_clients_module), and proxy_cache_purge in the two shapes of ngx_cache_purge (a purge
// location `proxy_cache_purge ZONE KEY;`, or `proxy_cache_purge on|METHOD [from ...];` beside proxy_cache).
// Defaults and wording are nginx's. Every proxy_cache_* directive is inherited from the enclosing block when a
// block does not set it (lists as a whole); proxy_cache_purge acts only where written.
//
// Names used before they are defined: a `proxy_cache ZONE` may precede its proxy_cache_path (nginx resolves
// zones at the end of the http block); finalize_conf checks every zone name once the whole file is read.
// split_clients must precede the uses of its variable (kosoku compiles templates as it reads them).
#include <arpa/inet.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cache/cache_conf.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/purge_key.hh"
#include "core/cache/tags.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/values.hh"
#include "core/config/variables.hh"

namespace kosoku::cache {

namespace {

using namespace config;  // the directive-table vocabulary: Builder, Scope, Directive, set_*, inherit

/// Zone names written before their proxy_cache_path may be read; checked by finalize_conf (loading only).
struct CacheBuildState {
  static constexpr ConfLevel kLevel = ConfLevel::kMain;  // kept in Builder::scratch
  std::vector<NameRef> zone_refs;        // `proxy_cache ZONE`
  std::vector<NameRef> purge_zone_refs;  // `proxy_cache_purge ZONE KEY`
};

// `proxy_cache_path PATH [levels=L[:L[:L]]] keys_zone=NAME:SIZE [inactive=T] [max_size=S] [use_temp_path=on|off]
// [disk_queue=NAME] [loader_*=] [manager_*=];`
bool set_cache_path(Builder& b, Scope& s, const Directive& d) {
  CachePathConf p;
  p.path = d.args[0].value;
  p.file = d.loc.file;
  p.line = d.loc.line;
  if (p.path.empty()) return fail_invalid_value(b, d, 0);
  while (p.path.size() > 1 && p.path.back() == '/') p.path.pop_back();
  bool have_zone = false;
  for (size_t i = 1; i < d.args.size(); ++i) {
    const Arg& a = d.args[i];
    std::string_view v = a.value;
    auto param = [&](std::string_view name) {
      if (!absl::StartsWith(v, name)) return false;
      v.remove_prefix(name.size());
      return true;
    };
    auto bad = [&]() { return b.fail(a.loc, absl::StrCat("invalid parameter ", quoted(a.value))); };
    if (param("levels=")) {
      p.levels.clear();
      for (std::string_view l : absl::StrSplit(v, ':')) {
        if (l != "1" && l != "2") return bad();
        p.levels.push_back(static_cast<uint8_t>(l[0] - '0'));
      }
      if (p.levels.size() > 3) return bad();
    } else if (param("keys_zone=")) {
      size_t colon = v.rfind(':');
      if (colon == std::string_view::npos || colon == 0) {
        return b.fail(a.loc, absl::StrCat("invalid keys zone size ", quoted(a.value)));
      }
      auto size = parse_size(v.substr(colon + 1));
      if (!size) return b.fail(a.loc, absl::StrCat("invalid keys zone size ", quoted(a.value)));
      if (*size < 8192) return b.fail(a.loc, absl::StrCat("keys zone ", quoted(v.substr(0, colon)), " is too small"));
      p.zone = std::string(v.substr(0, colon));
      p.zone_size = *size;
      have_zone = true;
    } else if (param("inactive=")) {
      auto t = parse_time_sec(v);
      if (!t) return bad();
      p.inactive_ms = *t * 1000;
    } else if (param("max_size=")) {
      auto sz = parse_size(v);
      if (!sz) return bad();
      p.max_size = *sz;
    } else if (param("use_temp_path=")) {
      if (v == "on") {
        p.use_temp_path = true;
      } else if (v == "off") {
        p.use_temp_path = false;
      } else {
        return b.fail(a.loc, absl::StrCat("invalid use_temp_path value ", quoted(v), ", it must be \"on\" or \"off\""));
      }
    } else if (param("disk_queue=")) {
      if (v.empty()) return bad();
      p.disk_queue = std::string(v);
      b.aio_refs.push_back(NameRef{p.disk_queue, a.loc});
    } else if (param("loader_files=") || param("manager_files=")) {
      auto n = parse_number(v);
      if (!n || *n == 0) return bad();
      (absl::StartsWith(a.value, "loader") ? p.loader_files : p.manager_files) = static_cast<uint32_t>(*n);
    } else if (param("loader_threshold=") || param("loader_sleep=") || param("manager_threshold=") ||
               param("manager_sleep=")) {
      auto t = parse_time_ms(v);
      if (!t) return bad();
      std::string_view n = a.value;
      uint64_t* slot = absl::StartsWith(n, "loader_threshold")    ? &p.loader_threshold_ms
                       : absl::StartsWith(n, "loader_sleep")      ? &p.loader_sleep_ms
                       : absl::StartsWith(n, "manager_threshold") ? &p.manager_threshold_ms
                                                                  : &p.manager_sleep_ms;
      *slot = *t;
    } else if (param("min_free=")) {
      if (!parse_size(v)) return bad();  // accepted; kosoku bounds the cache by max_size only
    } else {
      return bad();
    }
  }
  if (!have_zone) return b.fail(d.loc, "\"proxy_cache_path\" must have \"keys_zone\" parameter");
  for (const CachePathConf& other : s.main->http.module<CacheHttpConf>().paths) {
    if (other.zone == p.zone) return b.fail(d.loc, absl::StrCat("duplicate zone ", quoted(p.zone)));
    if (other.path == p.path) return b.fail(d.args[0].loc, absl::StrCat("duplicate cache path ", quoted(p.path)));
  }
  s.main->http.module<CacheHttpConf>().paths.push_back(std::move(p));
  return true;
}

// `proxy_cache ZONE | $var | off;`
bool set_proxy_cache(Builder& b, Scope& s, const Directive& d) {
  CacheLocConf& c = s.loc->module<CacheLocConf>();
  const Arg& a = d.args[0];
  if (a.value == "off") {
    c.enabled = false;
    c.zone.clear();
    c.zone_tpl.reset();
    return true;
  }
  if (a.value.empty()) return fail_invalid_value(b, d, 0);
  c.enabled = true;
  if (a.value.find('$') != std::string::npos) {
    c.zone_tpl = compile_arg(b, a);
    c.zone.clear();
    return c.zone_tpl != nullptr;
  }
  c.zone = a.value;
  c.zone_tpl.reset();
  b.scratch.get<CacheBuildState>().zone_refs.push_back(NameRef{c.zone, a.loc});
  return true;
}

bool set_cache_key(Builder& b, Scope& s, const Directive& d) {
  if (d.args[0].value.empty()) return fail_invalid_value(b, d, 0);
  auto t = compile_arg(b, d.args[0]);
  if (!t) return false;
  s.loc->module<CacheLocConf>().key = std::move(t);
  s.loc->module<CacheLocConf>().key_text = d.args[0].value;
  return true;
}

// `proxy_cache_valid [code ... | any] time;` (several lines add up; without codes: 200 301 302).
bool set_cache_valid(Builder& b, Scope& s, const Directive& d) {
  CacheValid v;
  const Arg& last = d.args.back();
  auto t = parse_time_sec(last.value);
  if (!t) return b.fail(last.loc, absl::StrCat("invalid time value ", quoted(last.value)));
  v.ms = *t * 1000;
  for (size_t i = 0; i + 1 < d.args.size(); ++i) {
    const std::string& code = d.args[i].value;
    if (code == "any") {
      v.any = true;
      continue;
    }
    auto n = parse_number(code, 599);
    if (!n || *n < 100) return b.fail(d.args[i].loc, absl::StrCat("invalid status ", quoted(code)));
    v.codes.push_back(static_cast<int>(*n));
  }
  if (v.any && !v.codes.empty()) {
    // nginx stores `any` as status 0 among the others; a lookup returns at the first of either.
    CacheValid rest = v;
    rest.any = false;
    s.loc->module<CacheLocConf>().valid.push_back(rest);
    v.codes.clear();
  }
  s.loc->module<CacheLocConf>().valid.push_back(std::move(v));
  return true;
}

// `proxy_cache_methods GET | HEAD | POST ...;` GET and HEAD are always included (nginx).
bool set_cache_methods(Builder& b, Scope& s, const Directive& d) {
  uint32_t m = cache::kMethodGet | cache::kMethodHead;
  for (size_t i = 0; i < d.args.size(); ++i) {
    const std::string& v = d.args[i].value;
    if (v == "GET") {
      m |= cache::kMethodGet;
    } else if (v == "HEAD") {
      m |= cache::kMethodHead;
    } else if (v == "POST") {
      m |= cache::kMethodPost;
    } else {
      return b.fail(d.args[i].loc, absl::StrCat("invalid value ", quoted(v), " in ", quoted(d.name), " directive"));
    }
  }
  s.loc->module<CacheLocConf>().methods = m;
  return true;
}

// `proxy_cache_bypass STRING ...;` / `proxy_no_cache STRING ...;` (lines add up).
bool set_predicates(Builder& b, Scope& s, const Directive& d) {
  auto& list = d.name == "proxy_cache_bypass" ? s.loc->module<CacheLocConf>().bypass : s.loc->module<CacheLocConf>().no_cache;
  for (const Arg& a : d.args) {
    auto t = compile_arg(b, a);
    if (!t) return false;
    list.push_back(std::move(t));
  }
  return true;
}

// `proxy_cache_use_stale off | error | timeout | invalid_header | updating | http_500 | ...;`
bool set_use_stale(Builder& b, Scope& s, const Directive& d) {
  struct Name {
    std::string_view name;
    uint32_t bit;
  };
  static constexpr Name kNames[] = {
      {"error", cache::kStaleError},        {"timeout", cache::kStaleTimeout},
      {"invalid_header", cache::kStaleInvalidHeader}, {"updating", cache::kStaleUpdating},
      {"http_500", cache::kStaleHttp500},  {"http_502", cache::kStaleHttp502},
      {"http_503", cache::kStaleHttp503},  {"http_504", cache::kStaleHttp504},
      {"http_403", cache::kStaleHttp403},  {"http_404", cache::kStaleHttp404},
      {"http_429", cache::kStaleHttp429},
  };
  uint32_t bits = 0;
  bool off = false;
  for (const Arg& a : d.args) {
    if (a.value == "off") {
      off = true;
      continue;
    }
    bool found = false;
    for (const Name& n : kNames) {
      if (a.value == n.name) {
        bits |= n.bit;
        found = true;
      }
    }
    if (!found) return b.fail(a.loc, absl::StrCat("invalid value ", quoted(a.value)));
  }
  s.loc->module<CacheLocConf>().use_stale = off ? 0 : bits;
  return true;
}

// `proxy_cache_tags_header NAME ...;` / `proxy_cache_tags_header off;`: which of Surrogate-Key, Cache-Tag and xkey
// give a response its tags (cache/tags.hh; case-insensitive).
bool set_tags_header(Builder& b, Scope& s, const Directive& d) {
  uint32_t forms = 0;
  if (d.args.size() == 1 && d.args[0].value == "off") {
    s.loc->module<CacheLocConf>().tags_headers = 0;
    return true;
  }
  for (const Arg& a : d.args) {
    const uint32_t f = tag_header_form(a.value);
    if (f == 0) {
      return b.fail(a.loc, absl::StrCat("invalid value ", quoted(a.value),
                                        " (Surrogate-Key, Cache-Tag, xkey or \"off\")"));
    }
    forms |= f;
  }
  s.loc->module<CacheLocConf>().tags_headers = forms;
  return true;
}

// `proxy_ignore_headers FIELD ...;` (case-insensitive, as nginx's bitmask slot).
bool set_ignore_headers(Builder& b, Scope& s, const Directive& d) {
  struct Name {
    std::string_view name;
    uint32_t bit;
  };
  static constexpr Name kNames[] = {
      {"x-accel-redirect", cache::kIgnoreXAccelRedirect}, {"x-accel-expires", cache::kIgnoreXAccelExpires},
      {"x-accel-limit-rate", cache::kIgnoreXAccelLimitRate}, {"x-accel-buffering", cache::kIgnoreXAccelBuffering},
      {"x-accel-charset", cache::kIgnoreXAccelCharset},   {"expires", cache::kIgnoreExpires},
      {"cache-control", cache::kIgnoreCacheControl},      {"set-cookie", cache::kIgnoreSetCookie},
      {"vary", cache::kIgnoreVary},
  };
  uint32_t bits = 0;
  for (const Arg& a : d.args) {
    bool found = false;
    for (const Name& n : kNames) {
      if (absl::EqualsIgnoreCase(a.value, n.name)) {
        bits |= n.bit;
        found = true;
      }
    }
    if (!found) return b.fail(a.loc, absl::StrCat("invalid value ", quoted(a.value)));
  }
  s.loc->module<CacheLocConf>().ignore_headers = bits;
  return true;
}

bool is_method_token(std::string_view v) {
  if (v.empty()) return false;
  for (char c : v) {
    if (!(c >= 'A' && c <= 'Z') && c != '-' && c != '_') return false;
  }
  return true;
}

// A parameter word of proxy_cache_purge (unquoted: a quoted "wildcard" is a KEY).
bool purge_flag(const Arg& a, PurgeConf& p) {
  if (a.quoted) return false;
  if (a.value == "wildcard") {
    p.wildcard = true;
    return true;
  }
  if (a.value == "any_host") {
    p.any_host = true;
    return true;
  }
  return false;
}

// `proxy_cache_purge ZONE KEY [wildcard] [any_host];` or
// `proxy_cache_purge on | off | METHOD [wildcard] [any_host] [from all | ADDR[/N] ...];`. The method form is
// the one whose second argument is absent, `from` or a flag.
bool set_cache_purge(Builder& b, Scope& s, const Directive& d) {
  PurgeConf p;
  p.file = d.loc.file;
  p.line = d.loc.line;
  p.col = d.loc.col;
  const std::string& first = d.args[0].value;
  PurgeConf probe;
  bool method_form = d.args.size() == 1 || (!d.args[1].quoted && d.args[1].value == "from") ||
                     purge_flag(d.args[1], probe);
  if (!method_form) {
    p.mode = PurgeConf::Mode::kZoneKey;
    p.zone = first;
    for (size_t i = 2; i < d.args.size(); ++i) {
      if (!purge_flag(d.args[i], p)) {
        return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(d.args[i].value)));
      }
    }
    p.key = compile_arg(b, d.args[1]);
    if (!p.key) return false;
    if (d.args[1].value.empty()) return fail_invalid_value(b, d, 1);
    if (!p.any_host) {
      if (std::string why = check_purge_template(*p.key); !why.empty()) {
        return b.fail(d.args[1].loc, absl::StrCat("\"proxy_cache_purge\" key ", quoted(d.args[1].value), " ", why,
                                                  "; add \"any_host\" if that is intended"));
      }
    }
    b.scratch.get<CacheBuildState>().purge_zone_refs.push_back(NameRef{p.zone, d.args[0].loc});
    s.loc->module<CacheLocConf>().purge = std::move(p);
    return true;
  }
  if (first == "off") {
    if (d.args.size() > 1) return b.fail(d.args[1].loc, absl::StrCat("invalid parameter ", quoted(d.args[1].value)));
    s.loc->module<CacheLocConf>().purge = PurgeConf{};
    return true;
  }
  p.mode = PurgeConf::Mode::kMethod;
  if (first == "on") {
    p.method = "PURGE";
  } else if (is_method_token(first)) {
    p.method = first;
  } else {
    return fail_invalid_value(b, d, 0, ", it must be \"on\", \"off\" or a method name");
  }
  size_t i = 1;
  while (i < d.args.size() && purge_flag(d.args[i], p)) ++i;
  if (i < d.args.size()) {
    if (d.args[i].quoted || d.args[i].value != "from") {
      return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(d.args[i].value)));
    }
    if (i + 1 == d.args.size()) return b.fail(d.loc, "invalid number of arguments in \"proxy_cache_purge\" directive");
    for (++i; i < d.args.size(); ++i) {
      PurgeConf::From f;
      AccessRule r;
      bool host_bits = false;
      if (!parse_access_rule(d.args[i].value, &r, &host_bits)) {
        return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(d.args[i].value)));
      }
      if (host_bits) b.warn(d.args[i].loc, absl::StrCat("low address bits of ", d.args[i].value, " are meaningless"));
      f.all = r.all;
      f.family = r.family;
      std::memcpy(f.addr, r.addr, sizeof(f.addr));
      f.prefix = r.prefix;
      p.from.push_back(f);
    }
  }
  s.loc->module<CacheLocConf>().purge = std::move(p);
  return true;
}

// nginx's ngx_atofp(value, len, 2): a decimal with at most two fraction digits, in hundredths; -1 on error.
int64_t parse_percent(std::string_view v) {
  int64_t n = 0;
  int frac = -1;
  if (v.empty()) return -1;
  for (char c : v) {
    if (c == '.') {
      if (frac >= 0) return -1;
      frac = 0;
      continue;
    }
    if (c < '0' || c > '9') return -1;
    if (frac >= 0 && ++frac > 2) return -1;
    n = n * 10 + (c - '0');
    if (n > 1000000) return -1;
  }
  for (int i = frac < 0 ? 0 : frac; i < 2; ++i) n *= 10;
  return n;
}

// `split_clients STRING $variable { P% value; ... * value; }` (http).
bool set_split_clients(Builder& b, Scope& s, const Directive& d) {
  SplitClientsConf sc;
  sc.source = compile_arg(b, d.args[0]);
  if (!sc.source) return false;
  std::string_view var = d.args[1].value;
  if (var.size() < 2 || var[0] != '$') {
    return b.fail(d.args[1].loc, absl::StrCat("invalid variable name ", quoted(var)));
  }
  sc.variable = absl::AsciiStrToLower(var.substr(1));
  for (char c : sc.variable) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return b.fail(d.args[1].loc, absl::StrCat("invalid variable name ", quoted(var)));
    }
  }
  if (!declare_variable(sc.variable, &split_clients_value)) {
    return b.fail(d.args[1].loc, absl::StrCat("the duplicate ", quoted(sc.variable), " variable"));
  }
  uint64_t sum = 0;
  uint64_t last = 0;
  for (const Directive& c : d.children) {
    if (c.block || c.args.size() != 1) return b.fail(c.loc, "invalid number of arguments in \"split_clients\" block");
    SplitPart part;
    part.value = c.args[0].value;
    if (c.name == "*") {
      part.percent = 0;
      sum = 10000;
    } else {
      if (c.name.size() < 2 || c.name.back() != '%') {
        return b.fail(c.loc, absl::StrCat("invalid percent value ", quoted(c.name)));
      }
      int64_t pc = parse_percent(std::string_view(c.name).substr(0, c.name.size() - 1));
      if (pc <= 0) return b.fail(c.loc, absl::StrCat("invalid percent value ", quoted(c.name)));
      part.percent = static_cast<uint32_t>(pc);
      sum += part.percent;
    }
    if (sum > 10000) return b.fail(c.loc, "percent total is greater than 100%");
    if (part.percent != 0) {
      // nginx: last += percent * 0xffffffff / 10000; the part matches hash < last.
      last += static_cast<uint64_t>(part.percent) * 0xffffffffull / 10000;
      part.threshold = static_cast<uint32_t>(last);
    }
    sc.parts.push_back(std::move(part));
  }
  s.main->http.module<CacheHttpConf>().split_clients.push_back(std::move(sc));
  return true;
}

constexpr DirectiveSpec kCacheDirectives[] = {
    {.name = "proxy_cache_path", .contexts = kCtxHttp, .args = k2More, .flags = kMulti, .set = set_cache_path},
    {.name = "proxy_cache", .contexts = kCtxHttpAny, .args = kTake1, .set = set_proxy_cache,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.module<CacheLocConf>().enabled = p.module<CacheLocConf>().enabled;
           c.module<CacheLocConf>().zone = p.module<CacheLocConf>().zone;
           c.module<CacheLocConf>().zone_tpl = p.module<CacheLocConf>().zone_tpl;
         },
     .default_value = "off"},
    {.name = "proxy_cache_key", .contexts = kCtxHttpAny, .args = kTake1, .set = set_cache_key,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.module<CacheLocConf>().key = p.module<CacheLocConf>().key;
           c.module<CacheLocConf>().key_text = p.module<CacheLocConf>().key_text;
         },
     .default_value = "$scheme$proxy_host$request_uri"},
    {.name = "proxy_cache_valid", .contexts = kCtxHttpAny, .args = k1More, .flags = kMulti, .set = set_cache_valid,
     .merge_loc = inherit<&CacheLocConf::valid>},
    {.name = "proxy_cache_methods", .contexts = kCtxHttpAny, .args = k1More, .set = set_cache_methods,
     .merge_loc = inherit<&CacheLocConf::methods>},
    {.name = "proxy_cache_min_uses", .contexts = kCtxHttpAny, .args = kTake1,
     .set =
         [](Builder& b, Scope& s, const Directive& d) {
           auto n = parse_number(d.args[0].value);
           if (!n || *n == 0) return fail_invalid_value(b, d, 0);
           s.loc->module<CacheLocConf>().min_uses = static_cast<uint32_t>(*n);
           return true;
         },
     .merge_loc = inherit<&CacheLocConf::min_uses>, .default_value = "1"},
    {.name = "proxy_cache_bypass", .contexts = kCtxHttpAny, .args = k1More, .flags = kMulti, .set = set_predicates,
     .merge_loc = inherit<&CacheLocConf::bypass>},
    {.name = "proxy_no_cache", .contexts = kCtxHttpAny, .args = k1More, .flags = kMulti, .set = set_predicates,
     .merge_loc = inherit<&CacheLocConf::no_cache>},
    {.name = "proxy_cache_revalidate", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) { return parse_flag_arg(b, d, 0, &s.loc->module<CacheLocConf>().revalidate); },
     .merge_loc = inherit<&CacheLocConf::revalidate>, .default_value = "off"},
    {.name = "proxy_cache_convert_head", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) { return parse_flag_arg(b, d, 0, &s.loc->module<CacheLocConf>().convert_head); },
     .merge_loc = inherit<&CacheLocConf::convert_head>, .default_value = "on"},
    {.name = "proxy_cache_lock", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) { return parse_flag_arg(b, d, 0, &s.loc->module<CacheLocConf>().lock); },
     .merge_loc = inherit<&CacheLocConf::lock>, .default_value = "off"},
    {.name = "proxy_cache_lock_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto t = parse_time_ms(d.args[0].value);
       if (!t) return fail_invalid_value(b, d, 0);
       s.loc->module<CacheLocConf>().lock_timeout_ms = *t;
       return true;
     },
     .merge_loc = inherit<&CacheLocConf::lock_timeout_ms>, .default_value = "5s"},
    {.name = "proxy_cache_lock_age", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto t = parse_time_ms(d.args[0].value);
       if (!t) return fail_invalid_value(b, d, 0);
       s.loc->module<CacheLocConf>().lock_age_ms = *t;
       return true;
     },
     .merge_loc = inherit<&CacheLocConf::lock_age_ms>, .default_value = "5s"},
    {.name = "proxy_cache_use_stale", .contexts = kCtxHttpAny, .args = k1More, .set = set_use_stale,
     .merge_loc = inherit<&CacheLocConf::use_stale>, .default_value = "off"},
    {.name = "proxy_cache_background_update", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s,
               const Directive& d) { return parse_flag_arg(b, d, 0, &s.loc->module<CacheLocConf>().background_update); },
     .merge_loc = inherit<&CacheLocConf::background_update>, .default_value = "off"},
    {.name = "proxy_ignore_headers", .contexts = kCtxHttpAny, .args = k1More, .set = set_ignore_headers,
     .merge_loc = inherit<&CacheLocConf::ignore_headers>},
    {.name = "proxy_cache_tags_header", .contexts = kCtxHttpAny, .args = k1More, .set = set_tags_header,
     .merge_loc = inherit<&CacheLocConf::tags_headers>},
    {.name = "proxy_cache_purge", .contexts = kCtxHttpAny, .args = k1More, .set = set_cache_purge},
    {.name = "split_clients", .contexts = kCtxHttp, .args = kTake2, .flags = kBlock | kMulti | kDataBlock,
     .set = set_split_clients},
};

// A wildcard method-form purge selects keys by the location's (merged) proxy_cache_key: it needs a host
// segment there (cache/purge_key.hh) unless any_host says otherwise. The default key has $proxy_host.
bool check_wildcard_purge(Builder& b, const LocationConf& loc) {
  const PurgeConf& p = loc.module<CacheLocConf>().purge;
  if (p.mode != PurgeConf::Mode::kMethod || !p.wildcard || p.any_host || loc.module<CacheLocConf>().key == nullptr) return true;
  std::string why = check_purge_template(*loc.module<CacheLocConf>().key);
  if (why.empty()) return true;
  return b.fail(SourceLoc{p.file, p.line, p.col},
                absl::StrCat("\"proxy_cache_purge ... wildcard\": the cache key ", quoted(loc.module<CacheLocConf>().key_text), " ", why,
                             "; add \"any_host\" if that is intended"));
}

// The tag fields a caching location reads are not forwarded to clients unless proxy_pass_header names them
// (as Fastly strips Surrogate-Key): the proxy's finalize, after this one, builds its hidden list from them.
void hide_tag_fields(LocationConf& loc) {
  const CacheLocConf& cc = loc.module<CacheLocConf>();
  if (!cc.enabled) return;
  for (uint32_t form : {kTagSurrogateKey, kTagCacheTag, kTagXkey}) {
    if (cc.tags_headers & form) loc.module<proxy::ProxyLocationConf>().module_hidden.emplace_back(tag_header_name(form));
  }
}

void hide_tag_fields(std::vector<LocationConf>& locs) {
  for (LocationConf& l : locs) {
    hide_tag_fields(l);
    hide_tag_fields(l.locations);
  }
}

bool check_wildcard_purges(Builder& b, const std::vector<LocationConf>& locs) {
  for (const LocationConf& l : locs) {
    if (!check_wildcard_purge(b, l) || !check_wildcard_purges(b, l.locations)) return false;
  }
  return true;
}

}  // namespace

std::span<const config::DirectiveSpec> directives() { return kCacheDirectives; }

bool finalize_conf(config::Builder& b) {
  using namespace config;
  const CacheHttpConf& http = b.main->http.module<CacheHttpConf>();
  for (const NameRef& r : b.scratch.get<CacheBuildState>().zone_refs) {
    if (http.find_zone(r.name) == nullptr) {
      return b.fail(r.loc, absl::StrCat("\"proxy_cache\" zone ", quoted(r.name), " is unknown"));
    }
  }
  for (const NameRef& r : b.scratch.get<CacheBuildState>().purge_zone_refs) {
    if (http.find_zone(r.name) == nullptr) {
      return b.fail(r.loc, absl::StrCat("\"proxy_cache_purge\" zone ", quoted(r.name), " is unknown"));
    }
  }
  for (const auto& srv : b.main->http.servers) {
    if (!check_wildcard_purge(b, srv->base) || !check_wildcard_purges(b, srv->locations)) return false;
    hide_tag_fields(srv->base);
    hide_tag_fields(srv->locations);
  }
  return true;
}

}  // namespace kosoku::cache
