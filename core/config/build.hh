// Loader-internal state while a configuration is being built: what the directive setters
// (config/directive.hh, directives_*.cc) write into, and how they report errors. Not for the HTTP engine:
// it only ever sees the finished, const MainConf (config/loader.hh).
//
// Build order (nginx's create → set → merge): every block gets a node whose conf starts at the conf.hh
// initialisers; setters write the directives of that block and mark their "slot" in `seen`; when the whole
// tree is read, finalize (config/finalize.cc) merges each unset slot down from the enclosing block with the
// rows' merge functions, resolves names (disk queues, log formats), groups listen sockets and builds the
// lookup indexes, then runs each module's finalize hook (config/module.hh) in registry order.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/config/conf.hh"
#include "core/config/parser.hh"

namespace kosoku::config {

/// Context bits: where a directive may appear (nginx's NGX_MAIN_CONF, NGX_HTTP_SRV_CONF, ...).
enum Context : uint32_t {
  kCtxMain = 1u << 0,       // top level of the main file
  kCtxEvents = 1u << 1,     // events { }
  kCtxHttp = 1u << 2,       // http { }
  kCtxServer = 1u << 3,     // server { }
  kCtxLocation = 1u << 4,   // location { } (any depth)
  kCtxAppliance = 1u << 5,  // appliance { }
  kCtxUpstream = 1u << 6,   // upstream NAME { } (http; core/proxy/)
  kCtxDpdk = 1u << 7,       // dpdk { } (main)
  kCtxIf = 1u << 8,         // if (...) { } of a server, or of a location holding only rewrite directives
                            // (core/rewrite/; a location's other `if` blocks are read as locations)
};
inline constexpr uint32_t kCtxHttpAny = kCtxHttp | kCtxServer | kCtxLocation;
inline constexpr uint32_t kCtxServerAny = kCtxServer | kCtxLocation;

/// Slots set in one block: slot → name of the directive that set it (for "is duplicate" messages).
class Seen {
 public:
  bool has(std::string_view slot) const { return set_.contains(absl::string_view(slot.data(), slot.size())); }
  /// Name of the directive that set `slot`, or "" if unset.
  std::string_view who(std::string_view slot) const {
    auto it = set_.find(absl::string_view(slot.data(), slot.size()));
    return it == set_.end() ? std::string_view() : std::string_view(it->second);
  }
  void mark(std::string_view slot, std::string_view name) {
    set_.try_emplace(std::string(slot), std::string(name));
  }

 private:
  absl::flat_hash_map<std::string, std::string> set_;
};

/// A location block being built (also the http-level and server-level pseudo-locations).
struct LocNode {
  LocationConf conf;
  Seen seen;
  std::vector<std::unique_ptr<LocNode>> children;  // nested `location` blocks, file order
};

/// A server block being built. Server-level slots (listen, client_header_timeout, ...) and location-level
/// slots written at server level share `base.seen`.
struct SrvNode {
  std::unique_ptr<ServerConf> conf = std::make_unique<ServerConf>();
  LocNode base;
  std::vector<SourceLoc> listen_locs;  // parallel to conf->listen
  std::vector<bool> listen_opts;       // parallel: the listen line set socket options (backlog=, reuseport)
};

/// A name to resolve once everything is read (disk_queue for `aio`, log_format for `access_log`...).
struct NameRef {
  std::string name;
  SourceLoc loc;
};

/// The block a setter is filling. `srv`/`loc` point at the conf objects the block's server-level and
/// location-level directives write: at http level the http pseudo-server/-location, at server level the
/// server and its base, in a location that location.
struct Scope {
  uint32_t ctx = kCtxMain;  // exactly one Context bit
  MainConf* main = nullptr;
  ServerConf* srv = nullptr;
  LocationConf* loc = nullptr;
  LocNode* loc_node = nullptr;  // where `location` adds children (server base or a location)
  SrvNode* srv_node = nullptr;  // server and location contexts
  Seen* seen = nullptr;
};

class Builder {
 public:
  /// Records the first error as `FILE:LINE:COL: message`; returns false so setters can `return b.fail(...)`.
  bool fail(const SourceLoc& loc, std::string_view message);
  /// Records a warning (`FILE:LINE:COL: message`), as nginx's NGX_LOG_WARN during configuration.
  void warn(const SourceLoc& loc, std::string_view message);
  /// Records a notice (`FILE:LINE:COL: message`), as nginx's NGX_LOG_NOTICE: something the operator should
  /// know that changes nothing (a directive kosoku accepts and ignores).
  void notice(const SourceLoc& loc, std::string_view message);

  /// Applies every directive of `body` in `scope` through the directive tables (config/loader.cc):
  /// unknown / not allowed here / missing `;` or `{` / argument count / duplicate checks, then the setter.
  bool walk(Scope& scope, const std::vector<Directive>& body);

  std::unique_ptr<MainConf> main = std::make_unique<MainConf>();
  Seen main_seen;
  Seen events_seen;
  Seen appliance_seen;
  bool http_present = false;
  bool resolve_names = true;  // LoadOptions::resolve_names
  std::string prefix;         // directory relative file names resolve against (with '/'; "" = the cwd)
  ServerConf http_srv;  // http-level values of server-level directives
  LocNode http_loc;     // http-level values of location-level directives
  std::vector<std::unique_ptr<SrvNode>> servers;
  std::vector<NameRef> aio_refs;         // `aio ...=NAME`, checked against disk_queue names
  std::vector<SourceLoc> disk_queue_locs;  // parallel to main->disk_queues (user-declared ones)
  SourceLoc affinity_loc;                // `worker_cpu_affinity` (for the worker-count check)
  bool affinity_auto = false;            // `worker_cpu_affinity auto [MASK]`
  std::vector<uint64_t> affinity_masks;  // explicit masks, or the `auto` mask (empty: all CPUs)

  /// Modules' own loading state (names to check once the file is read, ...), one object per type
  /// (config/module_conf.hh); gone with the Builder.
  ModuleConfs scratch;

  std::string error;
  std::vector<std::string> warnings;
  std::vector<std::string> notices;
};

/// After the walk: merge down, resolve names, group listen sockets, build lookup indexes
/// (config/finalize.cc). False with b.error set.
bool finalize(Builder& b);

/// The network backend part of finalize (config/directives_dpdk.cc): `network dpdk` needs a complete dpdk
/// block, one worker and IPv4 listen addresses; a dpdk block needs `network dpdk`.
bool finalize_dpdk(Builder& b);

/// Groups every server's `listen` into MainConf::http.listen_sockets and builds each socket's server-name
/// index (config/listen.cc). Runs after the servers are final (their addresses no longer move).
bool group_listen_sockets(Builder& b);

/// `invalid number of arguments in "NAME" directive` etc. share this quoting.
inline std::string quoted(std::string_view s) { return std::string("\"").append(s).append("\""); }

}  // namespace kosoku::config
