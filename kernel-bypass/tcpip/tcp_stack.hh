// kosoku's own TCP (RFC 9293) for one core, implementing net::Stack so the HTTP engine runs on it unchanged.
// Independent of DPDK: it sits on an Interface (IPv4/ARP) over any PacketIO, a TimerWheel and a Clock, so the
// unit tests drive two instances against each other through an in-memory pipe.
//
// What is implemented (see tcb.hh for the per-connection details): the full state machine including
// simultaneous open and close and TIME_WAIT; passive open with a SYN backlog per listener and SYN cookies
// (RFC 4987 §3.6) when it overflows; active open (connect) from an ephemeral port; MSS (RFC 9293 §3.7.1,
// RFC 6691), window scaling and timestamps with PAWS (RFC 7323); RTO per RFC 6298 with Karn's algorithm and
// exponential backoff; NewReno fast retransmit / recovery (RFC 5681, RFC 6582); delayed ACKs (every second
// full segment or delayed_ack_ms); zero-window probes (persist timer); RST handling with RFC 5961 challenge
// ACKs (rate-limited per connection); ISNs per RFC 6528 (isn.hh); RST for segments to closed ports.
// SACK (RFC 2018) negotiated on SYN/SYN-ACK with RFC 6675 loss recovery (sack_scoreboard.hh; NewReno
// for peers without SACK); keep-alive per listening socket (`listen ... so_keepalive=`, RFC 9293 §3.8.4);
// receive and send buffer sizes per listening socket (`listen ... rcvbuf= sndbuf=`, else TcpConfig's).
// Across cores: every core runs its own TcpStack listening on the same ports; the DPDK layer steers each
// 4-tuple to one core (dpdk/flow_hash.hh), and connect() only picks ephemeral ports the FlowOwner accepts, so
// the return traffic of an outgoing connection lands on the connecting core (as F-Stack does).
// Ephemeral ports (Linux tcp_tw_reuse = 1): connect() takes a free port (a rotating cursor, at most
// kEphemeralProbes candidates per call); when none is found it takes over the oldest 4-tuple to the same
// destination that is in TIME-WAIT on our side, if timestamps were negotiated on it and its last segment is
// ≥ kTimeWaitReuseMs old, so the new SYN's TSval exceeds everything the peer saw and PAWS separates the
// incarnations (RFC 7323 §5, RFC 6191). Otherwise it fails with EADDRNOTAVAIL.
// RACK-TLP (RFC 8985) loss detection with SACK; D-SACK (RFC 2883) sent for duplicate data below RCV.NXT or
// inside the out-of-order queue and read as a sender (it widens RACK's reordering window). Congestion control
// CUBIC (RFC 9438, default) or Reno, PRR (RFC 9937: RecoverFS = pipe) in SACK recovery; SACKed octets leave the pipe before
// recovery too (RFC 6675 §5 step 2: a late reordered segment does not stop new data); spurious reductions undone by D-SACK
// (RFC 3708), by timestamps (Eifel, RFC 3522; RFC 4015 response for timeouts) and, without timestamps, by
// F-RTO (RFC 5682) for timeouts.
// TX backpressure (set_tx_backpressure / resume_tx): where the link's TX path is bounded (a DPDK worker
// without a TX queue sends through a ring another core drains; one with its own queue while frames the PMD
// refused wait in its TX backlog), a new data segment waits while the link has less room than a reserve,
// and the TCB resumes once the loop finds room again, instead of the link refusing frames that TCP must
// then retransmit. ACKs, control segments and retransmissions are not held.
// Not implemented (fail loudly where a caller could depend on it): urgent data (ignored), IPv6
// (listen/connect refuse it), ECN.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/log.hh"
#include "core/net/stream.hh"
#include "core/reactor/timer_wheel.hh"
#include "core/stats/counters.hh"
#include "kernel-bypass/tcpip/congestion.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/isn.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

/// The clock the stack runs on (Reactor::now_ms in production, a simulated clock in tests).
class Clock {
 public:
  virtual uint64_t now_ms() const = 0;
  virtual uint64_t now_us() const = 0;

 protected:
  ~Clock() = default;
};

struct TcpConfig {
  uint32_t max_streams = 1024;               // worker_connections: open streams (not TIME_WAIT) per core
  uint32_t recv_buffer_bytes = 256 * 1024;   // per connection: in-order + out-of-order bytes held; bounds
                                             // the advertised window
  uint32_t send_window_bytes = 4 * 1024 * 1024;  // per connection: cap on bytes in flight (with cwnd and rwnd);
                                                 // 4 MiB as Linux's tcp_wmem max: 1 MiB held a 20 ms path
                                                 // to 41 MB/s
  uint32_t send_buffer_bytes = 4 * 1024 * 1024;  // per connection: output the TCB takes over from the
                                                 // application until acknowledged (write_ref bytes are
                                                 // copied), like a kernel socket's SO_SNDBUF; beyond it
                                                 // pending_output() grows (tcb.hh "Send side")
  uint64_t rto_initial_ms = 1000;            // RFC 6298 §2.1
  uint64_t rto_min_ms = 200;                 // RFC 6298 §2.4 says 1 s; 200 ms as Linux (TCP_RTO_MIN)
  uint64_t rto_max_ms = 60000;
  unsigned max_retransmits = 12;             // then the connection fails with ETIMEDOUT
  unsigned syn_retries = 6;
  uint64_t delayed_ack_ms = 40;              // RFC 9293 §3.8.6.3: < 0.5 s
  uint64_t time_wait_ms = 60000;             // 2·MSL with MSL = 30 s
  uint32_t max_time_wait = 16384;            // TIME-WAIT connections per core (Linux tcp_max_tw_buckets):
                                             // beyond it a connection closes without TIME-WAIT (counted)
  uint64_t lingering_time_ms = 30000;        // bound on a graceful close (FIN_WAIT_2, unread peer)
  uint64_t persist_max_ms = 60000;           // zero-window probe interval cap
  uint16_t ephemeral_first = 32768, ephemeral_last = 60999;
  bool window_scaling = true;
  bool timestamps = true;
  bool syn_cookies = true;
  bool sack = true;                          // offer/accept SACK-permitted (RFC 2018), RFC 6675 recovery
  bool tail_loss_probe = true;               // RFC 8985 §7 TLP when SACK is on (Linux tcp_early_retrans)
  bool rack = true;                          // RFC 8985 §6 RACK loss detection when SACK is on (Linux
                                             // tcp_recovery & 1); false: RFC 6675 DupThresh (IsLost)
  bool frto = true;                          // RFC 5682 F-RTO for connections without timestamps (SACK-enhanced
                                             // §3 with SACK, basic §2 without; Linux tcp_frto)
  CongestionAlgorithm congestion_control = CongestionAlgorithm::kCubic;  // RFC 9438 (Linux's default) or Reno
  bool prr = true;                           // RFC 6937 proportional rate reduction in SACK recovery (Linux
                                             // since 3.2); false: RFC 6675's cwnd = ssthresh at entry
  // Keep-alive (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6), off unless the listening socket says so_keepalive=on;
  // the values a `so_keepalive=on` or an empty field of `so_keepalive=idle:intvl:cnt` uses (Linux defaults).
  uint64_t keepalive_idle_ms = 7'200'000;
  uint64_t keepalive_interval_ms = 75'000;
  unsigned keepalive_probes = 9;
};

/// Per-core TCP counters (plain fields, owning core only).
struct TcpStats {
  uint64_t segments_in = 0, segments_out = 0, bad_checksum = 0, bad_header = 0;
  uint64_t retransmits = 0, fast_retransmits = 0, rto_expired = 0, zero_window_probes = 0;
  uint64_t dup_acks_in = 0, out_of_order_in = 0, paws_dropped = 0, challenge_acks = 0;
  uint64_t oow_acks_skipped = 0;  // unacceptable pure ACKs (PAWS, outside the window) left unanswered: one
                                  // reply per 500 ms per connection (Tcb::oow_ack)
  uint64_t ooo_dropped = 0;  // out-of-order segments (or their tails) dropped: recv_buffer_bytes or the
                             // queue's segment cap reached
  uint64_t rst_in = 0, rst_out = 0, resets_to_closed_port = 0;
  uint64_t syn_in = 0, syn_backlog_full = 0, syn_cookies_sent = 0, syn_cookies_ok = 0, syn_cookies_bad = 0;
  uint64_t syn_fin_dropped = 0;  // SYN+FIN to a listener, discarded
  uint64_t active_opens = 0, passive_opens = 0, established = 0, timeouts = 0;
  uint64_t refused_max_streams = 0;  // SYNs (or cookie ACKs, completed handshakes) dropped: worker_connections
  uint64_t time_wait = 0;  // gauge
  uint64_t time_wait_overflow = 0;  // connections closed without TIME-WAIT: max_time_wait reached
  uint64_t time_wait_reused = 0;  // active opens that took over a TIME-WAIT 4-tuple (tcp_tw_reuse, RFC 6191)
  uint64_t sack_recoveries = 0, sack_blocks_out = 0, sack_reneging = 0;  // RFC 6675 recoveries entered
  uint64_t keepalive_probes = 0, keepalive_timeouts = 0;
  uint64_t tlp_probes = 0;  // RFC 8985 §7 tail loss probes sent
  uint64_t rack_lost = 0;          // segments RACK (RFC 8985 §6) marked lost
  uint64_t lost_retransmits = 0;   // ... of which were retransmissions (RFC 6675 alone waits for the RTO)
  uint64_t dsacks_in = 0;          // ACKs carrying a D-SACK block (RFC 2883): a retransmission was spurious
  uint64_t dsack_undos = 0;        // recoveries whose window reduction was undone: all their retransmissions
                                   // came back as D-SACKs (RFC 3708)
  uint64_t eifel_undos = 0;        // recoveries whose reduction was undone because the ACK ending them echoed
                                   // a TSval older than their first retransmission (RFC 3522)
  uint64_t spurious_rtos = 0;      // retransmission timeouts undone: the first ACK after one echoed a TSval
                                   // older than its retransmission (RFC 3522, RFC 4015; Linux TCPSpuriousRTOs),
                                   // or F-RTO found it (below)
  uint64_t frto_spurious_rtos = 0;  // ... of which F-RTO (RFC 5682) found, on a connection without timestamps
  uint64_t ephemeral_not_local = 0;  // candidate source ports skipped by connect(): their return traffic
                                     // would be steered to another core (FlowOwner)
  uint64_t memory_bytes = 0;  // gauge: TCBs (TIME_WAIT included) + their buffers, bytes
  uint64_t tx_blocked = 0;    // times a connection's next new segment was held back for want of TX room
                              // (the link's tx_room() below the reserve) and it began waiting for resume_tx()
};

class Tcb;

/// Which 4-tuples this core's stack may use for an active open (flow steering across cores: the core the
/// return traffic is steered to). Unset: every tuple is local.
class FlowOwner {
 public:
  virtual bool is_local(const FourTuple& t) const = 0;

 protected:
  ~FlowOwner() = default;
};

class TcpStack final : public net::Stack, public L4Handler {
 public:
  static constexpr uint32_t kEphemeralProbes = 1024;      // free-port candidates examined per connect()
  static constexpr uint64_t kTimeWaitReuseMs = 1000;      // Linux tcp_tw_reuse: 1 s since the last segment
  static constexpr uint32_t kTimeWaitReuseProbes = 8;     // TIME-WAIT entries examined per connect()
  static constexpr uint32_t kCookieWindow = 65535;         // window of a SYN cookie's SYN-ACK (unscaled; at
                                                           // most the listener's rcvbuf=); the connection
                                                           // the cookie completes starts with it
  static constexpr uint32_t kMinRcvbuf = 4096;             // floor of a listener's rcvbuf= (Linux has one too,
                                                           // SOCK_MIN_RCVBUF): a window below a segment or two
                                                           // would hold the peer in SWS avoidance
  TcpStack(Interface& ip, reactor::TimerWheel& timers, const Clock& clock, stats::CoreStats& core_stats,
           const TcpConfig& conf);
  ~TcpStack() override;

  // net::Stack. listen: AF_INET sockets whose address is 0.0.0.0 or the interface address; anything else
  // (IPv6, another address) is refused with -EADDRNOTAVAIL and "network dpdk: not supported yet: ...".
  int listen(const std::vector<config::ListenSocket>& sockets, net::AcceptHandler& handler,
             std::string* err) override;
  net::Stream* connect(const sockaddr* addr, socklen_t addr_len, net::StreamHandler& handler,
                       std::string* err) override;
  void stop_accepting() override;
  size_t open_streams() const override { return open_; }

  /// Listen on `port` with a SYN backlog of `backlog` half-open connections (tests and the DPDK glue).
  /// `socket` is passed to AcceptHandler::on_accept (may be null: an empty ListenSocket is passed).
  int listen_port(uint16_t port, uint32_t backlog, net::AcceptHandler& handler,
                  const config::ListenSocket* socket = nullptr);
  /// Active open from a chosen local port (simultaneous-open tests); 0 picks an ephemeral port.
  net::Stream* connect_from(uint16_t local_port, Ipv4Addr dst, uint16_t dst_port, net::StreamHandler& handler,
                            std::string* err);

  // L4Handler: one TCP segment from the interface.
  void received(const Ipv4Header& ip, std::span<const uint8_t> l4, RxChecksum l4_checksum) override;

  /// Restricts ephemeral ports to tuples `owner` accepts (nullptr: any). `owner` outlives the stack.
  void set_flow_owner(const FlowOwner* owner) { flow_owner_ = owner; }

  /// TX backpressure: before each new data (or FIN) segment a TCB reads `link->tx_room()` (PacketIO, frames);
  /// below `reserve_frames` the segment is not sent, the TCB joins a FIFO of waiting connections and
  /// TcpStats::tx_blocked counts it. The reserve (one TX burst in the DPDK backend) keeps room for the ACKs
  /// and retransmissions, which are never held. `link` is normally the PacketIO under this stack's Interface
  /// and outlives the stack; nullptr (the default) turns the check off.
  void set_tx_backpressure(const PacketIO* link, size_t reserve_frames) {
    tx_link_ = link;
    tx_reserve_ = reserve_frames;
  }
  /// Once per loop iteration, after the TX flush: while the link has at least the reserve of room, runs
  /// output() for the waiting TCBs in the order they began to wait, each at most once per call (one held
  /// again goes to the back). Returns how many it ran; an empty-list check when none waits. Never call it
  /// from inside a StreamHandler callback.
  size_t resume_tx();
  /// Connections waiting for TX room.
  size_t tx_waiting() const { return tx_waiting_count_; }

  /// Frees connections that finished (call once per loop iteration after input processing; never from
  /// inside a StreamHandler callback).
  void reap();
  /// Sends a RST (SEQ = SND.NXT, ACK = RCV.NXT) for every connection that is synchronized or half-open
  /// (not SYN-SENT, TIME-WAIT or closed) and returns how many. Calls no handler and changes no state: for the
  /// end of a worker (shutdown drain over), just before the stack is destroyed.
  size_t reset_all();

  const TcpStats& stats() const { return stats_; }
  const TcpConfig& config() const { return conf_; }
  /// Connections in the table, TIME_WAIT included.
  size_t connections() const { return table_.size(); }
  /// Bytes one idle established connection costs (TCB plus its empty buffers), for the stats page.
  size_t idle_connection_bytes() const;

 private:
  friend class Tcb;
  struct Listener {
    net::AcceptHandler* handler = nullptr;
    const config::ListenSocket* socket = nullptr;
    uint32_t backlog = 0;
    uint32_t half_open = 0;
  };

  /// `listen ... rcvbuf= sndbuf=` (nginx; config::ListenConf): the receive buffer (at least kMinRcvbuf) and
  /// send buffer of connections accepted through `l`, in bytes; TcpConfig's recv_buffer_bytes /
  /// send_buffer_bytes where the listen line gives none. Set on the TCB before its SYN-ACK
  /// (Tcb::set_buffer_limits).
  uint32_t listen_rcvbuf(const Listener& l) const;
  uint32_t listen_sndbuf(const Listener& l) const;
  void on_listen_segment(Listener& l, const FourTuple& t, const TcpSegment& seg);
  bool accept_cookie(Listener& l, const FourTuple& t, const TcpSegment& seg);
  /// A segment outside any connection (RFC 9293 §3.10.7.1 reset generation, or SYN-ACK cookies).
  void send_control(const FourTuple& t, SeqNum seq, SeqNum ack, uint8_t flags, uint16_t window,
                    const TcpOptions& options);
  void reset_for(const FourTuple& t, const TcpSegment& seg);
  /// worker_connections reached: a SYN (or a cookie ACK, or a handshake completing) from t is dropped;
  /// counted in TcpStats::refused_max_streams and CoreStats::conn_rejected, and an alert is logged
  /// ("N worker_connections are not enough", as nginx) at most once per second per core.
  void refuse_max_streams(const FourTuple& t);
  /// A local port for an active open to dst:dst_port: a free one (at most kEphemeralProbes candidates from
  /// the rotating cursor), else one whose TIME-WAIT tuple may be reused (reuse_time_wait); 0: none.
  uint16_t pick_ephemeral(Ipv4Addr dst, uint16_t dst_port);
  /// tcp_tw_reuse: terminates the oldest eligible TIME-WAIT TCB to dst:dst_port (timestamps on, last
  /// segment ≥ kTimeWaitReuseMs ago, FlowOwner-local) and returns its local port; 0 if none (looks at most at
  /// kTimeWaitReuseProbes live entries).
  uint16_t reuse_time_wait(Ipv4Addr dst, uint16_t dst_port);
  /// After a segment for `tcb`: remembers an ephemeral TIME-WAIT tuple with timestamps (and when it last
  /// heard from the peer) as a reuse candidate.
  void note_time_wait(const Tcb& tcb);
  static uint64_t dest_key(Ipv4Addr dst, uint16_t dst_port) {
    return (static_cast<uint64_t>(dst.value) << 16) | dst_port;
  }
  // Called by Tcb.
  void established(Tcb& tcb);
  void stream_closed(Tcb& tcb);
  void remove(Tcb& tcb);
  uint64_t now_ms() const { return clock_.now_ms(); }
  /// Tcb::send_next, before a new segment: true when it must wait for TX room (the TCB is then queued for
  /// resume_tx unless it already waits). O(1): one virtual call when a link is set.
  bool tx_hold(Tcb& tcb) {
    if (tx_room_ok()) return false;
    tx_wait(tcb);
    return true;
  }
  bool tx_room_ok() const { return tx_link_ == nullptr || tx_link_->tx_room() >= tx_reserve_; }
  /// Appends `tcb` to the waiting FIFO (no-op if it waits already); tx_unwait takes it out (remove() does for a
  /// TCB that ends while waiting, so the list never holds a freed TCB).
  void tx_wait(Tcb& tcb);
  void tx_unwait(Tcb& tcb);

  Interface& ip_;
  reactor::TimerWheel& timers_;
  const Clock& clock_;
  stats::CoreStats& core_stats_;
  TcpConfig conf_;
  SequenceKeys keys_;
  TcpStats stats_;
  absl::flat_hash_map<FourTuple, Tcb*> table_;
  absl::flat_hash_map<uint16_t, Listener> listeners_;
  std::vector<Tcb*> zombies_;
  size_t open_ = 0;
  bool accepting_ = true;
  uint16_t next_ephemeral_ = 0;
  // tcp_tw_reuse candidates: ms of the last segment per TIME-WAIT tuple, and per destination (dest_key) the
  // local ports in the order they entered TIME-WAIT (entries whose tuple left tw_heard_ms_ are skipped).
  absl::flat_hash_map<FourTuple, uint64_t> tw_heard_ms_;
  absl::flat_hash_map<uint64_t, std::deque<uint16_t>> tw_ports_;
  const FlowOwner* flow_owner_ = nullptr;
  config::ListenSocket empty_socket_;
  base::LogRateLimiter max_streams_log_{1000};
  base::LogRateLimiter syn_backlog_log_{1000};
  // TX backpressure: the link asked for room, the reserve (frames), and the FIFO of waiting TCBs (intrusive:
  // Tcb::tx_wait_prev_/tx_wait_next_).
  const PacketIO* tx_link_ = nullptr;
  size_t tx_reserve_ = 0;
  Tcb* tx_wait_head_ = nullptr;
  Tcb* tx_wait_tail_ = nullptr;
  size_t tx_waiting_count_ = 0;
};

}  // namespace kosoku::tcpip
