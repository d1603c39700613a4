// The client half of a proxied response: decoded content from an UpstreamFetch passed on to the client's
// Exchange with nginx's proxy_buffering semantics, in bounded memory — used by the proxy (proxy_handler.hh) and
// by the cache for the responses it passes through (core/cache).
//
// The bytes go through a per-request ring (ref_ring.hh) with zero-copy write_ref: with proxy_buffering on it
// holds proxy_buffers N × SIZE (default 8 × 4k) and at most proxy_busy_buffers_size (default 8k) of it is in
// flight to the client until the response has been read whole; with it off, one proxy_buffer_size buffer.
// room() is the ring's free space: the fetch does not read the upstream while it is 0 (kosoku has no temp files,
// so this bounds the memory per request whatever the body size), and the client's low-water mark is set so
// that the owner's on_writable() comes when the client has taken data (then UpstreamFetch::resume()).
// Framing toward the client is the connection's (Content-Length when known, else chunked to HTTP/1.1).
//
// Output is counted: out_ is every byte the relay's calls queued on the client stream, counted from reset();
// a ring slice is free once out_ − pending_output() has passed it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/http/exchange.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/proxy/ref_ring.hh"

namespace kosoku::proxy {

class ClientRelay {
 public:
  /// Writes (a view of) the content to the client instead of the whole: e.g. the cache's ranges of a 200.
  /// `by_ref`: the bytes stay valid until pending output drops past them (write_ref may be used), else they
  /// are valid during the call only.
  class Filter {
   public:
    virtual void write_content(const char* data, size_t len, bool by_ref) = 0;

   protected:
    ~Filter() = default;
  };

  /// Starts a response on `ex` with `conf`'s buffers. Only while idle() (a finished response drained).
  void reset(http::Exchange& ex, const ProxyLocationConf& conf, Filter* filter = nullptr) {
    ex_ = &ex;
    filter_ = filter;
    // nginx: with proxy_buffering the response is read ahead into proxy_buffers and at most
    // proxy_busy_buffers_size of it is being sent to the client at a time; without, one proxy_buffer_size
    // buffer is read and passed on as it comes. (kosoku has no temp files: a full ring stops the upstream.)
    const size_t cap = conf.buffering ? conf.buffers_num * conf.buffers_size : conf.buffer_size;
    ring_.reset(cap);
    busy_limit_ = conf.buffering ? conf.busy_buffers_size : cap;
    out_ = ex.pending_output();
  }

  /// Sends the response head (Exchange::send_head), counted.
  void send_head() {
    const size_t before = ex_->pending_output();
    ex_->send_head();
    queued(before);
  }

  /// Frees what the client has taken, hands staged bytes on, and returns the bytes deliver() takes now. While
  /// bytes wait for the client (staged, or no room) the client's low-water mark is set: on_writable follows.
  size_t room() {
    ring_.release(sent());
    hand(false);
    const size_t space = ring_.free();
    if (ring_.staged() > 0 || space == 0) ex_->set_low_water(ring_.busy() / 2);
    return space;
  }

  /// Decoded content (at most room() bytes in total). The last piece of a response with nothing else in flight is
  /// copied into the client stream (finish() flushes it); everything else goes through the ring by reference.
  void deliver(const std::string_view* spans, size_t count, bool last) {
    if (last && ring_.idle()) {
      for (size_t i = 0; i < count; ++i) write(spans[i].data(), spans[i].size(), false);
      return;
    }
    for (size_t i = 0; i < count; ++i) ring_.append(spans[i]);
    hand(last);
  }

  /// The response was read whole: everything staged goes out. True when no ring byte is referenced by the
  /// client stream any more (the owner may finish() now); otherwise the low-water mark is 0 and drained() is
  /// asked again on the owner's on_writable, so the next request (which may reuse or replace the owner) never
  /// overwrites bytes in flight.
  bool flush() {
    hand(true);
    ring_.release(sent());
    if (ring_.idle()) return true;
    ex_->set_low_water(0);
    return false;
  }
  bool drained() {
    ring_.release(sent());
    return ring_.idle();
  }

  /// Bytes of memory the ring holds.
  size_t memory() const { return ring_.memory(); }

 private:
  uint64_t sent() const {
    const size_t pending = ex_->pending_output();
    return out_ > pending ? out_ - pending : 0;
  }
  // out_ counts the bytes our calls queued (pending output was `before` ahead of them).
  uint64_t queued(size_t before) {
    const size_t after = ex_->pending_output();
    if (after > before) out_ += after - before;
    return out_;
  }
  uint64_t write(const char* p, size_t n, bool by_ref) {
    const size_t before = ex_->pending_output();
    if (filter_ != nullptr) {
      filter_->write_content(p, n, by_ref);
    } else if (by_ref) {
      ex_->write_ref(p, n);
    } else {
      ex_->write(std::string_view(p, n));
    }
    return queued(before);
  }
  // Hands staged ring bytes to the client: up to the busy limit until the response was read whole (`all`). A
  // slice that queued nothing (a filter passing some ranges on) is unreferenced: mark 0, free at once.
  void hand(bool all) {
    ring_.hand(all ? SIZE_MAX : busy_limit_, [this](const char* p, size_t n) -> uint64_t {
      const uint64_t before = out_;
      return write(p, n, true) > before ? out_ : 0;
    });
  }

  http::Exchange* ex_ = nullptr;
  Filter* filter_ = nullptr;
  RefRing ring_;            // proxy_buffers N × SIZE (buffering) or proxy_buffer_size (no buffering)
  size_t busy_limit_ = 0;   // proxy_busy_buffers_size (buffering) or the ring's capacity
  uint64_t out_ = 0;        // client output bytes queued, counted from reset()
};

}  // namespace kosoku::proxy
