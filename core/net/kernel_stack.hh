// The kernel-socket network backend: io_uring sockets on one core.
//   - one listening socket per (address, core) with SO_REUSEPORT, so the kernel spreads connections over cores
//     without a shared accept queue (the `reuseport` listen flag is therefore always in effect);
//   - multishot accept (IORING_OP_ACCEPT + IORING_ACCEPT_MULTISHOT, Linux 5.19);
//   - multishot receive into a per-core provided-buffer ring (IORING_OP_RECV + IORING_RECV_MULTISHOT with
//     IOSQE_BUFFER_SELECT, Linux 6.0); received bytes are appended to the stream's input buffer and the
//     provided buffer goes straight back to the ring;
//   - sends with IORING_OP_SENDMSG over a chain of output blocks (no copy on send);
//   - outgoing streams (connect) use IORING_OP_CONNECT, then behave exactly like accepted ones;
//   - graceful close = flush, shutdown(SHUT_WR), discard input until FIN or lingering timeout (5 s),
//     like nginx's lingering_close — only when unread input is there or more is expected; otherwise a plain
//     close. Output sent after close() carries MSG_MORE, so the FIN rides on the last data segment (one
//     packet less per "Connection: close" response); the descriptor is closed with IORING_OP_CLOSE.
// Per connection (a new connection per request): no system call besides the shared io_uring_enter — the peer
// address is looked up (getpeername) only when peer()/peer_text() is first called; input buffers, small
// output blocks and the sendmsg arguments come from per-core free lists and go back as soon as the input is
// consumed, the output sent, the send completed: an idle (keep-alive) stream holds none of them.
// worker_connections is enforced per core: at the limit the multishot accept is cancelled and connections
// wait in the kernel's backlog; accepting resumes below the limit.
// An accept that fails for want of a descriptor or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) pauses accepting for
// 500 ms, or until one of the core's streams closes, as nginx disables its accept events for accept_mutex_delay
// (ngx_event_accept): retrying at once would spin the loop while new clients time out in the backlog. It is
// counted (CoreStats::conn_accept_failed) and logged at crit, "accept4() failed (24: Too many open files)", at
// most once per second per core.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::net {

class KernelStack final : public Stack {
 public:
  /// max_streams: worker_connections. Throws std::system_error if the buffer ring cannot be set up.
  KernelStack(reactor::Reactor& reactor, stats::CoreStats& stats, uint32_t max_streams);
  ~KernelStack() override;

  int listen(const std::vector<config::ListenSocket>& sockets, AcceptHandler& handler, std::string* err) override;
  net::Stream* connect(const sockaddr* addr, socklen_t addr_len, StreamHandler& handler, std::string* err) override;
  void stop_accepting() override;
  size_t open_streams() const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Opens a listening socket for `conf` (SO_REUSEPORT, non-blocking, backlog); returns fd or -errno.
int open_listen_socket(const config::ListenConf& conf, std::string* err);

/// Checks that no other process listens on `conf`'s address: binds a probe socket WITHOUT SO_REUSEPORT
/// (a second kosoku would otherwise silently join the first one's reuseport group and take part of its
/// traffic). Returns 0 or -errno with *err = "bind() to ADDR failed (98: Address already in use)".
int probe_listen_address(const config::ListenConf& conf, std::string* err);

}  // namespace kosoku::net
