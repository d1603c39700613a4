// Configuration of the headers module (nginx's ngx_http_headers_module: add_header, expires), stored by module
// (config/module_conf.hh): `loc.module<headers::HeadersLocConf>()`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"
#include "core/headers/expires.hh"

namespace kosoku::headers {

/// `add_header NAME VALUE [always];` VALUE may contain variables ($uri ...).
struct AddHeader {
  std::string name;
  std::string value;
  bool always = false;
  std::shared_ptr<const config::Template> value_tpl;  // `value` compiled (variables validated); never null
};

/// A block's add_header list (http, server, location): inherited whole, only by a block without one of its own.
struct HeadersLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::vector<AddHeader> add_header;
  Expires expires;                                     // `expires` (default off); inherited
  std::shared_ptr<const config::Template> expires_var;  // `expires $variable;`: parsed per response
};

config::Module& module();

}  // namespace kosoku::headers
