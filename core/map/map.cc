// The map lookup (map_conf.hh): nginx's ngx_http_map_find over one map — exact strings (case-insensitive),
// host-name masks, regexes in file order — and the getter of the declared variables.
#include <algorithm>
#include <string>

#include "core/config/conf.hh"
#include "core/config/regex.hh"
#include "core/http/exchange.hh"
#include "core/http/variables.hh"
#include "core/map/map_conf.hh"
#include "re2/re2.h"

namespace kosoku::map {

namespace {

// Nesting bound for map variables whose source or value uses another map variable (or itself).
constexpr int kMaxDepth = 8;

absl::string_view key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// nginx's ngx_hash_find_wc_head: the longest `*.`/`.` mask that `host` falls under.
const HeadMask* find_head(const MapConf& m, std::string_view host) {
  auto it = m.head.find(key(host));
  if (it != m.head.end() && !it->second.star) return &it->second;  // ".example.com" matches "example.com"
  for (size_t dot = host.find('.'); dot != std::string_view::npos; dot = host.find('.', dot + 1)) {
    it = m.head.find(key(host.substr(dot + 1)));
    if (it != m.head.end()) return &it->second;
  }
  return nullptr;
}

// nginx's ngx_hash_find_wc_tail: the longest `.*` mask that `host` falls under (at least one label follows).
const uint32_t* find_tail(const MapConf& m, std::string_view host) {
  for (size_t dot = host.rfind('.'); dot != std::string_view::npos && dot > 0; dot = host.rfind('.', dot - 1)) {
    auto it = m.tail.find(key(host.substr(0, dot)));
    if (it != m.tail.end()) return &it->second;
  }
  return nullptr;
}

}  // namespace

const MapValue& find_value(const MapConf& m, std::string_view source, Captures& caps) {
  caps.fill({});
  if (m.hostnames && !source.empty() && source.back() == '.') source.remove_suffix(1);
  if (!m.exact.empty() || !m.head.empty() || !m.tail.empty()) {
    thread_local std::string lower;
    lower.assign(source);
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
    }
    auto it = m.exact.find(key(lower));
    if (it != m.exact.end()) return m.values[it->second];
    if (!m.head.empty()) {
      if (const HeadMask* h = find_head(m, lower)) return m.values[h->value];
    }
    if (!m.tail.empty()) {
      if (const uint32_t* t = find_tail(m, lower)) return m.values[*t];
    }
  }
  if (!source.empty()) {
    re2::StringPiece text(source.data(), source.size());
    for (const MapRegex& r : m.regexes) {
      const MapValue& v = m.values[r.value];
      const re2::RE2& re = config::per_core_regex(*r.re);
      if (v.max_capture == 0) {
        if (re.Match(text, 0, text.size(), re2::RE2::UNANCHORED, nullptr, 0)) return v;
        continue;
      }
      re2::StringPiece sub[10];
      const int n = std::min(v.max_capture, re.NumberOfCapturingGroups()) + 1;
      if (!re.Match(text, 0, text.size(), re2::RE2::UNANCHORED, sub, n)) continue;
      for (int i = 0; i < n; ++i) caps[i] = std::string_view(sub[i].data(), sub[i].size());
      return v;
    }
  }
  return m.values[0];
}

void expand_value(const MapValue& v, const Captures& caps, const config::VariableSource& src, std::string& out) {
  for (const MapValue::Piece& p : v.pieces) {
    if (p.tpl) {
      config::expand(*p.tpl, src, out);
    } else {
      out.append(caps[p.capture]);
    }
  }
}

bool map_variable(const config::VariableSource& src, std::string_view name, std::string& out) {
  const config::MainConf* conf = src.exchange().core().conf;
  if (conf == nullptr) return false;
  const MapConf* m = conf->http.module<MapHttpConf>().find(name);
  if (m == nullptr || src.depth >= kMaxDepth) return false;
  ++src.depth;
  std::string source;
  config::expand(*m->source, src, source);
  Captures caps;
  const MapValue& value = find_value(*m, source, caps);
  expand_value(value, caps, src, out);
  --src.depth;
  return true;
}

}  // namespace kosoku::map
