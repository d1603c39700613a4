// Configuration of the rewrite module (nginx's ngx_http_rewrite_module; only its `return` so far), stored by
// module (config/module_conf.hh): `loc.module<rewrite::RewriteLocConf>()`.
#pragma once

#include <memory>
#include <string>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::rewrite {

/// `return CODE [TEXT|URL];` / `return URL;` (server, location). Not inherited: it acts only in the block that
/// has it, as in nginx — a server's in the SERVER_REWRITE phase, before any location is chosen; a location's
/// in the REWRITE phase, before access checks.
struct ReturnConf {
  int code = 0;          // 0: no return directive
  std::string text;      // body text or redirect URL; may contain variables
  std::shared_ptr<const config::Template> text_tpl;  // `text` compiled; null when code == 0
};

struct RewriteLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  ReturnConf ret;
};

config::Module& module();

}  // namespace kosoku::rewrite
