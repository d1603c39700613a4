// `kosoku -t`: load the configuration and report like `nginx -t`.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "core/config/conf.hh"

namespace kosoku::config {

/// Loads `path` and prints, on success, to `out`:
///   kosoku: the configuration file PATH syntax is ok
///   kosoku: configuration file PATH test is successful
/// and on failure, to `err`:
///   kosoku: [emerg] FILE:LINE:COL: message
///   kosoku: configuration file PATH test failed
/// Warnings go to `err` as `kosoku: [warn] FILE:LINE:COL: message` in both cases.
/// `check_data` (optional) runs after a successful load to check the files a module reads at start (the cache
/// rules file): false with *error fails the test with `kosoku: [emerg] ERROR`, the message the start-up
/// would stop with. Returns the process exit status: 0 on success, 1 on failure.
using DataCheck = std::function<bool(const MainConf& conf, std::string* error)>;
int test_config(const std::string& path, std::ostream& out, std::ostream& err, const DataCheck& check_data = {});

}  // namespace kosoku::config
