#include "core/config/check.hh"

#include <ostream>

#include "core/config/loader.hh"

namespace kosoku::config {

int test_config(const std::string& path, std::ostream& out, std::ostream& err) {
  LoadResult r = load(path);
  for (const std::string& w : r.warnings) err << "kosoku: [warn] " << w << '\n';
  if (!r.ok()) {
    err << "kosoku: [emerg] " << r.error.message << '\n';
    err << "kosoku: configuration file " << path << " test failed\n";
    return 1;
  }
  out << "kosoku: the configuration file " << path << " syntax is ok\n";
  out << "kosoku: configuration file " << path << " test is successful\n";
  return 0;
}

}  // namespace kosoku::config
