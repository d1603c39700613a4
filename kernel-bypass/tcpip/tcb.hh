// One TCP connection (RFC 9293 transmission control block) and its net::Stream face.
//
// Send side (tcb_send_buffer.cc): like a kernel socket, the TCB takes the application's output into its own
// send buffer — owned blocks, which are also the retransmission queue — up to send_buffer_bytes
// (TcpConfig, the SO_SNDBUF analogue, or the listener's sndbuf=): committed bytes stay where reserve() put
// them, write_ref bytes are copied, so the caller's buffer is free at once, and write_shared bytes (file
// chunks core/static read into a net::SharedBuffer) are not copied at all: the block keeps a reference to the
// buffer until they are acknowledged. Output beyond the limit waits in order (write_ref blocks by reference,
// a shared block split at the limit) and is taken as ACKs free room. pending_output() is the output not
// taken yet (waiting bytes, plus any committed overshoot of the limit); on_writable fires when an ACK lets it
// drop to the low-water mark.
// A segment's payload is found through a cursor (no per-segment allocation). If it is at least 1 KiB of one
// shared buffer and the link can chain external buffers (PacketIO::tx_payload_by_reference: dpdk::Queue on a
// port whose PMD takes chained mbufs), it goes by reference — zero-copy from the io_uring read to the PMD;
// otherwise it is copied from the send buffer into the frame. In flight ≤ min(cwnd, peer window, send_window_bytes), where with SACK the octets
// the peer SACKed do not count against cwnd (the pipe, RFC 6675: in recovery, and before it while no loss is
// marked — a late reordered segment does not stop the ACK clock; Tcb::output()).
// Receive side: in-order bytes in a contiguous input buffer (Stream::input), out-of-order segments in a
// sorted list; both together never exceed the receive buffer (TcpConfig::recv_buffer_bytes, or the listener's
// rcvbuf=; recv_buffer_limit()), which is what the advertised window says.
// The right window edge never moves left (RFC 9293 §3.8.6.2.2 / MUST-34).
//
// Close: kGraceful sends what is queued then FIN, discards further input, and reports on_closed once both
// FINs are acknowledged (TIME_WAIT or CLOSED), or after lingering_time_ms with an RST. kAbort sends RST if
// input is unread, otherwise drops the output the send buffer has not taken (pending_output()) and sends
// a FIN after the rest (net::Stream's contract).
// The TCB may outlive on_closed (TIME_WAIT); memory is freed by TcpStack::reap(), never inside a callback.
//
// SACK (RFC 2018), when both SYNs carry SACK-permitted: as receiver, every ACK sent while out-of-order data is
// held carries up to 3 SACK blocks (4 without timestamps), the first covering the most recently received
// segment, then the most recently reported others (§4). As sender, a SackScoreboard and RFC 6675 loss
// recovery (tcb_sack.cc) replace NewReno's dupack inflation; the scoreboard is cleared on an RTO (F-RTO keeps
// a copy of it to judge the timeout) and when the peer is seen to renege (RFC 2018 §8). Data stays in the
// output chain until cumulatively acknowledged.
//
// Tail Loss Probe (RFC 8985 §7, tcb_tlp.cc), with SACK only: while data is outstanding and no recovery
// (fast or RTO) runs, a probe timeout PTO = 2·SRTT (+ the peer's worst-case delayed ACK when one segment is in
// flight) runs beside the RTO; on expiry one probe goes out — a new segment if the windows and the send buffer
// allow, else the highest unacknowledged segment again — once per episode. An ACK that then SACKs the probe
// shows every hole below it lost (RACK's reasoning: those octets were sent at least a PTO earlier) and
// starts RFC 6675 recovery, instead of waiting for the RTO.
//
// RACK (RFC 8985 §6, tcb_rack.cc; with SACK and TcpConfig::rack): every transmission is recorded with its time
// (rack.hh); a segment is lost once one sent after it was delivered and RACK.rtt + reo_wnd has passed, which
// replaces RFC 6675's DupThresh rule (IsLost) as the loss marking recovery acts on: recovery starts when
// RACK marks the first loss, NextSeg() rule 1 retransmits what RACK marked (lost retransmissions included),
// and the pipe counts what is neither SACKed nor marked lost. A reordering timer re-runs the detection
// when a segment's reo_wnd runs out without an ACK. D-SACKs (RFC 2883) widen reo_wnd.
//
// Spurious retransmission timeouts (RFC 4015 response, tcb_rtt.cc): found by timestamps (RFC 3522) or, on a
// connection without them, by F-RTO (RFC 5682, tcb_frto.cc: after a first timeout's retransmission is
// acknowledged, two new segments go out instead of the go-back; an ACK of data never retransmitted then shows
// the originals were delivered). Either way the window reduction is undone and the go-back stops.
//
// Idle connections (tcb_idle.cc): once everything sent is acknowledged and no input is held for 1 s, the
// input buffer and the kept output block are freed, so an idle keep-alive connection costs its TCB only.
// Keep-alive (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6; tcb_idle.cc): off unless set_keepalive() (the
// listening socket's so_keepalive=); after idle_ms with nothing received, a probe SEG.SEQ = SND.NXT - 1
// every interval_ms; `probes` unanswered probes abort the connection with ETIMEDOUT.
#pragma once

#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/net/in_buffer.hh"
#include "core/net/out_chain.hh"
#include "core/net/stream.hh"
#include "core/reactor/timer_wheel.hh"
#include "kernel-bypass/tcpip/congestion.hh"
#include "kernel-bypass/tcpip/isn.hh"
#include "kernel-bypass/tcpip/rack.hh"
#include "kernel-bypass/tcpip/sack_scoreboard.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

class TcpStack;

enum class TcpState : uint8_t {
  kClosed, kSynSent, kSynReceived, kEstablished, kFinWait1, kFinWait2, kCloseWait, kClosing, kLastAck, kTimeWait,
};
const char* state_name(TcpState s);

class Tcb final : public net::Stream {
 public:
  Tcb(TcpStack& stack, const FourTuple& tuple);
  Tcb(const Tcb&) = delete;
  Tcb& operator=(const Tcb&) = delete;
  ~Tcb();

  // ---- opening (called by TcpStack) ----
  /// Active open: send SYN, state SYN_SENT.
  void open_active(net::StreamHandler* handler);
  /// Passive open from a SYN received on a listener: state SYN_RECEIVED, send SYN-ACK.
  void open_passive(const TcpSegment& syn, bool listener_backlog);
  /// Passive open completed by a valid SYN cookie: straight to ESTABLISHED with the cookie's MSS.
  void open_from_cookie(const TcpSegment& ack, SeqNum iss, uint16_t mss);
  void set_handler(net::StreamHandler* h) override { handler_ = h; }
  /// Drop the connection: state CLOSED, timers off, on_closed(error) if not yet told, table removal (the
  /// memory is freed by TcpStack::reap()).
  void terminate(int error);

  /// Processes one segment for this connection (RFC 9293 §3.10.7.3 / §3.10.7.4).
  void segment_arrives(const TcpSegment& seg);

  TcpState state() const { return state_; }
  const FourTuple& tuple() const { return tuple_; }
  bool counts_in_backlog() const { return in_backlog_; }
  void leave_backlog() { in_backlog_ = false; }
  bool counted() const { return counted_; }
  void set_counted() { counted_ = true; }
  bool finished() const { return state_ == TcpState::kClosed; }
  // Introspection for tests and stats.
  SeqNum snd_una() const { return snd_una_; }
  SeqNum snd_nxt() const { return snd_nxt_; }
  SeqNum rcv_nxt() const { return rcv_nxt_; }
  uint32_t snd_wnd() const { return snd_wnd_; }
  uint32_t cwnd() const { return cc_.cwnd(); }
  /// RFC 6675 fast recovery runs (entered on a loss RACK or DupThresh found, until SND.UNA passes RecoveryPoint).
  bool in_fast_recovery() const { return cc_.in_recovery(); }
  uint64_t rto_ms() const { return rto_ms_; }
  /// RFC 6298 SRTT, µs (1 ms before the first sample): RACK's reo_wnd cap and the TLP's PTO use it.
  uint64_t srtt_us() const { return have_rtt_ ? std::max<uint64_t>(srtt_us_, 1) : 1000; }
  uint16_t mss() const { return mss_; }
  uint8_t snd_wscale() const { return snd_wscale_; }
  uint8_t rcv_wscale() const { return rcv_wscale_; }
  bool timestamps() const { return ts_ok_; }
  uint32_t ts_recent() const { return ts_recent_; }
  /// Heap bytes of the buffers: input, output blocks, and the RACK transmission record.
  size_t buffer_bytes() const { return in_.capacity() + out_block_bytes_ + rack_.heap_bytes(); }
  /// Send buffer: bytes the TCB owns (unacknowledged, sent or not), and bytes still waiting to be taken.
  size_t send_buffered() const { return send_.bytes(); }
  size_t send_waiting() const { return wait_.bytes(); }
  /// Out-of-order payload bytes held, and the number of (non-overlapping) queued ranges.
  size_t ooo_bytes() const { return ooo_bytes_; }
  size_t ooo_segments() const { return ooo_.size(); }
  /// Bytes this connection holds: sizeof(Tcb) + buffers + out-of-order data + SACK scoreboard (what
  /// TcpStats::memory_bytes sums).
  size_t memory_bytes() const;
  bool sack_permitted() const { return sack_ok_; }
  const SackScoreboard& scoreboard() const { return sb_; }
  const Rack& rack() const { return rack_; }
  /// Congestion state (cwnd, ssthresh, recovery; tests and the status location read it).
  const CongestionControl& cc() const { return cc_; }
  bool in_recovery() const { return cc_.in_recovery(); }
  /// Keep-alive: idle_ms of silence before the first probe, interval_ms between probes, abort after
  /// `probes` unanswered ones (ETIMEDOUT). idle_ms = 0 turns it off.
  void set_keepalive(uint64_t idle_ms, uint64_t interval_ms, unsigned probes);
  /// net::Stream (proxy_socket_keepalive): on = the stack's TcpConfig keepalive_* values (tcp_stack.cc).
  void set_keepalive(bool on) override;
  bool keepalive() const { return ka_idle_ms_ != 0; }
  /// Buffer limits in bytes (tcb_send_buffer.cc): `recv_bytes` bounds in-order + out-of-order input, i.e. what
  /// the advertised window says, and picks the window scale offered in our SYN or SYN-ACK (RFC 7323 §2.3);
  /// `send_bytes` is the send buffer (SO_SNDBUF's analogue). The constructor takes TcpConfig's
  /// recv_buffer_bytes / send_buffer_bytes; TcpStack sets a passive connection's from its listening socket
  /// (`listen ... rcvbuf= sndbuf=`) before the SYN-ACK. Call only before the first SYN or SYN-ACK is sent.
  void set_buffer_limits(uint32_t recv_bytes, uint32_t send_bytes);
  uint32_t recv_buffer_limit() const { return recv_limit_; }
  uint32_t send_buffer_limit() const { return send_limit_; }

  // ---- net::Stream ----
  std::span<const char> input() const override { return in_.view(); }
  void consume(size_t n) override;
  void pause_reading() override { paused_ = true; }
  void resume_reading() override;
  std::span<char> reserve(size_t min_bytes) override;
  void commit(size_t n) override;
  void write_ref(const char* data, size_t len) override;
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override;
  void flush() override;
  size_t pending_output() const override;
  void set_low_water(size_t bytes) override { low_water_ = bytes; }
  void close(Close how) override;
  const sockaddr* peer() const override { return reinterpret_cast<const sockaddr*>(&peer_addr_); }
  std::string_view peer_text() const override { return peer_text_; }
  uint16_t local_port() const override { return tuple_.local_port; }

 private:
  enum class TimerKind : uint8_t {
    kRetransmit, kDelayedAck, kPersist, kTimeWait, kLinger, kNotify, kKeepalive, kRelease, kTlp, kRack,
  };
  struct TcbTimer final : reactor::Timer {
    Tcb* tcb;
    TimerKind kind;
    TcbTimer(Tcb* t, TimerKind k) : tcb(t), kind(k) {}
    void fire() override { tcb->on_timer(kind); }
  };
  using OutBlock = net::OutBlock;
  struct OooSegment {
    SeqNum seq;
    std::string data;
    bool fin;
  };

  void on_timer(TimerKind k);
  void on_retransmit_timer();
  void on_persist_timer();
  /// kKeepalive: the keep-alive probe schedule; kRelease: free the buffers of a connection that stayed idle.
  void on_idle_timer(TimerKind k);
  void on_keepalive_timer();
  // Tail Loss Probe (tcb_tlp.cc, RFC 8985 §7).
  /// Arms the probe timeout (PTO, §7.2) when a probe is allowed, otherwise cancels it. Called after new data
  /// is sent and after each ACK.
  void tlp_arm();
  /// A probe may be armed or sent: an open state, SACK and TcpConfig::tail_loss_probe on, none sent this
  /// episode, data outstanding, no recovery running.
  bool tlp_allowed() const;
  /// The PTO expired: sends one probe (§7.3) and re-arms the RTO.
  void on_tlp_timer();
  /// True when the ACKs of this episode's probe SACKed it with a hole below: the holes are lost (§7.4 with
  /// RACK's time order), so SACK recovery may start at once.
  bool tlp_shows_loss() const;
  // RACK (tcb_rack.cc, RFC 8985 §6).
  /// RACK loss detection runs: SACK negotiated and TcpConfig::rack.
  bool rack_on() const;
  /// Records one transmission of [seq, seq + len) (a FIN included in len) for RACK.
  void rack_sent(SeqNum seq, uint32_t len);
  /// Steps 1-4 for one ACK (after the scoreboard took its blocks; `dsack`: its first block is a D-SACK),
  /// then step 5 (rack_detect).
  void rack_ack(const TcpSegment& seg, bool dsack);
  /// Step 5: marks losses, counts lost retransmissions, arms or cancels the reordering timer.
  void rack_detect();
  /// The reordering timer: detection again; recovery starts if RACK now marks a loss; output.
  void on_rack_timer();
  /// Fast recovery (RFC 6675 §5 step 4) when allowed and a loss is shown: RACK's marks (or, without RACK,
  /// DupThresh duplicates / IsLost(SND.UNA)), or the tail loss probe's SACK. Returns true when it started.
  /// `delivered`: octets the ACK that called it newly delivered (PRR's first share; 0 from a timer).
  bool sack_maybe_enter_recovery(uint32_t delivered = 0);
  /// RFC 6675 pipe (RACK's when RACK is on), octets.
  uint32_t sack_pipe() const;
  /// Outside fast recovery (an RTO's go-back): retransmits RACK-marked losses below SND.NXT (lost
  /// retransmissions) while the pipe leaves room in cwnd.
  void rack_retransmit_lost();
  /// Sender: a D-SACK block arrived: when it covers one of the last recovery's retransmissions it counts down
  /// undo_retrans_; at 0 every retransmission was spurious and the window reduction is undone.
  void dsack_undo(const SackBlock& dsack);
  /// RFC 3522: the ACK echoes a TSval older than `first_rtx_ts`, the one the first retransmission of a
  /// recovery or a timeout carried (an original arrived).
  bool eifel_delayed(const TcpSegment& seg, uint32_t first_rtx_ts) const;
  /// The last retransmission timeout was spurious (RFC 3522 detection, or F-RTO's): RFC 4015 §2's response —
  /// ssthresh back to pipe_prev, cwnd = `flight` + min(`bytes_acked`, IW) (CongestionControl::undo_timeout:
  /// slow start climbs back, no burst; `flight` = octets outstanding after the ACK, `bytes_acked` = octets it
  /// newly acknowledged cumulatively), RACK's lost marks withdrawn, and the go-back ends (SND.NXT back to
  /// SND.MAX: the originals are in flight). Counted in TcpStats::spurious_rtos. The backed-off RTO is not
  /// reset here: rtt_sample() recomputes it (without the doubling) at the next RTT sample — with RACK (SACK)
  /// or timestamps the ACK that showed the timeout spurious gives one (the original's send time / its TSecr);
  /// on a basic F-RTO connection (no SACK, no timestamps) the timed segment is the first new one sent after
  /// the timeout (Karn), so the doubled RTO stays until that segment is acknowledged.
  void undo_spurious_rto(uint32_t flight, uint32_t bytes_acked);
  // F-RTO (tcb_frto.cc, RFC 5682) for connections without timestamps (they use RFC 3522 above).
  /// What process_ack saw before it changed anything: SND.UNA advanced; a duplicate ACK (RFC 5681 §2: at
  /// SND.UNA, no data, same window, data outstanding); SND.UNA before it; in step 3 with SACK, the highest
  /// octet retransmitted since the timeout (frto_rtx_high_) and the originals acknowledged before the ACK.
  struct FrtoAck {
    bool advanced;
    bool dup;
    SeqNum una;
    SeqNum rtx_high;
    uint32_t originals_before;
  };
  FrtoAck frto_ack_before(bool advanced, bool dup) const;
  /// Octets in [rtx_high, recover) acknowledged cumulatively or SACKed, less those SACKed before the timeout
  /// (frto_sacked_): originals (never retransmitted since the timeout, not known to have arrived before it)
  /// that reached the peer. Non-decreasing from ACK to ACK for a fixed rtx_high (a cumulative ACK of octets
  /// SACKed before adds nothing, nor does a block re-reported after the timeout), so a rise means the ACK
  /// newly acknowledged one.
  uint32_t frto_originals(SeqNum rtx_high) const;
  /// Octets in [lo, hi) acknowledged cumulatively (below SND.UNA) or SACKed (the scoreboard); 0 if hi ≤ lo.
  uint32_t frto_acked(SeqNum lo, SeqNum hi) const;
  /// A segment [seq, seq + len) went out: during an RTO recovery a retransmission raises frto_rtx_high_.
  void frto_sent(SeqNum seq, size_t len) {
    if (!rto_recovery_ || len == 0 || !(seq < snd_max_)) return;
    SeqNum end = std::min(seq + static_cast<uint32_t>(len), snd_max_);
    if (frto_rtx_high_ < end) frto_rtx_high_ = end;
  }
  /// Step 1, after the timeout's go-back retransmission went out: `fresh` = the timeout reduced the window
  /// (CongestionControl::on_timeout), `fast_recovery` = it fired in a fast recovery. Arms step 2 or not.
  void frto_on_timeout(bool fresh, bool fast_recovery);
  /// Steps 2 and 3 for one ACK (called at the end of process_ack while an RTO recovery runs).
  void frto_on_ack(const TcpSegment& seg, const FrtoAck& a);
  /// Step 2b: up to two new segments within the peer's window (not cwnd); false when none could go.
  bool frto_send_new();
  /// Arms the release timer (kReleaseIdleMs) unless it runs; when it fires with no input held and nothing to
  /// send, the input buffer and the kept output block are freed (they come back on the next byte).
  void arm_release();
  /// Keep-alive from the listening socket this passive connection came through (so_keepalive=).
  void keepalive_from_listener();
  void arm(TcbTimer& t, uint64_t delay_ms);

  // Input processing steps.
  void syn_sent_arrives(const TcpSegment& seg);
  bool acceptable(const TcpSegment& seg) const;
  void process_ack(const TcpSegment& seg);
  void process_text(const TcpSegment& seg);
  /// Out-of-order reassembly (tcb_reassembly.cc): keeps [seq, seq + data) minus what the queue already
  /// holds, appended to a contiguous predecessor; bytes beyond recv_buffer_bytes (in-order + queued) or a
  /// segment beyond max_ooo_segments() are dropped (TcpStats::ooo_dropped).
  void ooo_insert(SeqNum seq, std::span<const uint8_t> data, bool fin);
  size_t max_ooo_segments() const;
  void peer_fin();
  void take_syn_options(const TcpOptions& o, bool we_offered);
  void challenge_ack();
  /// The ACK an unacceptable segment gets (PAWS, RFC 7323 §5.3 R1; outside the window, RFC 9293 §3.10.7.4).
  /// For a pure ACK (no data, SYN or FIN) at most one per kOowAckIntervalMs: answering every stale ACK of a
  /// reordering path costs a frame each and can feed an ACK loop (Linux's tcp_oow_rate_limited,
  /// net.ipv4.tcp_invalid_ratelimit); the rest are counted in TcpStats::oow_acks_skipped. Data is always
  /// answered (its D-SACK), and so is a keep-alive probe, which comes far less often than the interval.
  void oow_ack(const TcpSegment& seg);

  // Output.
  void output();
  /// Sends the next new segment within `wnd` bytes of SND.UNA (sender SWS avoidance applies); false when
  /// nothing could be sent.
  bool send_next(uint32_t wnd);
  /// Sends one segment: `len` payload bytes from sequence `seq` (0 for control segments).
  void send_segment(SeqNum seq, size_t len, uint8_t flags);
  void send_ack() { send_segment(snd_nxt_, 0, tcp_flag::kAck); }
  void send_syn();
  void send_rst(SeqNum seq);
  uint32_t rcv_space() const;
  uint16_t window_field(bool syn);
  uint32_t ts_now() const;
  void arm_retransmit();
  /// One RFC 6298 §2 sample, µs: SRTT/RTTVAR updated, RTO = SRTT + max(G, 4·RTTVAR) with G = 1 ms, rounded up
  /// to ms and clamped to [rto_min, rto_max].
  void rtt_sample(uint64_t rtt_us);
  /// The sample an ACK of new data (up to `ack`) gives, in order of precision: RACK's transmission record
  /// (µs; the oldest newly acknowledged segment sent once and not SACKed before, as Linux's first_ackt, so
  /// Karn's rule holds); else the timestamp echo (RFC 7323 §4; the TSval clock is ms, a 0 ms echo counts as
  /// 1 ms as in Linux); else the one timed segment (µs).
  void rtt_on_ack(const TcpSegment& seg, SeqNum ack);
  // Send buffer (tcb_send_buffer.cc). Segments read their payload from send_ at an offset from data_seq_
  // (send_.copy_out; send_.shared_at for zero-copy TX).
  void drop_acked(size_t n);
  /// Appends `n` bytes to the send buffer's copied blocks (send_.bytes() grows by n).
  void copy_in(const char* src, size_t n);
  /// Moves waiting output into the send buffer while it is under send_buffer_bytes; returns bytes taken.
  size_t take();
  OutBlock* new_block(size_t cap);
  /// Frees one block of either queue: unrefs a shared buffer, keeps out_block_bytes_ right.
  void free_block(OutBlock* b);
  /// Frees the spare blocks (idle release, TIME-WAIT, destruction).
  void free_spares();
  /// close(kAbort) without unread input: drops the output not taken (the waiting queue and any overshoot of
  /// the limit not sent yet); what the send buffer took is still delivered, as by a kernel socket's close().
  void drop_unsent();
  /// Frees every buffer: the output chain, the input buffer, the out-of-order queue, the SACK scoreboard
  /// (idle release, and on entering TIME-WAIT, which needs only the tuple, sequence numbers and timestamps).
  void free_buffers();
  /// Output committed, not acknowledged: the send buffer and the waiting queue.
  size_t out_bytes() const { return send_.bytes() + wait_.bytes(); }
  SeqNum fin_seq() const { return data_seq_ + static_cast<uint32_t>(out_bytes()); }
  bool fin_acked() const { return fin_sent_ && snd_una_ > fin_seq(); }

  // SACK (tcb_sack.cc). sack_ack: the SACK part of an ACK (after the cumulative part); `advanced`:
  // SND.UNA moved by `acked` octets; `dup_candidate`: RFC 5681 duplicate-ACK conditions (a)-(d) hold.
  void sack_ack(const TcpSegment& seg, bool advanced, uint32_t acked, bool dup_candidate);
  /// RFC 6675 §5 (C): while cwnd - pipe ≥ 1 SMSS, send what NextSeg() picks.
  void sack_send();
  /// Retransmits up to `len` octets from `seq` (data, and the FIN if the range reaches it); false when
  /// nothing there could be sent (acknowledged, or beyond the send buffer).
  bool sack_retransmit(SeqNum seq, uint32_t len);
  void sack_on_timeout();
  /// Receiver: an out-of-order segment at `seq` arrived (becomes the first SACK block).
  void sack_note_ooo(SeqNum seq);
  /// Receiver: `len` octets from `seq` arrived, some already held: below RCV.NXT (delivered), or else the
  /// first stretch the out-of-order queue holds (call before queueing them). The next ACK, sent at once,
  /// reports that duplicate range as a D-SACK (RFC 2883 §4), a queued one followed by its queue block.
  void note_dsack(SeqNum seq, size_t len);
  /// Receiver: fills o->sack with the blocks for an outgoing ACK (RFC 2018 §4), a pending D-SACK first
  /// (RFC 2883 §4).
  void sack_fill(TcpOptions* o);
  bool ooo_range(SeqNum anchor, SackBlock* out) const;
  void update_memory();

  // State changes and endings.
  void enter(TcpState s);
  void enter_time_wait();
  /// The connection is over for the application: on_closed(error) once.
  void notify_closed(int error);
  void notify_readable();

  TcpStack& stack_;
  FourTuple tuple_;
  sockaddr_in peer_addr_{};
  std::string peer_text_;
  net::StreamHandler* handler_ = nullptr;
  TcpState state_ = TcpState::kClosed;
  bool passive_ = false;
  bool in_backlog_ = false;
  bool closing_ = false;         // application called close()
  bool closed_notified_ = false; // on_closed delivered
  bool paused_ = false;
  bool counted_ = false;        // counts in TcpStack::open_streams (until on_closed)
  bool fin_queued_ = false;      // our FIN is to follow the queued data
  bool fin_sent_ = false;
  bool peer_fin_ = false;

  // Send sequence space (RFC 9293 §3.3.1). snd_max_: highest sequence sent + 1 (snd_nxt_ drops back to
  // snd_una_ after an RTO). data_seq_: sequence of the first byte in the output chain.
  SeqNum iss_, snd_una_, snd_nxt_, snd_max_, snd_wl1_, snd_wl2_, data_seq_;
  uint32_t snd_wnd_ = 0;
  uint32_t max_snd_wnd_ = 0;
  // Receive sequence space. rcv_adv_: right edge of the window last advertised.
  SeqNum irs_, rcv_nxt_, rcv_adv_, last_ack_sent_;
  uint16_t mss_ = 536;           // payload bytes per segment (options excluded)
  uint16_t peer_mss_ = 536;
  uint8_t snd_wscale_ = 0, rcv_wscale_ = 0;
  bool ws_ok_ = false, ts_ok_ = false, sack_ok_ = false;
  uint32_t ts_recent_ = 0;
  uint32_t ts_offset_ = 0;

  // RFC 6298 estimator in µs (a ms estimator rounds a sub-millisecond path to 0 and its integer smoothing
  // cannot climb from 0 on samples below 8 ms), the RTO in ms (the timer wheel's unit), and Karn's timing of
  // one segment when neither timestamps nor RACK's record give a sample.
  uint64_t srtt_us_ = 0, rttvar_us_ = 0, rto_ms_ = 1000;
  /// The RTT CUBIC's W_cubic(t + RTT) uses, µs: RACK's min RTT (µs clock) when known, else SRTT.
  uint64_t cc_rtt_us() const {
    return rack_.min_rtt_us() != UINT64_MAX ? rack_.min_rtt_us() : srtt_us();
  }
  bool have_rtt_ = false;
  bool timing_ = false;
  SeqNum timed_seq_;
  uint64_t timed_at_us_ = 0;
  unsigned retries_ = 0;
  uint64_t persist_ms_ = 0;
  CongestionControl cc_;
  unsigned unacked_segments_ = 0;  // received, not yet acknowledged (delayed ACK)
  uint64_t last_challenge_ms_ = 0;
  uint64_t last_oow_ack_ms_ = 0;  // oow_ack(): when the last reply to an unacceptable pure ACK went
  bool oow_acked_ = false;
  unsigned challenges_this_second_ = 0;

  // Output: the send buffer (copied and shared blocks from data_seq_ on; its front() is data_seq_), then the
  // waiting queue (not taken yet).
  net::OutChain send_;
  net::OutChain wait_;
  size_t out_block_bytes_ = 0;   // bytes of copied and shared blocks in both, and of the spares (memory accounting)
  // copy_in()'s largest block (write_ref bytes go to blocks of up to 64 KiB); acknowledged ones are kept for
  // reuse, up to 8 (512 KiB), so a long transfer does not malloc and fault in fresh pages per block.
  static constexpr size_t kCopyBlock = 64 * 1024;
  net::BlockPool<kCopyBlock, 8> spares_;
  size_t low_water_ = 0;

  // Input.
  net::InBuffer in_;
  std::vector<OooSegment> ooo_;
  size_t ooo_bytes_ = 0;

  TcbTimer rtx_timer_{this, TimerKind::kRetransmit};
  TcbTimer delack_timer_{this, TimerKind::kDelayedAck};
  TcbTimer persist_timer_{this, TimerKind::kPersist};
  TcbTimer tw_timer_{this, TimerKind::kTimeWait};
  TcbTimer linger_timer_{this, TimerKind::kLinger};
  TcbTimer notify_timer_{this, TimerKind::kNotify};  // deferred on_readable after resume_reading
  std::vector<char> scratch_;  // reserve() target after close (writes are discarded)

  // SACK sender (RFC 6675 HighRxt, rescue retransmission) and receiver (most recent blocks, by an octet in
  // each).
  SackScoreboard sb_;
  SeqNum high_rxt_;
  bool rescue_done_ = false;
  // RFC 7661 §4.3: cwnd, not the peer's window or the application, stopped output this round (until SND.UNA
  // passes cwnd_limited_end_); cwnd grows only then (congestion.hh).
  bool cwnd_limited_ = false;
  SeqNum cwnd_limited_end_;
  bool cwnd_limited_round();
  uint8_t sack_recent_count_ = 0;
  // Sender undo (RFC 2883 §5, RFC 3708): retransmissions of the last SACK recovery, [SND.UNA, RecoveryPoint)
  // at its start, not yet reported as D-SACKs; -1: no undo possible (none yet, after an RTO, or done).
  int undo_retrans_ = -1;
  // Eifel detection (RFC 3522) per SACK recovery: the TSval of its first retransmission, and whether every
  // ACK that advanced SND.UNA in it echoed an older TSval (the original filled the hole: reordering). Used
  // only for a recovery with a single retransmission (tcb_sack.cc).
  uint32_t eifel_ts_ = 0;
  bool eifel_ok_ = false;
  uint32_t rto_eifel_ts_ = 0;  // TSval of the last timeout's retransmission (RFC 3522)...
  bool rto_eifel_ = false;     // ...judged on the first ACK of new data after it
  SeqNum undo_low_, undo_high_;
  // F-RTO (RFC 5682): the step the last timeout's detection is in; "recover" (SND.MAX at the last timeout)
  // and whether that timeout's recovery still runs (SND.UNA below recover); the end of its retransmission.
  enum class Frto : uint8_t { kOff, kStep2, kStep3 };
  Frto frto_ = Frto::kOff;
  bool rto_recovery_ = false;
  SeqNum frto_recover_, frto_rtx_end_;
  SeqNum frto_rtx_high_;  // the highest octet retransmitted since the last timeout + 1 (its go-back included)
  // The scoreboard's ranges when the timeout fired (sack_on_timeout moves them here before clearing it),
  // kept while F-RTO runs: octets the peer had SACKed before the timeout are no evidence in step 3.
  SackScoreboard frto_sacked_;
  // Receiver D-SACK (RFC 2883 §4): a duplicate range below RCV.NXT, reported first in the next ACK only.
  bool dsack_pending_ = false;
  SackBlock dsack_;
  SeqNum sack_recent_[TcpOptions::kMaxSackBlocks];
  // Keep-alive.
  uint64_t ka_idle_ms_ = 0, ka_interval_ms_ = 0;
  unsigned ka_probes_ = 0, ka_unanswered_ = 0;
  uint64_t last_heard_ms_ = 0;
  TcbTimer keepalive_timer_{this, TimerKind::kKeepalive};
  TcbTimer release_timer_{this, TimerKind::kRelease};
  // Tail Loss Probe: one probe per episode; the episode ends when SND.UNA passes tlp_high_ (the data end of
  // the probe, = SND.MAX when it went).
  TcbTimer tlp_timer_{this, TimerKind::kTlp};
  bool tlp_sent_ = false;
  SeqNum tlp_high_;
  // RACK: the transmission record and its reordering timer.
  Rack rack_;
  TcbTimer rack_timer_{this, TimerKind::kRack};
  size_t accounted_bytes_ = 0;  // what this TCB added to TcpStats::memory_bytes
  uint32_t recv_limit_ = 0, send_limit_ = 0;  // set_buffer_limits()
  // TX backpressure (tcp_stack.hh): send_next held a new segment back for want of TX room; this TCB's links
  // in its TcpStack's FIFO of waiting connections (TcpStack::tx_wait / tx_unwait / resume_tx).
  friend class TcpStack;
  bool tx_waiting_ = false;
  Tcb* tx_wait_prev_ = nullptr;
  Tcb* tx_wait_next_ = nullptr;
};

}  // namespace kosoku::tcpip
