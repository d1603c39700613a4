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

  /// What a module says of a connection's first bytes (take_stream).
  enum class Take {
    kNo,     // not this module's protocol: HTTP/1.1 reads the request
    kMore,   // the bytes so far could begin the module's protocol: ask again once more have arrived
    kTaken,  // the module made a handler of its own the stream's (net::Stream::set_handler)
  };
  /// Whether the module may take connections over (take_stream is then asked); fixed for the core's life.
  virtual bool takes_streams() const { return false; }
  /// Before the first request of a connection accepted on `listen` is parsed, with its first bytes in
  /// s.input() (and the TLS layer's ALPN choice in s.alpn()): a module that speaks another protocol on the
  /// stream (HTTP/2: its connection preface) takes it over. kTaken: the module's handler owns the stream from
  /// now on and will read the input already there; the HTTP/1.1 connection lets go of the stream at once.
  virtual Take take_stream(net::Stream& s, const config::ListenSocket& listen) { return Take::kNo; }
};

}  // namespace kosoku::http
