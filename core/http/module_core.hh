// A module's per-core part (config/module.hh: Module::init_core): what a module keeps on one loop — its
// content handler, its pollers and timers, its per-core caches. Created on the loop's thread by
// HttpServer::init_modules in registry order, destroyed by the HttpServer in reverse order; used only on that
// loop.
#pragma once

namespace kosoku::config {
struct ListenSocket;
}  // namespace kosoku::config
namespace kosoku::net {
class FilterStream;
class Stream;
}  // namespace kosoku::net

namespace kosoku::http {

class ContentHandler;

class ModuleCore {
 public:
  virtual ~ModuleCore() = default;
  /// The module's content handler on this core (for the locations its Module::content predicate accepts);
  /// null if the module provides none. Stable for the core's lifetime.
  virtual ContentHandler* content_handler() { return nullptr; }
  /// A stream accepted on `listen`: a module that layers a protocol under HTTP (TLS) returns the layer, the
  /// stream the HTTP framing then reads and writes (the caller sets its handler and makes it the handler of
  /// `s`); null: not this module's socket. Asked of every module in registry order; the first layer wins.
  virtual net::FilterStream* filter_accepted(net::Stream& s, const config::ListenSocket& listen) { return nullptr; }
};

}  // namespace kosoku::http
