// Tcb: what an idle connection does and costs — keep-alive probes (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6),
// giving buffers back after kReleaseIdleMs without traffic, and the memory accounting behind
// TcpStats::memory_bytes.
//
// Keep-alive follows Linux's timing, which nginx's so_keepalive= configures: the first probe after idle_ms
// with nothing received from the peer, then one every interval_ms; when `probes` probes went unanswered, one
// interval later the connection is aborted (RST, on_closed(ETIMEDOUT)). A probe is an ACK with SEG.SEQ =
// SND.NXT - 1 and no data: outside the peer's window, so a live peer answers with an ACK (RFC 9293
// §3.10.7.4). Any acceptable segment from the peer counts as an answer (segment_arrives sets last_heard_ms_).
// While data is outstanding no probe is sent: the retransmission timer watches the peer then.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

void Tcb::set_keepalive(uint64_t idle_ms, uint64_t interval_ms, unsigned probes) {
  ka_idle_ms_ = idle_ms;
  ka_interval_ms_ = interval_ms > 0 ? interval_ms : 1;
  ka_probes_ = probes > 0 ? probes : 1;
  ka_unanswered_ = 0;
  if (idle_ms == 0) {
    if (keepalive_timer_.armed()) stack_.timers_.cancel(keepalive_timer_);
    return;
  }
  if (state_ == TcpState::kEstablished || state_ == TcpState::kCloseWait || state_ == TcpState::kFinWait1 ||
      state_ == TcpState::kFinWait2) {
    last_heard_ms_ = stack_.now_ms();
    arm(keepalive_timer_, ka_idle_ms_);
  }
}

void Tcb::keepalive_from_listener() {
  auto l = stack_.listeners_.find(tuple_.local_port);
  if (l == stack_.listeners_.end() || l->second.socket == nullptr) return;
  const config::ListenConf& lc = l->second.socket->conf;
  if (lc.so_keepalive != 1) return;  // off unless asked for (nginx's default: the system's, i.e. off)
  const TcpConfig& c = stack_.conf_;
  set_keepalive(lc.keepidle_s ? lc.keepidle_s * 1000ull : c.keepalive_idle_ms,
                lc.keepintvl_s ? lc.keepintvl_s * 1000ull : c.keepalive_interval_ms,
                lc.keepcnt ? lc.keepcnt : c.keepalive_probes);
}

namespace {
constexpr uint64_t kReleaseIdleMs = 1000;  // buffers of a connection idle this long are freed
}  // namespace

void Tcb::arm_release() {
  if (!release_timer_.armed() && state_ != TcpState::kClosed) arm(release_timer_, kReleaseIdleMs);
}

void Tcb::on_idle_timer(TimerKind k) {
  if (k == TimerKind::kKeepalive) {
    on_keepalive_timer();
    return;
  }
  // kRelease: only a connection with nothing unacknowledged and no unread input gives its buffers back.
  if (out_bytes() != 0 || !in_.empty()) return;
  if (!send_.empty() && send_.head() == send_.tail() && send_.head()->end == 0) {  // the block kept for reuse
    send_.clear([this](OutBlock* b) { free_block(b); });
  }
  free_spares();
  in_.release();
  rack_.release();  // nothing outstanding: the record is empty
  update_memory();
}

void Tcb::free_buffers() {
  send_.clear([this](OutBlock* b) { free_block(b); });
  wait_.clear([this](OutBlock* b) { free_block(b); });
  free_spares();
  out_block_bytes_ = 0;
  in_.release();
  std::vector<OooSegment>().swap(ooo_);
  ooo_bytes_ = 0;
  std::vector<char>().swap(scratch_);
  sb_ = SackScoreboard{};
  frto_sacked_ = SackScoreboard{};
  rack_.release();
  update_memory();
}

void Tcb::on_keepalive_timer() {
  if (ka_idle_ms_ == 0) return;
  switch (state_) {
    case TcpState::kEstablished:
    case TcpState::kCloseWait:
    case TcpState::kFinWait1:
    case TcpState::kFinWait2:
      break;
    default:
      return;
  }
  uint64_t now = stack_.now_ms();
  uint64_t quiet = now - last_heard_ms_;
  if (ka_unanswered_ == 0 && quiet < ka_idle_ms_) {  // heard from the peer since: wait out the rest
    arm(keepalive_timer_, ka_idle_ms_ - quiet);
    return;
  }
  if (snd_una_ != snd_max_) {  // data in flight: the retransmission timer is in charge
    ka_unanswered_ = 0;
    arm(keepalive_timer_, ka_idle_ms_);
    return;
  }
  if (ka_unanswered_ >= ka_probes_) {
    ++stack_.stats_.keepalive_timeouts;
    send_rst(snd_nxt_);
    terminate(ETIMEDOUT);
    return;
  }
  send_segment(snd_nxt_ - 1, 0, tcp_flag::kAck);
  ++stack_.stats_.keepalive_probes;
  ++ka_unanswered_;
  arm(keepalive_timer_, ka_interval_ms_);
}

size_t Tcb::memory_bytes() const {
  return sizeof(Tcb) + buffer_bytes() + ooo_bytes_ + ooo_.capacity() * sizeof(OooSegment) + sb_.heap_bytes() +
         frto_sacked_.heap_bytes();
}

void Tcb::update_memory() {
  size_t now = memory_bytes();
  stack_.stats_.memory_bytes += now;
  stack_.stats_.memory_bytes -= accounted_bytes_;
  accounted_bytes_ = now;
}

}  // namespace kosoku::tcpip
