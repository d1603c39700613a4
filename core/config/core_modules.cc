// The core's own module descriptors (config/module.hh): the directive tables of config/directives_*.cc. They
// have no per-core part and serve no location; they come first in the registry (core/modules.cc).
#include <atomic>

#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"

namespace kosoku::config {

namespace detail {
size_t next_conf_slot() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace detail

Module& core_module() {
  static Module m{.name = "core", .directives = core_directives()};
  return m;
}

Module& appliance_module() {
  static Module m{.name = "appliance", .directives = appliance_directives()};
  return m;
}

Module& network_module() {
  static Module m{.name = "network", .directives = dpdk_directives(), .finalize = &finalize_dpdk};
  return m;
}

Module& http_core_module() {
  static Module m{.name = "http_core", .directives = http_server_directives()};
  return m;
}

Module& http_module() {
  static Module m{.name = "http", .directives = http_directives()};
  return m;
}

Module& no_effect_module() {
  static Module m{.name = "no_effect", .directives = no_effect_directives()};
  return m;
}

}  // namespace kosoku::config
