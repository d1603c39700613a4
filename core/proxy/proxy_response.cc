// ProxyState's response side: the head (checked, 1xx skipped, retries), the content streamed to the client,
// the end of the exchange, and what the upstream connection reports (errors, timeouts). See proxy_state.hh.
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>

#include "core/base/log.hh"
#include "core/http/chunked.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/proxy_state.hh"

namespace kosoku::proxy {

// ---- response ----

void ProxyState::on_upstream_readable() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  if (!up_->stream().input().empty()) got_bytes_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void ProxyState::on_upstream_eof() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  upstream_eof_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void ProxyState::read_head() {
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

void ProxyState::on_response_head() {
  if (http::UpstreamTry* t = current_try()) {
    t->status = resp_.status;
    t->header_ms = try_elapsed(*t);
  }
  const uint32_t ft = next_upstream_flag(resp_.status);
  if (ft != 0 && retry_allowed(ft)) {
    retry(ft, resp_.status == 403 || resp_.status == 404 ? PeerResult::kNext : PeerResult::kFailed);
    return;
  }
  build_response_head(resp_, *conf_, ex_.head());
  rewrite_redirects(ex_, *conf_, ex_.head());
  if (ProxyHooks* hooks = mod_.hooks()) {
    observer_ = hooks->observe(ex_, resp_);
    if (observer_ != nullptr) {
      alive_ = std::make_shared<ProxyState*>(this);
      observer_ready_ = [alive = std::weak_ptr<ProxyState*>(alive_)] {
        if (std::shared_ptr<ProxyState*> p = alive.lock()) (*p)->on_writable();  // pumps again in kBody
      };
      observer_->on_head(resp_);
    }
  }
  phase_ = Phase::kBody;
  remaining_ = resp_.framing == http::ResponseFraming::kContentLength ? resp_.content_length : 0;
  if (resp_.framing == http::ResponseFraming::kChunked) chunked_.emplace(http::ChunkedLimits{});
  const size_t before = ex_.pending_output();
  ex_.send_head();
  queued(before);
  head_sent_ = true;
  resp_.release_fields();  // the head's lines were copied into the client's response: no heap storage kept
  if (resp_.framing == http::ResponseFraming::kNone ||
      (resp_.framing == http::ResponseFraming::kContentLength && remaining_ == 0)) {
    if (!up_->stream().input().empty()) extra_ = true;
    complete();
    return;
  }
  pump();
}

// Moves response content from the upstream to the client until the upstream has nothing more or the ring is
// full (then the upstream is not read until the client has taken data: on_writable).
void ProxyState::pump() {
  net::Stream& s = up_->stream();
  for (;;) {
    ring_.release(sent());
    hand_to_client(false);
    std::span<const char> in = s.input();
    if (in.empty()) {
      if (ring_.staged() > 0) ex_.set_low_water(ring_.busy() / 2);  // staged bytes wait for the client
      if (upstream_eof_) {
        if (resp_.framing == http::ResponseFraming::kClose) {
          complete();
          return;
        }
        KOSOKU_LOG(kError, "upstream prematurely closed connection while reading upstream%s", context());
        abort_client();
        return;
      }
      if (up_paused_) {
        up_paused_ = false;
        s.resume_reading();
      }
      up_->arm_timer(conf_->read_timeout_ms);
      return;
    }
    const size_t space = ring_.free();
    const bool held = observer_ != nullptr && observer_->holding(observer_ready_);  // the cache's disk is behind
    if (space == 0 || held) {
      if (!up_paused_) {
        up_paused_ = true;
        s.pause_reading();
      }
      up_->arm_timer(0);  // waiting for the client (send_timeout runs on that side)
      ex_.set_low_water(ring_.busy() / 2);
      return;
    }
    switch (resp_.framing) {
      case http::ResponseFraming::kContentLength: {
        size_t n = in.size();
        if (n > remaining_) n = static_cast<size_t>(remaining_);
        if (n > space) n = space;
        const std::string_view data(in.data(), n);
        const bool last = n == remaining_;
        deliver(&data, 1, last);
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
            abort_client();
            return;
          }
          if (step.status == http::ChunkedStatus::kData) spans[count++] = step.data;
          if (step.status == http::ChunkedStatus::kDone) {
            done = true;
            break;
          }
          if (step.status == http::ChunkedStatus::kNeedMore) break;
        }
        deliver(spans, count, done);
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
        deliver(&data, 1, false);
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

// Hands decoded content to the observer and the client. The last piece of a response with nothing else in
// flight is copied into the client stream (finish() flushes it); everything else goes through the ring by
// reference, at most busy_limit_ bytes in flight to the client until the response has been read whole. The
// total never exceeds ring_.free().
void ProxyState::deliver(const std::string_view* spans, size_t count, bool last) {
  if (observer_ != nullptr) {
    for (size_t i = 0; i < count; ++i) observer_->on_data(spans[i]);
  }
  if (last && ring_.idle()) {
    for (size_t i = 0; i < count; ++i) write_client(spans[i]);
    return;
  }
  for (size_t i = 0; i < count; ++i) ring_.append(spans[i]);
  hand_to_client(last);
}

void ProxyState::complete() {
  end_try(0);
  phase_ = Phase::kDraining;
  if (observer_ != nullptr) {
    observer_->on_end(true);
    observer_.reset();
  }
  const bool keep = resp_.reusable() && !extra_ && !upstream_eof_ && request_complete() &&
                    up_->stream().pending_output() == 0;
  up_->release(keep);
  up_ = nullptr;
  group_->balancer().done(attempt_, PeerResult::kOk, mod_.reactor().now_ms());
  hand_to_client(true);  // a close-delimited response ends here: whatever is staged goes out
  ring_.release(sent());
  if (!ring_.idle()) {
    // The ring's bytes are still referenced by the client stream: finish once they are sent, so that the
    // next request (which may reuse or replace this state) never overwrites bytes in flight.
    ex_.set_low_water(0);
    return;
  }
  phase_ = Phase::kDone;
  ex_.finish();
}

void ProxyState::abort_client() {
  end_try(502);
  phase_ = Phase::kDone;
  if (observer_ != nullptr) {
    observer_->on_end(false);
    observer_.reset();
  }
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  group_->balancer().done(attempt_, PeerResult::kNext, mod_.reactor().now_ms());
  ex_.abort_response();
}

// ---- upstream failures ----

void ProxyState::on_upstream_error(int error) {
  up_ = nullptr;  // gone
  if (deferred_status_ != 0) return;
  const char* what = error != 0 ? std::strerror(error) : "connection closed";
  switch (phase_) {
    case Phase::kConnecting:
    case Phase::kWaitingHead: {
      if (phase_ == Phase::kConnecting) {
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
      abort_client();
      return;
    default:
      return;
  }
}

void ProxyState::on_upstream_timer() {
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
      abort_client();
      return;
    default:
      return;
  }
}

}  // namespace kosoku::proxy
