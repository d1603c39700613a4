#include "core/cache/cache_variables.hh"

#include "core/cache/cache_conf.hh"
#include "core/cache/split_clients.hh"
#include "core/config/conf.hh"
#include "core/http/variables.hh"

namespace kosoku::cache {

bool split_clients_value(const config::VariableSource& src, std::string_view name, std::string& out) {
  const config::MainConf* conf = src.exchange().core().conf;
  if (conf == nullptr) return false;
  const SplitClientsConf* sc = conf->http.module<CacheHttpConf>().find_split(name);
  // A source string may use variables, split_clients ones among them: bounded recursion.
  if (sc == nullptr || src.depth > 8) return false;
  std::string source;
  ++src.depth;
  config::expand(*sc->source, src, source);
  --src.depth;
  out.append(split_value(*sc, source));
  return true;
}

bool any_predicate(const std::vector<std::shared_ptr<const config::Template>>& list, const http::Exchange& ex) {
  if (list.empty()) return false;
  http::RequestVariables vars(ex, ex.core().reactor);
  std::string v;
  for (const auto& t : list) {
    v.clear();
    config::expand(*t, vars, v);
    if (!v.empty() && v != "0") return true;
  }
  return false;
}

}  // namespace kosoku::cache
