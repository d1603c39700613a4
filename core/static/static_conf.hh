// Configuration of the static module (`index`, nginx's ngx_http_index_module; `log_not_found`), stored by module
// (config/module_conf.hh): `loc.module<static_files::StaticLocConf>()`. root, alias and try_files are the HTTP
// core's (config/conf.hh), as in nginx.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/config/module_conf.hh"

namespace kosoku::config {
struct DirectiveSpec;
}

namespace kosoku::static_files {

/// `index FILE...;` (http, server, location): several lines add up; the first one in a block replaces the
/// inherited list. Inherited whole by a block without one of its own.
struct StaticLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::vector<std::string> index = {"index.html"};
  /// `log_not_found on|off;` (nginx's core directive; only the static files log a missing file): whether a
  /// missing file is logged at `error`.
  bool log_not_found = true;
};

/// The static module's directives (static_directives.cc).
std::span<const config::DirectiveSpec> directives();

}  // namespace kosoku::static_files
