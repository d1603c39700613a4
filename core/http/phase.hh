// nginx's request phases (ngx_http_core_module's phase engine), in the order a request passes them, and the
// response head filters. The
// connection runs its own steps (reading the head, choosing the server and the location, the body limits);
// modules join a phase with a PhaseHandler in their descriptor (config/module.hh: Module::phases), and the
// HttpServer flattens every module's handlers once, at start, in phase order and, within a phase, in registry
// order (HttpServer::phase_handlers).
#pragma once

#include <cstdint>
#include <string>

namespace kosoku::http {

class Exchange;

enum class Phase : uint8_t {
  kPostRead,       // the head is read: URI normalisation
  kServerRewrite,  // the server-level `return`
  kFindConfig,     // the location, then its body-size and Expect checks
  kRewrite,        // rewrite-module work inside the location
  kAccess,         // allow/deny and other access checks
  kPreContent,     // try_files-like steps before the content handler
  kContent,        // the location's content handler (LocationConf::content) or `return`
  kLog,            // after the response: the modules' handlers, then access_log (their result is not asked)
};

enum class PhaseResult : uint8_t {
  kNext,  // go on with the next handler
  kDone,  // the handler answered the request (or will): stop here
  /// REWRITE only: the handler changed the URI (Exchange::set_uri); the location is searched again for it and
  /// REWRITE runs in the new location (nginx's POST_REWRITE → FIND_CONFIG), at most 10 times per request.
  /// Elsewhere it means kNext.
  kFindConfig,
};

struct PhaseHandler {
  Phase phase = Phase::kAccess;
  PhaseResult (*run)(Exchange& ex) = nullptr;
};

/// A module's part in every response head (nginx's header filter chain): `run` appends the fields it adds to
/// the head of a response with `status`, each "Name: value\r\n", after the handler's own. Run in registry order.
struct HeadFilter {
  void (*run)(const Exchange& ex, int status, std::string& fields) = nullptr;
};

}  // namespace kosoku::http
