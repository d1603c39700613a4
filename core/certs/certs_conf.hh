// Configuration of the TLS certificate store (core/certs/), filled by the `ssl_certificate_*` directives
// (certs/certs_directives.cc) and read by the certs module; stored by module (config/module_conf.hh):
// `http.module<CertsConf>()`, `loc.module<CertsLocConf>()`.
//
//   ssl_certificate_store PATH;              http      directory of one PEM file per host (none: no store)
//   ssl_certificate_cache N [inactive=T];    http      per-core cache of loaded certificates: at most N
//                                                      (default 1000), one unused for T is freed (10m)
//   ssl_certificate_admin;                   location  the admin API (GET/PUT/DELETE .../certs/HOST), guarded
//                                                      by the location's allow/deny
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::certs {

struct CertsConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  std::string store;                     // as written; relative to the prefix (empty: no store)
  uint32_t cache_max = 1000;             // loaded certificates per core
  uint64_t cache_inactive_ms = 600000;   // an entry unused this long is freed
  std::optional<config::SourceLoc> admin_loc;  // the first `ssl_certificate_admin` (checked against `store`)
};

struct CertsLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  bool admin = false;  // `ssl_certificate_admin;` (not inherited, like `cache_rules_admin`)
};

}  // namespace kosoku::certs
