// CUBIC window arithmetic for one connection (RFC 9438): the cubic increase function W_cubic(t) = C·(t−K)³ +
// W_max (§4.2), the Reno-friendly estimate W_est (§4.3), concave/convex growth towards target =
// W_cubic(t + RTT) clamped to [cwnd, 1.5·cwnd] (§4.4, §4.5), the multiplicative decrease with β_cubic = 0.7
// (§4.6), fast convergence (§4.7), the timeout rule (§4.8) and the undo of a spurious congestion event
// (§4.9.2). Pure arithmetic: no timers, no I/O, no allocation; the caller (NewReno/the TCB) owns cwnd and
// ssthresh, runs slow start and loss recovery, and calls on_ack() only in congestion avoidance.
//
// Units: every window crossing the API is in bytes (uint32_t, as the TCB keeps cwnd); times are µs
// (uint64_t, any monotonic clock). Internally windows are doubles in bytes (W_max, W_est, cwnd_prior,
// cwnd_epoch) and K is in seconds; the RFC's segment-based C (0.4 segments/s³) is applied as C·SMSS
// bytes/s³. The per-ACK path does a few multiplications in double (no cbrt, no libm); std::cbrt runs once per
// congestion avoidance stage, when the epoch starts. Doubles make huge t harmless: (t−K)³ for t of years is
// ~1e24, far from overflow, and the result is clamped to 1.5·cwnd (then to UINT32_MAX) before it is converted.
#pragma once

#include <cstdint>

namespace kosoku::tcpip {

class Cubic {
 public:
  static constexpr double kBeta = 0.7;  // β_cubic (RFC 9438 §4.6)
  static constexpr double kC = 0.4;     // C (§5.1), segments / s³
  /// α_cubic = 3(1−β)/(1+β) ≈ 0.529 (§4.3): W_est's additive increase, in segments per RTT, until W_est
  /// reaches cwnd_prior; 1 after that.
  static constexpr double kAlpha = 3.0 * (1.0 - kBeta) / (1.0 + kBeta);

  explicit Cubic(uint32_t smss = 536) { reset(smss); }
  /// A new connection (or a new SMSS): no W_max recorded, no epoch, nothing to undo, fast convergence on.
  void reset(uint32_t smss);

  /// Fast convergence (§4.7) is on by default; the RFC says to turn it off when the flow is known to be alone
  /// on its path.
  void set_fast_convergence(bool on) { fast_convergence_ = on; }

  /// Congestion avoidance (cwnd ≥ ssthresh, not in loss recovery): one ACK at `now_us` newly acknowledged
  /// `acked` bytes (cumulative plus SACKed). RFC 9438 §4.2–§4.5:
  ///  - the first such ACK with no epoch running starts one (§4.2): t_epoch = now_us, cwnd_epoch = cwnd,
  ///    W_est = cwnd_epoch, K = cbrt((W_max − cwnd_epoch)/C). With no W_max (the first slow start ended
  ///    without loss, §4.10), after a timeout (§4.8), or when cwnd_epoch ≥ W_max: W_max = cwnd_epoch and
  ///    K = 0 (with no W_max also cwnd_prior = cwnd_epoch);
  ///  - W_est += α·acked·SMSS/cwnd (eq. 4, byte-counted), α = α_cubic until W_est ≥ cwnd_prior, then 1;
  ///  - Reno-friendly region (W_cubic(t) < W_est): cwnd = W_est;
  ///  - otherwise (concave below W_max, convex above): cwnd += (target − cwnd)·acked/cwnd, i.e. the RFC's
  ///    (target − cwnd)/cwnd segments per SMSS acked, with target = W_cubic(t + RTT) clamped to
  ///    [cwnd, 1.5·cwnd]; fractions of a byte carry over to the next ACK.
  /// t = now_us − t_epoch (0 if the clock is before t_epoch); `rtt_us` is the RTT used in W_cubic(t + RTT)
  /// (the caller's SRTT or min RTT; 0 is allowed). `acked` = 0 changes nothing. Returns the new cwnd in bytes,
  /// never less than `cwnd` and at most UINT32_MAX. The caller must not call this while it is not
  /// cwnd-limited (application- or rwnd-limited) — see on_app_limited() and on_congestion_event().
  uint32_t on_ack(uint32_t cwnd, uint32_t acked, uint64_t now_us, uint64_t rtt_us);

  /// A congestion event: fast retransmit, RACK-detected loss or ECN-Echo (§4.6, §4.7). Saves the undo state
  /// (§4.9.2), records W_max = cwnd, or cwnd·(1+β)/2 with fast convergence when cwnd < the previous W_max,
  /// sets cwnd_prior = cwnd, ends the epoch, and returns the new ssthresh = max(⌊cwnd·β⌋, 2·SMSS) bytes. The
  /// caller sets cwnd (to ssthresh, or lets PRR bring it there; ≥ 2·SMSS on loss, ≥ 1·SMSS on ECE).
  /// `cwnd` stands in for FlightSize (RFC 9438 §4.6 allows cwnd): the caller MUST then stop cwnd from growing
  /// while it is not cwnd-limited (bytes in flight below cwnd), so that this cwnd is one the network carried.
  uint32_t on_congestion_event(uint32_t cwnd);

  /// The retransmission timer expired (§4.8): W_max, cwnd_prior, ssthresh and the undo state as
  /// on_congestion_event(); returns ssthresh. The caller sets cwnd = 1·SMSS and slow-starts; the first
  /// congestion avoidance stage after it starts a new epoch with K = 0 and W_max = W_est = cwnd_epoch.
  uint32_t on_timeout(uint32_t cwnd);

  /// A further RTO of the same loss episode (the timer already fired, or a fast recovery already reduced, with
  /// nothing acknowledged since): no new reduction — W_max, cwnd_prior and ssthresh stay, as RFC 5681 §3.1
  /// holds ssthresh — but the next congestion avoidance stage starts with K = 0 as after any timeout (§4.8).
  void on_repeated_timeout() {
    st_.in_epoch = false;
    st_.after_timeout = true;
    carry_ = 0;
  }

  /// What undo() hands back: the caller's cwnd and ssthresh before the undone event, in bytes.
  struct Saved {
    uint32_t cwnd, ssthresh;
  };
  /// The last on_congestion_event()/on_timeout() was spurious (D-SACK, RFC 3708; F-RTO, RFC 5682): restores
  /// W_max, cwnd_prior, K, t_epoch (so a restored epoch runs on from its old start) and W_est as they were
  /// before it (§4.9.2) and returns the cwnd passed to that call and the ssthresh in force before it — the
  /// one this class returned last, UINT32_MAX if none (the initial slow start). §4.9.2 restores only when the
  /// current cwnd < cwnd_prior: check undo_cwnd() first. With nothing to undo (no event since reset(), or
  /// undone already) it changes nothing and returns {0, 0}, so callers can take max() with their values.
  Saved undo();
  /// The cwnd undo() would restore (the cwnd passed to the last event), 0 when there is nothing to undo.
  uint32_t undo_cwnd() const { return has_undo_ ? undo_cwnd_ : 0; }

  /// The flow was application- or rwnd-limited for `duration_us` (cwnd did not grow meanwhile): moves t_epoch
  /// forward by it so that t excludes that period (§4.2, §5.8), as Linux does when sending resumes after
  /// idle. No effect without a running epoch.
  void on_app_limited(uint64_t duration_us);
  /// Ends the running epoch without touching W_max (e.g. RFC 5681 §4.1 restart after idle cut cwnd and slow
  /// start runs again): the next congestion avoidance ACK starts a new one from the cwnd it brings.
  void restart_epoch() { st_.in_epoch = false; }

  // Read-only state for tests and stats.
  uint32_t smss() const { return smss_; }
  /// W_max in bytes (0 before the first congestion event or epoch).
  uint32_t w_max() const { return to_u32(st_.w_max); }
  /// K in µs (0 without an epoch).
  uint64_t k_us() const { return static_cast<uint64_t>(st_.k_s * 1e6 + 0.5); }
  /// W_est in bytes (the Reno-friendly estimate of the running epoch).
  uint32_t w_est() const { return to_u32(st_.w_est); }
  /// cwnd_prior in bytes: cwnd when ssthresh was last set (or when the first slow start ended).
  uint32_t cwnd_prior() const { return to_u32(st_.cwnd_prior); }
  bool in_epoch() const { return st_.in_epoch; }
  uint64_t epoch_start_us() const { return st_.t_epoch_us; }
  /// The ssthresh this class last returned (UINT32_MAX before any event).
  uint32_t ssthresh() const { return st_.ssthresh; }

  /// W_cubic(t) in bytes for the running epoch, t in seconds (eq. 1); for tests and stats.
  double w_cubic(double t_s) const {
    const double d = t_s - st_.k_s;
    return kC * smss_ * d * d * d + st_.w_max;
  }

 private:
  // Everything §4.9.2 restores, plus what this class needs to resume exactly.
  struct State {
    double w_max = 0;       // bytes; 0 = none recorded
    double cwnd_prior = 0;  // bytes
    double w_est = 0;       // bytes
    double k_s = 0;         // K, seconds
    uint64_t t_epoch_us = 0;
    bool in_epoch = false;
    bool after_timeout = false;  // the next epoch is the first congestion avoidance stage after an RTO
    uint32_t ssthresh = UINT32_MAX;
  };

  static uint32_t to_u32(double bytes);
  void start_epoch(uint32_t cwnd, uint64_t now_us);
  uint32_t reduce(uint32_t cwnd);

  uint32_t smss_ = 536;
  bool fast_convergence_ = true;
  State st_;
  double carry_ = 0;  // fraction of a byte of cubic growth not yet added to cwnd
  bool has_undo_ = false;
  State undo_;             // st_ before the last event
  uint32_t undo_cwnd_ = 0;  // the cwnd passed to the last event
};

}  // namespace kosoku::tcpip
