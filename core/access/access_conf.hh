// Configuration of the access module (nginx's ngx_http_access_module): the ordered allow/deny list of a block,
// stored by module (config/module_conf.hh): `loc.module<access::AccessLocConf>()`.
#pragma once

#include <sys/socket.h>

#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::access {

/// `allow ADDR[/N] | all;` and `deny ...;` (http, server, location): one list in file order; the first rule
/// that matches the client's address decides; no match allows. Inherited whole, only by a block without a
/// rule of its own.
struct AccessLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::vector<config::AccessRule> rules;
};

/// Whether rule list `rules` lets `peer` in (an IPv4-mapped IPv6 address also matches IPv4 rules). A null
/// `peer` matches only `all`.
bool allowed(const std::vector<config::AccessRule>& rules, const sockaddr* peer);

config::Module& module();

}  // namespace kosoku::access
