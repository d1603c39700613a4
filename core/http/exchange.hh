// One request/response exchange, as content handlers see it (static files, proxy, cache, the admin API, the status
// page). The request (http_request.hh) runs the phases in nginx's order (find server → find location → access →
// return → content → log); the content handler produces the response through this interface and calls finish()
// exactly once. The protocol underneath (HTTP/1.1 now: connection_impl.hh) is not visible here.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"
#include "core/http/parser.hh"
#include "core/net/shared_buffer.hh"

namespace re2 {
class RE2;
}
namespace kosoku::disk {
class DiskQueue;
class OpenFileCache;
}  // namespace kosoku::disk
namespace kosoku::reactor {
class Reactor;
}
namespace kosoku::net {
class Stack;
class Stream;
}
namespace kosoku::stats {
struct CoreStats;
}

namespace kosoku::http {

class HttpServer;

/// Per-core context shared by every connection of a loop.
struct CoreContext {
  reactor::Reactor* reactor = nullptr;
  stats::CoreStats* stats = nullptr;
  const config::MainConf* conf = nullptr;
  disk::OpenFileCache* open_file_cache = nullptr;
  net::Stack* stack = nullptr;  // the core's network stack (outgoing connections: Stack::connect)
  std::string prefix;  // directory relative paths (root, alias, logs) resolve against, with trailing '/'
  /// The core's queue for a `disk_queue` name (never null for names the config validated).
  disk::DiskQueue* (*find_queue)(void* owner, std::string_view name) = nullptr;
  void* queue_owner = nullptr;
  disk::DiskQueue* queue(std::string_view name) const { return find_queue(queue_owner, name); }
  /// The core's HttpServer (its modules' per-core parts: HttpServer::module_core); set by the server.
  HttpServer* server = nullptr;
  /// Every core's counters (for the `status` location); filled before the loops start, read-only after.
  const std::vector<const stats::CoreStats*>* all_stats = nullptr;
};

/// Response head fields a handler sets before send_head(). Content-Length -1: unknown — the body is sent
/// with chunked transfer coding to HTTP/1.1 clients (RFC 9112 §7.1) and close-delimited to HTTP/1.0 ones.
struct ResponseHead {
  int status = 200;
  std::string_view content_type;      // empty: none
  int64_t content_length = -1;
  int64_t last_modified = -1;         // seconds since the epoch; -1: none
  std::string etag;                   // with quotes (and W/ if weak); empty: none
  std::string location;               // absolute-path or URL for redirects
  std::string extra;                  // further header lines, each "Name: value\r\n"
  bool accept_ranges = false;
};

/// What a module keeps of one request beside the content state (nginx's ngx_http_get_module_ctx): the
/// proxy's upstream tries for $upstream_*, the cache's $upstream_cache_status. A module derives its own type,
/// creates it on first use (module_ctx) and reads it back from its variables; it goes with the request.
class RequestCtx {
 public:
  virtual ~RequestCtx() = default;
};

/// Receives the request body (decoded: Content-Length bytes or de-chunked data) of a handler that reads it.
class BodySink {
 public:
  /// Body bytes, valid only during the call. The sink may call Exchange::pause_body(true) to stop the flow.
  virtual void on_body_data(std::string_view data) = 0;
  /// The whole body has arrived (also called at once for a request without a body).
  virtual void on_body_end() = 0;
  /// The body is broken (status 400/413, or 408 on client_body_timeout; 0: the client went away). The
  /// connection closes after the handler's response; the sink gets nothing more.
  virtual void on_body_error(int status) = 0;

 protected:
  ~BodySink() = default;
};

/// Per-request state of a content module, owned by the request (Exchange::state): every request starts with an
/// empty slot, and the state goes with its request — once the response is complete and the stream has sent the
/// bytes the state lent it by reference (write_ref), or after an abort once the state called release().
class ContentState {
 public:
  virtual ~ContentState() = default;
  /// The client went away while this state had work in flight. The state must stop producing output and
  /// call Exchange::release() once no I/O of its own is in flight (possibly right away).
  virtual void on_abort() = 0;
  /// The stream's pending output fell to the low-water mark (see Exchange::set_low_water).
  virtual void on_writable() = 0;
  /// Whether a client that closes its side (FIN) while this state works means the request is abandoned:
  /// the connection then aborts and the state gets on_abort(). The proxy says yes (nginx's upstream
  /// check_broken_connection, proxy_ignore_client_abort off); a static response is still sent (nginx).
  virtual bool abort_on_peer_close() const { return false; }
  /// The response is complete (Exchange::finish ran): everything it needed is in the stream, which keeps
  /// copied and shared bytes itself. The state lets go of what only this response needed and the stream does
  /// not reference — open files, spare read buffers — as nginx closes a request's file when the request ends:
  /// an idle keep-alive connection holds no descriptor but its socket. Called inside finish(); the state must
  /// produce no more output.
  virtual void on_response_complete() {}
};

class Exchange {
 public:
  // Request.
  virtual const Request& request() const = 0;
  /// Normalised, percent-decoded path (nginx $uri).
  virtual std::string_view uri() const = 0;
  virtual std::string_view args() const = 0;
  virtual const config::ServerConf& server() const = 0;
  virtual const config::LocationConf& location() const = 0;
  virtual const CoreContext& core() const = 0;
  /// The client's address as text ($remote_addr) and the connection's counters.
  virtual std::string_view remote_addr() const = 0;
  /// The client's address (AF_INET / AF_INET6), for address checks; null when unknown.
  virtual const sockaddr* peer_addr() const { return nullptr; }
  /// The stream the request arrived on (the TLS layer on an ssl socket: net::Stream::secure), null once the
  /// connection is gone or for a request without one.
  virtual const net::Stream* stream() const { return nullptr; }
  /// The connection closes after this response (nginx's r->keepalive = 0).
  virtual void disable_keep_alive() {}
  virtual uint16_t server_port() const = 0;
  virtual uint64_t connection_id() const = 0;
  virtual uint64_t connection_requests() const = 0;
  /// Lower-cased host of the request (Host or absolute-form authority); empty if none ($host falls back to
  /// the server name).
  virtual std::string_view host() const = 0;
  /// Bytes of the request head ($request_length, without the body).
  virtual uint64_t request_length() const = 0;
  /// A group of the regex that chose the location (`location ~`): `group` is "1".."9" (nginx's $1..$9) or the
  /// name of a named group (`(?P<name>...)`). False when no regex chose it or the group took no part.
  virtual bool regex_capture(std::string_view group, std::string_view* out) const { return false; }

  /// Where $uri comes from (nginx's valid_unparsed_uri and valid_location), for what is sent upstream:
  ///   kAsReceived          the request's own path;
  ///   kChanged             a rewrite or an internal redirect made it, and the location was chosen for it;
  ///   kChangedInLocation   a rewrite made it and the location stayed the one chosen for the URI before
  ///                        (`break`): the location's prefix says nothing about it.
  enum class UriOrigin : uint8_t { kAsReceived, kChanged, kChangedInLocation };
  virtual UriOrigin uri_origin() const { return UriOrigin::kAsReceived; }

  // Changing the request (the rewrite module: rewrite, `if` regexes).
  /// Makes `uri` the request's $uri and, when `args` is given, `args` its $args (empty: no query). The URI is
  /// taken as written, not percent-decoded (nginx's rewrite); one with a "." or ".." segment is normalised as a
  /// request's path. False, with nothing changed, when it cannot be made safe to map onto a root (a ".." above
  /// the root, a NUL byte). The location is not searched again here: a REWRITE handler asks for that with
  /// PhaseResult::kFindConfig, and after SERVER_REWRITE the search is made for the new URI anyway.
  virtual bool set_uri(std::string uri, const std::string* args) { return false; }
  /// Makes `loc` the request's location without a search (nginx's r->loc_conf = an `if` block's): the phases
  /// after REWRITE, the content handler and the head filters use it. For the rewrite module's `if` blocks.
  virtual void use_location(const config::LocationConf& loc) {}
  /// The groups of a match of `re` on `subject` become $1..$9 and the named-group variables, in place of the
  /// previous match's (nginx: every successful regex match with captures replaces them). `groups[i]` views into
  /// `subject` (a null data pointer: the group took no part); both are copied.
  virtual void set_captures(const re2::RE2& re, std::string_view subject, std::span<const std::string_view> groups) {}
  /// An internal redirect (try_files' last parameter; nginx's ngx_http_internal_redirect and
  /// ngx_http_named_location): the request goes through the phases again, from SERVER_REWRITE for `target`
  /// (a URI, with `?args` if any) or from the named location `@name`, with its method and fields. The calling
  /// content state is kept, inert, until the request goes: it must not touch the exchange after this call.
  virtual void internal_redirect(std::string_view target) {}

  // Response.
  virtual ResponseHead& head() = 0;
  virtual const ResponseHead& head() const = 0;
  /// Serialise head() into the output (adds Date, Server, Connection, add_header...). For HEAD requests
  /// the connection suppresses the body: write()/write_ref() become no-ops.
  virtual void send_head() = 0;
  /// A complete response with a default body (error page) or `body`, then finish().
  virtual void respond(int status, std::string_view body = {}, std::string_view content_type = {}) = 0;
  /// 301/302/307/308 to `location` with nginx's default body, then finish().
  virtual void redirect(int status, std::string_view location) = 0;
  virtual void write(std::string_view data) = 0;
  /// Zero-copy: the bytes belong to the content state, which keeps them unchanged; the request and its state
  /// live until the stream has sent them, after the response is complete too.
  virtual void write_ref(const char* data, size_t len) = 0;
  /// Zero-copy with a reference instead of a lifetime promise: `len` bytes at `data` inside `buf` (a file
  /// chunk read into it); the connection's stream keeps `buf` as long as it needs the bytes
  /// (net::Stream::write_shared), the caller may unref it at once. The default copies.
  virtual void write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
    write(std::string_view(data, len));
  }
  virtual size_t pending_output() const = 0;
  virtual void set_low_water(size_t bytes) = 0;
  /// The response is complete (all body bytes written or referenced).
  virtual void finish() = 0;
  /// The response cannot be completed (e.g. a read error after the head was sent): the connection is cut
  /// without finishing the message, so the client sees a truncated response, never a wrong one. The state then
  /// gets on_abort().
  virtual void abort_response() = 0;
  /// After on_abort(): no I/O of the state is in flight any more.
  virtual void release() = 0;
  /// Start delivering the request body to `sink` (once per request). Sends `100 Continue` first when the
  /// client asked for it (RFC 9110 §10.1.1). Enforces client_max_body_size (413) and client_body_timeout.
  virtual void read_body(BodySink* sink) = 0;
  /// For an answer that never reads the request body (nginx's ngx_http_discard_request_body): what has arrived
  /// of it is dropped now, the rest after the response. Returns 0, or the status of a malformed body, which is
  /// then the answer (the connection closes after it): a response that promised keep-alive and then closed
  /// would be worse.
  virtual int discard_request_body() = 0;
  /// Flow control for read_body: while paused, no on_body_data calls (the socket stops being read once the
  /// input buffer is full).
  virtual void pause_body(bool paused) = 0;
  /// The request's slot for the content module's state (empty when the content handler is called).
  virtual std::unique_ptr<ContentState>& state() = 0;
  /// Module `m`'s data for this request (RequestCtx): the slot, empty until the module fills it.
  virtual std::unique_ptr<RequestCtx>& ctx(const config::Module& m) = 0;
  virtual const RequestCtx* ctx(const config::Module& m) const = 0;

 protected:
  ~Exchange() = default;
};

/// Module `m`'s RequestCtx of type T for the exchange's request, created on first use.
template <class T>
T& module_ctx(Exchange& ex, const config::Module& m) {
  std::unique_ptr<RequestCtx>& slot = ex.ctx(m);
  if (slot == nullptr) slot = std::make_unique<T>();
  return static_cast<T&>(*slot);
}
/// The RequestCtx of type T module `m` made for the request, or null.
template <class T>
const T* module_ctx(const Exchange& ex, const config::Module& m) {
  return static_cast<const T*>(ex.ctx(m));
}

/// The content phase: produces the response for an exchange. Stateless; per-request state goes in
/// Exchange::state().
class ContentHandler {
 public:
  virtual ~ContentHandler() = default;
  virtual void handle(Exchange& ex) = 0;
  /// Whether the handler may read the request body (Exchange::read_body). One that never does (static files,
  /// the status page) gets the request after what has already arrived of the body was discarded, so a
  /// malformed body is answered 400 instead of a response that promises keep-alive and then closes.
  virtual bool reads_body() const { return true; }
};

}  // namespace kosoku::http
