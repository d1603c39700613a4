// Congestion control for one connection: the window arithmetic around loss recovery.
//   - Window growth and reduction: CUBIC (RFC 9438, cubic.hh; the default, as Linux) or Reno (RFC 5681):
//     slow start adds min(acked, SMSS) per ACK (RFC 5681 §3.1, L = 1 SMSS) below ssthresh; above it Reno adds
//     SMSS²/cwnd per ACK, CUBIC follows W_cubic / W_est. On a congestion event Reno sets ssthresh =
//     max(FlightSize/2, 2·SMSS) (RFC 5681 eq. 4), CUBIC max(cwnd·0.7, 2·SMSS) (RFC 9438 §4.6, from cwnd as
//     Linux: cwnd only grows while cwnd-limited, below). Initial window per RFC 6928: min(10·SMSS, max(2·SMSS,
//     14600)).
//   - Without SACK: NewReno fast retransmit / fast recovery (RFC 6582; partial ACKs keep the connection in
//     recovery, a full ACK of `recover` ends it) with dupack inflation and partial-ACK deflation.
//   - With SACK (RFC 6675): enter_sack_recovery() once, the pipe estimate (sack_scoreboard.hh / rack.hh)
//     replaces inflation/deflation, on_sack_recovery_ack() ends recovery at RecoveryPoint.
// PRR (RFC 6937, PRR-SSRB; RecoverFS = the pipe as RFC 9937 has it): during SACK recovery cwnd is not set to ssthresh at once; each ACK's delivered
// octets release a proportional share (ssthresh / RecoverFS) of new transmissions while pipe > ssthresh, and
// the slow-start reduction bound lets the window catch up to ssthresh once pipe fell below it — so the ACK
// clock keeps running through recovery (RFC 6675 sends nothing until half the flight is acknowledged, then a
// burst) and recovery ends with cwnd = ssthresh.
// Window growth only while the sender was cwnd-limited (RFC 7661 §4.3 / Linux tcp_is_cwnd_limited): an
// application-limited connection does not inflate cwnd it never used.
// Pure arithmetic, no timers, no I/O (times are passed in).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernel-bypass/tcpip/cubic.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

/// Window growth/reduction algorithm (Linux net.ipv4.tcp_congestion_control: cubic, reno).
enum class CongestionAlgorithm : uint8_t { kCubic, kReno };

class CongestionControl {
 public:
  static constexpr unsigned kDupAckThreshold = 3;

  explicit CongestionControl(uint32_t smss = 536) { reset(smss); }
  void reset(uint32_t smss) {
    smss_ = smss;
    cubic_.reset(smss);
    cwnd_ = initial_window();
    ssthresh_ = UINT32_MAX;
    dupacks_ = 0;
    recovery_ = false;
    app_limited_ = false;
    rto_backoff_ = false;
  }

  /// RFC 6937 PRR in SACK recovery (default on; off: RFC 6675's cwnd = ssthresh at entry).
  void set_prr(bool on) { prr_ = on; }
  void set_algorithm(CongestionAlgorithm a) { algorithm_ = a; }
  CongestionAlgorithm algorithm() const { return algorithm_; }
  const Cubic& cubic() const { return cubic_; }
  uint32_t cwnd() const { return cwnd_; }
  uint32_t ssthresh() const { return ssthresh_; }
  bool in_recovery() const { return recovery_; }
  unsigned dupacks() const { return dupacks_; }

  /// An ACK advanced SND.UNA to `ack`, acknowledging `acked` bytes; `flight` = bytes outstanding after it.
  /// `cwnd_limited`: cwnd, not the peer's window or the application, limited what was sent in the last
  /// round; without it cwnd does not grow (RFC 7661 §4.3).
  /// Returns true for a partial ACK during recovery: the caller retransmits the first unacknowledged
  /// segment and restarts the retransmission timer (RFC 6582 §3.2 step 3).
  /// `now_us` and `rtt_us` (the TCB passes RACK's min RTT, else SRTT) drive CUBIC's W_cubic(t + RTT).
  bool on_ack(SeqNum ack, uint32_t acked, uint32_t flight, bool cwnd_limited = true, uint64_t now_us = 0,
              uint64_t rtt_us = 0) {
    dupacks_ = 0;
    rto_backoff_ = false;  // progress: a later RTO is a new congestion event
    if (recovery_) {
      if (ack >= recover_) {  // full ACK (step 4): deflate
        recovery_ = false;
        cwnd_ = std::min(ssthresh_, std::max(flight, smss_) + smss_);
        return false;
      }
      cwnd_ = cwnd_ > acked ? cwnd_ - acked : 0;  // partial ACK: deflate by what was acked...
      if (acked >= smss_) cwnd_ += smss_;          // ...and add back one SMSS
      cwnd_ = std::max(cwnd_, smss_);
      return true;
    }
    if (!cwnd_limited) {
      // RFC 9438 §5.8: no growth, and t does not count the time the window was not used: CUBIC's epoch is
      // shifted by it once the sender is cwnd-limited again (as Linux's tcp_cubic after idle). Restarting the
      // epoch instead would recompute the curve from the cwnd then: W_max = cwnd, K = 0 in the convex region,
      // i.e. a flat start after every application-limited round.
      if (!app_limited_) {
        app_limited_ = true;
        app_limited_since_us_ = now_us;
      }
      return false;
    }
    if (app_limited_) {
      app_limited_ = false;
      if (algorithm_ == CongestionAlgorithm::kCubic && now_us > app_limited_since_us_) {
        cubic_.on_app_limited(now_us - app_limited_since_us_);
      }
    }
    if (cwnd_ < ssthresh_) {
      cwnd_ += std::min(acked, smss_);
    } else if (algorithm_ == CongestionAlgorithm::kCubic) {
      cwnd_ = cubic_.on_ack(cwnd_, acked, now_us, rtt_us);
    } else {
      cwnd_ += std::max(1u, static_cast<uint32_t>(static_cast<uint64_t>(smss_) * smss_ / cwnd_));
    }
    return false;
  }

  /// A duplicate ACK (RFC 5681 §2). `snd_una`, `snd_max` (highest sequence sent + 1) and `flight` as now.
  /// Returns true when the caller must fast-retransmit the segment at SND.UNA (the third duplicate, and the
  /// ACK covers more than `recover`, RFC 6582 §3.2 step 2).
  bool on_dupack(SeqNum snd_una, SeqNum snd_max, uint32_t flight) {
    if (recovery_) {
      cwnd_ += smss_;  // step 3 inflation: each dupack means a segment left the network
      return false;
    }
    if (++dupacks_ != kDupAckThreshold) return false;
    if (have_recover_ && !(snd_una - 1 > recover_)) return false;  // still ≤ recover: no second reduction
    ssthresh_ = reduced_ssthresh(flight);
    recover_ = snd_max;
    have_recover_ = true;
    recovery_ = true;
    cwnd_ = ssthresh_ + kDupAckThreshold * smss_;
    return true;
  }

  /// RFC 6675 §5: may a new SACK loss recovery start with SND.UNA at `snd_una`? Not while one runs, and
  /// after an RTO not until HighACK ≥ RecoveryPoint (§5.1).
  bool may_enter_sack_recovery(SeqNum snd_una) const { return !recovery_ && (!have_recover_ || snd_una >= recover_); }
  /// Counts one RFC 6675 duplicate ACK (an ACK that newly SACKs octets); returns DupAcks.
  unsigned count_dupack() { return ++dupacks_; }
  /// RFC 6675 §5 steps (4.1)/(4.2): RecoveryPoint = HighData (snd_max), ssthresh reduced (Reno: max(min(FlightSize,
  /// cwnd)/2, 2·SMSS), RFC 5681 eq. 4 and §3.2 step 2; CUBIC: max(cwnd·0.7, 2·SMSS)). Without PRR cwnd = ssthresh at once; with PRR cwnd
  /// is left as it was and RecoverFS = the pipe at the start of recovery (RFC 9937, which obsoletes RFC 6937's
  /// FlightSize: data SACKed before recovery has left the network), at most `flight`: prr_ack() takes over.
  void enter_sack_recovery(uint32_t flight, SeqNum snd_max, uint32_t pipe = UINT32_MAX) {
    prior_cwnd_ = cwnd_;
    prior_ssthresh_ = ssthresh_;
    ssthresh_ = reduced_ssthresh(flight);
    if (!prr_) cwnd_ = ssthresh_;
    recover_fs_ = std::max(std::min(flight, pipe), 1u);
    prr_delivered_ = prr_out_ = 0;
    undone_ = false;
    sndcnt_ = 0;
    recover_ = snd_max;
    have_recover_ = true;
    recovery_ = true;
    dupacks_ = 0;
  }
  /// A cumulative ACK during SACK recovery: an ACK at or beyond RecoveryPoint ends recovery (cwnd =
  /// ssthresh, RFC 6937 §3 "on exiting recovery"; a recovery whose reduction undo_reduction() took back ends
  /// with cwnd = max(cwnd, cwnd before it) instead: its restored ssthresh may be UINT32_MAX). Returns true
  /// when it ended.
  bool on_sack_recovery_ack(SeqNum ack) {
    dupacks_ = 0;
    if (ack >= recover_) {
      recovery_ = false;
      if (prr_) cwnd_ = undone_ ? std::max(cwnd_, prior_cwnd_) : ssthresh_;
      return true;
    }
    return false;
  }

  /// PRR is pacing this recovery (SACK recovery with set_prr(true)).
  bool prr_active() const { return prr_ && recovery_; }
  /// RFC 6937 §3, one ACK in SACK recovery (its entry ACK included): `delivered` = octets this ACK newly
  /// delivered (SND.UNA's advance + the change in SACKed octets), `pipe` = RFC 6675 pipe after it. Sets the
  /// send quota sndcnt (bytes; may be ≤ 0) and cwnd = pipe + max(sndcnt, 0).
  void prr_ack(uint32_t delivered, uint32_t pipe) {
    if (!prr_active()) return;
    prr_delivered_ += delivered;
    int64_t sndcnt;
    if (pipe > ssthresh_) {  // proportional rate reduction: CEIL(prr_delivered · ssthresh / RecoverFS) - prr_out
      uint64_t share = (prr_delivered_ * ssthresh_ + recover_fs_ - 1) / recover_fs_;
      sndcnt = static_cast<int64_t>(share) - static_cast<int64_t>(prr_out_);
    } else {  // slow-start reduction bound: catch up to ssthresh, at most one SMSS beyond what was delivered
      int64_t limit = std::max<int64_t>(static_cast<int64_t>(prr_delivered_) - static_cast<int64_t>(prr_out_),
                                        delivered) + smss_;
      sndcnt = std::min<int64_t>(static_cast<int64_t>(ssthresh_ - pipe), limit);
    }
    sndcnt_ = std::max<int64_t>(sndcnt, 0);
    cwnd_ = pipe + static_cast<uint32_t>(sndcnt_);
  }
  /// Octets (re)transmitted in recovery: counted in prr_out and taken from the quota.
  void prr_sent(uint32_t bytes) {
    if (!prr_active()) return;
    prr_out_ += bytes;
    sndcnt_ -= bytes;
  }
  /// Bytes PRR still lets go on this ACK (> 0: send one more segment).
  int64_t prr_quota() const { return sndcnt_; }

  /// The reduction made when the last SACK recovery started was spurious (every retransmission of it came
  /// back as a D-SACK, RFC 2883 §5 / RFC 3708): cwnd and ssthresh go back to at least their values before it
  /// (Linux tcp_undo_cwnd_reduction). Recovery itself runs on to RecoveryPoint.
  void undo_reduction() {
    if (recovery_) undone_ = true;  // PRR runs on; its exit must not set cwnd = the restored ssthresh
    if (algorithm_ == CongestionAlgorithm::kCubic) cubic_.undo();  // W_max, K, epoch as before (§4.9.2)
    cwnd_ = std::max(cwnd_, prior_cwnd_);
    ssthresh_ = std::max(ssthresh_, prior_ssthresh_);
  }

  /// The last retransmission timeout was spurious (RFC 3522 or RFC 5682 F-RTO detection, Tcb): RFC 4015 §2's
  /// response, not Linux's full restore. `flight` = octets outstanding after the ACK that showed it,
  /// `bytes_acked` = octets that ACK newly acknowledged cumulatively. ssthresh = pipe_prev = max(FlightSize,
  /// ssthresh) as both were when the timer fired (never below the current ssthresh); cwnd = flight +
  /// min(bytes_acked, IW), never below the current cwnd: after a timeout the flight is small, and restoring
  /// the old cwnd at once (Linux tcp_undo_cwnd_reduction) would let a stretch ACK release up to a window at
  /// line rate — kosoku does not pace — where RFC 4015 lets slow start climb back to ssthresh within about a
  /// round trip. CUBIC's state (W_max, K, epoch, W_est) is restored as before the timeout (RFC 9438 §4.9.2).
  /// The RecoveryPoint the timeout set is dropped, so a real loss later may start fast recovery at once.
  void undo_timeout(uint32_t flight, uint32_t bytes_acked) {
    if (algorithm_ == CongestionAlgorithm::kCubic) cubic_.undo();
    cwnd_ = std::max(cwnd_, flight + std::min(bytes_acked, initial_window()));
    ssthresh_ = std::max(ssthresh_, prior_pipe_);
    rto_backoff_ = false;
    have_recover_ = false;
  }

  /// F-RTO found the last timeout real after two more ACKs (RFC 5682 §2 / §3 step 3a): cwnd = 3·SMSS, what
  /// slow start from the loss window would have reached in those two round trips; ssthresh stays reduced.
  void frto_real_timeout() { cwnd_ = 3 * smss_; }

  /// The retransmission timer expired (RFC 5681 §3.1 eq. 4, loss window = 1 SMSS; Reno's FlightSize capped by
  /// cwnd as in reduced_ssthresh, Linux's tcp_reno_ssthresh; RFC 6582 §4 sets recover;
  /// CUBIC: RFC 9438 §4.8). ssthresh is held when the timer fires again before an ACK made progress (RFC 5681
  /// §3.1: the segment was already retransmitted by the timer), and with CUBIC when it fires in fast recovery
  /// (that recovery's reduction stands, as Linux's tcp_enter_loss): CUBIC reduces from cwnd, and cwnd is
  /// 1 SMSS after an RTO, inflated by duplicate ACKs in NewReno recovery, or PRR's pipe-based value.
  /// Returns true when this timeout reduced ssthresh (a new congestion event undo_timeout() can take back).
  bool on_timeout(uint32_t flight, SeqNum snd_max) {
    bool cubic = algorithm_ == CongestionAlgorithm::kCubic;
    bool fresh = !(rto_backoff_ || (cubic && recovery_));
    if (!fresh) {
      if (cubic) cubic_.on_repeated_timeout();
    } else {
      prior_cwnd_ = cwnd_;
      prior_ssthresh_ = ssthresh_;
      prior_pipe_ = std::max(flight, ssthresh_);  // RFC 4015 §2 pipe_prev, for undo_timeout()
      ssthresh_ = cubic ? cubic_.on_timeout(cwnd_) : reduced_ssthresh(flight);
    }
    rto_backoff_ = true;
    cwnd_ = smss_;
    recovery_ = false;
    dupacks_ = 0;
    recover_ = snd_max;
    have_recover_ = true;
    return fresh;
  }

 private:
  /// RFC 6928 initial window: min(10·SMSS, max(2·SMSS, 14600)) bytes.
  uint32_t initial_window() const { return std::min(10 * smss_, std::max(2 * smss_, 14600u)); }
  /// ssthresh after a congestion event (fast retransmit / SACK recovery entry). Reno's FlightSize leaves out
  /// what was sent beyond cwnd before the event (RFC 5681 §3.2 step 2: limited transmit's segments; with SACK
  /// also the cwnd - pipe data sent while a hole was late, Tcb::output), else a recovery could raise the window.
  uint32_t reduced_ssthresh(uint32_t flight) {
    if (algorithm_ == CongestionAlgorithm::kCubic) return cubic_.on_congestion_event(cwnd_);
    return std::max(std::min(flight, cwnd_) / 2, 2 * smss_);
  }

  CongestionAlgorithm algorithm_ = CongestionAlgorithm::kCubic;
  Cubic cubic_;
  uint32_t smss_ = 536;
  uint32_t cwnd_ = 0;
  uint32_t ssthresh_ = UINT32_MAX;
  unsigned dupacks_ = 0;
  bool recovery_ = false;
  bool have_recover_ = false;
  SeqNum recover_;
  bool prr_ = true;
  uint64_t recover_fs_ = 1, prr_delivered_ = 0, prr_out_ = 0;  // RFC 6937 RecoverFS, prr_delivered, prr_out
  int64_t sndcnt_ = 0;                                           // PRR's quota left for this ACK, bytes
  bool undone_ = false;  // undo_reduction() ran during the current SACK recovery
  bool app_limited_ = false;           // the last ACK outside recovery found the sender not cwnd-limited...
  uint64_t app_limited_since_us_ = 0;  // ...since the first such ACK at this time (µs)
  bool rto_backoff_ = false;  // the retransmission timer fired and no ACK has advanced SND.UNA since
  uint32_t prior_cwnd_ = 0, prior_ssthresh_ = 0;  // before the last reduction (SACK recovery or RTO; undo)
  uint32_t prior_pipe_ = 0;  // RFC 4015 pipe_prev: max(FlightSize, ssthresh) when the last fresh timeout fired
};

}  // namespace kosoku::tcpip
