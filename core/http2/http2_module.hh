// The HTTP/2 module's descriptor (config/module.hh), for the registry (core/modules.cc).
#pragma once

#include "core/config/module.hh"

namespace kosoku::http2 {

config::Module& module();

}  // namespace kosoku::http2
