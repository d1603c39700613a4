// The map module (nginx's ngx_http_map_module): `map STRING $variable { ... }` in the http block declares
// $variable, whose value for a request is the value of the first entry its expanded STRING matches:
//
//   map $http_host$uri $route {
//       hostnames;                  # entries after it are host names: `*.example.com`, `.example.com`, `www.example.*`
//       default        fallback;    # no entry matches (default: the empty string)
//       example.com    exact;       # exact strings, matched ignoring case (a hash lookup)
//       ~^/api/        api;         # regular expressions (RE2), case-sensitive, in file order
//       ~*\.JPG$       image-$host; # case-insensitive; a value may contain variables
//       ~^/u/(\w+)$     user-$1;     # and the captures of its regex, $1..$9
//       \default       literal;     # `\` lets a source value be one of the parameter names
//       include        more.map;    # the parser splices the file's entries in
//       volatile;                   # accepted; kosoku never caches a variable's value within a request
//   }
//
// Order of the search, as nginx: the exact strings, then (hostnames) the longest matching `*.`/`.` mask, then
// the longest matching `.*` mask, then the regular expressions in file order (never for an empty source); else
// the default. With hostnames, one trailing dot of the source is dropped first.
//
// The variable resolves in every template compiled after the map (log_format, add_header, return,
// proxy_set_header, cache keys, another map's source or values); kosoku compiles templates as it reads them,
// so a map must precede the templates that use its variable (nginx accepts a later map).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/config/conf.hh"
#include "core/config/module_conf.hh"
#include "core/config/variables.hh"

namespace re2 {
class RE2;
}

namespace kosoku::config {
struct Module;
}

namespace kosoku::map {

/// A resulting value: text with variables, and (after a regex entry) that regex's captures `$1`..`$9`, nginx's
/// single-digit capture references. A capture a regex did not set, or after a non-regex entry, is empty.
struct MapValue {
  struct Piece {
    std::shared_ptr<const config::Template> tpl;  // the text between captures (null for a capture)
    int capture = 0;                              // 1..9: `$N`
  };
  std::vector<Piece> pieces;
  int max_capture = 0;  // highest `$N` used (0: none; the regex is then matched without submatches)
};

/// The captures of the regex that matched: [n] is `$n` ([0] the whole match); views into the source string.
using Captures = std::array<std::string_view, 10>;

/// A `~regex value;` / `~*regex value;` entry.
struct MapRegex {
  std::shared_ptr<const re2::RE2> re;
  uint32_t value = 0;  // index in MapConf::values
};

/// A host-name mask with a leading wildcard, stored under its name without `*.` / `.`.
struct HeadMask {
  uint32_t value = 0;
  bool star = false;  // `*.example.com`: subdomains only; else `.example.com`: the name and its subdomains
};

/// One `map` block. Immutable once loaded.
struct MapConf {
  std::string variable;                            // without '$', lower-case
  std::shared_ptr<const config::Template> source;  // STRING
  bool hostnames = false;                          // `hostnames;` was written (drop a trailing dot)
  std::vector<MapValue> values;                    // every value; [0] is the default
  absl::flat_hash_map<std::string, uint32_t> exact;  // lower-cased source value → value index
  absl::flat_hash_map<std::string, HeadMask> head;   // `*.example.com` / `.example.com` → "example.com"
  absl::flat_hash_map<std::string, uint32_t> tail;   // `www.example.*` → "www.example"
  std::vector<MapRegex> regexes;                     // file order
};

/// Every map of the http block, by variable name.
struct MapHttpConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kHttp;
  absl::flat_hash_map<std::string, std::shared_ptr<const MapConf>> maps;

  const MapConf* find(std::string_view variable) const {
    auto it = maps.find(absl::string_view(variable.data(), variable.size()));
    return it == maps.end() ? nullptr : it->second.get();
  }
};

/// The value for an already expanded source string (map.cc); `caps` receives a matching regex's captures
/// (cleared first).
const MapValue& find_value(const MapConf& m, std::string_view source, Captures& caps);

/// Appends `v` expanded for the request `src` describes, with the captures `caps`.
void expand_value(const MapValue& v, const Captures& caps, const config::VariableSource& src, std::string& out);

/// The getter of every map variable (declared with config::declare_variable): expands the source, finds the
/// value and appends its expansion. Nested maps (a map variable in a source or a value) are bounded by
/// VariableSource::depth; past the bound the variable is not found.
bool map_variable(const config::VariableSource& src, std::string_view name, std::string& out);

config::Module& module();

}  // namespace kosoku::map
