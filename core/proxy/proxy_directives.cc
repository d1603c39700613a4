// Reverse-proxy directives: nginx's ngx_http_upstream_module (`upstream { server; keepalive; hash; }`) and
// ngx_http_proxy_module (`proxy_pass`, `proxy_set_header`, timeouts, `proxy_next_upstream`, ...), filling
// proxy/proxy_conf.hh. Defaults and inheritance are nginx's: every proxy_* directive is inherited from the
// enclosing block when a block does not set it (lists as a whole), except `proxy_pass`, which acts only in
// the location where it is written.
//
// Response buffers (proxy_conf.hh has the semantics): `proxy_buffer_size SIZE` (4k), `proxy_buffers N SIZE`
// (8 4k), `proxy_busy_buffers_size SIZE` (2 × max of the two sizes = 8k). Checked once inheritance is done with
// nginx's texts ("there must be at least 2 "proxy_buffers"", ""proxy_busy_buffers_size" must be equal to or
// greater than ...", "... must be less than the size of all "proxy_buffers" minus one buffer"), at the
// file:line:col of the directive at fault (nginx names the end of the enclosing block).
//
// Addresses: `server` and `proxy_pass` take numeric IPv4/IPv6 addresses or host names, with an optional port
// (default 80). As nginx, names are resolved while the configuration loads (getaddrinfo, before any loop runs:
// nothing blocks a loop later), every address of a name becomes a server (IPv4 first, duplicates dropped), and
// a name that does not resolve is `host not found in upstream "NAME"` at its file:line:col. Nothing is
// resolved at run time.
//
// The `upstream` block's body is a context of its own (kCtxUpstream: its `server` is another row than the
// http-level `server` block). Names in `proxy_pass` are resolved once the whole
// file is read (finalize_conf, the module's finalize hook), because nginx allows an upstream block to
// follow the locations that use it; a `proxy_pass http://ADDR:PORT` without a block gets an implicit group of
// one server, shared by every proxy_pass naming the same address (nginx's ngx_http_upstream_add).
#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/values.hh"
#include "core/config/variables.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/tls/tls_client.hh"
#include "re2/re2.h"

namespace kosoku::proxy {

namespace {

using namespace config;  // the directive-table vocabulary: Builder, Scope, Directive, set_*, inherit

// One address of an upstream server.
struct Resolved {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

// Resolves a host name (nginx's ngx_inet_resolve_host: getaddrinfo with AF_UNSPEC and SOCK_STREAM; IPv4
// addresses first, duplicates dropped). Unlike nginx, without AI_ADDRCONFIG: glibc does not count loopback
// addresses for it, so on an appliance whose only interface is still down `localhost` would not resolve.
// False when the name does not resolve.
bool resolve_name(const std::string& host, uint16_t port, std::vector<Resolved>* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    // RFC 6761 §6.3: `localhost` is the loopback address even where nothing says so (an appliance image
    // without /etc/hosts).
    if (!absl::EqualsIgnoreCase(host, "localhost")) return false;
    Resolved r;
    auto* in4 = reinterpret_cast<sockaddr_in*>(&r.addr);
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r.len = sizeof(sockaddr_in);
    out->push_back(r);
    return true;
  }
  for (int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_family != family) continue;
      Resolved r;
      std::memcpy(&r.addr, ai->ai_addr, ai->ai_addrlen);
      r.len = ai->ai_addrlen;
      if (family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&r.addr)->sin_port = htons(port);
      } else {
        reinterpret_cast<sockaddr_in6*>(&r.addr)->sin6_port = htons(port);
      }
      bool dup = false;
      for (const Resolved& o : *out) dup = dup || same_sockaddr(o.addr, r.addr);
      if (!dup) out->push_back(r);
    }
  }
  freeaddrinfo(res);
  return !out->empty();
}

// Parses `ADDR[:PORT]`, `[V6][:PORT]` or `NAME[:PORT]` (port default 80) into its addresses (a name may have
// several). *numeric: the host was an address, not a name. False with *err ("host not found" for a name that
// does not resolve). Without `resolve` (LoadOptions::resolve_names off) a name is not looked up: it stands for
// 127.0.0.1, so untrusted text (the fuzzer) sends no DNS query and still reaches everything after resolution.
bool parse_upstream_address(std::string_view s, bool resolve, std::vector<Resolved>* out, bool* numeric,
                            std::string* err) {
  std::string_view host = s;
  std::string_view port;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) {
      *err = "invalid IPv6 address";
      return false;
    }
    host = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        *err = "invalid host";
        return false;
      }
      port = rest.substr(1);
      if (port.empty()) {
        *err = "invalid port";
        return false;
      }
    }
  } else {
    size_t colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      if (s.find(':') != colon) {
        *err = "invalid host";  // an IPv6 address must be bracketed
        return false;
      }
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
      if (port.empty()) {
        *err = "invalid port";
        return false;
      }
    }
  }
  uint16_t p = 80;
  if (!port.empty()) {
    auto v = parse_number(port, 65535);
    if (!v || *v == 0) {
      *err = "invalid port";
      return false;
    }
    p = static_cast<uint16_t>(*v);
  }
  out->clear();
  *numeric = true;
  std::string h(host);
  Resolved r;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&r.addr);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&r.addr);
  if (inet_pton(AF_INET, h.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(p);
    r.len = sizeof(sockaddr_in);
    out->push_back(r);
    return true;
  }
  if (inet_pton(AF_INET6, h.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(p);
    r.len = sizeof(sockaddr_in6);
    out->push_back(r);
    return true;
  }
  *numeric = false;
  if (!resolve && !h.empty() && h.find_first_of("/ \t") == std::string::npos) h = "127.0.0.1";
  if (h.empty() || h.find_first_of("/ \t") != std::string::npos || !resolve_name(h, p, out)) {
    *err = "host not found";
    return false;
  }
  return true;
}

// `server ADDRESS [weight=N] [max_fails=N] [fail_timeout=TIME] [backup] [down];`
bool upstream_server(Builder& b, UpstreamConf& up, const Directive& d) {
  if (d.args.empty()) return b.fail(d.loc, "invalid number of arguments in \"server\" directive");
  UpstreamServerConf srv;
  srv.name = d.args[0].value;
  std::string err;
  if (srv.name.rfind("unix:", 0) == 0) {
    return b.fail(d.args[0].loc, absl::StrCat("unix domain sockets are not supported in upstream ", quoted(up.name)));
  }
  std::vector<Resolved> addrs;
  bool numeric = true;
  if (!parse_upstream_address(srv.name, b.resolve_names, &addrs, &numeric, &err)) {
    return b.fail(d.args[0].loc, absl::StrCat(err, " in upstream ", quoted(srv.name)));
  }
  for (size_t i = 1; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    bool ok = true;
    if (v.rfind("weight=", 0) == 0) {
      auto n = parse_number(v.substr(7), 1000000);
      ok = n && *n > 0;
      if (ok) srv.weight = static_cast<uint32_t>(*n);
    } else if (v.rfind("max_fails=", 0) == 0) {
      auto n = parse_number(v.substr(10), 1000000);
      ok = n.has_value();
      if (ok) srv.max_fails = static_cast<uint32_t>(*n);
    } else if (v.rfind("fail_timeout=", 0) == 0) {
      auto t = parse_time_sec(v.substr(13));
      ok = t.has_value();
      if (ok) srv.fail_timeout_ms = *t * 1000;
    } else if (v == "backup") {
      srv.backup = true;
    } else if (v == "down") {
      srv.down = true;
    } else {
      ok = false;
    }
    if (!ok) return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
  }
  // Every address of a name is a server with the same parameters (nginx's peers of one `server` line).
  for (const Resolved& r : addrs) {
    UpstreamServerConf one = srv;
    one.addr = r.addr;
    one.addr_len = r.len;
    one.addr_text = format_sockaddr(r.addr);
    up.servers.push_back(std::move(one));
  }
  return true;
}

// The upstream block being read (loading only; Builder::scratch).
struct ProxyBuildState {
  static constexpr ConfLevel kLevel = ConfLevel::kMain;
  UpstreamConf* upstream = nullptr;
};

UpstreamConf& current_upstream(Builder& b) { return *b.scratch.get<ProxyBuildState>().upstream; }

// `server ADDRESS [weight=N] ...;` in an upstream block.
bool set_upstream_server(Builder& b, Scope&, const Directive& d) { return upstream_server(b, current_upstream(b), d); }

// `keepalive N;` / `keepalive_requests N;` (N >= 1) in an upstream block.
template <uint32_t UpstreamConf::*M>
bool set_upstream_number(Builder& b, Scope&, const Directive& d) {
  auto n = parse_number(d.args[0].value);
  if (!n || *n == 0) return fail_invalid_value(b, d, 0);
  current_upstream(b).*M = static_cast<uint32_t>(*n);
  return true;
}

// `keepalive_timeout TIME;` in an upstream block.
bool set_upstream_keepalive_timeout(Builder& b, Scope&, const Directive& d) {
  auto t = parse_time_ms(d.args[0].value);
  if (!t) return fail_invalid_value(b, d, 0);
  current_upstream(b).keepalive_timeout_ms = *t;
  return true;
}

// `hash KEY [consistent];` in an upstream block.
bool set_upstream_hash(Builder& b, Scope&, const Directive& d) {
  UpstreamConf& up = current_upstream(b);
  if (d.args.size() == 2 && d.args[1].value != "consistent") {
    return b.fail(d.args[1].loc, absl::StrCat("invalid parameter ", quoted(d.args[1].value)));
  }
  up.hash_key = compile_arg(b, d.args[0]);
  if (!up.hash_key) return false;
  up.hash_key_text = d.args[0].value;
  up.hash_consistent = d.args.size() == 2;
  return true;
}

// `upstream NAME { server ...; keepalive N; keepalive_timeout T; keepalive_requests N; hash KEY [consistent]; }`:
// the body is its own context (kCtxUpstream), read by the generic walk.
bool set_upstream(Builder& b, Scope& s, const Directive& d) {
  auto up = std::make_unique<UpstreamConf>();
  up->name = d.args[0].value;
  up->file = d.loc.file;
  up->line = d.loc.line;
  if (up->name.empty() || up->name.find_first_of("/:$ ") != std::string::npos) return fail_invalid_value(b, d, 0);
  for (const auto& other : s.main->http.module<ProxyHttpConf>().upstreams) {
    if (other->name == up->name) return b.fail(d.args[0].loc, absl::StrCat("duplicate upstream ", quoted(up->name)));
  }
  Seen seen;
  Scope inner;
  inner.ctx = kCtxUpstream;
  inner.main = s.main;
  inner.seen = &seen;
  b.scratch.get<ProxyBuildState>().upstream = up.get();
  bool ok = b.walk(inner, d.children);
  b.scratch.get<ProxyBuildState>().upstream = nullptr;
  if (!ok) return false;
  if (up->servers.empty()) return b.fail(d.loc, absl::StrCat("no servers are inside upstream ", quoted(up->name)));
  if (up->hash_key) {
    for (const UpstreamServerConf& srv : up->servers) {
      if (srv.backup) {
        return b.fail(d.loc, absl::StrCat("\"backup\" servers are not supported with \"hash\" in upstream ",
                                          quoted(up->name), " (nginx: the hash method does not use them)"));
      }
    }
  }
  s.main->http.module<ProxyHttpConf>().upstreams.push_back(std::move(up));
  return true;
}

// `proxy_pass http://NAME[:PORT][/URI];` (or https://: TLS to the origin, core/tls/tls_client.hh)
bool set_proxy_pass(Builder& b, Scope& s, const Directive& d) {
  ProxyLocationConf& p = s.loc->module<ProxyLocationConf>();
  std::string_view url = d.args[0].value;
  p.pass_ssl = absl::StartsWithIgnoreCase(url, "https://");
  if (!p.pass_ssl && !absl::StartsWithIgnoreCase(url, "http://")) {
    return b.fail(d.args[0].loc, "invalid URL prefix in \"proxy_pass\"");
  }
  if (url.find('$') != std::string_view::npos) {
    return b.fail(d.args[0].loc, "variables in \"proxy_pass\" are not supported");
  }
  std::string_view rest = url.substr(p.pass_ssl ? 8 : 7);
  if (absl::StartsWithIgnoreCase(rest, "unix:")) {
    return b.fail(d.args[0].loc, "unix domain sockets are not supported in \"proxy_pass\" (kosoku proxies to TCP "
                                 "upstreams only)");
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.find('@') != std::string_view::npos) {
    return b.fail(d.args[0].loc, "no host in \"proxy_pass\"");
  }
  p.pass = true;
  p.pass_url = url;
  p.pass_file = d.args[0].loc.file;
  p.pass_line = d.args[0].loc.line;
  p.pass_col = d.args[0].loc.col;
  p.pass_has_uri = slash != std::string_view::npos;
  p.pass_uri = p.pass_has_uri ? std::string(rest.substr(slash)) : std::string();
  // Host and port: "[v6]:port", "name:port", "name".
  std::string_view host = authority;
  std::string_view port;
  if (authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return b.fail(d.args[0].loc, "invalid host in \"proxy_pass\"");
    host = authority.substr(0, close + 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return b.fail(d.args[0].loc, "invalid host in \"proxy_pass\"");
      port = authority.substr(close + 2);
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  p.pass_host = host;
  p.pass_port = 0;
  if (!port.empty() || authority.back() == ':') {
    auto v = parse_number(port, 65535);
    if (!v || *v == 0) return b.fail(d.args[0].loc, "invalid port in \"proxy_pass\"");
    p.pass_port = static_cast<uint16_t>(*v);
  }
  const uint16_t default_port = p.pass_ssl ? 443 : 80;
  p.proxy_port = p.pass_port ? p.pass_port : default_port;
  p.proxy_host =
      p.pass_port && p.pass_port != default_port ? absl::StrCat(host, ":", p.pass_port) : std::string(host);
  p.ssl_name = std::string(host[0] == '[' ? host.substr(1, host.size() - 2) : host);
  using Match = LocationConf::Match;
  if (p.pass_has_uri && (s.loc->match == Match::kRegex || s.loc->match == Match::kRegexCaseless)) {
    return b.fail(d.loc,
                  "\"proxy_pass\" cannot have URI part in location given by regular expression, or inside named "
                  "location, or inside \"if\" statement, or inside \"limit_except\" block");
  }
  return true;
}

// `proxy_set_header NAME VALUE;`
bool set_proxy_set_header(Builder& b, Scope& s, const Directive& d) {
  ProxySetHeader h;
  h.name = d.args[0].value;
  if (h.name.empty() || h.name.find_first_of(" \t\r\n:") != std::string::npos) return fail_invalid_value(b, d, 0);
  h.value = d.args[1].value;
  if (h.value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) return fail_invalid_value(b, d, 1);
  // A field of the request sent upstream: control bytes in variables become SP (variables.hh, kField).
  h.value_tpl = compile_arg(b, d.args[1], LogEscape::kField);
  if (!h.value_tpl) return false;
  s.loc->module<ProxyLocationConf>().set_header.push_back(std::move(h));
  return true;
}

bool set_proxy_http_version(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v == "1.0") {
    s.loc->module<ProxyLocationConf>().http_version_minor = 0;
  } else if (v == "1.1") {
    s.loc->module<ProxyLocationConf>().http_version_minor = 1;
  } else {
    return fail_invalid_value(b, d, 0);
  }
  return true;
}

// `proxy_next_upstream error | timeout | invalid_header | http_500 | ... | non_idempotent | off ...;`
bool set_proxy_next_upstream(Builder& b, Scope& s, const Directive& d) {
  uint32_t mask = 0;
  bool off = false;
  for (size_t i = 0; i < d.args.size(); ++i) {
    const std::string& v = d.args[i].value;
    static constexpr std::pair<std::string_view, uint32_t> kNames[] = {
        {"error", proxy::kNextError},       {"timeout", proxy::kNextTimeout},
        {"invalid_header", proxy::kNextInvalidHeader},
        {"http_500", proxy::kNextHttp500},  {"http_502", proxy::kNextHttp502},
        {"http_503", proxy::kNextHttp503},  {"http_504", proxy::kNextHttp504},
        {"http_403", proxy::kNextHttp403},  {"http_404", proxy::kNextHttp404},
        {"http_429", proxy::kNextHttp429},  {"non_idempotent", proxy::kNextNonIdempotent},
        {"updating", 0},  // meaningful with proxy_cache_use_stale only
    };
    bool found = false;
    for (const auto& [name, bit] : kNames) {
      if (v == name) {
        mask |= bit;
        found = true;
      }
    }
    if (v == "off") {
      off = true;
      found = true;
    }
    if (!found) return fail_invalid_value(b, d, i);
  }
  if (off && d.args.size() > 1) return fail_invalid_value(b, d, 0);
  s.loc->module<ProxyLocationConf>().next_upstream = off ? 0 : mask;
  return true;
}

// A literal template (no variables).
std::shared_ptr<const Template> literal(const std::string& text) {
  Template t;
  t.segments.push_back(TemplateSegment{false, nullptr, text});
  return std::make_shared<const Template>(std::move(t));
}

// nginx's `proxy_redirect default` for a location named `location_name` with proxy_pass `p`.
proxy::ProxyRedirect default_redirect(const ProxyLocationConf& p, const std::string& location_name) {
  proxy::ProxyRedirect r;
  r.redirect = p.pass_has_uri ? p.pass_url : absl::StrCat(p.pass_url, "/");
  r.replacement = p.pass_has_uri ? location_name : std::string("/");
  r.redirect_tpl = literal(r.redirect);
  r.replacement_tpl = literal(r.replacement);
  return r;
}

// `proxy_redirect default | off | REDIRECT REPLACEMENT;` (nginx's ngx_http_proxy_redirect). `default` stands
// for `proxy_redirect PROXY_PASS_URL LOCATION_NAME` (or `URL/ /` when proxy_pass has no URI part) and must
// follow proxy_pass in its location.
bool set_proxy_redirect(Builder& b, Scope& s, const Directive& d) {
  ProxyLocationConf& p = s.loc->module<ProxyLocationConf>();
  const std::string& first = d.args[0].value;
  if (d.args.size() == 1 && first == "off") {
    p.redirect_off = true;
    p.redirect.clear();
    return true;
  }
  p.redirect_off = false;
  proxy::ProxyRedirect r;
  if (d.args.size() == 1) {
    if (first != "default") return b.fail(d.loc, "invalid number of arguments in \"proxy_redirect\" directive");
    if ((s.ctx & kCtxLocation) == 0 || !p.pass) {
      return b.fail(d.loc, "\"proxy_redirect default\" should be placed after the \"proxy_pass\" directive");
    }
    p.redirect.push_back(default_redirect(p, s.loc->pattern));
    return true;
  }
  r.redirect = first;
  r.replacement = d.args[1].value;
  if (r.replacement.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
    return fail_invalid_value(b, d, 1);
  }
  if (!first.empty() && first[0] == '~') {
    const bool caseless = first.size() > 1 && first[1] == '*';
    re2::RE2::Options o;
    o.set_log_errors(false);
    o.set_case_sensitive(!caseless);
    auto re = std::make_shared<const re2::RE2>(first.substr(caseless ? 2 : 1), o);
    if (!re->ok()) {
      return b.fail(d.args[0].loc, absl::StrCat("invalid regex ", quoted(first), ": ", re->error()));
    }
    r.regex = std::move(re);
  } else {
    // Both are URIs of a Location or Refresh field: variables percent-encoded (variables.hh, kUri), so the
    // pattern compares with the upstream's encoded URI and the replacement cannot split the field.
    r.redirect_tpl = compile_arg(b, d.args[0], LogEscape::kUri);
    r.replacement_tpl = compile_arg(b, d.args[1], LogEscape::kUri);
    if (!r.redirect_tpl || !r.replacement_tpl) return false;
  }
  p.redirect.push_back(std::move(r));
  return true;
}

// Upper bound of proxy_buffer_size, N × SIZE of proxy_buffers and proxy_busy_buffers_size (bytes).
constexpr uint64_t kMaxProxyBuffers = 64u << 20;

proxy::DirectivePos pos_of(const Directive& d) { return proxy::DirectivePos{d.loc.file, d.loc.line, d.loc.col}; }

// `proxy_buffers N SIZE;`
bool set_proxy_buffers(Builder& b, Scope& s, const Directive& d) {
  auto n = parse_number(d.args[0].value);
  auto size = parse_size(d.args[1].value);
  if (!n || *n == 0 || !size || *size == 0 || *n > kMaxProxyBuffers / *size) return fail_invalid_value(b, d, 0);
  if (*n < 2) return b.fail(d.args[0].loc, "there must be at least 2 \"proxy_buffers\"");
  ProxyLocationConf& p = s.loc->module<ProxyLocationConf>();
  p.buffers_num = static_cast<uint32_t>(*n);
  p.buffers_size = *size;
  p.buffers_at = pos_of(d);
  return true;
}

// `proxy_pass_header NAME;` / `proxy_hide_header NAME;` (lists; lower-cased).
template <std::vector<std::string> ProxyLocationConf::*M>
bool set_proxy_name_list(Builder& b, Scope& s, const Directive& d) {
  std::string name = absl::AsciiStrToLower(d.args[0].value);
  if (name.empty() || name.find_first_of(" \t\r\n:") != std::string::npos) return fail_invalid_value(b, d, 0);
  (s.loc->module<ProxyLocationConf>().*M).push_back(std::move(name));
  return true;
}

constexpr DirectiveSpec kProxyDirectives[] = {
    {.name = "upstream", .contexts = kCtxHttp, .args = kTake1, .flags = kBlock | kMulti, .set = set_upstream},
    {.name = "server", .contexts = kCtxUpstream, .args = k1More, .flags = kMulti, .set = set_upstream_server},
    {.name = "keepalive", .contexts = kCtxUpstream, .args = kTake1,
     .set = set_upstream_number<&UpstreamConf::keepalive>},
    {.name = "keepalive_timeout", .contexts = kCtxUpstream, .args = kTake1, .set = set_upstream_keepalive_timeout},
    {.name = "keepalive_requests", .contexts = kCtxUpstream, .args = kTake1,
     .set = set_upstream_number<&UpstreamConf::keepalive_requests>},
    {.name = "hash", .contexts = kCtxUpstream, .args = kTake12, .set = set_upstream_hash},
    {.name = "proxy_pass", .contexts = kCtxLocation, .args = kTake1, .set = set_proxy_pass},
    {.name = "proxy_set_header", .contexts = kCtxHttpAny, .args = kTake2, .flags = kMulti,
     .set = set_proxy_set_header, .merge_loc = inherit<&ProxyLocationConf::set_header>},
    {.name = "proxy_http_version", .contexts = kCtxHttpAny, .args = kTake1, .set = set_proxy_http_version,
     .merge_loc = inherit<&ProxyLocationConf::http_version_minor>, .default_value = "1.0"},
    {.name = "proxy_connect_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_msec<&ProxyLocationConf::connect_timeout_ms>,
     .merge_loc = inherit<&ProxyLocationConf::connect_timeout_ms>, .default_value = "60s"},
    {.name = "proxy_read_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_msec<&ProxyLocationConf::read_timeout_ms>,
     .merge_loc = inherit<&ProxyLocationConf::read_timeout_ms>, .default_value = "60s"},
    {.name = "proxy_send_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_msec<&ProxyLocationConf::send_timeout_ms>,
     .merge_loc = inherit<&ProxyLocationConf::send_timeout_ms>, .default_value = "60s"},
    {.name = "proxy_ignore_client_abort", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ProxyLocationConf::ignore_client_abort>,
     .merge_loc = inherit<&ProxyLocationConf::ignore_client_abort>, .default_value = "off"},
    {.name = "proxy_socket_keepalive", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ProxyLocationConf::socket_keepalive>,
     .merge_loc = inherit<&ProxyLocationConf::socket_keepalive>, .default_value = "off"},
    {.name = "proxy_buffering", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ProxyLocationConf::buffering>,
     .merge_loc = inherit<&ProxyLocationConf::buffering>, .default_value = "on"},
    {.name = "proxy_buffer_size", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto v = parse_size(d.args[0].value);
       if (!v || *v < 64 || *v > kMaxProxyBuffers) return fail_invalid_value(b, d, 0);
       s.loc->module<ProxyLocationConf>().buffer_size = *v;
       s.loc->module<ProxyLocationConf>().buffer_size_at = pos_of(d);
       return true;
     },
     .merge_loc = inherit<&ProxyLocationConf::buffer_size, &ProxyLocationConf::buffer_size_at>,
     .default_value = "4k"},
    {.name = "proxy_buffers", .contexts = kCtxHttpAny, .args = kTake2, .set = set_proxy_buffers,
     .merge_loc = inherit<&ProxyLocationConf::buffers_num, &ProxyLocationConf::buffers_size,
                                &ProxyLocationConf::buffers_at>,
     .default_value = "8 4k"},
    {.name = "proxy_busy_buffers_size", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto v = parse_size(d.args[0].value);
       if (!v || *v == 0 || *v > kMaxProxyBuffers) return fail_invalid_value(b, d, 0);
       s.loc->module<ProxyLocationConf>().busy_buffers_size = *v;
       s.loc->module<ProxyLocationConf>().busy_buffers_at = pos_of(d);
       return true;
     },
     .merge_loc = inherit<&ProxyLocationConf::busy_buffers_size, &ProxyLocationConf::busy_buffers_at>,
     .default_value = "8k"},
    {.name = "proxy_next_upstream", .contexts = kCtxHttpAny, .args = k1More, .set = set_proxy_next_upstream,
     .merge_loc = inherit<&ProxyLocationConf::next_upstream>, .default_value = "error timeout"},
    {.name = "proxy_next_upstream_tries", .contexts = kCtxHttpAny, .args = kTake1,
     .set = [](Builder& b, Scope& s, const Directive& d) {
       auto v = parse_number(d.args[0].value);
       if (!v) return fail_invalid_value(b, d, 0);
       s.loc->module<ProxyLocationConf>().next_upstream_tries = static_cast<uint32_t>(*v);
       return true;
     },
     .merge_loc = inherit<&ProxyLocationConf::next_upstream_tries>, .default_value = "0"},
    {.name = "proxy_next_upstream_timeout", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_msec<&ProxyLocationConf::next_upstream_timeout_ms>,
     .merge_loc = inherit<&ProxyLocationConf::next_upstream_timeout_ms>, .default_value = "0"},
    {.name = "proxy_pass_request_headers", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ProxyLocationConf::pass_request_headers>,
     .merge_loc = inherit<&ProxyLocationConf::pass_request_headers>, .default_value = "on"},
    {.name = "proxy_pass_request_body", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ProxyLocationConf::pass_request_body>,
     .merge_loc = inherit<&ProxyLocationConf::pass_request_body>, .default_value = "on"},
    {.name = "proxy_pass_header", .contexts = kCtxHttpAny, .args = kTake1, .flags = kMulti,
     .set = set_proxy_name_list<&ProxyLocationConf::pass_header>,
     .merge_loc = inherit<&ProxyLocationConf::pass_header>},
    {.name = "proxy_hide_header", .contexts = kCtxHttpAny, .args = kTake1, .flags = kMulti,
     .set = set_proxy_name_list<&ProxyLocationConf::hide_header>,
     .merge_loc = inherit<&ProxyLocationConf::hide_header>},
    {.name = "proxy_redirect", .contexts = kCtxHttpAny, .args = kTake12, .flags = kMulti, .set = set_proxy_redirect,
     .merge_loc = [](LocationConf& c, const LocationConf& p) {
       c.module<ProxyLocationConf>().redirect = p.module<ProxyLocationConf>().redirect;
       c.module<ProxyLocationConf>().redirect_off = p.module<ProxyLocationConf>().redirect_off;
     }},  // default: `default`, built per location at load (it needs the location's proxy_pass)
};

// ---- after the walk ----

// nginx's ngx_http_proxy_headers defaults (the empty ones only remove the client's field) and
// ngx_http_proxy_hide_headers.
constexpr std::pair<std::string_view, std::string_view> kDefaultHeaders[] = {
    {"Host", "$proxy_host"}, {"Connection", "close"}, {"TE", ""},
    {"Keep-Alive", ""},      {"Expect", ""},          {"Upgrade", ""},
};
constexpr std::string_view kDefaultHidden[] = {
    "date", "server", "x-pad", "x-accel-expires", "x-accel-redirect", "x-accel-limit-rate", "x-accel-buffering",
    "x-accel-charset",
};

void build_effective(LocationConf& loc) {
  ProxyLocationConf& p = loc.module<ProxyLocationConf>();
  p.headers = p.set_header;
  for (const auto& [name, value] : kDefaultHeaders) {
    bool named = false;
    for (const ProxySetHeader& h : p.set_header) named = named || absl::EqualsIgnoreCase(h.name, name);
    if (named) continue;
    ProxySetHeader h;
    h.name = std::string(name);
    h.value = std::string(value);
    Template t = compile(value, SourceLoc{"<built-in>", 0, 0}, nullptr);
    t.escape = LogEscape::kField;  // a request field, as proxy_set_header's
    h.value_tpl = std::make_shared<const Template>(std::move(t));
    p.headers.push_back(std::move(h));
  }
  p.hidden.clear();
  auto hide_unless_passed = [&](std::string_view h) {
    bool passed = false;
    for (const std::string& n : p.pass_header) passed = passed || n == h;
    if (!passed) p.hidden.emplace_back(h);
  };
  for (std::string_view h : kDefaultHidden) hide_unless_passed(h);
  for (const std::string& h : p.module_hidden) hide_unless_passed(h);
  for (const std::string& n : p.hide_header) p.hidden.push_back(n);
  // nginx: without proxy_redirect lines (and without `off`), `proxy_redirect default` applies.
  if (p.pass && p.redirect.empty() && !p.redirect_off) p.redirect.push_back(default_redirect(p, loc.pattern));
}

// The response buffer sizes after inheritance (nginx's ngx_http_proxy_merge_loc_conf checks, same texts): the
// default proxy_busy_buffers_size, then max(proxy_buffer_size, SIZE) ≤ busy ≤ (N − 1) × SIZE. An error names
// the directive that made the combination wrong: proxy_busy_buffers_size when written, else the larger of
// proxy_buffer_size / proxy_buffers.
bool check_buffers(Builder& b, LocationConf& loc) {
  ProxyLocationConf& p = loc.module<ProxyLocationConf>();
  const uint64_t size = p.buffer_size > p.buffers_size ? p.buffer_size : p.buffers_size;
  const bool busy_written = p.busy_buffers_size != 0;
  if (!busy_written) p.busy_buffers_size = 2 * size;
  auto at = [&](std::initializer_list<const proxy::DirectivePos*> order) {
    for (const proxy::DirectivePos* d : order) {
      if (!d->file.empty()) return SourceLoc{d->file, d->line, d->col};
    }
    return loc.loc;
  };
  const proxy::DirectivePos* larger = p.buffer_size > p.buffers_size ? &p.buffer_size_at : &p.buffers_at;
  if (p.busy_buffers_size < size) {
    return b.fail(at({&p.busy_buffers_at, larger, &p.buffer_size_at, &p.buffers_at}),
                  "\"proxy_busy_buffers_size\" must be equal to or greater than the maximum of the value of "
                  "\"proxy_buffer_size\" and one of the \"proxy_buffers\"");
  }
  if (p.busy_buffers_size > (p.buffers_num - 1) * p.buffers_size) {
    return b.fail(at({busy_written ? &p.busy_buffers_at : larger, &p.buffers_at, &p.buffer_size_at}),
                  "\"proxy_busy_buffers_size\" must be less than the size of all \"proxy_buffers\" minus one buffer");
  }
  return true;
}

bool resolve_pass(Builder& b, LocationConf& loc) {
  ProxyLocationConf& p = loc.module<ProxyLocationConf>();
  if (!p.pass) return true;
  SourceLoc where{p.pass_file, p.pass_line, p.pass_col};
  if (p.pass_ssl) {
    const tls::ClientConf& c = loc.module<tls::ClientConf>();
    if (c.verify && c.trusted_certificate.empty()) {
      return b.fail(where, "no \"proxy_ssl_trusted_certificate\" for \"proxy_ssl_verify\"");
    }
    std::string err;
    SSL_CTX* ctx = tls::TlsClient::new_client_ctx(c, &err);
    if (ctx == nullptr) return b.fail(where, err);
    SSL_CTX_free(ctx);
    p.ssl = &c;
  }
  auto& ups = b.main->http.module<ProxyHttpConf>().upstreams;
  for (const auto& up : ups) {
    if (up->implicit || up->name != p.pass_host) continue;
    if (p.pass_port != 0) {
      return b.fail(where, absl::StrCat("upstream ", quoted(up->name), " may not have port ", p.pass_port));
    }
    p.upstream = up.get();
    return true;
  }
  // An address or a host name: one implicit group per distinct ADDR:PORT / NAME:PORT (nginx's
  // ngx_http_upstream_add), a name's group holding every address it resolves to.
  std::string text = absl::StrCat(p.pass_host, ":", p.proxy_port);
  std::vector<Resolved> addrs;
  bool numeric = true;
  std::string err;
  if (!parse_upstream_address(text, b.resolve_names, &addrs, &numeric, &err)) {
    if (err == "host not found") {
      return b.fail(where, absl::StrCat("host not found in upstream ", quoted(p.pass_host)));  // nginx: no port
    }
    return b.fail(where, absl::StrCat(err, " in upstream ", quoted(p.pass_url)));
  }
  for (const auto& up : ups) {
    if (!up->implicit) continue;
    if (numeric ? up->servers.size() == 1 && same_sockaddr(up->servers[0].addr, addrs[0].addr)
                : absl::EqualsIgnoreCase(up->name, text)) {
      p.upstream = up.get();
      return true;
    }
  }
  auto up = std::make_unique<UpstreamConf>();
  up->implicit = true;
  up->name = text;
  up->file = p.pass_file;
  up->line = p.pass_line;
  for (const Resolved& r : addrs) {
    UpstreamServerConf srv;
    srv.name = text;
    srv.addr = r.addr;
    srv.addr_len = r.len;
    srv.addr_text = format_sockaddr(r.addr);
    up->servers.push_back(std::move(srv));
  }
  p.upstream = up.get();
  ups.push_back(std::move(up));
  return true;
}

bool finalize_locations(Builder& b, std::vector<LocationConf>& locs) {
  for (LocationConf& l : locs) {
    build_effective(l);
    if (!check_buffers(b, l) || !resolve_pass(b, l) || !finalize_locations(b, l.locations)) return false;
  }
  return true;
}

}  // namespace

std::span<const config::DirectiveSpec> directives() { return kProxyDirectives; }

bool finalize_conf(config::Builder& b) {
  using namespace config;
  HttpConf& http = b.main->http;
  for (auto& srv : http.servers) {
    build_effective(srv->base);
    if (!check_buffers(b, srv->base) || !resolve_pass(b, srv->base) || !finalize_locations(b, srv->locations)) {
      return false;
    }
  }
  auto& upstreams = http.module<ProxyHttpConf>().upstreams;
  for (size_t i = 0; i < upstreams.size(); ++i) upstreams[i]->index = static_cast<uint32_t>(i);
  return true;
}

}  // namespace kosoku::proxy
