#include "core/config/check.hh"

#include <ostream>

#include "core/config/loader.hh"

namespace kosoku::config {

int test_config(const std::string& path, std::ostream& out, std::ostream& err, const DataCheck& check_data) {
  LoadResult r = load(path);
  for (const std::string& n : r.notices) err << "kosoku: [notice] " << n << '\n';
  for (const std::string& w : r.warnings) err << "kosoku: [warn] " << w << '\n';
  std::string data_error;
  if (!r.ok() || (check_data && !check_data(*r.conf, &data_error))) {
    err << "kosoku: [emerg] " << (r.ok() ? data_error : r.error.message) << '\n';
    err << "kosoku: configuration file " << path << " test failed\n";
    return 1;
  }
  out << "kosoku: the configuration file " << path << " syntax is ok\n";
  out << "kosoku: configuration file " << path << " test is successful\n";
  return 0;
}

}  // namespace kosoku::config
