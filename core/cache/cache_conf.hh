// Configuration of the proxy cache (nginx's ngx_http_file_cache + the proxy_cache_* directives of
// ngx_http_proxy_module, ngx_http_split_clients_module, and a purge directive in the shape of
// ngx_cache_purge / nginx plus), held in the immutable config tree by module (config/module_conf.hh):
// `http.module<CacheHttpConf>()` (cache paths, split_clients) and `loc.module<CacheLocConf>()` (the
// per-location settings). The directive table that fills these structs is cache/cache_directives.cc; the
// run-time side is the rest of core/cache/. Durations are milliseconds, sizes bytes, as everywhere in the config tree.
//
//   proxy_cache_path PATH [levels=1:2] keys_zone=NAME:SIZE [inactive=10m] [max_size=S] [use_temp_path=on|off]
//                    [disk_queue=NAME] [loader_files=100] [loader_threshold=200ms] [loader_sleep=50ms]
//                    [manager_files=100] [manager_threshold=200ms] [manager_sleep=50ms]          (http)
//   proxy_cache ZONE | $var | off;                    proxy_cache_key STRING;
//   proxy_cache_valid [CODE ...| any] TIME;           proxy_cache_methods GET | HEAD | POST ...;
//   proxy_cache_min_uses N;                           proxy_cache_bypass STRING ...;  proxy_no_cache STRING ...;
//   proxy_cache_revalidate on|off;                    proxy_cache_convert_head on|off;
//   proxy_cache_lock on|off;  proxy_cache_lock_timeout T;  proxy_cache_lock_age T;
//   proxy_cache_use_stale off | error timeout invalid_header updating http_500 http_502 http_503 http_504
//                         http_403 http_404 http_429 ...;
//   proxy_cache_background_update on|off;            proxy_ignore_headers FIELD ...;
//   proxy_cache_purge ZONE KEY [wildcard] [any_host];   (location: a purge endpoint; a `*` ending KEY as
//                                                         written is a wildcard, see cache/purge_key.hh)
//   proxy_cache_purge on | off | METHOD [wildcard] [any_host] [from all | ADDR[/N] ...];  (beside proxy_cache)
//   split_clients STRING $variable { P% value; ... * value; }                                        (http)
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/module_conf.hh"

namespace kosoku::config {
struct Template;  // config/variables.hh
class Builder;
struct DirectiveSpec;
struct Module;
}

namespace kosoku::cache {

/// `proxy_cache_path ...` (http): one on-disk cache and its in-memory keys zone.
struct CachePathConf {
  std::string path;                  // as written (relative paths resolve against the prefix at start)
  std::vector<uint8_t> levels;       // `levels=1:2` → {1, 2}; each 1 or 2, at most 3 levels; empty: flat
  std::string zone;                  // keys_zone NAME
  uint64_t zone_size = 0;            // keys_zone SIZE in bytes (bounds the number of entries)
  uint64_t inactive_ms = 600000;     // `inactive=10m`: entries not used for this long are removed
  uint64_t max_size = 0;             // `max_size`: bytes on disk; 0 = unlimited
  bool use_temp_path = true;         // `use_temp_path`: on = temp files under PATH/temp/, off = beside the entry
  std::string disk_queue = "default";  // `disk_queue=NAME`: the DiskQueue every file op of this path uses
  uint32_t loader_files = 100;       // cache loader: files per iteration
  uint64_t loader_threshold_ms = 200;
  uint64_t loader_sleep_ms = 50;
  uint32_t manager_files = 100;      // cache manager: entries removed per pass
  uint64_t manager_threshold_ms = 200;
  uint64_t manager_sleep_ms = 50;
  std::string file;                  // where it was written
  int line = 0;
};

/// One `split_clients STRING $var { ... }` part: `percent` of the hash space (hundredths of a percent,
/// 0 = the `*` rest) maps to `value`.
struct SplitPart {
  uint32_t percent = 0;   // 0.01 % units as written (`12.5%` → 1250); 0 for `*`
  uint32_t threshold = 0; // cumulative upper bound in 32-bit hash space (nginx's computation)
  std::string value;
};

/// `split_clients STRING $variable { ... }` (http; ngx_http_split_clients_module): $variable takes the
/// value of the part that MurmurHash2(expanded STRING) falls in; empty when no part matches.
struct SplitClientsConf {
  std::string variable;                          // without '$', lower-case
  std::shared_ptr<const config::Template> source;  // STRING
  std::vector<SplitPart> parts;                  // in order
};

struct CacheHttpConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  std::vector<CachePathConf> paths;              // file order
  std::vector<SplitClientsConf> split_clients;   // file order

  const CachePathConf* find_zone(std::string_view name) const {
    for (const CachePathConf& p : paths) {
      if (p.zone == name) return &p;
    }
    return nullptr;
  }
  const SplitClientsConf* find_split(std::string_view var) const {
    for (const SplitClientsConf& s : split_clients) {
      if (s.variable == var) return &s;
    }
    return nullptr;
  }
};

/// `proxy_cache_valid [code ...] time;` — codes empty with `any` set means every status.
struct CacheValid {
  std::vector<int> codes;  // empty: nginx's default list 200 301 302 (written without codes)
  bool any = false;        // `any`
  uint64_t ms = 0;
};

/// `proxy_cache_use_stale` conditions (nginx's NGX_HTTP_UPSTREAM_FT_* plus `updating`).
enum UseStale : uint32_t {
  kStaleError = 1u << 0,
  kStaleTimeout = 1u << 1,
  kStaleInvalidHeader = 1u << 2,
  kStaleUpdating = 1u << 3,
  kStaleHttp500 = 1u << 4,
  kStaleHttp502 = 1u << 5,
  kStaleHttp503 = 1u << 6,
  kStaleHttp504 = 1u << 7,
  kStaleHttp403 = 1u << 8,
  kStaleHttp404 = 1u << 9,
  kStaleHttp429 = 1u << 10,
};

/// `proxy_ignore_headers` fields (nginx's NGX_HTTP_UPSTREAM_IGN_*); only the cache-related ones change
/// kosoku's behaviour, the X-Accel-* others are accepted for compatibility.
enum IgnoreHeader : uint32_t {
  kIgnoreXAccelRedirect = 1u << 0,
  kIgnoreXAccelExpires = 1u << 1,
  kIgnoreXAccelLimitRate = 1u << 2,
  kIgnoreXAccelBuffering = 1u << 3,
  kIgnoreXAccelCharset = 1u << 4,
  kIgnoreExpires = 1u << 5,
  kIgnoreCacheControl = 1u << 6,
  kIgnoreSetCookie = 1u << 7,
  kIgnoreVary = 1u << 8,
};

/// `proxy_cache_methods` bits (GET and HEAD are always set, as in nginx).
enum CacheMethod : uint32_t {
  kMethodGet = 1u << 0,
  kMethodHead = 1u << 1,
  kMethodPost = 1u << 2,
};

/// `proxy_cache_purge`.
struct PurgeConf {
  enum class Mode : uint8_t {
    kOff,
    kZoneKey,  // `proxy_cache_purge ZONE KEY;`: every request to the location purges KEY in ZONE
    kMethod,   // `proxy_cache_purge on|METHOD [from ...];`: requests with METHOD purge their own cache key
  };
  Mode mode = Mode::kOff;
  std::string zone;                                  // kZoneKey
  std::shared_ptr<const config::Template> key;       // kZoneKey
  std::string method = "PURGE";                      // kMethod
  bool wildcard = false;   // `wildcard`: a trailing `*` the request supplies selects every key with that prefix
  bool any_host = false;   // `any_host`: a purge may reach the keys of other hosts (purge_key.hh)
  std::string file;        // where the directive was written (configuration-time checks)
  int line = 0;
  int col = 0;
  struct From {
    bool all = false;
    int family = 0;
    uint8_t addr[16] = {};
    int prefix = 0;
  };
  std::vector<From> from;                            // kMethod; empty: every client (allow/deny still apply)
};

/// The per-location cache settings (inherited down like nginx's, each directive on its own).
struct CacheLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  bool enabled = false;                              // `proxy_cache ZONE|$var` (off: false)
  std::string zone;                                  // a literal zone name
  std::shared_ptr<const config::Template> zone_tpl;  // `proxy_cache $var`: the zone name per request
  std::shared_ptr<const config::Template> key;       // `proxy_cache_key`; null: the default
  std::string key_text = "$scheme$proxy_host$request_uri";
  std::vector<CacheValid> valid;                     // `proxy_cache_valid`, in file order
  uint32_t methods = kMethodGet | kMethodHead;
  uint32_t min_uses = 1;
  std::vector<std::shared_ptr<const config::Template>> bypass;    // `proxy_cache_bypass`
  std::vector<std::shared_ptr<const config::Template>> no_cache;  // `proxy_no_cache`
  bool revalidate = false;
  bool convert_head = true;
  bool lock = false;
  uint64_t lock_timeout_ms = 5000;
  uint64_t lock_age_ms = 5000;
  uint32_t use_stale = 0;                            // UseStale bits; 0 = off
  bool background_update = false;
  uint32_t ignore_headers = 0;                       // IgnoreHeader bits
  uint32_t tags_headers = 7;                         // `proxy_cache_tags_header`: TagHeader bits (tags.hh; all)
  PurgeConf purge;                                   // not inherited (acts where written)

  /// nginx's ngx_http_file_cache_valid: the validity for `status` from proxy_cache_valid, in ms; 0: none.
  uint64_t valid_for(int status) const {
    for (const CacheValid& v : valid) {
      if (v.any) return v.ms;
      if (v.codes.empty()) {
        if (status == 200 || status == 301 || status == 302) return v.ms;
        continue;
      }
      for (int c : v.codes) {
        if (c == status) return v.ms;
      }
    }
    return 0;
  }
};

/// The cache module (cache/cache_module.cc): its descriptor, directive table and load-time hook (zone names
/// checked against proxy_cache_path, wildcard purge keys; cache/cache_directives.cc).
config::Module& module();
std::span<const config::DirectiveSpec> directives();
bool finalize_conf(config::Builder& b);

}  // namespace kosoku::cache
