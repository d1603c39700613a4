// Per-core upstream state (nginx's ngx_http_upstream_round_robin.c, ngx_http_upstream_hash_module.c and
// ngx_http_upstream_keepalive_module.c): peer choice and the keepalive connection cache of one upstream group
// on one core. Shared-nothing: every core has its own copy, so weights, failure counts and cached connections
// are per core, exactly as nginx keeps them per worker process (without a `zone`).
//
//   Balancer            peer choice: smooth weighted round robin (nginx's), `max_fails`/`fail_timeout`,
//                       `backup` servers, `hash KEY` (Cache::Memcached-compatible rehashing) and
//                       `hash KEY consistent` (ketama: 160 points per unit of weight, crc32(HOST \0 PORT PREV)).
//                       Pure: time comes in as an argument, so unit tests drive it directly.
//   UpstreamConnection  one outgoing connection (net::Stack::connect), owned by itself until the stack closes
//                       it; while a request uses it the UpstreamUser gets its events, while it sits in the cache
//                       an unexpected byte or the origin's FIN closes it at once (a cached connection closed by
//                       the origin is detected, never handed out).
//   UpstreamGroup       Balancer + the cache of at most `keepalive N` idle connections (LRU; the oldest is
//                       closed when a new one does not fit), `keepalive_timeout`, `keepalive_requests`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/net/stream.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/reactor/reactor.hh"

typedef struct ssl_session_st SSL_SESSION;
namespace kosoku::tls {
struct ClientConf;
class TlsClient;
}  // namespace kosoku::tls

namespace kosoku::proxy {

/// CRC-32 (IEEE 802.3, the zlib/nginx ngx_crc32 polynomial). crc32("123456789") == 0xCBF43926.
class Crc32 {
 public:
  void update(std::string_view data);
  uint32_t final() const { return ~state_; }

 private:
  uint32_t state_ = 0xffffffffu;
};
uint32_t crc32(std::string_view data);

/// Outcome of one attempt on a peer (nginx's NGX_PEER_FAILED / NGX_PEER_NEXT / success).
enum class PeerResult { kOk, kFailed, kNext };

/// Peer choice for one upstream group on one core.
class Balancer {
 public:
  explicit Balancer(const UpstreamConf& conf);

  /// Per-request choice state (nginx's ngx_http_upstream_rr_peer_data / hash peer data).
  struct Attempt {
    absl::InlinedVector<uint64_t, 1> tried;  // bit per peer index
    int current = -1;                        // the peer last returned by next()
    bool in_backup = false;                  // primaries exhausted: choosing among backups
    uint32_t tries = 0;                      // attempts left (nginx's pc->tries)
    // hash state
    bool use_hash = false;
    uint32_t hash = 0;        // consistent: point index; plain: accumulated hash
    uint32_t hash_tries = 0;  // > 20: fall back to round robin
    uint32_t rehash = 0;
    std::string key;
  };

  /// Starts a request. `hash_key`: the expanded `hash` key (ignored without `hash`). `max_tries`:
  /// proxy_next_upstream_tries (0: no limit beyond the number of servers).
  void start(Attempt& a, std::string_view hash_key, uint32_t max_tries) const;
  /// The next peer to try (index into servers()), or -1 when none is usable: every server is down, failed
  /// within fail_timeout or already tried (nginx: "no live upstreams"; the failure counts are then reset so
  /// the group recovers quickly, as nginx does). `now_ms`: monotonic clock.
  int next(Attempt& a, uint64_t now_ms);
  /// Reports how the attempt on a.current ended (nginx's free_peer): kFailed counts a failure (max_fails
  /// within fail_timeout takes the server out for fail_timeout), kOk clears the count once fail_timeout has
  /// passed since the failure, kNext (403/404 retries) changes nothing. Decrements a.tries; a second call for
  /// the same choice does nothing.
  void done(Attempt& a, PeerResult r, uint64_t now_ms);
  /// Makes a.current choosable again in this attempt (a retry of the same server on a fresh connection
  /// after a cached connection turned out to be closed). Call before done().
  void untry(Attempt& a) const;

  size_t size() const { return peers_.size(); }
  const UpstreamServerConf& server(int i) const { return *peers_[static_cast<size_t>(i)].conf; }
  /// Whether the group has one primary server and no backup (nginx's `single`: failures are not counted and
  /// there is nothing to retry on).
  bool single() const { return single_; }
  /// For tests: the peer state nginx keeps.
  struct Peer {
    const UpstreamServerConf* conf = nullptr;
    int64_t current_weight = 0;
    int64_t effective_weight = 0;
    uint32_t fails = 0;
    uint64_t accessed_ms = 0;
    uint64_t checked_ms = 0;
  };
  const Peer& peer(int i) const { return peers_[static_cast<size_t>(i)]; }
  /// The consistent-hash ring (sorted by hash), for tests.
  struct Point {
    uint32_t hash;
    uint32_t server;  // index into servers()
  };
  const std::vector<Point>& points() const { return points_; }

 private:
  bool usable(const Attempt& a, size_t i, uint64_t now_ms) const;
  int next_rr(Attempt& a, uint64_t now_ms, bool backup);
  int next_hash(Attempt& a, uint64_t now_ms);
  int next_chash(Attempt& a, uint64_t now_ms);
  void take(Attempt& a, size_t i, uint64_t now_ms);

  const UpstreamConf& conf_;
  std::vector<Peer> peers_;  // primaries then backups, in file order
  size_t primaries_ = 0;
  uint64_t total_weight_ = 0;  // primaries, not down
  uint32_t tries_ = 0;         // servers not down (primaries + backups)
  bool single_ = false;
  std::vector<Point> points_;
};

class UpstreamGroup;

/// The request side of an UpstreamConnection (the proxy handler). Every call may close or release the
/// connection; none happens after release() / close().
class UpstreamUser {
 public:
  virtual void on_upstream_connected() = 0;
  virtual void on_upstream_readable() = 0;
  virtual void on_upstream_writable() = 0;
  /// The origin sent FIN (input() may still hold unread bytes).
  virtual void on_upstream_eof() = 0;
  /// The connection broke or was refused (errno, or 0). The connection is gone after this call.
  virtual void on_upstream_error(int error) = 0;
  /// The timer armed with UpstreamConnection::arm_timer fired.
  virtual void on_upstream_timer() = 0;

 protected:
  ~UpstreamUser() = default;
};

class UpstreamConnection final : public net::StreamHandler, public reactor::Timer {
 public:
  net::Stream& stream() { return *stream_; }
  int peer() const { return peer_; }
  /// Taken from the keepalive cache (it carried earlier requests).
  bool reused() const { return requests_ > 0; }
  bool connected() const { return connected_; }
  /// Requests this connection carried before the current one.
  uint32_t requests() const { return requests_; }

  /// Arms (or re-arms) the user's timer `ms` from now; 0 cancels it.
  void arm_timer(uint64_t ms);
  /// The user is done with the connection. `keep`: the response ended cleanly and allows reuse: the
  /// connection goes to the group's cache (if the group has `keepalive`, room, and requests left), else it
  /// is closed.
  void release(bool keep);
  /// Closes the connection at once (RST if input is unread); the user gets no further call.
  void close();

  // net::StreamHandler
  void on_readable(net::Stream& s) override;
  void on_peer_closed(net::Stream& s) override;
  void on_writable(net::Stream& s) override;
  void on_connected(net::Stream& s) override;
  void on_closed(net::Stream& s, int error) override;
  // reactor::Timer
  void fire() override;

 private:
  friend class UpstreamGroup;
  UpstreamConnection(UpstreamGroup& g, int peer, UpstreamUser* user) : group_(g), peer_(peer), user_(user) {}
  ~UpstreamConnection() = default;

  UpstreamGroup& group_;
  net::Stream* stream_ = nullptr;
  int peer_;
  const tls::ClientConf* ssl_ = nullptr;  // the TLS settings it was opened with (null: plain TCP)
  UpstreamUser* user_;
  uint32_t requests_ = 0;
  bool connected_ = false;
  bool idle_ = false;     // in the cache
  bool closing_ = false;  // close() called; waiting for on_closed
  UpstreamConnection* prev_ = nullptr;  // cache list, most recently used first
  UpstreamConnection* next_ = nullptr;
};

/// One upstream group on one core: peer choice and the keepalive cache.
class UpstreamGroup {
 public:
  UpstreamGroup(const UpstreamConf& conf, reactor::Reactor& reactor, net::Stack& stack);
  ~UpstreamGroup();
  UpstreamGroup(const UpstreamGroup&) = delete;
  UpstreamGroup& operator=(const UpstreamGroup&) = delete;

  const UpstreamConf& conf() const { return conf_; }
  Balancer& balancer() { return balancer_; }
  reactor::Reactor& reactor() { return reactor_; }

  /// A connection to `peer` for `user`: a cached idle one (reused() true, already connected) or a new one
  /// (the user gets on_upstream_connected or on_upstream_error). nullptr with *err when the stack refuses
  /// (worker_connections).
  /// `ssl`: TLS to the origin with these settings (proxy_pass https://), `ssl_name` the name for SNI and
  /// verification; a cached connection is handed out only for the same settings.
  UpstreamConnection* acquire(int peer, UpstreamUser* user, std::string* err, const tls::ClientConf* ssl = nullptr,
                              std::string_view ssl_name = {});
  /// The core's TLS client (set by the proxy module before any acquire with `ssl`).
  void set_tls_client(tls::TlsClient* c) { tls_client_ = c; }
  /// Closes every idle cached connection (graceful shutdown) and caches none from now on.
  void shutdown();
  size_t idle_count() const { return idle_count_; }

 private:
  friend class UpstreamConnection;
  void unlink_idle(UpstreamConnection* c);
  void cache(UpstreamConnection* c);

  const UpstreamConf& conf_;
  reactor::Reactor& reactor_;
  net::Stack& stack_;
  Balancer balancer_;
  UpstreamConnection* idle_head_ = nullptr;  // most recently used
  UpstreamConnection* idle_tail_ = nullptr;
  size_t idle_count_ = 0;
  bool shutting_down_ = false;
  tls::TlsClient* tls_client_ = nullptr;
  std::vector<SSL_SESSION*> sessions_;  // by peer: the TLS session to resume (proxy_ssl_session_reuse)
};

}  // namespace kosoku::proxy
