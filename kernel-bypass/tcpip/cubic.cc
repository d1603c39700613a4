// CUBIC window arithmetic (RFC 9438); see cubic.hh for the units and the split of work with the caller.
#include "kernel-bypass/tcpip/cubic.hh"

#include <algorithm>
#include <cmath>

namespace kosoku::tcpip {

namespace {
// ssthresh = cwnd·β in integer arithmetic, so that 0.7·146000 is 102200 and not 102199.99…
constexpr uint64_t kBetaNum = 7, kBetaDen = 10;
static_assert(Cubic::kBeta == static_cast<double>(kBetaNum) / kBetaDen);
constexpr double kUint32Max = 4294967295.0;
}  // namespace

void Cubic::reset(uint32_t smss) {
  smss_ = std::max(smss, 1u);
  fast_convergence_ = true;
  st_ = State{};
  carry_ = 0;
  has_undo_ = false;
  undo_ = State{};
  undo_cwnd_ = 0;
}

uint32_t Cubic::to_u32(double bytes) {
  if (!(bytes > 0)) return 0;
  if (bytes >= kUint32Max) return UINT32_MAX;
  return static_cast<uint32_t>(bytes);
}

// §4.2 eq. 2 with the K = 0 cases of §4.8 (first stage after an RTO) and §4.10 (slow start ended without a
// congestion event, so no W_max), and cwnd_epoch ≥ W_max (a negative cube root would start the stage in the
// convex region's steep part; Linux starts it at the plateau instead, and so does this).
void Cubic::start_epoch(uint32_t cwnd, uint64_t now_us) {
  const double epoch = cwnd;
  st_.in_epoch = true;
  st_.t_epoch_us = now_us;
  carry_ = 0;
  if (st_.w_max <= 0) st_.cwnd_prior = epoch;
  if (st_.w_max <= 0 || st_.after_timeout || epoch >= st_.w_max) {
    st_.w_max = epoch;
    st_.k_s = 0;
  } else {
    st_.k_s = std::cbrt((st_.w_max - epoch) / (kC * smss_));
  }
  st_.after_timeout = false;
  st_.w_est = epoch;
}

uint32_t Cubic::on_ack(uint32_t cwnd, uint32_t acked, uint64_t now_us, uint64_t rtt_us) {
  if (acked == 0) return cwnd;
  const uint32_t w = std::max(cwnd, 1u);
  if (!st_.in_epoch) start_epoch(w, now_us);
  const double cw = w;

  // §4.3 eq. 4, byte-counted: α segments per cwnd's worth of acknowledged bytes.
  const double alpha = st_.w_est >= st_.cwnd_prior ? 1.0 : kAlpha;
  st_.w_est += alpha * acked * smss_ / cw;

  const double t = now_us > st_.t_epoch_us ? static_cast<double>(now_us - st_.t_epoch_us) * 1e-6 : 0.0;
  double next;
  if (w_cubic(t) < st_.w_est) {  // Reno-friendly region
    next = st_.w_est;
    carry_ = 0;
  } else {  // concave (cwnd < W_max) or convex region: the same step towards target
    const double target = std::clamp(w_cubic(t + static_cast<double>(rtt_us) * 1e-6), cw, 1.5 * cw);
    next = cw + (target - cw) * acked / cw + carry_;
    if (next < kUint32Max) {
      const double whole = static_cast<double>(static_cast<uint32_t>(next));
      carry_ = next - whole;
      next = whole;
    }
  }
  if (!(next > cw)) return cwnd;
  return to_u32(next);
}

uint32_t Cubic::reduce(uint32_t cwnd) {
  has_undo_ = true;
  undo_ = st_;
  undo_cwnd_ = cwnd;
  const double c = cwnd;
  // §4.7: a congestion event below the last W_max means the saturation point fell: release more.
  st_.w_max = fast_convergence_ && c < st_.w_max ? c * (1.0 + kBeta) / 2.0 : c;
  st_.cwnd_prior = c;
  st_.in_epoch = false;
  st_.after_timeout = false;
  carry_ = 0;
  const uint64_t ss = std::max<uint64_t>(cwnd * kBetaNum / kBetaDen, 2ull * smss_);
  st_.ssthresh = static_cast<uint32_t>(std::min<uint64_t>(ss, UINT32_MAX));
  return st_.ssthresh;
}

uint32_t Cubic::on_congestion_event(uint32_t cwnd) { return reduce(cwnd); }

uint32_t Cubic::on_timeout(uint32_t cwnd) {
  const uint32_t ss = reduce(cwnd);
  st_.after_timeout = true;
  return ss;
}

Cubic::Saved Cubic::undo() {
  if (!has_undo_) return Saved{0, 0};
  const Saved saved{undo_cwnd_, undo_.ssthresh};
  st_ = undo_;
  carry_ = 0;
  has_undo_ = false;
  return saved;
}

void Cubic::on_app_limited(uint64_t duration_us) {
  if (!st_.in_epoch) return;
  st_.t_epoch_us = st_.t_epoch_us > UINT64_MAX - duration_us ? UINT64_MAX : st_.t_epoch_us + duration_us;
}

}  // namespace kosoku::tcpip
