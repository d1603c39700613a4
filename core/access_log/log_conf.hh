// Configuration of the log module (nginx's ngx_http_log_module): `access_log` per block and the http-level
// `log_format` table, stored by module (config/module_conf.hh): `loc.module<access_log::LogLocConf>()`,
// `http.module<access_log::LogHttpConf>()`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::access_log {

/// `access_log off | PATH [FORMAT];` FORMAT names a `log_format` (default "combined").
struct AccessLogConf {
  std::string path;
  std::string format = "combined";
};

/// A block's access_log lines: inherited whole, only by a block without one of its own; empty: logging off.
struct LogLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::vector<AccessLogConf> logs;
};

/// `log_format NAME [escape=default|json|none] STRING...;`
struct LogFormatConf {
  std::string name;
  std::string format;  // concatenated string pieces, with $variables
  config::SourceLoc loc;
  config::LogEscape escape = config::LogEscape::kDefault;  // `escape=` parameter
  std::shared_ptr<const config::Template> tpl;             // `format` compiled with `escape`; never null
};

struct LogHttpConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  std::vector<LogFormatConf> formats;  // always contains "combined" once loaded, first
  const LogFormatConf* find(std::string_view name) const {
    for (const LogFormatConf& f : formats) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
};

config::Module& module();

}  // namespace kosoku::access_log
