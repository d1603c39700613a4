// `kosoku -t`: load the configuration and report like `nginx -t`.
#pragma once

#include <iosfwd>
#include <string>

namespace kosoku::config {

/// Loads `path` and prints, on success, to `out`:
///   kosoku: the configuration file PATH syntax is ok
///   kosoku: configuration file PATH test is successful
/// and on failure, to `err`:
///   kosoku: [emerg] FILE:LINE:COL: message
///   kosoku: configuration file PATH test failed
/// Warnings go to `err` as `kosoku: [warn] FILE:LINE:COL: message` in both cases.
/// Returns the process exit status: 0 on success, 1 on failure.
int test_config(const std::string& path, std::ostream& out, std::ostream& err);

}  // namespace kosoku::config
