// The `status` module's configuration and descriptor (stats/status_module.cc).
#pragma once

#include "core/config/module_conf.hh"

namespace kosoku::config {
struct Module;
}

namespace kosoku::stats {

struct StatusLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  bool enabled = false;  // `status;` or `stub_status;`: this location serves the counters
  bool stub_page = false;  // `stub_status;`: only nginx's four stub_status lines, whatever the arguments
};

config::Module& status_module();

}  // namespace kosoku::stats
