#include "bench/loadgen/load_client.hh"

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/http/response_parser.hh"

namespace kosoku::loadgen {

namespace {
constexpr uint32_t kMaxPipeline = 64;
constexpr size_t kMaxFields = 32;
}  // namespace

// One keep-alive connection: writes requests, parses responses, keeps the send time of each request in
// flight (a ring of `pipeline` entries).
class LoadClient::Conn final : public net::StreamHandler {
 public:
  Conn(LoadClient& owner, size_t slot) : owner_(owner), slot_(slot) {}

  bool connect(std::string* err) {
    const auto* a = reinterpret_cast<const sockaddr*>(&owner_.opts_.server);
    stream_ = owner_.stack_.connect(a, sizeof(sockaddr_in), *this, err);
    up_ = false;
    in_flight_ = 0;
    last_len_ = 0;
    head_len_ = 0;
    return stream_ != nullptr;
  }
  void abort() {
    if (stream_ != nullptr) stream_->close(net::Stream::Close::kAbort);
  }

  void on_connected(net::Stream& s) override {
    up_ = true;
    ++owner_.connected_;
    fill_pipeline(s);
    s.flush();
  }

  void on_readable(net::Stream& s) override {
    LoadClient& o = owner_;
    while (true) {
      std::span<const char> in = s.input();
      if (in.empty()) break;
      std::string_view buf(in.data(), in.size());
      if (head_len_ == 0) {
        parsed_.fields = std::span<http::HeaderField>(fields_);
        http::ResponseParseResult r = http::parse_response_head(buf, parsed_, limits_, false, last_len_);
        if (r.status == http::ParseStatus::kPartial) {
          last_len_ = buf.size();
          break;
        }
        last_len_ = 0;
        if (r.status == http::ParseStatus::kError || parsed_.framing != http::ResponseFraming::kContentLength) {
          ++o.counters().err_parse;
          fail(s);
          return;
        }
        head_len_ = r.consumed;
        body_len_ = parsed_.content_length;
      }
      if (buf.size() < head_len_ + body_len_) break;
      finish_response(s, buf.substr(head_len_, body_len_));
      const size_t total = head_len_ + body_len_;
      const bool reusable = parsed_.reusable();
      head_len_ = 0;
      s.consume(total);
      if (!reusable) {  // Connection: close (keepalive_requests reached): reopen once this one is closed
        ++o.counters().reconnects;
        clean_close_ = true;
        s.close(net::Stream::Close::kGraceful);
        return;
      }
      if (o.phase_ != Phase::kDone && o.phase_ != Phase::kFailed) fill_pipeline(s);
    }
    s.flush();
  }

  void on_peer_closed(net::Stream& s) override {
    if (in_flight_ > 0 && !clean_close_) ++owner_.counters().err_closed;
    clean_close_ = true;  // counted once
    s.close(net::Stream::Close::kGraceful);
  }
  void on_writable(net::Stream&) override {}
  void on_closed(net::Stream&, int error) override {
    LoadClient& o = owner_;
    if (!up_) {
      ++o.counters().err_connect;
      if (o.failure_.empty()) o.failure_ = absl::StrCat("connect failed: errno ", error);
    } else {
      --o.connected_;
      if (in_flight_ > 0 && !clean_close_ && !o.closing_all_) ++o.counters().err_closed;
    }
    stream_ = nullptr;
    up_ = false;
    clean_close_ = false;
    if (o.phase_ != Phase::kDone && o.phase_ != Phase::kFailed) o.reopen_.push_back(slot_);
  }

 private:
  void fill_pipeline(net::Stream& s) {
    LoadClient& o = owner_;
    while (in_flight_ < o.opts_.pipeline) {
      s.write(o.request_);
      sent_ns_[(first_ + in_flight_) % kMaxPipeline] = o.now_ns_;
      ++in_flight_;
    }
  }

  void finish_response(net::Stream& s, std::string_view body) {
    LoadClient& o = owner_;
    LoadCounters& c = o.counters();
    uint64_t sent = sent_ns_[first_];
    first_ = (first_ + 1) % kMaxPipeline;
    if (in_flight_ > 0) --in_flight_;
    c.wire_bytes_in += head_len_ + body.size();
    if (parsed_.status != 200) {
      ++c.err_status;
      return;
    }
    if (o.opts_.check_body &&
        (body.size() != o.opts_.expected_body.size() ||
         std::memcmp(body.data(), o.opts_.expected_body.data(), body.size()) != 0)) {
      ++c.err_body;
      return;
    }
    ++c.responses;
    c.body_bytes += body.size();
    if (o.phase_ == Phase::kMeasuring) o.latency_.record(o.now_ns_ - sent);
  }

  void fail(net::Stream& s) {
    clean_close_ = true;  // already counted
    s.close(net::Stream::Close::kAbort);
  }

  LoadClient& owner_;
  size_t slot_;
  net::Stream* stream_ = nullptr;
  bool up_ = false;
  bool clean_close_ = false;
  uint32_t in_flight_ = 0;
  uint32_t first_ = 0;
  std::array<uint64_t, kMaxPipeline> sent_ns_{};
  // Response being parsed.
  size_t last_len_ = 0;
  size_t head_len_ = 0;   // 0: head not complete yet
  uint64_t body_len_ = 0;
  http::ParsedResponse parsed_;
  std::array<http::HeaderField, kMaxFields> fields_;
  http::ResponseLimits limits_{.max_head = 8192, .max_fields = kMaxFields, .allow_bare_lf = false};
};

LoadClient::LoadClient(net::Stack& stack, const LoadOptions& opts) : stack_(stack), opts_(opts) {
  if (opts_.pipeline == 0) opts_.pipeline = 1;
  if (opts_.pipeline > kMaxPipeline) opts_.pipeline = kMaxPipeline;
  request_ = absl::StrCat("GET ", opts_.path, " HTTP/1.1\r\nHost: ", opts_.host_header, "\r\n\r\n");
}

LoadClient::~LoadClient() = default;

bool LoadClient::start(uint64_t now_ns, std::string* err) {
  now_ns_ = now_ns;
  phase_start_ns_ = now_ns;
  conns_.reserve(opts_.connections);
  for (size_t i = 0; i < opts_.connections; ++i) {
    conns_.push_back(std::make_unique<Conn>(*this, i));
    if (!conns_.back()->connect(err)) return false;
  }
  return true;
}

void LoadClient::tick(uint64_t now_ns) {
  now_ns_ = now_ns;
  const uint64_t in_phase_ms = (now_ns - phase_start_ns_) / 1'000'000;
  switch (phase_) {
    case Phase::kConnecting:
      if (connected_ == opts_.connections) {
        phase_ = Phase::kWarmup;
        phase_start_ns_ = now_ns;
      } else if (in_phase_ms > opts_.connect_timeout_ms) {
        phase_ = Phase::kFailed;
        failure_ = absl::StrCat(connected_, " of ", opts_.connections, " connections up after ",
                                opts_.connect_timeout_ms, " ms", failure_.empty() ? "" : "; ", failure_);
      }
      break;
    case Phase::kWarmup:
      if (in_phase_ms >= opts_.warmup_ms) {
        phase_ = Phase::kMeasuring;
        phase_start_ns_ = measure_start_ns_ = now_ns;
      }
      break;
    case Phase::kMeasuring:
      if (in_phase_ms >= opts_.duration_ms) {
        phase_ = Phase::kDone;
        measure_end_ns_ = now_ns;
      }
      break;
    case Phase::kDone:
    case Phase::kFailed:
      break;
  }
  if (!reopen_.empty() && phase_ != Phase::kDone && phase_ != Phase::kFailed) {
    std::vector<size_t> slots;
    slots.swap(reopen_);
    for (size_t slot : slots) open(slot);
  }
}

void LoadClient::open(size_t slot) {
  std::string err;
  if (!conns_[slot]->connect(&err)) {
    ++counters().err_connect;
    if (failure_.empty()) failure_ = err;
    reopen_.push_back(slot);  // retry on the next tick
  }
}

void LoadClient::close_all() {
  closing_all_ = true;  // the requests still in flight are ours to drop, not errors
  for (auto& c : conns_) c->abort();
}

}  // namespace kosoku::loadgen
