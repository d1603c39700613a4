// An in-memory Ethernet link between two kosoku TCP/IP stacks, with a simulated clock and a scripted fault
// injector (drop / duplicate / delay-to-reorder the Nth segment of a kind, rewrite advertised windows, random
// loss with a fixed seed). Used by tcp_stack_test.cc; every frame really goes through both stacks' parsers.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/reactor/timer_wheel.hh"
#include "core/stats/counters.hh"
#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/ethernet.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip::testing {

/// The TCB behind a stream this stack created (connect_from / an accepted stream).
inline Tcb& tcb(net::Stream* s) { return *static_cast<Tcb*>(s); }

class SimClock final : public Clock {
 public:
  uint64_t now_ms() const override { return ms; }
  uint64_t now_us() const override { return ms * 1000; }
  uint64_t ms = 10'000;
};

/// What a rule matches among the TCP segments one side sends.
enum class Match { kData, kSyn, kFin, kAny };
enum class Action { kDrop, kDuplicate, kDelay, kSetWindow };

struct Fault {
  int from = 0;       // sending side (0 or 1)
  Match match = Match::kData;
  int nth = 1;        // 1-based index among matching segments from `from`
  int count = 1;      // how many consecutive matches the rule covers
  Action action = Action::kDrop;
  uint64_t delay_ms = 5;  // kDelay: extra latency (reorders behind later segments)
  uint16_t window = 0;    // kSetWindow: value written into the window field
};

struct SentSegment {
  int from;
  uint64_t at_ms;
  TcpHeader header;
  size_t payload;
};

class Link {
 public:
  class End final : public PacketIO {
   public:
    End(Link& link, int side, MacAddr mac) : link_(link), side_(side), mac_(mac) {}
    std::span<uint8_t> frame_begin(size_t max_len) override {
      buf_.assign(max_len, 0);
      return buf_;
    }
    void frame_send(size_t len) override {
      buf_.resize(len);
      link_.transmit(side_, std::move(buf_));
    }
    MacAddr mac() const override { return mac_; }
    uint16_t mtu() const override { return 1500; }
    /// Zero-copy TX on (off by default): the TCP stack hands full-sized payloads of shared buffers by
    /// reference; this end, like net_tap's writev, copies header and payload into the frame at once.
    bool by_reference = false;
    uint64_t payload_frames = 0;  // frames sent through frame_send_payload
    bool tx_payload_by_reference() const override { return by_reference; }
    void frame_send_payload(size_t len, net::SharedBuffer&, const uint8_t* payload, size_t n) override {
      buf_.resize(len);
      buf_.insert(buf_.end(), payload, payload + n);
      ++payload_frames;
      link_.transmit(side_, std::move(buf_));
    }

   private:
    Link& link_;
    int side_;
    MacAddr mac_;
    std::vector<uint8_t> buf_;
  };

  struct Side {
    std::unique_ptr<End> end;
    std::unique_ptr<Interface> ip;
    std::unique_ptr<TcpStack> tcp;
    stats::CoreStats core_stats;
    int counts[4] = {};  // per Match
  };

  explicit Link(TcpConfig conf = TcpConfig{}) : Link(conf, conf) {}
  /// Side 0 runs with conf0, side 1 with conf1 (e.g. only one side offers SACK).
  Link(TcpConfig conf0, TcpConfig conf1) {
    const TcpConfig* confs[2] = {&conf0, &conf1};
    const char* addrs[2] = {"10.0.0.1", "10.0.0.2"};
    for (int i = 0; i < 2; ++i) {
      Side& s = side_[i];
      s.end = std::make_unique<End>(*this, i, MacAddr{{2, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)}});
      InterfaceConfig ic;
      ic.address = *Ipv4Addr::parse(addrs[i]);
      ic.prefix_len = 24;
      s.ip = std::make_unique<Interface>(*s.end, ic);
      s.tcp = std::make_unique<TcpStack>(*s.ip, timers_, clock_, s.core_stats, *confs[i]);
    }
  }

  TcpStack& tcp(int i) { return *side_[i].tcp; }
  Interface& ip(int i) { return *side_[i].ip; }
  End& end(int i) { return *side_[i].end; }
  Ipv4Addr addr(int i) { return side_[i].ip->address(); }
  SimClock& clock() { return clock_; }
  reactor::TimerWheel& timers() { return timers_; }

  void add_fault(const Fault& f) { faults_.push_back(f); }
  /// Random loss on every frame in both directions (fixed seed: reproducible).
  void set_loss(double p, uint32_t seed) {
    loss_ = p;
    rng_.seed(seed);
  }
  /// Every TCP segment put on the wire (before faults), for assertions.
  const std::vector<SentSegment>& log() const { return log_; }
  /// Observer of every TCP segment put on the wire, may return false to drop it.
  std::function<bool(int from, const TcpSegment&)> tap;

  /// Delivers frames (1 ms one-way latency) and fires timers, advancing the simulated clock by 1 ms when
  /// nothing is due, until done() or max_ms of simulated time. Returns done().
  bool run_until(const std::function<bool()>& done, uint64_t max_ms = 120'000) {
    uint64_t end = clock_.ms + max_ms;
    while (!done()) {
      if (clock_.ms >= end) return false;
      step();
    }
    return true;
  }
  /// Runs for ms of simulated time.
  void run_for(uint64_t ms) {
    uint64_t end = clock_.ms + ms;
    run_until([&] { return clock_.ms >= end; }, ms + 1);
  }
  /// Injects a raw IPv4 TCP segment `from` → the other side (for forged RST/SYN/PAWS tests).
  void inject(int from, const TcpHeader& h, const TcpOptions& o, std::span<const uint8_t> payload) {
    size_t hl = TcpHeader::kMinSize + o.wire_size();
    std::vector<uint8_t> l4(hl + payload.size());
    write_tcp_header(h, o, l4.data());
    if (!payload.empty()) std::memcpy(l4.data() + hl, payload.data(), payload.size());
    fill_tcp_checksum(l4, addr(from), addr(1 - from));
    Ipv4Header ip;
    ip.total_len = static_cast<uint16_t>(20 + l4.size());
    ip.protocol = kProtoTcp;
    ip.src = addr(from);
    ip.dst = addr(1 - from);
    std::vector<uint8_t> f(14 + ip.total_len);
    EthernetHeader{side_[1 - from].end->mac(), side_[from].end->mac(), kEtherTypeIpv4}.write(f.data());
    ip.write(f.data() + 14);
    std::memcpy(f.data() + 34, l4.data(), l4.size());
    side_[1 - from].ip->receive_frame(f, clock_.ms);
  }

 private:
  struct InFlight {
    int to;
    uint64_t at;
    std::vector<uint8_t> frame;
  };

  void step() {
    bool any = false;
    for (size_t i = 0; i < queue_.size();) {
      if (queue_[i].at <= clock_.ms) {
        InFlight f = std::move(queue_[i]);
        queue_.erase(queue_.begin() + static_cast<long>(i));
        side_[f.to].ip->receive_frame(f.frame, clock_.ms);
        any = true;
      } else {
        ++i;
      }
    }
    for (Side& s : side_) s.tcp->reap();
    timers_.expire(clock_.ms);
    for (Side& s : side_) s.tcp->reap();
    if (!any) ++clock_.ms;
  }

  void transmit(int from, std::vector<uint8_t> frame) {
    uint64_t delay = 1;
    bool duplicate = false;
    auto eth = EthernetHeader::read(frame);
    if (eth && eth->ether_type == kEtherTypeIpv4) {
      Ipv4Header ip;
      if (Ipv4Header::read(std::span(frame).subspan(14), &ip) == Ipv4Header::Error::kNone &&
          ip.protocol == kProtoTcp) {
        std::span<uint8_t> l4 = std::span(frame).subspan(14 + ip.header_len, ip.total_len - ip.header_len);
        TcpSegment seg;
        if (parse_tcp_segment(l4, ip.src, ip.dst, true, &seg) == TcpParseError::kNone) {
          log_.push_back({from, clock_.ms, seg.header, seg.payload.size()});
          if (tap && !tap(from, seg)) return;
          Side& s = side_[from];
          bool is[4] = {!seg.payload.empty(), seg.header.has(tcp_flag::kSyn), seg.header.has(tcp_flag::kFin), true};
          int index[4];
          for (int m = 0; m < 4; ++m) index[m] = is[m] ? ++s.counts[m] : 0;
          for (const Fault& f : faults_) {
            int m = static_cast<int>(f.match);
            if (f.from != from || !is[m] || index[m] < f.nth || index[m] >= f.nth + f.count) continue;
            switch (f.action) {
              case Action::kDrop:
                return;
              case Action::kDuplicate:
                duplicate = true;
                break;
              case Action::kDelay:
                delay += f.delay_ms;
                break;
              case Action::kSetWindow:
                store_be16(l4.data() + 14, f.window);
                fill_tcp_checksum(l4, ip.src, ip.dst);
                break;
            }
          }
        }
      }
    }
    if (loss_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < loss_) return;
    if (duplicate) queue_.push_back({1 - from, clock_.ms + delay, frame});
    queue_.push_back({1 - from, clock_.ms + delay, std::move(frame)});
  }

  SimClock clock_;
  reactor::TimerWheel timers_{4096};
  Side side_[2];
  std::deque<InFlight> queue_;
  std::vector<Fault> faults_;
  std::vector<SentSegment> log_;
  double loss_ = 0;
  std::mt19937 rng_;
};

/// Server side: accepts, collects every input byte, optionally echoes a reply, closes on the peer's FIN.
struct Sink final : net::StreamHandler, net::AcceptHandler {
  std::string received;
  std::string reply;              // written once the peer's FIN arrives, before closing
  bool consume = true;            // false: leave input unconsumed (the window closes)
  bool close_on_fin = true;
  bool peer_closed = false, closed = false;
  int close_error = -1;
  int accepted = 0;
  net::Stream* stream = nullptr;

  net::StreamHandler* on_accept(net::Stream& s, const config::ListenSocket&) override {
    ++accepted;
    stream = &s;
    return this;
  }
  void on_readable(net::Stream& s) override {
    if (!consume) return;
    auto in = s.input();
    received.append(in.data(), in.size());
    s.consume(in.size());
  }
  void drain() {
    if (stream == nullptr) return;
    auto in = stream->input();
    received.append(in.data(), in.size());
    stream->consume(in.size());
  }
  void on_peer_closed(net::Stream& s) override {
    peer_closed = true;
    if (!close_on_fin) return;
    if (!reply.empty()) {
      s.write(reply);
      s.flush();
    }
    s.close(net::Stream::Close::kGraceful);
  }
  void on_writable(net::Stream&) override {}
  void on_closed(net::Stream&, int error) override {
    closed = true;
    close_error = error;
    stream = nullptr;
  }
};

/// Client side: on connect writes `data` and closes gracefully (unless keep_open); collects what comes back.
struct Source final : net::StreamHandler {
  std::string data;
  std::string received;
  bool keep_open = false;
  bool connected = false, peer_closed = false, closed = false;
  int close_error = -1;
  net::Stream* stream = nullptr;

  void on_connected(net::Stream& s) override {
    connected = true;
    if (!data.empty()) s.write(data);
    s.flush();
    if (!keep_open) s.close(net::Stream::Close::kGraceful);
  }
  void on_readable(net::Stream& s) override {
    auto in = s.input();
    received.append(in.data(), in.size());
    s.consume(in.size());
  }
  void on_peer_closed(net::Stream&) override { peer_closed = true; }
  void on_writable(net::Stream&) override {}
  void on_closed(net::Stream&, int error) override {
    closed = true;
    close_error = error;
    stream = nullptr;
  }
};

/// Listens on side 1 (`port`, backlog 16, optional listening-socket settings) and connects side 0 to it with
/// `source` kept open (its `data`, if any, is sent); runs until both ends are established. Returns the client
/// stream, or null if the listen or the handshake (within 1 s) failed.
inline net::Stream* connect_kept_open(Link& link, Sink& sink, Source& source, uint16_t port,
                                      const config::ListenSocket* socket = nullptr) {
  source.keep_open = true;
  if (link.tcp(1).listen_port(port, 16, sink, socket) != 0) return nullptr;
  std::string err;
  net::Stream* c = link.tcp(0).connect_from(0, link.addr(1), port, source, &err);
  if (c == nullptr) return nullptr;
  if (!link.run_until([&] { return source.connected && sink.accepted == 1; }, 1000)) return nullptr;
  return c;
}

inline std::string pattern_bytes(size_t n, uint32_t seed) {
  std::mt19937 r(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(r());
  return s;
}

/// One bulk transfer through a fresh link: side 0 connects to `port` on side 1, sends `size` pattern bytes
/// (seed `seed`) and closes; `setup(link)` scripts the link first (faults, random loss, a tap). Runs until both
/// sides closed (at most 600 s simulated). Returns whether the bytes arrived exactly, the simulated ms it took
/// and both sides' counters.
struct TransferResult {
  bool exact = false;
  uint64_t ms = 0;
  TcpStats sender, receiver;
};
template <typename Setup>
TransferResult one_way_transfer(TcpConfig c, size_t size, uint32_t seed, Setup setup, uint16_t port = 80) {
  Link link(c);
  setup(link);
  Sink sink;
  Source source;
  source.data = pattern_bytes(size, seed);
  EXPECT_EQ(link.tcp(1).listen_port(port, 16, sink), 0);
  std::string err;
  uint64_t start = link.clock().ms;
  EXPECT_NE(link.tcp(0).connect_from(0, link.addr(1), port, source, &err), nullptr) << err;
  TransferResult r;
  EXPECT_TRUE(link.run_until([&] { return sink.closed && source.closed; }, 600'000));
  r.ms = link.clock().ms - start;
  r.exact = sink.received == source.data;
  r.sender = link.tcp(0).stats();
  r.receiver = link.tcp(1).stats();
  return r;
}

}  // namespace kosoku::tcpip::testing
