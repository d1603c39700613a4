// Configuration of the reverse proxy (nginx's ngx_http_upstream_module and ngx_http_proxy_module), held in the
// immutable config tree by module (config/module_conf.hh): `http.module<ProxyHttpConf>()` (the upstream groups)
// and `loc.module<ProxyLocationConf>()` (the proxy_* directives). The directive table that fills these structs
// is proxy/proxy_directives.cc; the run-time side is proxy/upstream.hh and proxy/proxy_handler.hh.
// Durations are milliseconds, sizes bytes, as everywhere in the config tree.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/module_conf.hh"

namespace kosoku::tls {
struct ClientConf;
}  // namespace kosoku::tls

namespace kosoku::config {
struct Template;  // config/variables.hh
class Builder;
struct DirectiveSpec;
struct Module;
struct Variable;
}
namespace re2 {
class RE2;
}

namespace kosoku::proxy {

/// `server ADDRESS [weight=N] [max_fails=N] [fail_timeout=TIME] [backup] [down];` in an upstream block.
/// ADDRESS is a numeric IPv4/IPv6 address or a host name, with an optional port (default 80). As nginx, a name
/// is resolved once, when the configuration loads (getaddrinfo; IPv4 addresses first), and each of its
/// addresses becomes a server of its own with the same parameters; a name that does not resolve fails the
/// configuration. Nothing is resolved at run time.
struct UpstreamServerConf {
  std::string name;               // ADDRESS as written ("127.0.0.1:8081"): the ketama points hash it (nginx)
  sockaddr_storage addr{};        // port in network order
  socklen_t addr_len = 0;
  std::string addr_text;          // normalised "ADDR:PORT" / "[V6]:PORT" for logs
  uint32_t weight = 1;
  uint32_t max_fails = 1;         // 0: never marked unavailable
  uint64_t fail_timeout_ms = 10000;
  bool backup = false;
  bool down = false;
};

/// `upstream NAME { ... }` (http), or the implicit group nginx makes for `proxy_pass http://ADDR:PORT`.
struct UpstreamConf {
  std::string name;               // block name, or "ADDR:PORT" for an implicit group
  bool implicit = false;
  uint32_t index = 0;             // position in ProxyHttpConf::upstreams (per-core run-time tables)
  std::vector<UpstreamServerConf> servers;  // file order; backups included (flagged)
  uint32_t keepalive = 0;         // `keepalive N`: idle connections cached per core; 0: none
  uint64_t keepalive_timeout_ms = 60000;  // `keepalive_timeout T` (idle time in the cache)
  uint32_t keepalive_requests = 1000;     // `keepalive_requests N` per cached connection
  std::shared_ptr<const config::Template> hash_key;  // `hash KEY [consistent]`; null: round robin
  std::string hash_key_text;
  bool hash_consistent = false;   // ketama: 160 points per unit of weight
  std::string file;               // where the block (or the proxy_pass making it) was written
  int line = 0;

  /// The group's name as nginx reports it when no server is usable ($upstream_addr after "no live
  /// upstreams"): the block name, or the host of an implicit group's "HOST:PORT" (nginx's us->host).
  std::string_view peers_name() const {
    std::string_view n = name;
    if (implicit) {
      if (size_t colon = n.rfind(':'); colon != std::string_view::npos) n = n.substr(0, colon);
    }
    return n;
  }
};

struct ProxyHttpConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  std::vector<std::shared_ptr<UpstreamConf>> upstreams;  // explicit blocks first, then implicit groups
};

/// `proxy_set_header NAME VALUE;` VALUE may contain variables; an empty expansion removes the field.
struct ProxySetHeader {
  std::string name;
  std::string value;
  std::shared_ptr<const config::Template> value_tpl;  // never null
};

/// `proxy_redirect REDIRECT REPLACEMENT;` (or `default`, expanded when it is read): rewrites the Location and
/// Refresh fields of upstream responses (nginx's ngx_http_proxy_rewrite_*). Text form: a field value (for
/// Refresh, the part after "url=") that starts with REDIRECT (case-sensitive, variables expanded) gets that
/// prefix replaced by REPLACEMENT (variables expanded). Regex form (`~` / `~*`): the value is searched with the
/// regex and, on a match, replaced whole by REPLACEMENT with $1..$9 taken from the captures.
struct ProxyRedirect {
  std::string redirect;                               // text form: as written
  std::shared_ptr<const config::Template> redirect_tpl;  // text form; never null there
  std::shared_ptr<const re2::RE2> regex;              // regex form
  std::string replacement;                            // as written
  std::shared_ptr<const config::Template> replacement_tpl;  // text form
};

/// Where a directive was written (config::SourceLoc's fields; this header cannot include config/conf.hh), for
/// errors found once inheritance is done. Empty file: not written (the default).
struct DirectivePos {
  std::string file;
  int line = 0;
  int col = 0;
};

/// `proxy_next_upstream` conditions (nginx's NGX_HTTP_UPSTREAM_FT_*).
enum NextUpstream : uint32_t {
  kNextError = 1u << 0,
  kNextTimeout = 1u << 1,
  kNextInvalidHeader = 1u << 2,
  kNextHttp500 = 1u << 3,
  kNextHttp502 = 1u << 4,
  kNextHttp503 = 1u << 5,
  kNextHttp504 = 1u << 6,
  kNextHttp403 = 1u << 7,
  kNextHttp404 = 1u << 8,
  kNextHttp429 = 1u << 9,
  kNextNonIdempotent = 1u << 10,
};

struct ProxyLocationConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  // `proxy_pass http://NAME[:PORT][/URI];` (location; not inherited, as in nginx).
  bool pass = false;
  bool pass_ssl = false;          // https://: TLS to the origin with the location's proxy_ssl_* settings
  const tls::ClientConf* ssl = nullptr;  // pass_ssl: the location's tls::ClientConf (set at load)
  std::string ssl_name;           // the proxy_pass host without port or brackets (proxy_ssl_name's default)
  std::string pass_url;           // as written
  std::string pass_host;          // NAME: an upstream block or an address
  uint16_t pass_port = 0;         // 0: no port written
  bool pass_has_uri = false;      // a URI part (even "/") was written
  std::string pass_uri;           // the URI part, starting with '/'
  std::string proxy_host;         // $proxy_host: "NAME[:PORT]" (port omitted when 80)
  uint16_t proxy_port = 80;       // $proxy_port
  const UpstreamConf* upstream = nullptr;  // resolved once the whole file is read; never null when `pass`
  std::string pass_file;          // where proxy_pass was written (load-time errors)
  int pass_line = 0;
  int pass_col = 0;

  /// `proxy_set_header` lines of the block that set them (inherited whole when a block has none).
  std::vector<ProxySetHeader> set_header;
  /// Effective request fields set by the proxy: set_header plus nginx's defaults (Host $proxy_host,
  /// Connection close) for the names set_header does not name. Built at load for every location.
  std::vector<ProxySetHeader> headers;
  uint8_t http_version_minor = 0;           // `proxy_http_version 1.0|1.1` (nginx default 1.0)
  uint64_t connect_timeout_ms = 60000;      // `proxy_connect_timeout`
  uint64_t read_timeout_ms = 60000;         // `proxy_read_timeout`
  uint64_t send_timeout_ms = 60000;         // `proxy_send_timeout`
  bool buffering = true;                    // `proxy_buffering`
  bool socket_keepalive = false;            // `proxy_socket_keepalive` (SO_KEEPALIVE on upstream connections)
  // `proxy_ignore_client_abort on|off`: off (nginx's default) abandons the upstream request when the client
  // closes its side before the response is complete; on lets it finish and still sends the response.
  bool ignore_client_abort = false;
  // Response buffers, per request (nginx's ngx_http_proxy_module; kosoku has no temp files, so these bound
  // the memory a proxied response uses and a full set stops reading the upstream until the client catches up):
  //  - `proxy_buffer_size SIZE` (default 4k, one page): the upstream's response head must fit in it, else 502
  //    and "upstream sent too big header" in the error log; with `proxy_buffering off` it is also the one
  //    buffer the body passes through (read, then sent, then read again).
  //  - `proxy_buffers N SIZE` (default 8 4k): with `proxy_buffering on`, the body is read ahead of the client
  //    into at most N × SIZE bytes.
  //  - `proxy_busy_buffers_size SIZE` (default 2 × max(proxy_buffer_size, SIZE of proxy_buffers) = 8k): with
  //    buffering on, at most this much of the read-ahead is being sent to the client at a time while the
  //    response is still being read (the rest keeps being filled from the upstream).
  // Checked at load as nginx does: N ≥ 2; max(proxy_buffer_size, SIZE) ≤ busy ≤ (N − 1) × SIZE.
  uint64_t buffer_size = 4096;              // `proxy_buffer_size` (bytes)
  uint32_t buffers_num = 8;                 // `proxy_buffers` N
  uint64_t buffers_size = 4096;             // `proxy_buffers` SIZE (bytes)
  uint64_t busy_buffers_size = 0;           // `proxy_busy_buffers_size` (bytes); 0 until load computes the default
  DirectivePos buffer_size_at;              // where each was written (inherited with the value)
  DirectivePos buffers_at;
  DirectivePos busy_buffers_at;
  uint32_t next_upstream = kNextError | kNextTimeout;  // `proxy_next_upstream` (0: off)
  uint32_t next_upstream_tries = 0;         // `proxy_next_upstream_tries` (0: unlimited)
  uint64_t next_upstream_timeout_ms = 0;    // `proxy_next_upstream_timeout` (0: unlimited)
  bool pass_request_headers = true;         // `proxy_pass_request_headers`
  bool pass_request_body = true;            // `proxy_pass_request_body`
  std::vector<std::string> pass_header;     // `proxy_pass_header NAME` (lower-case)
  std::vector<std::string> hide_header;     // `proxy_hide_header NAME` (lower-case)
  /// Fields other modules hide by default (lower-case; the cache's tag fields where it reads them), set by their
  /// finalize before the proxy's; proxy_pass_header passes them as it does nginx's defaults.
  std::vector<std::string> module_hidden;
  /// Effective hidden response fields (lower-case): nginx's defaults (Date, Server, X-Pad, X-Accel-*) and
  /// module_hidden minus pass_header, plus hide_header. Built at load.
  std::vector<std::string> hidden;
  /// `proxy_redirect` lines of the block that set them (inherited whole when a block has none); `off` clears
  /// them. Without any, a location with proxy_pass gets nginx's `proxy_redirect default` (built at load).
  std::vector<ProxyRedirect> redirect;
  bool redirect_off = false;                // `proxy_redirect off`
};

/// The proxy module (proxy/proxy_module.cc): its descriptor, directive table and load-time hook (proxy_pass
/// names resolved to upstream groups, effective headers, buffer checks; proxy/proxy_directives.cc).
config::Module& module();
std::span<const config::DirectiveSpec> directives();
bool finalize_conf(config::Builder& b);
/// $proxy_host, $proxy_port, $proxy_add_x_forwarded_for (proxy/proxy_request.cc).
std::span<const config::Variable> variables();

}  // namespace kosoku::proxy
