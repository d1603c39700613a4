// The typed, immutable configuration tree: what the loader (config/loader.hh) produces from an nginx-syntax
// file and what every loop reads. Built once (by `kosoku -t`, `make image` and at start), never mutated after.
// Every field holds its *effective* value: the loader merges each directive down from main → http → server →
// location and applies nginx's default in the same step, so readers never look at parents.
// Durations are milliseconds, sizes are bytes.
//
// The structs here hold what the core (config, http, net, reactor) reads. A module's configuration is not a
// field of them: each block keeps it by module (config/module_conf.hh), `loc.module<cache::CacheLocConf>()`.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/config/module_conf.hh"
#include "core/config/network_conf.hh"

namespace re2 {
class RE2;
}

namespace kosoku::config {

struct Template;      // config/variables.hh: a compiled string with $variables
struct Module;        // config/module.hh
struct LocationConf;
struct ServerConf;

/// `log_format ... escape=default|json|none` (ngx_http_log_module); also the escaping of a Template, with
/// kField / kUri for the templates that become header values (config/variables.hh).
enum class LogEscape { kNone, kDefault, kJson, kField, kUri };

/// Where a directive or token came from; printed as `file:line:col`.
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
};

/// `error_page CODE... [=[RESPONSE]] URI;` (nginx's ngx_http_core_module): an error response with one of `codes`
/// is answered by an internal redirect to `uri` (a path with optional `?args`, or `@name`), or by a redirect
/// to it when it is a URL (302, or `=RESPONSE` when that is 301, 302, 303, 307 or 308).
struct ErrorPage {
  std::vector<int> codes;
  /// The status of the answer: -1 (no `=`): the original code; 0 (`=` alone): the status the redirected
  /// request answers with; else that status.
  int overwrite = -1;
  std::shared_ptr<const Template> uri;  // never null; may contain variables
};

/// `aio io_uring[=NAME] | threads[=NAME] | off;` (http, server, location).
enum class AioMode { kIoUring, kThreads, kOff };

/// `disk_queue NAME [depth=N] [max_queue=M];` (main). `depth`: tasks in flight at once per core;
/// `max_queue`: tasks waiting beyond depth before new ones are refused (503 + log line). "default" always exists.
struct DiskQueueConf {
  std::string name;
  uint32_t depth = 64;
  uint32_t max_queue = 65536;
};

/// `listen ADDR:PORT [default_server] [reuseport] [deferred] [backlog=N] [rcvbuf=SIZE] [sndbuf=SIZE]
/// [so_keepalive=...];` (server). Default `*:80`
/// (nginx: 80 as root).
struct ListenConf {
  sockaddr_storage addr{};  // AF_INET or AF_INET6, port in network order
  socklen_t addr_len = 0;
  std::string text;         // as written, normalised "ADDR:PORT", for logs and stats
  bool default_server = false;
  bool reuseport = false;
  int backlog = 511;
  // `so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]` (nginx): -1 not given (system default), 0 off,
  // 1 on. keepidle/keepintvl in seconds, 0 = not given (the system's value); keepcnt 0 = not given.
  int so_keepalive = -1;
  uint32_t keepidle_s = 0;
  uint32_t keepintvl_s = 0;
  uint32_t keepcnt = 0;
  // `deferred` (nginx): TCP_DEFER_ACCEPT on the kernel backend — a connection is accepted only once its first
  // data (the request) has arrived, saving a wake-up per connection. kosoku's own TCP stack ignores it.
  bool deferred = false;
  // `rcvbuf=SIZE` / `sndbuf=SIZE` (nginx; sizes as ngx_parse_size, 0..1g), bytes, -1 not given (the system's /
  // TcpConfig's value). Kernel backend: SO_RCVBUF / SO_SNDBUF on the listening socket, inherited by accepted
  // sockets (Linux doubles the value and applies its minimum). kosoku's TCP: the receive buffer (what the
  // advertised window and the SYN-ACK's window scale follow) and send buffer of connections accepted on it.
  int rcvbuf = -1;
  int sndbuf = -1;
  // `ssl` (nginx): connections on this address speak TLS (core/tls/). Set for the socket when any server's
  // listen line for the address has it.
  bool ssl = false;
  // `http2` (nginx before 1.25.1; now `http2 on` in the server): HTTP/2 on this address (core/http2/), for
  // every server on it. Set for the socket when any server's listen line for the address has it.
  bool http2 = false;
};

/// An `allow`/`deny` rule (core/access/) or a `proxy_cache_purge ... from` address: `all` or ADDR/PREFIX.
struct AccessRule {
  bool allow = true;
  bool all = false;       // `all`: matches every address
  int family = AF_INET;   // AF_INET or AF_INET6
  uint8_t addr[16] = {};  // network order, masked
  int prefix = 0;         // CIDR prefix length in bits
};

/// `open_file_cache off | max=N [inactive=T];` + `open_file_cache_valid T` (60 s) + `_min_uses N` (1) +
/// `_errors on|off` (off).
struct OpenFileCacheConf {
  bool enabled = false;
  uint32_t max = 0;
  uint64_t inactive_ms = 60000;
  uint64_t valid_ms = 60000;
  uint32_t min_uses = 1;
  bool errors = false;
};

enum class IfModifiedSince { kOff, kExact, kBefore };

/// `types { MIME ext...; }` table (http, server, location): lower-case extension → MIME type.
using MimeTypes = absl::flat_hash_map<std::string, std::string>;

/// Lookup tables over one level of locations (a server's top level, or one location's nested ones), built
/// by the loader once the tree is final; used by ServerConf::find_location. Pointers and views point into
/// the owning MainConf. Prefix locations (plain and `^~`) are sorted by pattern; `parent` is the index of
/// the longest other prefix pattern that is a prefix of this one (-1: none), so the longest prefix of a URI
/// is found with one binary search plus a walk up that chain (nginx uses a static tree for the same job).
struct LocationIndex {
  struct Entry {
    std::string_view pattern;
    const LocationConf* loc = nullptr;
    int32_t parent = -1;  // prefix entries only
  };
  std::vector<Entry> exact;                  // `=` locations, sorted by pattern
  std::vector<Entry> prefix;                 // plain and `^~` locations, sorted by pattern
  std::vector<const LocationConf*> regex;    // `~` and `~*` locations, in file order
};

struct LocationConf {
  enum class Match {
    kNone,
    kPrefix,
    kExact,
    kPrefixNoRegex /* ^~ */,
    kRegex /* ~ */,
    kRegexCaseless /* ~* */,
    kNamed /* @name: reached only by error_page (ServerConf::find_named), never by a URI */
  };
  Match match = Match::kNone;  // kNone: the server-level pseudo-location used when no location matches
  std::string pattern;         // URI prefix, exact URI, or regex source
  std::shared_ptr<re2::RE2> regex;  // compiled for kRegex / kRegexCaseless
  SourceLoc loc;

  std::string root = "html";                  // `root` (nginx default: prefix/html)
  std::optional<std::string> alias;           // `alias` (location only); replaces the matched prefix
  std::vector<std::string> try_files;         // `try_files file ... uri|=code`; empty: not set
  bool internal = false;                      // `internal`: a request reaches it only by an internal redirect or
                                              // a rewrite (an external one is a 404); not inherited
  std::vector<ErrorPage> error_pages;         // `error_page`: inherited whole by a block without one
  std::shared_ptr<const MimeTypes> types;     // never null after loading
  std::string default_type = "text/plain";

  uint64_t keepalive_timeout_ms = 75000;
  uint64_t keepalive_header_timeout_s = 0;    // second arg of keepalive_timeout (Keep-Alive: timeout=), 0: none
  uint32_t keepalive_requests = 1000;
  uint64_t client_body_timeout_ms = 60000;
  uint64_t send_timeout_ms = 60000;
  uint64_t client_max_body_size = 1 << 20;    // 0: unlimited
  uint64_t sendfile_max_chunk = 2 << 20;

  bool etag = true;
  bool server_tokens = true;  // `server_tokens on|off|build`: the version in Server and in error pages
  IfModifiedSince if_modified_since = IfModifiedSince::kExact;
  AioMode aio = AioMode::kIoUring;
  std::string aio_queue = "default";          // a DiskQueueConf name
  OpenFileCacheConf open_file_cache;
  ModuleConfs modules;                        // location-level module confs (module<T>())
  /// The module whose content handler serves this location (config/module.hh), resolved once the file is
  /// read; null only for a conf built without the loader (the static files then).
  const Module* content = nullptr;

  std::vector<LocationConf> locations;        // nested locations, in file order
  LocationIndex nested_index;                 // over `locations` (built by the loader)

  template <ModuleConf T>
  const T& module() const { return modules.get<T>(); }
  template <ModuleConf T>
  T& module() { return modules.get<T>(); }
};

struct ServerConf {
  std::vector<ListenConf> listen;
  std::vector<std::string> server_names;      // as written: exact, "*.example.com", ".example.com", "~regex"
  std::vector<std::shared_ptr<re2::RE2>> server_name_regex;  // compiled "~" names, in order
  uint64_t client_header_timeout_ms = 60000;
  uint64_t client_header_buffer_size = 1024;
  uint32_t large_client_header_buffers_num = 4;
  uint64_t large_client_header_buffers_size = 8192;
  uint32_t max_headers = 1000;                // request header lines (nginx ≥ 1.29.8 `max_headers`)
  /// The application protocols the server speaks over TLS, in preference order, as ALPN's wire list (RFC 7301
  /// §3.1: each name after its length byte): http/1.1; the http2 module puts h2 first where HTTP/2 is on.
  std::string alpn = std::string("\x08http/1.1", 9);
  LocationConf base;                          // server-level settings; match == kNone
  std::vector<LocationConf> locations;        // top-level locations, in file order
  LocationIndex location_index;               // over `locations` (built by the loader)
  SourceLoc loc;
  ModuleConfs modules;                        // server-level module confs (module<T>())

  template <ModuleConf T>
  const T& module() const { return modules.get<T>(); }
  template <ModuleConf T>
  T& module() { return modules.get<T>(); }

  /// nginx's location choice (ngx_http_core_find_location): exact `=` match wins at once; else the longest
  /// prefix match; if it is `^~` use it; else the first matching regex in file order (searched inside the
  /// chosen prefix location's nested locations first, then the outer level), else the longest prefix;
  /// else `base`. `uri` is the normalised, percent-decoded path. Never returns null.
  const LocationConf* find_location(std::string_view uri) const;
  /// The named location `name` ("@fallback", with its '@'), or null.
  const LocationConf* find_named(std::string_view name) const;
};

/// server_name lookup tables of one ListenSocket (built by the loader; used by find_server).
/// Keys are lower-case. A server without server_name (or with `server_name "";`) is under "" in `exact`.
struct ServerNameIndex {
  struct Head {
    const ServerConf* sub = nullptr;   // `*.example.com` or `.example.com`: a host ending in ".example.com"
    const ServerConf* bare = nullptr;  // `.example.com`: the host "example.com" itself
  };
  absl::flat_hash_map<std::string, const ServerConf*> exact;  // "www.example.com"
  absl::flat_hash_map<std::string, Head> head;                // keyed "example.com"
  absl::flat_hash_map<std::string, const ServerConf*> tail;   // `www.example.*` keyed "www.example."
  std::vector<std::pair<const re2::RE2*, const ServerConf*>> regex;  // `~` names, file order
};

/// One listening socket after grouping: every server that listens on that address. Each ListenSocket is
/// bound on its own address; with SO_REUSEPORT, Linux hands a connection to the most specific bound address
/// (127.0.0.1:80 before 0.0.0.0:80), which gives nginx's per-address choice of server list.
struct ListenSocket {
  ListenConf conf;                            // merged options (default_server/backlog/reuseport)
  std::vector<const ServerConf*> servers;     // in file order
  const ServerConf* default_server = nullptr; // the `default_server` one, else the first
  ServerNameIndex names;

  /// nginx's virtual-server choice by Host (lower-cased, port stripped): exact name, then longest
  /// leading wildcard (`*.example.com` / `.example.com`), then longest trailing wildcard (`www.*`), then the
  /// first matching regex in file order, else default_server.
  const ServerConf* find_server(std::string_view host) const;
};

struct HttpConf {
  std::vector<std::unique_ptr<ServerConf>> servers;
  std::vector<ListenSocket> listen_sockets;   // grouped by address
  ModuleConfs modules;                        // http-level module confs (module<T>())

  template <ModuleConf T>
  const T& module() const { return modules.get<T>(); }
  template <ModuleConf T>
  T& module() { return modules.get<T>(); }
};

/// `appliance { ... }` (main): settings used only when kosoku runs as PID 1 of the appliance image
/// (image/). Ignored on a normal host.
struct ApplianceConf {
  bool present = false;               // an appliance block was given
  std::string address;                // `address 10.0.2.15/24;` (IPv4 CIDR); empty: 10.0.2.15/24 (QEMU user net)
  std::string gateway;                // `gateway 10.0.2.2;`
  std::string interface = "eth0";     // `interface eth0;` (kernel-socket backend)
  std::string data_device = "/dev/vda";  // `data_disk /dev/vda [ro|rw] [fstype=ext4] [mount=/data];`
  std::string data_mount = "/data";
  std::string data_fstype = "ext4";
  bool data_rw = false;
  uint32_t hugepages = 0;             // `hugepages N;` (2 MiB pages reserved at boot)
  std::string console = "ttyS0";      // `console ttyS0 [115200];`
  uint32_t console_baud = 115200;
  bool on_fatal_reboot = false;       // `on_fatal reboot|halt;` (default halt)
  SourceLoc loc;
};

struct MainConf {
  std::string file;                           // path of the main config file
  std::string text;                           // the main file's full text (for `config` on the console)
  int worker_processes = 1;                   // `auto` resolved to the number of online CPUs
  std::vector<int> worker_cpu_affinity;       // CPU per worker; empty: worker i → i-th allowed CPU
  uint32_t worker_connections = 512;
  uint64_t worker_rlimit_nofile = 0;          // 0: unchanged
  std::string pid_path;                       // `pid FILE;` (relative to the prefix); empty: no pid file
  std::string error_log_path = "logs/error.log";  // "stderr" allowed
  int error_log_level = 4;                    // 0 emerg,1 alert,2 crit,3 error,4 warn,5 notice,6 info,7 debug
  std::vector<DiskQueueConf> disk_queues;     // always contains "default"
  ApplianceConf appliance;
  NetworkConf network;                        // `network kernel|dpdk;` + `dpdk { }` (config/network_conf.hh)
  HttpConf http;
  ModuleConfs modules;                        // main-level module confs (module<T>())

  template <ModuleConf T>
  const T& module() const { return modules.get<T>(); }
  template <ModuleConf T>
  T& module() { return modules.get<T>(); }

  const DiskQueueConf* find_disk_queue(std::string_view name) const;
};

}  // namespace kosoku::config
