// The map module (map_conf.hh): the `map` directive, which reads its block's entries and declares the
// variable, and the module descriptor. Wording and checks are nginx's (ngx_http_map_module): `invalid number
// of the map parameters`, `duplicate default map parameter`, `conflicting parameter "x"`, `invalid hostname or
// wildcard "x"`, `the duplicate "x" variable`; a regex RE2 cannot compile (nginx's PCRE-only syntax such as
// lookahead) is `invalid regular expression "x": ...`, as a location's.
//
// A second map for the same variable replaces the first (nginx: the last map block wins).
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/map/map_conf.hh"
#include "re2/re2.h"

namespace kosoku::map {

namespace {

using namespace config;  // the directive-table vocabulary

absl::string_view key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Declares `$name` as a map variable. A name an earlier load of this process declared for a map is reused
// (its getter reads the current configuration); any other known name is nginx's duplicate.
bool declare_map_variable(std::string_view name) {
  if (declare_variable(name, &map_variable)) return true;
  Template t = compile(absl::StrCat("$", name), SourceLoc{}, nullptr);
  return t.segments.size() == 1 && t.segments[0].is_variable && t.segments[0].var->get == &map_variable &&
         t.segments[0].text == name;
}

// A value: text with variables (config::compile), split at nginx's capture references `$1`..`$9`.
bool compile_value(Builder& b, const Arg& a, MapValue* v) {
  const std::string& text = a.value;
  size_t start = 0;
  auto add_text = [&](size_t end) {
    if (end == start) return true;
    Arg part{text.substr(start, end - start), a.loc, a.quoted};
    std::shared_ptr<const Template> t = compile_arg(b, part);
    if (!t) return false;
    v->pieces.push_back(MapValue::Piece{std::move(t), 0});
    return true;
  };
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] != '$' || text[i + 1] < '1' || text[i + 1] > '9') continue;
    if (!add_text(i)) return false;
    const int n = text[i + 1] - '0';
    v->pieces.push_back(MapValue::Piece{nullptr, n});
    v->max_capture = std::max(v->max_capture, n);
    start = i + 2;
    ++i;
  }
  return add_text(text.size());
}

// The entries of one block while it is read: what nginx's ngx_hash_add_key checks for conflicts.
struct Entries {
  MapConf& m;
  bool hostnames = false;                    // `hostnames;` seen (applies to the entries after it)
  absl::flat_hash_set<std::string> names;    // exact names, and the names `.example.com` also covers

  // A source string (already stripped of a leading `\`), lower-cased. Returns the error text, or "".
  std::string add(std::string name, uint32_t value) {
    name = absl::AsciiStrToLower(name);
    if (hostnames) {
      size_t stars = 0;
      for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '*' && ++stars > 1) return invalid(name);
        if (name[i] == '.' && i + 1 < name.size() && name[i + 1] == '.') return invalid(name);
        if (name[i] == '\0') return invalid(name);
      }
      if (name.size() > 1 && name[0] == '.') {  // ".example.com": the name and its subdomains
        std::string bare = name.substr(1);
        if (names.contains(bare) || m.head.contains(bare)) return conflicting(name);
        names.insert(bare);
        m.head.emplace(std::move(bare), HeadMask{value, false});
        return {};
      }
      if (name.size() > 2 && name[0] == '*' && name[1] == '.') {  // "*.example.com": subdomains only
        std::string bare = name.substr(2);
        if (m.head.contains(bare)) return conflicting(name);
        m.head.emplace(std::move(bare), HeadMask{value, true});
        return {};
      }
      if (name.size() > 2 && name[name.size() - 2] == '.' && name.back() == '*') {  // "www.example.*"
        std::string bare = name.substr(0, name.size() - 2);
        if (m.tail.contains(bare)) return conflicting(name);
        m.tail.emplace(std::move(bare), value);
        return {};
      }
      if (stars != 0) return invalid(name);
    }
    if (names.contains(name)) return conflicting(name);
    names.insert(name);
    m.exact.emplace(std::move(name), value);
    return {};
  }

  static std::string invalid(std::string_view name) {
    return absl::StrCat("invalid hostname or wildcard ", quoted(name));
  }
  static std::string conflicting(std::string_view name) { return absl::StrCat("conflicting parameter ", quoted(name)); }
};

// `map STRING $variable { ... }` (http).
bool set_map(Builder& b, Scope& s, const Directive& d) {
  auto m = std::make_shared<MapConf>();
  m->source = compile_arg(b, d.args[0]);
  if (!m->source) return false;
  std::string_view var = d.args[1].value;
  if (var.size() < 2 || var[0] != '$') {
    return b.fail(d.args[1].loc, absl::StrCat("invalid variable name ", quoted(var)));
  }
  m->variable = absl::AsciiStrToLower(var.substr(1));
  for (char c : m->variable) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return b.fail(d.args[1].loc, absl::StrCat("invalid variable name ", quoted(var)));
    }
  }
  // Declared before the entries are read: a value may name the variable itself (bounded at run time).
  if (!declare_map_variable(m->variable)) {
    return b.fail(d.args[1].loc, absl::StrCat("the duplicate ", quoted(m->variable), " variable"));
  }
  m->values.emplace_back();  // the default (empty) until `default` says otherwise
  bool has_default = false;
  Entries entries{*m};
  for (const Directive& c : d.children) {
    if (c.block) return b.fail(c.loc, "unexpected \"{\"");
    if (c.args.empty() && c.name == "hostnames") {
      entries.hostnames = true;
      m->hostnames = true;
      continue;
    }
    if (c.args.empty() && c.name == "volatile") continue;  // values are never cached within a request
    if (c.args.size() != 1) return b.fail(c.loc, "invalid number of the map parameters");
    MapValue value;
    if (!compile_value(b, c.args[0], &value)) return false;
    if (c.name == "default") {
      if (has_default) return b.fail(c.loc, "duplicate default map parameter");
      has_default = true;
      m->values[0] = std::move(value);
      continue;
    }
    const uint32_t index = static_cast<uint32_t>(m->values.size());
    m->values.push_back(std::move(value));
    std::string_view name = c.name;
    if (!name.empty() && name[0] == '~') {
      name.remove_prefix(1);
      const bool caseless = !name.empty() && name[0] == '*';
      if (caseless) name.remove_prefix(1);
      re2::RE2::Options o;
      o.set_log_errors(false);
      o.set_case_sensitive(!caseless);
      const std::string spelled = re2_spelling(name);  // nginx's (?<name>...) is RE2's (?P<name>...)
      auto re = std::make_shared<const re2::RE2>(re2::StringPiece(spelled.data(), spelled.size()), o);
      if (!re->ok()) {
        return b.fail(c.loc, absl::StrCat("invalid regular expression ", quoted(name), ": ", re->error()));
      }
      m->regexes.push_back(MapRegex{std::move(re), index});
      continue;
    }
    if (!name.empty() && name[0] == '\\') name.remove_prefix(1);
    std::string err = entries.add(std::string(name), index);
    if (!err.empty()) return b.fail(c.loc, err);
  }
  s.main->http.module<MapHttpConf>().maps.insert_or_assign(m->variable, std::move(m));
  return true;
}

constexpr DirectiveSpec kMapDirectives[] = {
    {.name = "map", .contexts = kCtxHttp, .args = kTake2, .flags = kBlock | kMulti | kDataBlock, .set = set_map},
};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "map", .directives = kMapDirectives};
  return m;
}

}  // namespace kosoku::map
