// HTTP structure directives (nginx's ngx_http_core_module): server, listen, server_name, location, types,
// and the server-level request-header settings.
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/variables.hh"
#include "re2/re2.h"

namespace kosoku::config {

namespace {

constexpr uint64_t kMaxListenBuffer = 1ull << 30;  // rcvbuf= / sndbuf=: 1g

bool set_server(Builder& b, Scope& s, const Directive& d) {
  auto node = std::make_unique<SrvNode>();
  node->conf->loc = d.loc;
  node->base.conf.loc = d.loc;
  Scope inner;
  inner.ctx = kCtxServer;
  inner.main = s.main;
  inner.srv = node->conf.get();
  inner.loc = &node->base.conf;
  inner.loc_node = &node->base;
  inner.srv_node = node.get();
  inner.seen = &node->base.seen;
  b.servers.push_back(std::move(node));
  return b.walk(inner, d.children);
}

// nginx's `so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]` value (after the '='): idle and interval are
// times in seconds ("30m"), count a number; empty fields keep the system's value, but not all three.
bool parse_so_keepalive(std::string_view v, ListenConf* l) {
  if (v == "on" || v == "off") {
    l->so_keepalive = v == "on" ? 1 : 0;
    return true;
  }
  std::string_view part[3];  // as nginx: trailing fields may be left out ("30m", "30m:10s")
  for (int i = 0; i < 3 && !v.empty(); ++i) {
    size_t colon = i < 2 ? v.find(':') : std::string_view::npos;
    part[i] = v.substr(0, colon);
    v = colon == std::string_view::npos ? std::string_view() : v.substr(colon + 1);
  }
  std::optional<uint64_t> idle, intvl, cnt;
  if (!part[0].empty() && !(idle = parse_time_sec(part[0]))) return false;
  if (!part[1].empty() && !(intvl = parse_time_sec(part[1]))) return false;
  if (!part[2].empty() && !(cnt = parse_number(part[2], 0x7fffffff))) return false;
  l->keepidle_s = static_cast<uint32_t>(idle.value_or(0));
  l->keepintvl_s = static_cast<uint32_t>(intvl.value_or(0));
  l->keepcnt = static_cast<uint32_t>(cnt.value_or(0));
  if (l->keepidle_s == 0 && l->keepintvl_s == 0 && l->keepcnt == 0) return false;
  l->so_keepalive = 1;
  return true;
}

// nginx's `rcvbuf=SIZE` / `sndbuf=SIZE` listen parameters (`arg` whole, `name` "rcvbuf"): a size (ngx_parse_size)
// of at most 1g (the setsockopt int, and RFC 7323's largest window). False after reporting the error.
bool parse_listen_buffer(Builder& b, const Arg& arg, std::string_view name, int* out) {
  std::string_view v = arg.value;
  auto n = parse_size(v.substr(name.size() + 1));
  if (!n) return b.fail(arg.loc, absl::StrCat("invalid ", name, " ", quoted(v)));
  if (*n > kMaxListenBuffer) return b.fail(arg.loc, absl::StrCat("invalid ", name, " ", quoted(v), ": more than 1g"));
  *out = static_cast<int>(*n);
  return true;
}

// `listen ADDR[:PORT] [default_server|default] [ssl] [http2] [reuseport] [deferred] [backlog=N] [rcvbuf=SIZE] [sndbuf=SIZE]
// [so_keepalive=...] [bind];`
bool set_listen(Builder& b, Scope& s, const Directive& d) {
  ListenConf l;
  std::string err;
  if (!parse_listen_address(d.args[0].value, &l, &err)) {
    return b.fail(d.args[0].loc, absl::StrCat(err, " in ", quoted(d.args[0].value), " of the \"listen\" directive"));
  }
  bool opts = false;
  for (size_t i = 1; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    if (v == "default_server" || v == "default") {
      l.default_server = true;
    } else if (v == "reuseport") {
      l.reuseport = true;
      opts = true;
    } else if (v == "deferred") {
      l.deferred = true;
      opts = true;
    } else if (v == "ssl") {
      l.ssl = true;  // TLS on this address (core/tls/); any listen line of the address sets it, as nginx
    } else if (v == "http2") {
      l.http2 = true;  // HTTP/2 on this address (core/http2/); the older form of `http2 on`
    } else if (v == "bind") {
      // Every ListenSocket is bound on its own address already (see conf.hh ListenSocket).
    } else if (v.rfind("backlog=", 0) == 0) {
      auto n = parse_number(v.substr(8), 0x7fffffff);
      if (!n || *n == 0) return b.fail(d.args[i].loc, absl::StrCat("invalid backlog ", quoted(v)));
      l.backlog = static_cast<int>(*n);
      opts = true;
    } else if (v.rfind("rcvbuf=", 0) == 0 || v.rfind("sndbuf=", 0) == 0) {
      bool rcv = v[0] == 'r';
      if (!parse_listen_buffer(b, d.args[i], rcv ? "rcvbuf" : "sndbuf", rcv ? &l.rcvbuf : &l.sndbuf)) return false;
      opts = true;
    } else if (v.rfind("so_keepalive=", 0) == 0) {
      if (!parse_so_keepalive(v.substr(13), &l)) {
        return b.fail(d.args[i].loc, absl::StrCat("invalid so_keepalive value: ", quoted(v.substr(13))));
      }
      opts = true;
    } else {
      return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
    }
  }
  for (const ListenConf& other : s.srv->listen) {
    if (same_sockaddr(other.addr, l.addr)) return b.fail(d.loc, absl::StrCat("a duplicate listen ", l.text));
  }
  s.srv->listen.push_back(std::move(l));
  s.srv_node->listen_locs.push_back(d.loc);
  s.srv_node->listen_opts.push_back(opts);
  return true;
}

// `server_name NAME...;` exact names, `*.example.com`, `.example.com`, `www.example.*`, `~REGEX`, `""`,
// `$hostname`. Non-regex names are lower-cased. Regexes are case-insensitive (nginx compiles server-name
// regexes with NGX_REGEX_CASELESS).
bool set_server_name(Builder& b, Scope& s, const Directive& d) {
  for (const Arg& a : d.args) {
    std::string v = a.value;
    if (!v.empty() && v[0] == '~') {
      auto re = compile_regex(b, std::string_view(v).substr(1), /*caseless=*/true, a.loc);
      if (!re) return false;
      s.srv->server_name_regex.push_back(std::move(re));
      s.srv->server_names.push_back(std::move(v));
      continue;
    }
    if (v == "$hostname") {
      char host[256] = {};
      if (::gethostname(host, sizeof(host) - 1) != 0) return fail_invalid_value(b, d, &a - d.args.data());
      v = host;
    }
    if (v == "*") return b.fail(a.loc, "\"server_name *\" is unsupported");
    bool bad = (v.size() >= 1 && v[0] == '*' && (v.size() < 3 || v[1] != '.')) || (v == ".");
    size_t star = v.find('*');
    if (star != std::string::npos) {
      bool head = star == 0;
      bool tail = star == v.size() - 1 && v.size() >= 3 && v[star - 1] == '.';
      if ((!head && !tail) || v.find('*', star + 1) != std::string::npos) bad = true;
    }
    if (v.size() >= 2 && v[0] == '.' && v.find('*') != std::string::npos) bad = true;
    if (v.find_first_of("/ \t") != std::string::npos) bad = true;
    if (bad) return b.fail(a.loc, absl::StrCat("server name ", quoted(v), " is invalid"));
    absl::AsciiStrToLower(&v);
    s.srv->server_names.push_back(std::move(v));
  }
  return true;
}

using Match = LocationConf::Match;

bool prefix_class(Match m) { return m == Match::kPrefix || m == Match::kPrefixNoRegex; }

// `location [=|^~|~|~*] URI { }` / `location =URI { }` (modifier glued, as nginx accepts).
bool set_location(Builder& b, Scope& s, const Directive& d) {
  Match m = Match::kPrefix;
  std::string pattern;
  SourceLoc ploc;
  if (d.args.size() == 2) {
    const std::string& mod = d.args[0].value;
    if (mod == "=") {
      m = Match::kExact;
    } else if (mod == "^~") {
      m = Match::kPrefixNoRegex;
    } else if (mod == "~") {
      m = Match::kRegex;
    } else if (mod == "~*") {
      m = Match::kRegexCaseless;
    } else {
      return b.fail(d.args[0].loc, absl::StrCat("invalid location modifier ", quoted(mod)));
    }
    pattern = d.args[1].value;
    ploc = d.args[1].loc;
  } else {
    std::string_view v = d.args[0].value;
    ploc = d.args[0].loc;
    if (v.rfind("=", 0) == 0) {
      m = Match::kExact;
      v.remove_prefix(1);
    } else if (v.rfind("^~", 0) == 0) {
      m = Match::kPrefixNoRegex;
      v.remove_prefix(2);
    } else if (v.rfind("~*", 0) == 0) {
      m = Match::kRegexCaseless;
      v.remove_prefix(2);
    } else if (v.rfind("~", 0) == 0) {
      m = Match::kRegex;
      v.remove_prefix(1);
    } else if (v.rfind("@", 0) == 0) {
      m = Match::kNamed;
      if (s.ctx != kCtxServer) {
        return b.fail(d.loc, absl::StrCat("named location ", quoted(v), " can be on the server level only"));
      }
      if (v.size() == 1) return b.fail(ploc, "invalid location: empty name");
    }
    pattern = std::string(v);
  }
  if (pattern.empty()) return b.fail(ploc, "invalid location: empty URI");
  if (s.ctx == kCtxLocation) {
    const LocationConf& parent = *s.loc;
    if (parent.match == Match::kNamed) {
      return b.fail(d.loc, absl::StrCat("location ", quoted(pattern), " could not be inside the named location ",
                                        quoted(parent.pattern)));
    }
    if (parent.match == Match::kExact) {
      return b.fail(d.loc, absl::StrCat("location ", quoted(pattern), " cannot be inside the exact location ",
                                        quoted(parent.pattern)));
    }
    bool is_regex = m == Match::kRegex || m == Match::kRegexCaseless;
    if (!is_regex && pattern.compare(0, parent.pattern.size(), parent.pattern) != 0) {
      return b.fail(d.loc, absl::StrCat("location ", quoted(pattern), " is outside location ", quoted(parent.pattern)));
    }
  }
  for (const auto& sibling : s.loc_node->children) {
    const LocationConf& o = sibling->conf;
    bool same_class = (m == Match::kExact && o.match == Match::kExact) || (prefix_class(m) && prefix_class(o.match)) ||
                      (m == Match::kNamed && o.match == Match::kNamed);
    if (same_class && o.pattern == pattern) {
      return b.fail(d.loc, absl::StrCat("duplicate location ", quoted(pattern)));
    }
  }
  auto node = std::make_unique<LocNode>();
  node->conf.match = m;
  node->conf.pattern = pattern;
  node->conf.loc = d.loc;
  if (m == Match::kRegex || m == Match::kRegexCaseless) {
    node->conf.regex = compile_regex(b, pattern, m == Match::kRegexCaseless, ploc);
    if (!node->conf.regex) return false;
    for (const auto& group : node->conf.regex->NamedCapturingGroups()) declare_capture_variable(group.first);
  }
  LocNode* raw = node.get();
  s.loc_node->children.push_back(std::move(node));
  Scope inner = s;
  inner.ctx = kCtxLocation;
  inner.loc = &raw->conf;
  inner.loc_node = raw;
  inner.seen = &raw->seen;
  return b.walk(inner, d.children);
}

// `types { MIME ext...; }` Several blocks in one context add up (`include mime.types;` followed by
// `types { application/wasm wasm; }` is common); a later extension wins with nginx's warning.
bool set_types(Builder& b, Scope& s, const Directive& d) {
  auto m = std::make_shared<MimeTypes>();
  if (s.seen->has("types") && s.loc->types) *m = *s.loc->types;
  for (const Directive& t : d.children) {
    if (t.block) return b.fail(t.loc, absl::StrCat("directive ", quoted(t.name), " is not terminated by \";\""));
    for (const Arg& a : t.args) {
      std::string ext = absl::AsciiStrToLower(a.value);
      auto [it, inserted] = m->try_emplace(ext, t.name);
      if (!inserted && it->second != t.name) {
        b.warn(a.loc, absl::StrCat("duplicate extension ", quoted(ext), ", content type: ", quoted(t.name),
                                   ", previous content type: ", quoted(it->second)));
        it->second = t.name;
      }
    }
  }
  s.loc->types = std::move(m);
  return true;
}

// `large_client_header_buffers NUMBER SIZE;`
bool set_large_buffers(Builder& b, Scope& s, const Directive& d) {
  auto n = parse_number(d.args[0].value, 1024);
  if (!n || *n == 0) return fail_invalid_value(b, d, 0);
  auto size = parse_size(d.args[1].value);
  if (!size || *size == 0 || *size > (64u << 20)) return fail_invalid_value(b, d, 1);
  s.srv->large_client_header_buffers_num = static_cast<uint32_t>(*n);
  s.srv->large_client_header_buffers_size = *size;
  return true;
}

// `client_header_buffer_size SIZE;` (at least 1 byte)
bool set_header_buffer(Builder& b, Scope& s, const Directive& d) {
  auto size = parse_size(d.args[0].value);
  if (!size || *size == 0 || *size > (64u << 20)) return fail_invalid_value(b, d, 0);
  s.srv->client_header_buffer_size = *size;
  return true;
}

constexpr DirectiveSpec kHttpServerDirectives[] = {
    {.name = "server", .contexts = kCtxHttp, .args = kNoArgs, .flags = kBlock | kMulti, .set = set_server},
    {.name = "listen", .contexts = kCtxServer, .args = k1More, .flags = kMulti, .set = set_listen},
    {.name = "server_name", .contexts = kCtxServer, .args = k1More, .flags = kMulti, .set = set_server_name},
    {.name = "location", .contexts = kCtxServer | kCtxLocation, .args = kTake12, .flags = kBlock | kMulti,
     .set = set_location},
    {.name = "types", .contexts = kCtxHttpAny, .args = kNoArgs, .flags = kBlock | kMulti | kDataBlock, .set = set_types,
     .merge_loc = inherit<&LocationConf::types>},
    {.name = "client_header_timeout", .contexts = kCtxHttp | kCtxServer, .args = kTake1,
     .set = set_msec<&ServerConf::client_header_timeout_ms>,
     .merge_srv = inherit<&ServerConf::client_header_timeout_ms>, .default_value = "60s"},
    {.name = "client_header_buffer_size", .contexts = kCtxHttp | kCtxServer, .args = kTake1, .set = set_header_buffer,
     .merge_srv = inherit<&ServerConf::client_header_buffer_size>, .default_value = "1k"},
    {.name = "large_client_header_buffers", .contexts = kCtxHttp | kCtxServer, .args = kTake2,
     .set = set_large_buffers,
     .merge_srv =
         [](ServerConf& c, const ServerConf& p) {
           c.large_client_header_buffers_num = p.large_client_header_buffers_num;
           c.large_client_header_buffers_size = p.large_client_header_buffers_size;
         },
     .default_value = "4 8k"},
    {.name = "max_headers", .contexts = kCtxHttp | kCtxServer, .args = kTake1,
     .set = set_number<&ServerConf::max_headers, 0>, .merge_srv = inherit<&ServerConf::max_headers>,
     .default_value = "1000"},
};

}  // namespace

std::span<const DirectiveSpec> http_server_directives() { return kHttpServerDirectives; }

}  // namespace kosoku::config
