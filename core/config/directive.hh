// A directive table row, nginx's ngx_command_t in typed C++ (style-anchors §1): one row per directive
// with its name, the contexts it may appear in, its argument count, a typed setter, and how it is
// inherited (its merge function) next to its default. Each module keeps its rows in its own folder and names
// its table in its Module descriptor (config/module.hh); the loader finds every row through the module
// registry, so a module's directive is added by editing only that module's folder.
//
// Setters write typed fields through member pointers (`set_flag<&LocationConf::etag>`, and the same for a
// module's conf: `set_flag<&cache::CacheLocConf::lock>` writes the block's CacheLocConf, config/module_conf.hh);
// there is no void* and no offsetof. "Unset" is not stored in the conf structs: a block records which slots it
// set (Seen), and finalize copies every unset slot from the enclosing block with the row's merge function, so
// the conf initialisers are the defaults at the outermost level (nginx's ngx_conf_merge_*_value).
// Generic checks done before any setter: unknown directive, wrong context ("is not allowed here"),
// `;` vs `{`, argument count, duplicates ("is duplicate") for rows without kMulti.
#pragma once

#include <cstdint>
#include <memory>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/values.hh"

namespace re2 {
class RE2;
}

namespace kosoku::config {

/// Argument count: min..max words after the name (nginx's NGX_CONF_NOARGS / TAKE1 / TAKE12 / 1MORE ...).
struct Args {
  uint8_t min = 0;
  uint8_t max = 0;
};
inline constexpr uint8_t kAnyArgs = 255;
inline constexpr Args kNoArgs{0, 0};
inline constexpr Args kTake1{1, 1};
inline constexpr Args kTake2{2, 2};
inline constexpr Args kTake12{1, 2};
inline constexpr Args kTake123{1, 3};
inline constexpr Args kTake23{2, 3};
inline constexpr Args k1More{1, kAnyArgs};
inline constexpr Args k2More{2, kAnyArgs};

/// Row flags.
enum DirectiveFlag : uint32_t {
  kBlock = 1u << 0,  // takes a `{ ... }` body (else must end with `;`)
  kMulti = 1u << 1,  // may repeat in one block (listen, allow, add_header, ...); else "is duplicate"
  kDataBlock = 1u << 2,  // its block holds data lines, not directives (map, types, split_clients)
};

using SetFn = bool (*)(Builder& b, Scope& s, const Directive& d);
using MergeSrv = void (*)(ServerConf& child, const ServerConf& parent);
using MergeLoc = void (*)(LocationConf& child, const LocationConf& parent);

struct DirectiveSpec {
  std::string_view name;
  uint32_t contexts = 0;  // Context bits
  Args args;
  uint32_t flags = 0;     // DirectiveFlag bits
  SetFn set = nullptr;
  /// Inheritance when the block did not set the slot: http → server (merge_srv), and http → server →
  /// location → nested location (merge_loc). Null: not inherited (e.g. `return`, `try_files`, `status`).
  MergeSrv merge_srv = nullptr;
  MergeLoc merge_loc = nullptr;
  /// nginx's default, as configuration text ("75s", "on"); equal to the conf.hh initialiser (a unit test
  /// checks). Empty: no default value (lists, blocks) or not expressible as arguments.
  std::string_view default_value = {};
  /// Slot shared by several rows (root/alias; allow/deny); empty: the directive's own name.
  std::string_view slot = {};
};

/// The slot a row marks in its block.
inline std::string_view slot_of(const DirectiveSpec& row) { return row.slot.empty() ? row.name : row.slot; }

/// Every module's table, in registry order (config/module.hh). A name is claimed by at most one row per
/// context (unit-tested): `server` is a block in http and a line in upstream, `address` a line in appliance
/// and in dpdk.
std::vector<std::span<const DirectiveSpec>> directive_tables();
/// The row named `name` that may appear in context `ctx`; else some row of that name (its contexts then
/// exclude `ctx`: "not allowed here"); else null (unknown directive).
const DirectiveSpec* find_directive(std::string_view name, uint32_t ctx);
/// Whether every row named `name` takes a block (`location`, `http`, `events`; not `server`, a line in
/// upstream): the parser then reports `directive "NAME" has no opening "{"` where the `;` ends it, as nginx does,
/// rather than the stray `}` the missing `{` leaves further on.
bool is_block_only_directive(std::string_view name);
/// Whether a row named `name` takes a data block (kDataBlock): inside it a line's first word is data (a map key
/// may be "http"), so the parser's block-only check is not applied there.
bool is_data_block_directive(std::string_view name);

// The core's own tables (config/directives_*.cc), named by the core module descriptors (config/module.cc).
std::span<const DirectiveSpec> core_directives();
std::span<const DirectiveSpec> http_directives();
std::span<const DirectiveSpec> http_server_directives();
std::span<const DirectiveSpec> appliance_directives();
std::span<const DirectiveSpec> dpdk_directives();   // directives_dpdk.cc
std::span<const DirectiveSpec> no_effect_directives();  // directives_no_effect.cc

// ---- typed setters and merge functions ----

template <class T>
struct MemberOf;
template <class C, class T>
struct MemberOf<T C::*> {
  using Class = C;
  using Type = T;
};

/// The object of class C that the scope's directives write.
template <class C>
C& target(Scope& s) {
  if constexpr (ModuleConf<C>) {
    if constexpr (C::kLevel == ConfLevel::kLocation) return s.loc->template module<C>();
    if constexpr (C::kLevel == ConfLevel::kServer) return s.srv->template module<C>();
    if constexpr (C::kLevel == ConfLevel::kHttp) return s.main->http.template module<C>();
    if constexpr (C::kLevel == ConfLevel::kMain) return s.main->template module<C>();
  } else if constexpr (std::is_same_v<C, LocationConf>) {
    return *s.loc;
  } else if constexpr (std::is_same_v<C, ServerConf>) {
    return *s.srv;
  } else if constexpr (std::is_same_v<C, MainConf>) {
    return *s.main;
  } else if constexpr (std::is_same_v<C, DpdkConf>) {
    return s.main->network.dpdk;
  } else {
    static_assert(std::is_same_v<C, ApplianceConf>, "no scope target for this class");
    return s.main->appliance;
  }
}

/// `invalid value "X" in "NAME" directive` (nginx's wording for a value a setter refuses).
bool fail_invalid_value(Builder& b, const Directive& d, size_t arg, std::string_view extra = {});
/// Parses `on`/`off` (nginx's ngx_conf_set_flag_slot wording on error).
bool parse_flag_arg(Builder& b, const Directive& d, size_t arg, bool* out);
/// Compiles argument `a` as a string with variables (config/variables.hh) whose values get `escape`; null with
/// the error recorded at `a`'s location (the first error of the build is kept).
std::shared_ptr<const Template> compile_arg(Builder& b, const Arg& a, LogEscape escape = LogEscape::kNone);

/// Compiles a configuration regex (nginx's `(?<name>` spelling accepted: re2_spelling), case-insensitive when
/// `caseless`; null with `invalid regular expression "P": REASON` recorded at `loc`.
std::shared_ptr<re2::RE2> compile_regex(Builder& b, std::string_view pattern, bool caseless, const SourceLoc& loc);

/// `NAME on|off;`
template <auto M>
bool set_flag(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  bool v;
  if (!parse_flag_arg(b, d, 0, &v)) return false;
  target<C>(s).*M = v;
  return true;
}

/// `NAME TIME;` stored in milliseconds.
template <auto M>
bool set_msec(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  auto v = parse_time_ms(d.args[0].value);
  if (!v) return fail_invalid_value(b, d, 0);
  target<C>(s).*M = *v;
  return true;
}

/// `NAME TIME;` for nginx's second-granular slots (`ms` refused), stored in milliseconds.
template <auto M>
bool set_sec_as_msec(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  auto v = parse_time_sec(d.args[0].value);
  if (!v) return fail_invalid_value(b, d, 0);
  target<C>(s).*M = *v * 1000;
  return true;
}

/// `NAME SIZE;` in bytes.
template <auto M>
bool set_size(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  auto v = parse_size(d.args[0].value);
  if (!v) return fail_invalid_value(b, d, 0);
  target<C>(s).*M = static_cast<typename MemberOf<decltype(M)>::Type>(*v);
  return true;
}

/// `NAME N;` (decimal, fits the field, at least 1 unless Min says 0).
template <auto M, uint64_t Min = 1>
bool set_number(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  using T = typename MemberOf<decltype(M)>::Type;
  auto v = parse_number(d.args[0].value, static_cast<uint64_t>(std::numeric_limits<T>::max()));
  if (!v || *v < Min) return fail_invalid_value(b, d, 0);
  target<C>(s).*M = static_cast<T>(*v);
  return true;
}

/// `NAME STRING;` (non-empty).
template <auto M>
bool set_string(Builder& b, Scope& s, const Directive& d) {
  using C = typename MemberOf<decltype(M)>::Class;
  if (d.args[0].value.empty()) return fail_invalid_value(b, d, 0);
  target<C>(s).*M = d.args[0].value;
  return true;
}

/// Accepts the arguments and stores nothing (documented no-op directives); validates on|off.
bool set_ignored_flag(Builder& b, Scope& s, const Directive& d);

/// The block type that holds an object of class C during merging: C itself for the core structs, the
/// LocationConf / ServerConf for a module's location- / server-level conf.
template <class C>
struct MergeHost {
  using type = C;
};
template <ModuleConf C>
struct MergeHost<C> {
  static_assert(C::kLevel == ConfLevel::kLocation || C::kLevel == ConfLevel::kServer,
                "only location and server confs are merged down");
  using type = std::conditional_t<C::kLevel == ConfLevel::kLocation, LocationConf, ServerConf>;
};
template <class C>
using MergeHostOf = typename MergeHost<C>::type;

/// The C inside block `host` (the block itself for a core struct).
template <class C>
C& conf_in(MergeHostOf<C>& host) {
  if constexpr (ModuleConf<C>) {
    return host.template module<C>();
  } else {
    return host;
  }
}
template <class C>
const C& conf_in(const MergeHostOf<C>& host) {
  if constexpr (ModuleConf<C>) {
    return host.template module<C>();
  } else {
    return host;
  }
}

/// merge: copy the field(s) from the enclosing block (nginx's ngx_conf_merge_value with the default already
/// sitting in the outermost block). Several members of one class merge as one slot (`proxy_buffers N SIZE`).
template <auto M, auto... More>
void inherit(MergeHostOf<typename MemberOf<decltype(M)>::Class>& child,
             const MergeHostOf<typename MemberOf<decltype(M)>::Class>& parent) {
  using C = typename MemberOf<decltype(M)>::Class;
  C& c = conf_in<C>(child);
  const C& p = conf_in<C>(parent);
  c.*M = p.*M;
  ((c.*More = p.*More), ...);
}

}  // namespace kosoku::config
