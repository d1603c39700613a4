// A module (nginx's ngx_module_t): the unit that owns a folder — its conf types (config/module_conf.hh), its
// directive table, its load-time checks, its variables, the request phases it joins, its per-core run-time part
// and the content handler it provides.
// The core names no module: it walks the registry, `modules()`, which core/modules.cc lists in order (as
// nginx's generated objs/ngx_modules.c). Adding a module is one folder plus one line there; adding a
// directive to a module touches only that module's folder.
//
// Order matters twice: finalize hooks run in registry order, and a location's content handler is the first
// module in registry order whose `content` predicate accepts it (resolved once, at load: LocationConf::content).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/variables.hh"
#include "core/http/phase.hh"

namespace kosoku::http {
class HttpServer;
class ModuleCore;
}  // namespace kosoku::http

namespace kosoku::config {

class Builder;
struct Directive;
struct DirectiveSpec;
struct LocationConf;

struct Module {
  std::string_view name;  // "proxy", "cache" ... (for logs and tests)
  /// The directives this module owns (may be empty).
  std::span<const DirectiveSpec> directives;
  /// Before any directive is applied, with the whole parsed file (includes spliced in): declares the variables
  /// the module's directives will define (config::declare_variable), so that a template may name one before
  /// the directive that defines it, as nginx resolves variables once the file is read. Null: nothing to declare.
  void (*predeclare)(const std::vector<Directive>& tree) = nullptr;
  /// After the whole file is read and merged down: resolve names, check combinations, build derived data.
  /// False with the error recorded in the Builder (b.fail).
  bool (*finalize)(Builder& b) = nullptr;
  /// The variables the module gives values to (config/variables.hh), resolvable in every template.
  std::span<const Variable> variables;
  /// The request-phase handlers the module joins (http/phase.hh), run for every request in phase order.
  std::span<const http::PhaseHandler> phases;
  /// The fields the module adds to response heads (http/phase.hh: HeadFilter), in registry order.
  std::span<const http::HeadFilter> head_filters;
  /// Whether this module is the content handler of `loc` (nginx: a location directive that sets the
  /// location's handler, such as proxy_pass). Null: the module provides no content handler.
  bool (*content)(const LocationConf& loc) = nullptr;
  /// Creates the module's per-core part on the loop's thread, after the HttpServer exists and after the
  /// per-core parts of the modules before it in the registry (it may look them up: HttpServer::module_core).
  /// Null hook: nothing per core. A null result with `*error` set fails the worker's start.
  std::unique_ptr<http::ModuleCore> (*init_core)(http::HttpServer& server, std::string* error) = nullptr;

  /// Position in modules() (set by the registry).
  size_t index = 0;
};

/// Every module, in registry order (core/modules.cc). Stable for the process's lifetime.
std::span<Module* const> modules();

// The core's own descriptors (config/core_modules.cc).
Module& core_module();
Module& appliance_module();
Module& network_module();
Module& http_core_module();
Module& http_module();
Module& no_effect_module();

}  // namespace kosoku::config
