// Configuration of the dynamic per-host cache rules (core/rules/), filled by the `cache_rules_*` directives
// (rules/rules_directives.cc) and read by the rules module; stored by module (config/module_conf.hh):
// `http.module<RulesConf>()`, `loc.module<RulesLocConf>()`.
//
//   cache_rules_file PATH;                 http      rules loaded at start, every change persisted here
//   cache_rules_default cache|nocache;     http      decision for hosts without rules (default: cache)
//   cache_rules_memo N;                    http      per-core memo of (host, $uri) decisions (default 100000;
//                                                    0: no memo)
//   cache_rules_compiled N [inactive=T];   http      per-core compiled RE2::Set cache: at most N hosts'
//                                                    sets (default 1024), a set unused for T is freed (10m)
//   cache_rules_admin;                     location  the admin API (GET/PUT/DELETE .../rules/HOST), guarded
//                                                    by the location's allow/deny
#pragma once

#include <cstdint>
#include <string>

#include "core/config/module_conf.hh"

namespace kosoku::rules {

struct RulesConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  std::string file;                       // empty: rules live in memory only (lost at restart)
  bool default_cache = true;              // `cache_rules_default cache`
  uint32_t memo_max = 100000;             // entries per core
  uint32_t compiled_max = 1024;           // compiled RE2::Set objects per core
  uint64_t compiled_inactive_ms = 600000;
};

struct RulesLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  bool admin = false;  // `cache_rules_admin;` (not inherited, like `status`)
};

}  // namespace kosoku::rules
