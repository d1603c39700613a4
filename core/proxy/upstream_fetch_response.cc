// UpstreamFetch's response side (upstream_fetch.hh): the head (checked, 1xx skipped, retries), the content
// decoded and handed to the sink within its room, the end, and what the upstream connection reports (errors,
// timeouts).
#include <cerrno>
#include <cstring>
#include <span>

#include "core/base/log.hh"
#include "core/proxy/upstream_fetch.hh"

namespace kosoku::proxy {

namespace {

// http::parse_response_head's reason for a head longer than ResponseLimits::max_head (proxy_buffer_size).
constexpr std::string_view kTooBigHeader = "upstream sent too big header";

}  // namespace

void UpstreamFetch::resume() {
  if (phase_ == Phase::kBody && up_ != nullptr && deferred_status_ == 0) pump();
}

const std::function<void()>& UpstreamFetch::resumer() {
  if (alive_ == nullptr) {
    alive_ = std::make_shared<UpstreamFetch*>(this);
    resumer_ = [alive = std::weak_ptr<UpstreamFetch*>(alive_)] {
      if (std::shared_ptr<UpstreamFetch*> p = alive.lock()) (*p)->resume();
    };
  }
  return resumer_;
}

void UpstreamFetch::on_upstream_readable() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  if (!up_->stream().input().empty()) got_bytes_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void UpstreamFetch::on_upstream_eof() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  upstream_eof_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void UpstreamFetch::read_head() {
  net::Stream& s = up_->stream();
  http::ResponseLimits lim;
  lim.max_head = conf_->buffer_size;
  for (;;) {
    std::span<const char> in = s.input();
    if (in.empty()) break;
    const std::string_view buf(in.data(), in.size());
    http::ResponseParseResult r = http::parse_response_head(buf, resp_, lim, head_request_, last_len_);
    if (r.status == http::ParseStatus::kPartial) {
      last_len_ = in.size();
      break;
    }
    std::string_view invalid;  // why the head is refused, or empty
    if (r.status == http::ParseStatus::kError) {
      invalid = r.reason;
    } else if (resp_.status == 101) {
      invalid = "unexpected 101";
    } else if (resp_.interim()) {
      // 100 Continue and other 1xx: not passed on (nginx 1.22 takes a 1xx for the final head). Together they get
      // one proxy_buffer_size, as much as the final head: at most ~290 of them with the default 4k, so a stream
      // of 1xx responses ends in a 502 like a head that never ends.
      interim_bytes_ += r.consumed;
      if (interim_bytes_ > conf_->buffer_size) invalid = kTooBigHeader;
    }
    if (!invalid.empty()) {
      // A head that does not fit in proxy_buffer_size is nginx's "upstream sent too big header" (then 502).
      KOSOKU_LOG(kError, "%s%s while reading response header from upstream%s",
                 invalid == kTooBigHeader ? "" : "upstream sent invalid header: ", invalid, context());
      if (retry_allowed(kNextInvalidHeader)) {
        retry(kNextInvalidHeader, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 502);
      }
      return;
    }
    if (resp_.interim()) {
      s.consume(r.consumed);
      last_len_ = 0;
      continue;
    }
    // Keep the head: move its views into our copy before the bytes leave the stream's buffer.
    resp_head_.assign(buf.data(), r.consumed);
    const char* from = buf.data();
    auto rebase = [&](std::string_view& v) {
      v = v.empty() ? std::string_view() : std::string_view(resp_head_.data() + (v.data() - from), v.size());
    };
    rebase(resp_.reason);
    for (http::HeaderField& f : resp_.headers()) {
      rebase(f.name);
      rebase(f.value);
    }
    s.consume(r.consumed);
    last_len_ = 0;
    on_response_head();
    return;
  }
  if (upstream_eof_) {
    KOSOKU_LOG(kError, "upstream prematurely closed connection while reading response header from upstream%s",
               context());
    if (retry_allowed(kNextError)) {
      retry(kNextError, PeerResult::kFailed);
    } else {
      give_up(PeerResult::kFailed, 502);
    }
    return;
  }
  arm_upstream_timer();
}

void UpstreamFetch::on_response_head() {
  if (UpstreamTry* t = current_try()) {
    t->status = resp_.status;
    t->header_ms = try_elapsed(*t);
  }
  const uint32_t ft = next_upstream_flag(resp_.status);
  if (ft != 0 && retry_allowed(ft)) {
    retry(ft, resp_.status == 403 || resp_.status == 404 ? PeerResult::kNext : PeerResult::kFailed);
    return;
  }
  phase_ = Phase::kBody;
  remaining_ = resp_.framing == http::ResponseFraming::kContentLength ? resp_.content_length : 0;
  if (resp_.framing == http::ResponseFraming::kChunked) chunked_.emplace(http::ChunkedLimits{});
  sink_->on_upstream_head(resp_);  // the sink may detach: sink_ is then the discarding one
  resp_.release_fields();  // the sink copied what it keeps of the head: no heap storage kept
  if (phase_ != Phase::kBody || up_ == nullptr) return;  // the sink cancelled it
  if (resp_.framing == http::ResponseFraming::kNone ||
      (resp_.framing == http::ResponseFraming::kContentLength && remaining_ == 0)) {
    if (!up_->stream().input().empty()) extra_ = true;
    complete();
    return;
  }
  pump();
}

// Moves response content from the upstream to the sink until the upstream has nothing more or the sink has no
// room (then the upstream is not read until resume()).
void UpstreamFetch::pump() {
  net::Stream& s = up_->stream();
  for (;;) {
    const size_t space = sink_->upstream_room();
    std::span<const char> in = s.input();
    if (in.empty()) {
      if (upstream_eof_) {
        if (resp_.framing == http::ResponseFraming::kClose) {
          complete();
          return;
        }
        KOSOKU_LOG(kError, "upstream prematurely closed connection while reading upstream%s", context());
        cut_off();
        return;
      }
      if (up_paused_) {
        up_paused_ = false;
        s.resume_reading();
      }
      up_->arm_timer(conf_->read_timeout_ms);
      return;
    }
    if (space == 0) {
      if (!up_paused_) {
        up_paused_ = true;
        s.pause_reading();
      }
      up_->arm_timer(0);  // waiting for the sink (the client's send_timeout, or the cache's disk)
      return;
    }
    switch (resp_.framing) {
      case http::ResponseFraming::kContentLength: {
        size_t n = in.size();
        if (n > remaining_) n = static_cast<size_t>(remaining_);
        if (n > space) n = space;
        const std::string_view data(in.data(), n);
        const bool last = n == remaining_;
        sink_->on_upstream_data(&data, 1, last);
        s.consume(n);
        count_received(n);
        remaining_ -= n;
        if (remaining_ == 0) {
          if (!s.input().empty()) extra_ = true;
          complete();
          return;
        }
        break;
      }
      case http::ResponseFraming::kChunked: {
        const std::string_view window(in.data(), in.size() < space ? in.size() : space);
        std::string_view spans[kMaxSpans];
        size_t count = 0;
        size_t used = 0;
        bool done = false;
        while (used < window.size() && count < kMaxSpans) {
          http::ChunkedStep step = chunked_->decode(window.substr(used));
          used += step.consumed;
          if (step.status == http::ChunkedStatus::kError) {
            KOSOKU_LOG(kError, "upstream sent invalid chunked response (%s) while reading upstream%s", step.reason,
                       context());
            cut_off();
            return;
          }
          if (step.status == http::ChunkedStatus::kData) spans[count++] = step.data;
          if (step.status == http::ChunkedStatus::kDone) {
            done = true;
            break;
          }
          if (step.status == http::ChunkedStatus::kNeedMore) break;
        }
        sink_->on_upstream_data(spans, count, done);
        s.consume(used);
        count_received(used);
        if (done) {
          if (!s.input().empty()) extra_ = true;
          complete();
          return;
        }
        break;
      }
      case http::ResponseFraming::kClose: {
        const std::string_view data(in.data(), in.size() < space ? in.size() : space);
        sink_->on_upstream_data(&data, 1, false);
        s.consume(data.size());
        count_received(data.size());
        break;
      }
      case http::ResponseFraming::kNone:
        complete();
        return;
    }
  }
}

void UpstreamFetch::complete() {
  end_try(0);
  const bool keep = resp_.reusable() && !extra_ && !upstream_eof_ && request_complete() &&
                    up_->stream().pending_output() == 0;
  up_->release(keep);
  up_ = nullptr;
  group_->balancer().done(attempt_, PeerResult::kOk, group_->reactor().now_ms());
  phase_ = Phase::kDone;
  sink_->on_upstream_end();
}

// The content was cut off after the head (the sink must abort its response).
void UpstreamFetch::cut_off() {
  end_try(502);
  close_upstream(PeerResult::kNext);
  fail(502);
}

// ---- upstream failures ----

void UpstreamFetch::on_upstream_error(int error) {
  up_ = nullptr;  // gone
  if (deferred_status_ != 0) return;
  const char* what = error != 0 ? std::strerror(error) : "connection closed";
  switch (phase_) {
    case Phase::kConnecting:
    case Phase::kWaitingHead: {
      if (phase_ == Phase::kConnecting && error == EPROTO) {
        // A TLS handshake failure: the TLS layer logged why (nginx logs only that line).
      } else if (phase_ == Phase::kConnecting) {
        KOSOKU_LOG(kError, "connect() failed (%d: %s) while connecting to upstream%s", error, what, context());
      } else {
        KOSOKU_LOG(kError, "upstream connection failed (%d: %s) while reading response header from upstream%s",
                   error, what, context());
      }
      if (retry_allowed(kNextError)) {
        retry(kNextError, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 502);
      }
      return;
    }
    case Phase::kBody:
      KOSOKU_LOG(kError, "upstream connection failed (%d: %s) while reading upstream%s", error, what, context());
      cut_off();
      return;
    default:
      return;
  }
}

void UpstreamFetch::on_upstream_timer() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  switch (phase_) {
    case Phase::kConnecting:
    case Phase::kWaitingHead: {
      const char* where = phase_ == Phase::kConnecting ? "connecting to upstream"
                          : up_->stream().pending_output() > 0 ? "sending request to upstream"
                                                                : "reading response header from upstream";
      KOSOKU_LOG(kError, "upstream timed out (110: Connection timed out) while %s%s", where, context());
      if (retry_allowed(kNextTimeout)) {
        retry(kNextTimeout, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 504);
      }
      return;
    }
    case Phase::kBody:
      KOSOKU_LOG(kError, "upstream timed out (110: Connection timed out) while reading upstream%s", context());
      cut_off();
      return;
    default:
      return;
  }
}

}  // namespace kosoku::proxy
