#include "core/cache/cache_variables.hh"

#include "absl/strings/match.h"
#include "core/cache/split_clients.hh"

namespace kosoku::cache {

bool CacheVariables::get(config::VarId id, std::string_view suffix, std::string& out) const {
  using config::VarId;
  switch (id) {
    case VarId::kDeclared: {
      const SplitClientsConf* sc = ex_.core().conf->http.module<cache::CacheHttpConf>().find_split(suffix);
      if (sc == nullptr || depth_ > 8) return false;
      std::string source;
      ++depth_;
      config::expand(*sc->source, *this, source);
      --depth_;
      out.append(split_value(*sc, source));
      return true;
    }
    default:
      return proxy_.get(id, suffix, out);
  }
}

bool any_predicate(const std::vector<std::shared_ptr<const config::Template>>& list, const http::Exchange& ex) {
  if (list.empty()) return false;
  CacheVariables vars(ex);
  std::string v;
  for (const auto& t : list) {
    v.clear();
    config::expand(*t, vars, v);
    if (!v.empty() && v != "0") return true;
  }
  return false;
}

}  // namespace kosoku::cache
