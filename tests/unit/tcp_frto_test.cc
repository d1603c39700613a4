// F-RTO (RFC 5682, kernel-bypass/tcpip/tcb_frto.cc) on connections without timestamps, through the
// in-memory two-stack link: ACKs held back past the RTO (spurious timeout: detected, window restored, no
// go-back) and a dropped flight (real timeout: two new segments, then the conventional go-back), with SACK
// (§3) and without (§2); the timestamp path (RFC 3522) untouched by it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernel-bypass/tcpip/congestion.hh"
#include "kernel-bypass/tcpip/tcp_metrics.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Action;
using testing::Fault;
using testing::Link;
using testing::Match;
using testing::Sink;
using testing::Source;
using testing::tcb;

constexpr uint32_t kMss = 1460;            // 1500-byte MTU, no timestamp option
constexpr uint32_t kInitialWindow = 14600;  // RFC 6928: min(10·SMSS, max(2·SMSS, 14600))

TcpConfig frto_config(bool sack) {
  TcpConfig c;
  c.timestamps = false;
  c.sack = sack;
  c.rto_min_ms = 30;            // the handshake's 2 ms RTT gives RTO = rto_min
  c.tail_loss_probe = false;    // the timeout, not a probe, answers the silence (TcpFrtoTransfer keeps it on)
  c.delayed_ack_ms = 10;        // below the RTO: the ACK of a lone last segment is no second timeout
  return c;
}

// What one scripted episode shows: the sender's window around the timeout, the data segments it sent after
// the timeout's retransmission, and the counters.
struct Episode {
  uint32_t cwnd_before_rto = 0, ssthresh_before_rto = 0;  // last values seen before the timer fired
  uint32_t cwnd_after_rto = 0, ssthresh_after_rto = 0;    // when its retransmission went out
  uint32_t cwnd_at_decision = 0, ssthresh_at_decision = 0;  // first data segment after step 3's ACK
  std::vector<uint32_t> after_rto;  // offsets (from the first data byte) of data segments sent after the RTO
  std::vector<uint64_t> rtos_at;    // the sender's rto_expired when each of them went out
  bool exact = false;
  uint32_t base = 0;  // the first data byte's sequence number
  uint32_t flight_before_rto = 0;        // SND.NXT - SND.UNA when the timer fired
  Cubic cubic_before, cubic_at_undo;     // CUBIC's state before the timeout, and when F-RTO undid it
  bool undone = false;
  // when the first data segment after an undo went out
  uint32_t cwnd_at_undo = 0, flight_at_undo = 0, ssthresh_at_undo = 0;
  TcpStats sender;
  double exported_spurious = -1, exported_frto = -1;  // the sender's stats section (append_tcp_metrics)
};

// Sees each segment after the handshake: `off` = its sequence number (side 0) or its ACK (side 1) minus the
// first data byte's; false drops it (before the Link's faults count it).
using Filter = std::function<bool(Link& link, int from, const TcpSegment& seg, uint32_t off)>;

// Sets the clock so that side 0's next connection from local port `port` to side 1's port 80 starts its
// sequence space (the first data byte, ISN + 1) in [first_byte, first_byte + 250): RFC 6528's ISN is M + F
// with M the 4 µs clock, so a probe connection (refused: nothing listens yet) reads M + F for this 4-tuple
// and the clock moves on by the difference (250 sequence numbers per simulated ms).
void aim_isn(Link& link, uint16_t port, uint32_t first_byte) {
  Source probe;
  std::string err;
  uint64_t probe_ms = link.clock().ms;
  net::Stream* p = link.tcp(0).connect_from(port, link.addr(1), 80, probe, &err);
  ASSERT_NE(p, nullptr) << err;
  uint32_t first = tcb(p).snd_nxt().v;
  link.run_until([&] { return probe.closed; }, 100);  // side 1 answers the SYN with a RST
  ASSERT_TRUE(probe.closed);
  uint32_t now_first = first + 250u * static_cast<uint32_t>(link.clock().ms - probe_ms);
  link.clock().ms += (static_cast<uint64_t>(first_byte - now_first) + 249) / 250;
}

// Connects (no faults during the handshake), then `script` adds faults, the client writes `bytes` and both
// sides run until the sink has every byte and the sender saw it acknowledged (or 10 s). `first_byte`: the
// sequence number the first data byte should have, within 250 (aim_isn).
template <typename Script>
Episode run_episode(bool sack, size_t bytes, Script script, Filter filter = {}, TcpConfig conf = TcpConfig{},
                    bool own_conf = false, std::optional<uint32_t> first_byte = std::nullopt) {
  if (!own_conf) conf = frto_config(sack);
  Link link(conf);
  Sink sink;
  Source source;
  net::Stream* c = nullptr;
  if (first_byte) {
    aim_isn(link, 40000, *first_byte);
    source.keep_open = true;
    std::string err;
    EXPECT_EQ(link.tcp(1).listen_port(80, 16, sink, nullptr), 0);
    c = link.tcp(0).connect_from(40000, link.addr(1), 80, source, &err);
    if (c != nullptr && !link.run_until([&] { return source.connected && sink.accepted == 1; }, 1000)) c = nullptr;
  } else {
    c = testing::connect_kept_open(link, sink, source, 80);
  }
  EXPECT_NE(c, nullptr);
  Episode e;
  if (c == nullptr) return e;
  Tcb& t = tcb(c);
  EXPECT_EQ(t.timestamps(), conf.timestamps);
  EXPECT_EQ(t.sack_permitted(), sack);
  EXPECT_EQ(t.mss(), conf.timestamps ? kMss - 12 : kMss);  // the timestamp option takes 12 bytes
  SeqNum base = t.snd_nxt();
  e.base = base.v;
  script(link);
  bool decided = false;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (filter && !filter(link, from, seg, (from == 0 ? seg.header.seq : seg.header.ack) - base)) return false;
    if (from != 0 || seg.payload.empty()) return true;
    const TcpStats& s = link.tcp(0).stats();
    if (s.rto_expired == 0) return true;
    uint32_t off = seg.header.seq - base;
    if (s.spurious_rtos > 0 && !e.undone) {
      e.undone = true;
      e.cubic_at_undo = t.cc().cubic();
      e.cwnd_at_undo = t.cwnd();
      e.flight_at_undo = t.snd_nxt() - t.snd_una();
      e.ssthresh_at_undo = t.cc().ssthresh();
    }
    if (e.after_rto.empty()) {
      e.cwnd_after_rto = t.cwnd();
      e.ssthresh_after_rto = t.cc().ssthresh();
    }
    e.after_rto.push_back(off);
    e.rtos_at.push_back(s.rto_expired);
    if (!decided && e.after_rto.size() > 3) {
      decided = true;
      e.cwnd_at_decision = t.cwnd();
      e.ssthresh_at_decision = t.cc().ssthresh();
    }
    return true;
  };
  std::string data = testing::pattern_bytes(bytes, 11);
  c->write(data);
  c->flush();
  link.run_until([&] {
    if (link.tcp(0).stats().rto_expired == 0) {
      e.cwnd_before_rto = t.cwnd();
      e.ssthresh_before_rto = t.cc().ssthresh();
      e.flight_before_rto = t.snd_nxt() - t.snd_una();
      e.cubic_before = t.cc().cubic();
    }
    sink.drain();
    return sink.received.size() == data.size() && t.send_buffered() == 0;  // delivered and acknowledged
  }, 10'000);
  e.exact = sink.received == data;
  e.sender = link.tcp(0).stats();
  stats::ExtraSection section{"dpdk_port", {}};
  append_tcp_metrics(link.tcp(0), {{"core", "0"}}, &section);
  for (const stats::ExtraMetric& m : section.metrics) {
    if (m.name == "dpdk_tcp_spurious_rtos_total") e.exported_spurious = m.value;
    if (m.name == "dpdk_tcp_frto_spurious_rtos_total") e.exported_frto = m.value;
  }
  return e;
}

// Every ACK side 1 sends after the handshake arrives 45 ms late: the 30 ms RTO fires while the whole initial
// window is delivered.
void delay_acks(Link& link) {
  link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 2, .count = 1 << 20, .action = Action::kDelay,
                       .delay_ms = 45});
}
// The whole initial window (10 data segments) is lost; the retransmissions get through.
void drop_initial_window(Link& link) {
  link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 1, .count = 10, .action = Action::kDrop});
}

// Spurious: the RTO retransmits segment 1 (offset 0); the first late ACK (2 segments) covers it, so step 2b
// sends the two segments after the initial window (offsets 14600, 16060); the second late ACK acknowledges
// segment 3-4, never retransmitted: spurious. The window before the timeout (IW, slow start) comes back and
// new data follows, offsets 17520 on; nothing else is retransmitted.
void expect_spurious(const Episode& e) {
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.sender.rto_expired, 1u);
  EXPECT_EQ(e.sender.spurious_rtos, 1u);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 1u);
  EXPECT_EQ(e.exported_spurious, 1.0);
  EXPECT_EQ(e.exported_frto, 1.0);
  EXPECT_EQ(e.sender.retransmits, 1u);
  EXPECT_EQ(e.cwnd_before_rto, kInitialWindow);
  EXPECT_EQ(e.ssthresh_before_rto, UINT32_MAX);
  EXPECT_EQ(e.cwnd_after_rto, kMss);                          // RFC 5681 loss window
  EXPECT_EQ(e.ssthresh_after_rto, kInitialWindow * 7 / 10);  // CUBIC β = 0.7: 10,220
  ASSERT_GE(e.after_rto.size(), 4u);
  EXPECT_EQ(e.after_rto[0], 0u);
  EXPECT_EQ(e.after_rto[1], kInitialWindow);
  EXPECT_EQ(e.after_rto[2], kInitialWindow + kMss);
  EXPECT_EQ(e.after_rto[3], kInitialWindow + 2 * kMss);  // new data again, not segment 2
  EXPECT_EQ(e.cwnd_at_decision, kInitialWindow);         // RFC 4015: cwnd and ssthresh as before the timeout
  EXPECT_EQ(e.ssthresh_at_decision, UINT32_MAX);
}

// A timeout not undone: delivery exact, `rtos` timeouts, none found spurious, and the data segments sent
// after the first timeout begin with `first` (offsets from the first data byte).
void expect_kept(const Episode& e, uint64_t rtos, const std::vector<uint32_t>& first, bool sack) {
  EXPECT_TRUE(e.exact) << sack;
  EXPECT_EQ(e.sender.rto_expired, rtos) << sack;
  EXPECT_EQ(e.sender.spurious_rtos, 0u) << sack;
  EXPECT_EQ(e.sender.frto_spurious_rtos, 0u) << sack;
  EXPECT_EQ(e.exported_frto, 0.0) << sack;
  ASSERT_GE(e.after_rto.size(), first.size()) << sack;
  EXPECT_EQ(std::vector<uint32_t>(e.after_rto.begin(), e.after_rto.begin() + static_cast<long>(first.size())),
            first)
      << sack;
}

// Real: nothing of the initial window arrived. The retransmitted segment 1 is ACKed (after the peer's
// delayed-ACK timer), step 2b sends offsets 14600 and 16060, their ACK is a duplicate (SACKing above
// "recover" with SACK): the timeout was real, cwnd = 3·SMSS and the go-back resumes at segment 2 (1460).
void expect_real(const Episode& e, bool sack) {
  // the timeout's retransmission, step 2b's two new segments, then the go-back from segment 2
  expect_kept(e, 1, {0, kInitialWindow, kInitialWindow + kMss, kMss}, sack);
  EXPECT_GE(e.sender.retransmits, 10u);  // the whole initial window, once each at least
  EXPECT_EQ(e.cwnd_at_decision, 3 * kMss);          // RFC 5682 step 3a
  EXPECT_EQ(e.ssthresh_at_decision, kInitialWindow * 7 / 10);  // the timeout's reduction stands
}

TEST(TcpFrto, SackSpuriousTimeoutIsUndone) { expect_spurious(run_episode(true, 64 * 1024, delay_acks)); }
TEST(TcpFrto, SackRealTimeoutKeepsConventionalRecovery) {
  expect_real(run_episode(true, 64 * 1024, drop_initial_window), true);
}
TEST(TcpFrto, BasicSpuriousTimeoutIsUndone) { expect_spurious(run_episode(false, 64 * 1024, delay_acks)); }
TEST(TcpFrto, BasicRealTimeoutKeepsConventionalRecovery) {
  expect_real(run_episode(false, 64 * 1024, drop_initial_window), false);
}

// No new data when the first ACK comes (the initial window was everything): RFC 5682 §2 step 2b's
// recommended action, the conventional recovery: the go-back resends segments 3 on (spuriously here), the
// timeout is not undone.
TEST(TcpFrto, NothingNewToSendFallsBackToTheGoBack) {
  for (bool sack : {true, false}) {
    Episode e = run_episode(sack, kInitialWindow, delay_acks);
    expect_kept(e, 1, {0, 2 * kMss}, sack);  // segment 3: the go-back after the ACK of 1-2
    EXPECT_GE(e.sender.retransmits, 3u) << sack;
  }
}

// Segment 1 lost and every ACK late: the first ACKs after the timeout are duplicates (segments 2-10 arrived
// out of order before the retransmission). Basic (§2 step 2a) goes back to the conventional recovery at once,
// SACK (§3 step 2) keeps waiting for the ACK of the retransmission; that ACK then covers "recover" (step 2a):
// the timeout was needed and is not undone. Only segment 1 is resent: with SACK the duplicates would let RFC
// 3042 limited transmit (tcb_sack.cc) send the go-back's next unSACKed segment (3), which step 2 holds back;
// the segments after the full ACK are new data.
TEST(TcpFrto, DuplicateAckFirstIsNoSpuriousTimeout) {
  for (bool sack : {true, false}) {
    Episode e = run_episode(sack, 64 * 1024, [](Link& link) {
      delay_acks(link);
      link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 1, .count = 1, .action = Action::kDrop});
    });
    expect_kept(e, 1, {0, kInitialWindow}, sack);
    EXPECT_EQ(e.sender.retransmits, 1u) << sack;
  }
}

// Segments 1 and 2 lost, every ACK late (review finding 1): the timeout resends segment 1; the first late
// ACKs are duplicates SACKing 3-10 (SACK step 2 waits), then the ACK of segment 1's retransmission (SND.UNA
// 1460) lets step 2b send two new segments. Segment 2 is resent before step 3 decides (SACK recovery: RACK
// finds it lost below the SACKed 3-10), and the ACK of that retransmission cumulatively acknowledges 3-10 —
// octets below "recover" never retransmitted, but SACKed before: nothing newly delivered is an original, so
// the timeout is not found spurious (aa3cd6c's "newly acknowledged below recover" called it spurious).
TEST(TcpFrto, SackTwoLostSegmentsAreNoSpuriousTimeout) {
  Episode e = run_episode(true, 64 * 1024, [](Link& link) {
    delay_acks(link);
    link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 1, .count = 2, .action = Action::kDrop});
  });
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.sender.spurious_rtos, 0u);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 0u);
  EXPECT_EQ(e.exported_frto, 0.0);
  // The timeout's retransmission, step 2b's two new segments, then (step 3a: the ACK SACKs 14600-16060
  // above "recover" with segment 2 missing) the go-back at segment 2 with cwnd 3·SMSS. Its ACK is late too:
  // the (backed-off) timer fires once more and resends segment 2 before that ACK comes.
  ASSERT_GE(e.after_rto.size(), 4u);
  EXPECT_EQ(std::vector<uint32_t>(e.after_rto.begin(), e.after_rto.begin() + 4),
            (std::vector<uint32_t>{0, kInitialWindow, kInitialWindow + kMss, kMss}));
  EXPECT_EQ(e.cwnd_at_decision, 3 * kMss);
  EXPECT_EQ(e.ssthresh_at_decision, kInitialWindow * 7 / 10);
  EXPECT_EQ(e.sender.rto_expired, 2u);
  EXPECT_EQ(e.sender.retransmits, 3u);  // segment 1 once, segment 2 twice
}

// (f) A stretch ACK past "recover" in step 3 (review finding 2): every ACK late, and side 1's ACKs of 5840
// to 14600 (and the duplicate ACK for the retransmitted segment 1) lost. Step 2 takes the ACK of 2920 and
// sends 14600 and 16060; the next ACK to arrive acknowledges everything, 17520: the originals 1460-14600
// were never retransmitted, so the timeout was spurious with SACK too (RFC 5682 §2's basic rule, Linux's
// tcp_process_loss; aa3cd6c called it real with SACK: cwnd 3·SMSS, ssthresh 10,220). RFC 4015's response:
// ssthresh = pipe_prev = max(FlightSize 14,600, ssthresh UINT32_MAX) and cwnd = FlightSize 0 + min(14,600
// octets acknowledged, IW) = 14,600 when new data goes again.
TEST(TcpFrto, StretchAckPastRecoverIsASpuriousTimeout) {
  for (bool sack : {true, false}) {
    Episode e = run_episode(sack, 64 * 1024, delay_acks, [](Link&, int from, const TcpSegment&, uint32_t off) {
      return !(from == 1 && off > 2 * kMss && off <= kInitialWindow);
    });
    EXPECT_TRUE(e.exact) << sack;
    EXPECT_EQ(e.sender.rto_expired, 1u) << sack;
    EXPECT_EQ(e.sender.spurious_rtos, 1u) << sack;
    EXPECT_EQ(e.sender.frto_spurious_rtos, 1u) << sack;
    EXPECT_EQ(e.sender.retransmits, 1u) << sack;
    ASSERT_GE(e.after_rto.size(), 4u) << sack;
    EXPECT_EQ(std::vector<uint32_t>(e.after_rto.begin(), e.after_rto.begin() + 4),
              (std::vector<uint32_t>{0, kInitialWindow, kInitialWindow + kMss, kInitialWindow + 2 * kMss}))
        << sack;
    EXPECT_EQ(e.cwnd_at_decision, kInitialWindow) << sack;
    EXPECT_EQ(e.ssthresh_at_decision, UINT32_MAX) << sack;
  }
}

// Review finding 4: the tail loss probe after a step-3b undo. 12 segments, every ACK late; step 2b sends
// the last two (14600, 16060) and the ACK of segments 3-4 undoes the timeout. The later ACKs (8760 to 16060)
// are lost (the first five side 1 sends above 5840: 8760, 11680, 14600, the duplicate ACK for the resent
// segment 1, 16060) and so is segment 16060: only a probe or a timeout can repair that tail. TLP is turned on at step
// 2b (the initial window's PTO, 2·SRTT = 4 ms, would otherwise probe before the timeout); the ACK that
// undoes cancelled the PTO while the timeout's recovery ran, and the undo arms it again: the probe resends
// 16060 about 2·SRTT later, its ACK (17520) ends the transfer, and the (backed-off) timer never fires again.
TEST(TcpFrto, TailLossProbeIsArmedAgainAfterTheUndo) {
  int tails = 0, acks = 0;
  Episode e = run_episode(true, kInitialWindow + 2 * kMss, delay_acks,
                          [&](Link& link, int from, const TcpSegment& seg, uint32_t off) {
    if (from == 1) return !(off > 4 * kMss && off <= kInitialWindow + kMss && acks++ < 5);
    if (off == kInitialWindow && !seg.payload.empty()) {
      const_cast<TcpConfig&>(link.tcp(0).config()).tail_loss_probe = true;
    }
    return !(off == kInitialWindow + kMss && tails++ == 0);
  });
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.sender.rto_expired, 1u);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 1u);
  EXPECT_EQ(e.sender.tlp_probes, 1u);
  EXPECT_EQ(e.sender.retransmits, 2u);  // the timeout's segment 1 and the probe
  // the timeout's retransmission, step 2b's 14600 (its 16060 was dropped before the log), the probe's 16060
  EXPECT_EQ(e.after_rto, (std::vector<uint32_t>{0, kInitialWindow, kInitialWindow + kMss}));
}

// (d) A timeout during fast recovery gets no F-RTO (RFC 5682 §3.1 step 1; applied to NewReno too): segments
// 1 and 3 are lost every time they are sent until the timer fires, so SACK/PRR recovery (RACK resending
// them) or NewReno recovery (fast retransmit of 1) runs when it does. The timeout resends segment 1; its
// ACK (2920) is below "recover" and above the retransmission — F-RTO's step 2b would send new data there —
// but the conventional go-back resends segment 3 (2920). CUBIC already treats that timeout as no fresh
// reduction (its recovery's stands); Reno's is fresh, so the fast-recovery condition alone keeps F-RTO out
// (checked: without it the SACK and NewReno Reno runs send new data, 108,040 / 84,680, after the timeout).
// The duplicate ACKs of the flight still in the air when the timer fires are dropped: NewReno's would
// otherwise end an F-RTO at once (§2 step 2a) and hide whether it started.
TEST(TcpFrto, TimeoutInFastRecoveryGetsNoFrto) {
  for (bool sack : {true, false}) {
    for (CongestionAlgorithm alg : {CongestionAlgorithm::kCubic, CongestionAlgorithm::kReno}) {
      TcpConfig c = frto_config(sack);
      c.congestion_control = alg;
      Episode e = run_episode(sack, 512 * 1024, [](Link&) {}, [](Link& link, int from, const TcpSegment& seg,
                                                                uint32_t off) {
        uint64_t rtos = link.tcp(0).stats().rto_expired;
        if (from == 1) return !(off == 0 && rtos > 0);  // duplicate ACKs after it: basic step 2a would stop
        return !(!seg.payload.empty() && (off == 0 || off == 2 * kMss) && rtos == 0);
      }, c, true);
      std::string what = std::string(sack ? "SACK" : "NewReno") +
                         (alg == CongestionAlgorithm::kCubic ? " CUBIC" : " Reno");
      EXPECT_GE(e.sender.fast_retransmits + (sack ? e.sender.retransmits : 0), 1u) << what;
      expect_kept(e, 1, {0, 2 * kMss}, sack);
      EXPECT_EQ(e.sender.spurious_rtos, 0u) << what;
    }
  }
}

// (i) Sequence numbers wrap inside the episode: the first data byte is 2^32 - 4·SMSS (aim_isn), so "recover"
// (SND.MAX at the timeout), the new segments and the SACK blocks lie beyond 2^32 while SND.UNA is below it.
// The spurious, real and stretch-ACK episodes end as without the wrap.
TEST(TcpFrto, SequenceWrapKeepsTheDecisions) {
  const uint32_t first = 0u - 4 * kMss;
  for (bool sack : {true, false}) {
    Episode s = run_episode(sack, 64 * 1024, delay_acks, {}, frto_config(sack), true, first);
    EXPECT_LT(s.base - first, 250u) << sack;
    expect_spurious(s);
    Episode r = run_episode(sack, 64 * 1024, drop_initial_window, {}, frto_config(sack), true, first);
    EXPECT_LT(r.base - first, 250u) << sack;
    expect_real(r, sack);
    Episode f = run_episode(sack, 64 * 1024, delay_acks, [](Link&, int from, const TcpSegment&, uint32_t off) {
      return !(from == 1 && off > 2 * kMss && off <= kInitialWindow);
    }, frto_config(sack), true, first);
    EXPECT_LT(f.base - first, 250u) << sack;
    EXPECT_TRUE(f.exact) << sack;
    EXPECT_EQ(f.sender.frto_spurious_rtos, 1u) << sack;
    EXPECT_EQ(f.cwnd_at_decision, kInitialWindow) << sack;
  }
}

// A timeout inside the recovery of an earlier one (§2/§3 step 1: "recover" ≥ SND.UNA) gets no F-RTO.
// (a) No progress between them: the first timeout's retransmission is lost too (data segments 1-11 dropped);
//     the second one's ACK is followed by the go-back (segment 2), not by new data.
// (b) Progress between them: F-RTO runs for the first timeout (step 2b: 14600, 16060; step 3a: go-back 1460,
//     2920, 4380 with cwnd 3·SMSS), those three are dropped (data segments 14-16); the second timeout resends
//     1460 and its ACK (SND.UNA 2920, below "recover") is followed by the go-back (2920), not by new data.
//     Basic only: with SACK, RACK finds those go-back retransmissions lost (the new segments were SACKed)
//     and resends them before a second timeout.
TEST(TcpFrto, RepeatedTimeoutsUseTheConventionalRecovery) {
  for (bool sack : {true, false}) {
    Episode a = run_episode(sack, 64 * 1024, [](Link& link) {
      link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 1, .count = 11, .action = Action::kDrop});
    });
    expect_kept(a, 2, {0, 0, kMss}, sack);
    if (sack) continue;

    Episode b = run_episode(sack, 64 * 1024, [](Link& link) {
      drop_initial_window(link);
      link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 14, .count = 3, .action = Action::kDrop});
    });
    expect_kept(b, 2, {0, kInitialWindow, kInitialWindow + kMss, kMss, 2 * kMss, 3 * kMss, kMss, 2 * kMss}, sack);
  }
}

// (e) A repeated timeout with SACK: the initial window is lost, F-RTO runs for the first timeout and finds
// it real (step 3a: go-back 1460, 2920, 4380 with cwnd 3·SMSS, then 5840); segment 2 (1460) is lost every
// time it is sent until the timer fires again inside the first timeout's recovery (SND.UNA 1460 <
// "recover" 17520): no F-RTO for it (§3 step 1). Its retransmission of 1460 is acknowledged up to 7300
// (2920-7300 arrived), below "recover": the go-back goes on at 7300 where F-RTO would have sent new data
// (17520; checked by dropping the step-1 condition); no timeout is found spurious.
TEST(TcpFrto, RepeatedTimeoutWithSackUsesTheConventionalRecovery) {
  Episode e = run_episode(true, 64 * 1024, drop_initial_window, [](Link& link, int from, const TcpSegment& seg,
                                                                   uint32_t off) {
    return !(from == 0 && !seg.payload.empty() && off == kMss && link.tcp(0).stats().rto_expired == 1);
  });
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.sender.rto_expired, 2u);
  EXPECT_EQ(e.sender.spurious_rtos, 0u);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 0u);
  EXPECT_EQ(e.cwnd_at_decision, 3 * kMss);  // the first timeout: step 3a
  std::vector<uint32_t> second;  // data segments sent after the second timeout fired
  for (size_t i = 0; i < e.after_rto.size(); ++i) {
    if (e.rtos_at[i] == 2) second.push_back(e.after_rto[i]);
  }
  ASSERT_GE(second.size(), 2u);
  EXPECT_EQ(std::vector<uint32_t>(second.begin(), second.begin() + 2), (std::vector<uint32_t>{kMss, 5 * kMss}));
}

// A zero window when the first ACK comes: no new segment may go (step 2b), conventional recovery.
TEST(TcpFrto, ZeroWindowFallsBackToTheGoBack) {
  Episode e = run_episode(true, 64 * 1024, [](Link& link) {
    delay_acks(link);
    // Side 1's 2nd and 3rd segments (a window update at ACK 0, the first data ACK at 2920) say window 0:
    // when the first ACK of new data comes the window is closed; the later ones reopen it.
    link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 2, .count = 2, .action = Action::kSetWindow,
                         .window = 0});
  });
  // The second late ACK (5840, window open again) resumes the go-back there, not new data (14600).
  expect_kept(e, 1, {0, 4 * kMss}, true);
}

// CUBIC's state (RFC 9438 §4.9.2's undo set) is the same in both.
void expect_same_cubic(const Cubic& after, const Cubic& before) {
  EXPECT_EQ(after.w_max(), before.w_max());
  EXPECT_EQ(after.k_us(), before.k_us());
  EXPECT_EQ(after.epoch_start_us(), before.epoch_start_us());
  EXPECT_EQ(after.in_epoch(), before.in_epoch());
  EXPECT_EQ(after.w_est(), before.w_est());
  EXPECT_EQ(after.cwnd_prior(), before.cwnd_prior());
  EXPECT_EQ(after.ssthresh(), before.ssthresh());
}

// Review finding 3: the undo of a spurious timeout is RFC 4015 §2's response, not Linux's full restore.
// Slow start to 40 segments, a SACK recovery (W_max = 58,400, ssthresh 40,880), congestion avoidance for a
// while (a CUBIC epoch), then a timeout with 40,880 + growth in flight and its undo after an ACK of 2
// segments with 4 left in flight: ssthresh = pipe_prev = max(FlightSize, ssthresh) at the timeout, cwnd =
// 4 + min(2, IW) segments (Linux: cwnd back to the old value at once), CUBIC's W_max, K, epoch, W_est and
// cwnd_prior exactly as before the timeout; slow start then adds one segment per segment acknowledged.
TEST(TcpFrtoUndo, Rfc4015ResponseRestoresSsthreshAndCubicButSlowStartsCwnd) {
  for (CongestionAlgorithm alg : {CongestionAlgorithm::kCubic, CongestionAlgorithm::kReno}) {
    bool cubic = alg == CongestionAlgorithm::kCubic;
    CongestionControl cc(kMss);
    cc.set_algorithm(alg);
    uint64_t now_us = 1'000'000;
    for (int i = 0; i < 30; ++i) cc.on_ack(SeqNum{0}, kMss, cc.cwnd(), true, now_us, 10'000);
    ASSERT_EQ(cc.cwnd(), 40 * kMss);
    cc.enter_sack_recovery(40 * kMss, SeqNum{100'000});
    ASSERT_TRUE(cc.on_sack_recovery_ack(SeqNum{100'000}));
    const uint32_t reduced = cubic ? 40 * kMss * 7 / 10 : 20 * kMss;  // 40,880 (β = 0.7) / 29,200 (Reno)
    ASSERT_EQ(cc.ssthresh(), reduced);
    ASSERT_EQ(cc.cwnd(), reduced);
    for (int i = 0; i < 40; ++i) {  // congestion avoidance: 4 s of ACKs, 100 ms apart
      now_us += 100'000;
      cc.on_ack(SeqNum{0}, kMss, cc.cwnd(), true, now_us, 10'000);
    }
    const uint32_t cwnd = cc.cwnd(), ssthresh = cc.ssthresh();
    ASSERT_GT(cwnd, reduced);
    const Cubic before = cc.cubic();
    if (cubic) {
      ASSERT_EQ(before.w_max(), 40 * kMss);
      ASSERT_TRUE(before.in_epoch());
      ASSERT_GT(before.k_us(), 0u);
    }

    ASSERT_TRUE(cc.on_timeout(cwnd, SeqNum{200'000}));
    EXPECT_EQ(cc.cwnd(), kMss);
    EXPECT_EQ(cc.ssthresh(), cubic ? cwnd * 7 / 10 : std::max(cwnd / 2, 2 * kMss));
    EXPECT_FALSE(cc.may_enter_sack_recovery(SeqNum{150'000}));  // the timeout's RecoveryPoint

    cc.undo_timeout(4 * kMss, 2 * kMss);
    EXPECT_EQ(cc.cwnd(), 6 * kMss);               // FlightSize + min(bytes_acked, IW), not `cwnd`
    EXPECT_EQ(cc.ssthresh(), std::max(cwnd, ssthresh));  // pipe_prev: the flight at the timeout
    EXPECT_TRUE(cc.may_enter_sack_recovery(SeqNum{150'000}));  // RecoveryPoint dropped
    expect_same_cubic(cc.cubic(), before);
    cc.on_ack(SeqNum{0}, kMss, 5 * kMss, true, now_us + 1000, 10'000);
    EXPECT_EQ(cc.cwnd(), 7 * kMss);  // slow start back towards ssthresh
    // A stretch ACK of more than IW adds IW at most.
    ASSERT_TRUE(cc.on_timeout(7 * kMss, SeqNum{300'000}));
    cc.undo_timeout(0, 64 * kMss);
    EXPECT_EQ(cc.cwnd(), kInitialWindow);
    EXPECT_EQ(cc.ssthresh(), std::max(cwnd, ssthresh));  // max(7 segments in flight, the restored ssthresh)
  }
}

// (h) Through the TCB: a congestion event first (data segment 3 lost: SACK recovery, W_max = the cwnd then),
// congestion avoidance (a CUBIC epoch), then from side 1's 60th segment on every ACK 45 ms late: the
// timeout is spurious and F-RTO's undo brings CUBIC's W_max, K, epoch start, W_est and cwnd_prior back as
// they were before it; ssthresh = max(the flight then, ssthresh before) (RFC 4015 pipe_prev).
TEST(TcpFrto, UndoRestoresCubicAfterAnEarlierCongestionEvent) {
  Episode e = run_episode(true, 1024 * 1024, [](Link& link) {
    link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 3, .count = 1, .action = Action::kDrop});
    link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 60, .count = 1 << 20, .action = Action::kDelay,
                         .delay_ms = 45});
  });
  EXPECT_TRUE(e.exact);
  EXPECT_GE(e.sender.fast_retransmits + e.sender.retransmits, 2u);
  ASSERT_TRUE(e.undone);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 1u);
  const Cubic& b = e.cubic_before;
  EXPECT_EQ(b.w_max(), kInitialWindow + kMss);  // the loss was found with cwnd 11 segments (16,060)
  EXPECT_EQ(e.ssthresh_before_rto, (kInitialWindow + kMss) * 7 / 10);  // 11,242
  EXPECT_TRUE(b.in_epoch());
  EXPECT_GT(b.k_us(), 0u);
  expect_same_cubic(e.cubic_at_undo, b);
  EXPECT_EQ(e.ssthresh_at_decision, std::max(e.flight_before_rto, e.ssthresh_before_rto));
}

// Review finding 3 through the timestamp path (RFC 3522 detection, the same undo): slow start grows cwnd
// far past IW, then side 1's ACKs are 45 ms late from its 20th segment on and the first 15 of those are
// lost, so the first ACK after the timeout (27 segments in flight, cwnd 27 segments) is a stretch ACK of 24.
// The undo gives cwnd = FlightSize 3 + min(24, IW 10) + the same ACK's slow-start SMSS = 14 segments: 11 may
// leave at once, where Linux's undo (cwnd 27 back) would send 24 back to back; ssthresh stays UINT32_MAX
// (no loss before), so slow start climbs on.
TEST(TcpFrtoUndo, EifelStretchAckUndoesWithoutABurst) {
  TcpConfig c = frto_config(true);
  c.timestamps = true;
  const uint32_t mss = kMss - 12, iw = 10 * mss;
  Episode e = run_episode(true, 1024 * 1024, [](Link& link) {
    link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 20, .count = 15, .action = Action::kDrop});
    link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 35, .count = 1 << 20, .action = Action::kDelay,
                         .delay_ms = 45});
  }, {}, c, true);
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.sender.rto_expired, 1u);
  EXPECT_EQ(e.sender.spurious_rtos, 1u);
  EXPECT_EQ(e.sender.frto_spurious_rtos, 0u);
  ASSERT_TRUE(e.undone);
  EXPECT_EQ(e.cwnd_before_rto, 27 * mss);
  EXPECT_EQ(e.flight_before_rto, 27 * mss);
  EXPECT_EQ(e.ssthresh_before_rto, UINT32_MAX);
  EXPECT_EQ(e.flight_at_undo, 3 * mss);
  EXPECT_EQ(e.cwnd_at_undo, e.flight_at_undo + iw + mss);  // 20,272
  EXPECT_EQ(e.ssthresh_at_undo, UINT32_MAX);
}

// Bulk: 256 KiB with every ACK after side 1's 10th segment 45 ms late (RTO floor 30 ms), TLP on (defaults
// but timestamps): F-RTO on vs off (TcpConfig::frto, Linux tcp_frto).
testing::TransferResult delayed_ack_transfer(bool sack, bool frto) {
  TcpConfig c;
  c.timestamps = false;
  c.sack = sack;
  c.rto_min_ms = 30;
  c.frto = frto;
  return testing::one_way_transfer(c, 256 * 1024, 7, [](Link& link) {
    link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 10, .count = 1 << 20, .action = Action::kDelay,
                         .delay_ms = 45});
  });
}

TEST(TcpFrtoTransfer, DelayedAcksCostNoGoBack) {
  for (bool sack : {true, false}) {
    testing::TransferResult on = delayed_ack_transfer(sack, true), off = delayed_ack_transfer(sack, false);
    std::printf("F-RTO %s, ACKs delayed 45 ms, RTO 30 ms, 256 KiB: on %llu RTOs, %llu spurious, %llu "
                "retransmissions, %llu ms; off %llu RTOs, %llu retransmissions, %llu ms\n",
                sack ? "SACK" : "basic", (unsigned long long)on.sender.rto_expired,
                (unsigned long long)on.sender.frto_spurious_rtos, (unsigned long long)on.sender.retransmits,
                (unsigned long long)on.ms, (unsigned long long)off.sender.rto_expired,
                (unsigned long long)off.sender.retransmits, (unsigned long long)off.ms);
    EXPECT_TRUE(on.exact) << sack;
    EXPECT_TRUE(off.exact) << sack;
    EXPECT_GE(on.sender.frto_spurious_rtos, 1u) << sack;
    EXPECT_EQ(on.sender.spurious_rtos, on.sender.frto_spurious_rtos) << sack;
    EXPECT_EQ(off.sender.spurious_rtos, 0u) << sack;
    EXPECT_LT(on.sender.retransmits * 4, off.sender.retransmits) << sack;
    EXPECT_LT(on.ms, off.ms) << sack;
  }
}

// Timestamps: RFC 3522 decides, F-RTO stays out: the same transfer with F-RTO on and off is identical.
TEST(TcpFrtoTransfer, TimestampConnectionsKeepEifel) {
  auto run = [](bool frto) {
    TcpConfig c;
    c.rto_min_ms = 30;
    c.frto = frto;
    return testing::one_way_transfer(c, 256 * 1024, 7, [](Link& link) {
      link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 10, .count = 1 << 20, .action = Action::kDelay,
                           .delay_ms = 45});
    });
  };
  testing::TransferResult on = run(true), off = run(false);
  EXPECT_TRUE(on.exact);
  EXPECT_EQ(on.sender.spurious_rtos, 1u);
  EXPECT_EQ(on.sender.frto_spurious_rtos, 0u);
  EXPECT_EQ(on.sender.rto_expired, off.sender.rto_expired);
  EXPECT_EQ(on.sender.retransmits, off.sender.retransmits);
  EXPECT_EQ(on.sender.segments_out, off.sender.segments_out);
  EXPECT_EQ(on.ms, off.ms);
}

}  // namespace
}  // namespace kosoku::tcpip
