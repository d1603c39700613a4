// A stream layered over another (TLS records over a TCP stream): the layer is the handler of the stream
// below it and the Stream of the layer above it (the HTTP framing), so the layer above runs unchanged on
// both network backends and with or without the layer.
//
// Lifetime: the layer lives as long as the stream below it. When that one closes (StreamHandler::on_closed),
// the layer tells its own handler (on_closed, the last callback) and frees itself afterwards, outside any of
// its callers' frames.
#pragma once

#include "core/net/stream.hh"

namespace kosoku::net {

class FilterStream : public Stream, public StreamHandler {
 public:
  /// The handler of this stream (set before the first callback can run; replaced by a protocol that takes
  /// the connection over).
  void set_handler(StreamHandler* h) override { handler_ = h; }

 protected:
  ~FilterStream() = default;
  StreamHandler* handler_ = nullptr;
};

}  // namespace kosoku::net
