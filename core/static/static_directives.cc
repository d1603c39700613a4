// The static module's directives: `index` (nginx's ngx_http_index_module) and `log_not_found`.
#include "core/config/directive.hh"
#include "core/static/static_conf.hh"

namespace kosoku::static_files {

namespace {

using namespace config;  // the directive-table vocabulary

// `index FILE...;` Several lines add up; the first one in a block replaces the inherited/default list.
bool set_index(Builder& b, Scope& s, const Directive& d) {
  std::vector<std::string>& index = s.loc->module<StaticLocConf>().index;
  if (!s.seen->has("index")) index.clear();
  for (const Arg& a : d.args) {
    if (a.value.empty()) return b.fail(a.loc, "index \"\" in \"index\" directive is invalid");
    index.push_back(a.value);
  }
  return true;
}

constexpr DirectiveSpec kStaticDirectives[] = {
    {.name = "index", .contexts = kCtxHttpAny, .args = k1More, .flags = kMulti, .set = set_index,
     .merge_loc = inherit<&StaticLocConf::index>, .default_value = "index.html"},
    {.name = "log_not_found", .contexts = kCtxHttpAny, .args = kTake1, .set = set_flag<&StaticLocConf::log_not_found>,
     .merge_loc = inherit<&StaticLocConf::log_not_found>, .default_value = "on"},
};

}  // namespace

std::span<const DirectiveSpec> directives() { return kStaticDirectives; }

}  // namespace kosoku::static_files
