#include "core/cache/cache_variables.hh"

#include "absl/strings/match.h"
#include "core/cache/split_clients.hh"

namespace kosoku::cache {

bool find_arg(std::string_view query, std::string_view name, std::string_view* value) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    size_t eq = pair.find('=');
    std::string_view n = pair.substr(0, eq);
    if (absl::EqualsIgnoreCase(n, name)) {
      *value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      return true;
    }
  }
  return false;
}

bool find_cookie(std::string_view header, std::string_view name, std::string_view* value) {
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view item = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view n = item.substr(0, eq);
    while (!n.empty() && (n.back() == ' ' || n.back() == '\t')) n.remove_suffix(1);
    if (absl::EqualsIgnoreCase(n, name)) {
      std::string_view v = item.substr(eq + 1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      *value = v;
      return true;
    }
  }
  return false;
}

bool CacheVariables::get(config::VarId id, std::string_view suffix, std::string& out) const {
  using config::VarId;
  switch (id) {
    case VarId::kArg: {
      std::string_view v;
      if (!find_arg(ex_.args(), suffix, &v)) return false;
      out.append(v);
      return true;
    }
    case VarId::kCookie: {
      for (const http::HeaderField& f : ex_.request().headers()) {
        if (f.token != http::HeaderToken::kCookie) continue;
        std::string_view v;
        if (find_cookie(f.value, suffix, &v)) {
          out.append(v);
          return true;
        }
      }
      return false;
    }
    case VarId::kDeclared: {
      const SplitClientsConf* sc = ex_.core().conf->http.cache.find_split(suffix);
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
