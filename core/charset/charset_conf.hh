// Configuration of the charset module (nginx's ngx_http_charset_module, labelling only): stored by module,
// `loc.module<charset::CharsetLocConf>()`.
#pragma once

#include <string>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::charset {

struct CharsetLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::string charset;  // `charset NAME;` ("" for `off`, the default): added to the Content-Type of the types
  /// `charset_types` (lower-case MIME types; text/html is always one): nginx's default list.
  std::vector<std::string> types = {"text/html",        "text/xml",  "text/plain", "text/vnd.wap.wml",
                                    "application/javascript", "application/rss+xml"};
  bool all_types = false;  // `charset_types *;`
};

config::Module& module();

}  // namespace kosoku::charset
