#include "core/proxy/upstream.hh"

#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/tls/tls_client.hh"

namespace kosoku::proxy {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

constexpr uint32_t kPointsPerWeight = 160;  // nginx's ketama points per unit of weight
constexpr uint32_t kMaxHashTries = 20;      // then round robin (nginx)

bool test_bit(const absl::InlinedVector<uint64_t, 1>& v, size_t i) { return (v[i / 64] >> (i % 64)) & 1; }
void set_bit(absl::InlinedVector<uint64_t, 1>& v, size_t i) { v[i / 64] |= uint64_t{1} << (i % 64); }

}  // namespace

void Crc32::update(std::string_view data) {
  uint32_t c = state_;
  for (char ch : data) c = kCrcTable[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
  state_ = c;
}

uint32_t crc32(std::string_view data) {
  Crc32 c;
  c.update(data);
  return c.final();
}

// ---- Balancer ----

Balancer::Balancer(const UpstreamConf& conf) : conf_(conf) {
  for (int pass = 0; pass < 2; ++pass) {
    for (const UpstreamServerConf& s : conf.servers) {
      if (s.backup != (pass == 1)) continue;
      Peer p;
      p.conf = &s;
      p.effective_weight = s.weight;
      peers_.push_back(p);
      if (!s.down) ++tries_;
      if (pass == 0) {
        ++primaries_;
        total_weight_ += s.weight;
      }
    }
  }
  single_ = primaries_ == 1 && peers_.size() == 1;
  if (conf.hash_key && conf.hash_consistent) {
    // Points compatible with Cache::Memcached::Fast (and nginx): crc32(HOST "\0" PORT PREV_HASH), where HOST and
    // PORT split the server name at its last ':' and PREV_HASH is the previous point's hash, 4 bytes
    // little-endian (0 for the first point).
    for (size_t i = 0; i < primaries_; ++i) {
      std::string_view name = peers_[i].conf->name;
      std::string_view host = name, port;
      for (size_t j = name.size(); j > 0; --j) {  // trailing digits after the last ':' are the port
        const char c = name[j - 1];
        if (c == ':') {
          host = name.substr(0, j - 1);
          port = name.substr(j);
          break;
        }
        if (c < '0' || c > '9') break;
      }
      Crc32 base;
      base.update(host);
      base.update(std::string_view("\0", 1));
      base.update(port);
      uint32_t prev = 0;
      const uint32_t n = peers_[i].conf->weight * kPointsPerWeight;
      for (uint32_t j = 0; j < n; ++j) {
        Crc32 h = base;
        const char bytes[4] = {static_cast<char>(prev & 0xff), static_cast<char>((prev >> 8) & 0xff),
                               static_cast<char>((prev >> 16) & 0xff), static_cast<char>(prev >> 24)};
        h.update(std::string_view(bytes, 4));
        prev = h.final();
        points_.push_back(Point{prev, static_cast<uint32_t>(i)});
      }
    }
    std::stable_sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) { return a.hash < b.hash; });
    auto last = std::unique(points_.begin(), points_.end(), [](const Point& a, const Point& b) { return a.hash == b.hash; });
    points_.erase(last, points_.end());
  }
}

void Balancer::start(Attempt& a, std::string_view hash_key, uint32_t max_tries) const {
  a.tried.assign((peers_.size() + 63) / 64, 0);
  a.current = -1;
  a.in_backup = false;
  a.tries = tries_;
  if (max_tries != 0 && a.tries > max_tries) a.tries = max_tries;
  a.use_hash = conf_.hash_key != nullptr;
  a.hash = 0;
  a.hash_tries = 0;
  a.rehash = 0;
  a.key.assign(hash_key.data(), hash_key.size());
  if (a.use_hash && conf_.hash_consistent && !points_.empty()) {
    const uint32_t h = crc32(hash_key);
    auto it = std::lower_bound(points_.begin(), points_.end(), h,
                               [](const Point& p, uint32_t v) { return p.hash < v; });
    a.hash = static_cast<uint32_t>(it - points_.begin());  // may equal size(): wraps below
  }
}

bool Balancer::usable(const Attempt& a, size_t i, uint64_t now_ms) const {
  const Peer& p = peers_[i];
  if (test_bit(a.tried, i) || p.conf->down) return false;
  if (p.conf->max_fails != 0 && p.fails >= p.conf->max_fails && now_ms - p.checked_ms <= p.conf->fail_timeout_ms) {
    return false;
  }
  return true;
}

void Balancer::take(Attempt& a, size_t i, uint64_t now_ms) {
  Peer& p = peers_[i];
  a.current = static_cast<int>(i);
  set_bit(a.tried, i);
  if (now_ms - p.checked_ms > p.conf->fail_timeout_ms) p.checked_ms = now_ms;
}

int Balancer::next(Attempt& a, uint64_t now_ms) {
  if (a.use_hash && !a.in_backup && primaries_ >= 2 && !a.key.empty() && a.hash_tries <= kMaxHashTries) {
    return conf_.hash_consistent ? next_chash(a, now_ms) : next_hash(a, now_ms);
  }
  return next_rr(a, now_ms, a.in_backup);
}

// nginx's ngx_http_upstream_get_round_robin_peer + ngx_http_upstream_get_peer (smooth weighted round robin).
int Balancer::next_rr(Attempt& a, uint64_t now_ms, bool backup) {
  const size_t begin = backup ? primaries_ : 0;
  const size_t end = backup ? peers_.size() : primaries_;
  if (!backup && single_) {
    if (peers_[0].conf->down) return -1;
    a.current = 0;
    return 0;
  }
  int best = -1;
  int64_t total = 0;
  for (size_t i = begin; i < end; ++i) {
    if (!usable(a, i, now_ms)) continue;
    Peer& p = peers_[i];
    p.current_weight += p.effective_weight;
    total += p.effective_weight;
    if (p.effective_weight < p.conf->weight) ++p.effective_weight;
    if (best < 0 || p.current_weight > peers_[static_cast<size_t>(best)].current_weight) best = static_cast<int>(i);
  }
  if (best >= 0) {
    peers_[static_cast<size_t>(best)].current_weight -= total;
    take(a, static_cast<size_t>(best), now_ms);
    return best;
  }
  if (!backup && peers_.size() > primaries_) {
    a.in_backup = true;
    return next_rr(a, now_ms, true);
  }
  // All failed: report "no live upstreams" (502) at once. The failure counts stay: each peer is tried again
  // only after its fail_timeout (nginx >= 1.3.x; the old "mark them all live" reset made every other request
  // during an outage wait for the connect timeouts of every dead server again).
  a.current = -1;
  return -1;
}

// nginx's ngx_http_upstream_get_hash_peer: ((crc32([REHASH] KEY) >> 16) & 0x7fff) + PREV_HASH, weighted.
int Balancer::next_hash(Attempt& a, uint64_t now_ms) {
  for (;;) {
    Crc32 c;
    if (a.rehash > 0) c.update(absl::StrCat(a.rehash));
    c.update(a.key);
    a.hash += (c.final() >> 16) & 0x7fff;
    ++a.rehash;
    uint64_t w = total_weight_ ? a.hash % total_weight_ : 0;
    size_t i = 0;
    while (i + 1 < primaries_ && w >= peers_[i].conf->weight) {
      w -= peers_[i].conf->weight;
      ++i;
    }
    if (usable(a, i, now_ms)) {
      take(a, i, now_ms);
      return static_cast<int>(i);
    }
    if (++a.hash_tries > kMaxHashTries) return next_rr(a, now_ms, false);
  }
}

// nginx's ngx_http_upstream_get_chash_peer: the first point at or after crc32(KEY), then the following points
// until a usable server; among peers sharing that server name, smooth weighted round robin.
int Balancer::next_chash(Attempt& a, uint64_t now_ms) {
  if (points_.empty()) return next_rr(a, now_ms, false);
  for (;;) {
    const std::string& name = peers_[points_[a.hash % points_.size()].server].conf->name;
    int best = -1;
    int64_t total = 0;
    for (size_t i = 0; i < primaries_; ++i) {
      if (!usable(a, i, now_ms) || peers_[i].conf->name != name) continue;
      Peer& p = peers_[i];
      p.current_weight += p.effective_weight;
      total += p.effective_weight;
      if (p.effective_weight < p.conf->weight) ++p.effective_weight;
      if (best < 0 || p.current_weight > peers_[static_cast<size_t>(best)].current_weight) best = static_cast<int>(i);
    }
    if (best >= 0) {
      peers_[static_cast<size_t>(best)].current_weight -= total;
      take(a, static_cast<size_t>(best), now_ms);
      return best;
    }
    ++a.hash;
    if (++a.hash_tries > kMaxHashTries) return next_rr(a, now_ms, false);
  }
}

// nginx's ngx_http_upstream_free_round_robin_peer.
void Balancer::done(Attempt& a, PeerResult r, uint64_t now_ms) {
  if (a.current < 0) return;
  Peer& p = peers_[static_cast<size_t>(a.current)];
  if (single_) {
    a.tries = 0;  // one server: nothing else to try, and failures are not counted
    a.current = -1;
    return;
  }
  if (r == PeerResult::kFailed) {
    ++p.fails;
    p.accessed_ms = now_ms;
    p.checked_ms = now_ms;
    if (p.conf->max_fails != 0) {
      p.effective_weight -= p.conf->weight / p.conf->max_fails;
      if (p.fails >= p.conf->max_fails) {
        KOSOKU_LOG(kWarn, "upstream server temporarily disabled, upstream: \"%s\" (%s)",
                   conf_.name, p.conf->addr_text);
      }
    }
    if (p.effective_weight < 0) p.effective_weight = 0;
  } else if (r == PeerResult::kOk) {
    if (p.accessed_ms < p.checked_ms) p.fails = 0;  // mark the peer live if the check passed
  }
  if (a.tries > 0) --a.tries;
  a.current = -1;  // reported once
}

void Balancer::untry(Attempt& a) const {
  if (a.current < 0) return;
  const size_t i = static_cast<size_t>(a.current);
  a.tried[i / 64] &= ~(uint64_t{1} << (i % 64));
}

// ---- UpstreamConnection ----

void UpstreamConnection::arm_timer(uint64_t ms) {
  reactor::Timer& t = *this;
  if (ms == 0) {
    group_.reactor_.timers().cancel(t);
    return;
  }
  group_.reactor_.timers().arm(t, group_.reactor_.now_ms() + ms);
}

void UpstreamConnection::release(bool keep) {
  user_ = nullptr;
  arm_timer(0);
  const UpstreamConf& conf = group_.conf_;
  if (keep && stream_ != nullptr && connected_ && conf.keepalive > 0 && !group_.shutting_down_ &&
      requests_ + 1 < conf.keepalive_requests && stream_->input().empty()) {
    ++requests_;
    stream_->set_low_water(0);
    stream_->resume_reading();  // a cached connection must see the origin's FIN at once
    group_.cache(this);
    arm_timer(conf.keepalive_timeout_ms);
    return;
  }
  close();
}

void UpstreamConnection::close() {
  if (closing_) return;
  closing_ = true;
  user_ = nullptr;
  if (idle_) group_.unlink_idle(this);
  arm_timer(0);
  if (stream_ != nullptr) {
    net::Stream* s = stream_;
    s->close(net::Stream::Close::kAbort);  // may call on_closed (and delete this) right away
  }
}

void UpstreamConnection::on_connected(net::Stream&) {
  connected_ = true;
  if (user_ != nullptr) user_->on_upstream_connected();
}

void UpstreamConnection::on_readable(net::Stream& s) {
  if (idle_) {
    // Nothing may arrive on an idle connection (nginx's ngx_http_upstream_keepalive_close_handler).
    close();
    return;
  }
  if (user_ != nullptr) user_->on_upstream_readable();
}

void UpstreamConnection::on_peer_closed(net::Stream&) {
  if (idle_) {
    close();
    return;
  }
  if (user_ != nullptr) user_->on_upstream_eof();
}

void UpstreamConnection::on_writable(net::Stream&) {
  if (user_ != nullptr) user_->on_upstream_writable();
}

void UpstreamConnection::on_closed(net::Stream&, int error) {
  stream_ = nullptr;
  arm_timer(0);
  if (idle_) group_.unlink_idle(this);
  UpstreamUser* u = user_;
  user_ = nullptr;
  closing_ = true;
  if (u != nullptr) u->on_upstream_error(error);
  delete this;
}

void UpstreamConnection::fire() {
  if (idle_) {
    close();  // keepalive_timeout
    return;
  }
  if (user_ != nullptr) user_->on_upstream_timer();
}

// ---- UpstreamGroup ----

UpstreamGroup::UpstreamGroup(const UpstreamConf& conf, reactor::Reactor& reactor, net::Stack& stack)
    : conf_(conf), reactor_(reactor), stack_(stack), balancer_(conf) {
  sessions_.resize(balancer_.size(), nullptr);  // never resized again: streams hold pointers into it
}

UpstreamGroup::~UpstreamGroup() {
  // Cached connections still open here belong to a loop that has stopped: they get no more callbacks, and
  // closing them would queue work on a ring nobody reaps. The process is exiting; leave them.
  for (UpstreamConnection* c = idle_head_; c != nullptr; c = c->next_) c->idle_ = false;
  for (SSL_SESSION* sess : sessions_) SSL_SESSION_free(sess);
}

UpstreamConnection* UpstreamGroup::acquire(int peer, UpstreamUser* user, std::string* err,
                                           const tls::ClientConf* ssl, std::string_view ssl_name) {
  for (UpstreamConnection* c = idle_head_; c != nullptr; c = c->next_) {
    if (c->peer_ != peer || c->ssl_ != ssl) continue;
    unlink_idle(c);
    c->arm_timer(0);
    c->user_ = user;
    return c;
  }
  auto* c = new UpstreamConnection(*this, peer, user);
  c->ssl_ = ssl;
  const UpstreamServerConf& srv = balancer_.server(peer);
  const auto* addr = reinterpret_cast<const sockaddr*>(&srv.addr);
  net::Stream* s = nullptr;
  if (ssl != nullptr && tls_client_ != nullptr) {
    s = tls_client_->connect(stack_, addr, srv.addr_len, *c, *ssl, ssl_name, &sessions_[static_cast<size_t>(peer)],
                             err);
  } else {
    s = stack_.connect(addr, srv.addr_len, *c, err);
  }
  if (s == nullptr) {
    delete c;
    return nullptr;
  }
  c->stream_ = s;
  return c;
}

void UpstreamGroup::cache(UpstreamConnection* c) {
  c->idle_ = true;
  c->prev_ = nullptr;
  c->next_ = idle_head_;
  if (idle_head_ != nullptr) idle_head_->prev_ = c;
  idle_head_ = c;
  if (idle_tail_ == nullptr) idle_tail_ = c;
  ++idle_count_;
  if (idle_count_ > conf_.keepalive) idle_tail_->close();  // the least recently used one
}

void UpstreamGroup::unlink_idle(UpstreamConnection* c) {
  if (!c->idle_) return;
  c->idle_ = false;
  if (c->prev_ != nullptr) {
    c->prev_->next_ = c->next_;
  } else {
    idle_head_ = c->next_;
  }
  if (c->next_ != nullptr) {
    c->next_->prev_ = c->prev_;
  } else {
    idle_tail_ = c->prev_;
  }
  c->prev_ = c->next_ = nullptr;
  --idle_count_;
}

void UpstreamGroup::shutdown() {
  shutting_down_ = true;
  while (idle_head_ != nullptr) idle_head_->close();
}

}  // namespace kosoku::proxy
