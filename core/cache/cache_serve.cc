// CacheState, serving half: an entry (HIT, UPDATING, STALE, REVALIDATED) becomes the response — the stored
// head through the proxy's own build_response_head (so a hit carries exactly what the miss did, minus the
// proxy's hidden fields), `Age` (RFC 9111 §5.1), the client's preconditions answered from the stored
// validators (RFC 9110 §13.2.2: If-None-Match with weak comparison and lists → 304 carrying ETag, Vary,
// Cache-Control, Expires... as the 200 would), ranges of a 200 (§14; the body offsets are clamped to
// the stored body), and the body streamed from disk in bounded chunks (two buffers, zero-copy).
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_state.hh"
#include "core/http/response_step.hh"
#include "core/proxy/proxy_request.hh"

namespace kosoku::cache {

namespace {

constexpr size_t kChunk = 128 * 1024;  // per buffer; two per request

}  // namespace

// The shared response step (http/response_step.hh) for a 200 of `size` bytes (-1: unknown, then no ranges) whose
// validators are h.etag and `last_modified` (-1: none): `h` becomes the 304 / 206 / 416 head and pieces_ lays
// out the body (the whole of it, or the 206's parts).
http::ResponseStep CacheState::response_step(http::ResponseHead& h, int64_t last_modified, int64_t size,
                                             http::RangeSupport ranges) {
  http::Representation rep;
  rep.validators.etag = h.etag;
  if (last_modified >= 0) rep.validators.last_modified = last_modified;
  rep.length = size;
  rep.ranges = ranges;
  const http::ResponseStep step = http::evaluate_response(ex_.request(), rep, ex_.location().if_modified_since);
  pieces_.clear();
  piece_ = 0;
  piece_done_ = 0;
  http::apply_response_step(step, size, mod_.reactor().now_ns(), h, multipart_type_, pieces_);
  return step;
}

// A MISS/EXPIRED/BYPASS passes the origin's 200 on as the client's view of it (response_step): the bytes of the
// wanted ranges (and the multipart texts between them) as they stream by; the store gets every byte.
void CacheState::write_view(const char* data, size_t len, bool by_ref) {
  const uint64_t pos = stream_pos_;
  stream_pos_ += len;
  while (piece_ < pieces_.size()) {
    Piece& p = pieces_[piece_];
    if (p.length == 0) {
      ex_.write(p.text);
      ++piece_;
      continue;
    }
    const uint64_t from = p.offset + piece_done_;
    if (from >= pos + len) return;
    const uint64_t start = from > pos ? from : pos;
    const uint64_t end = p.offset + p.length < pos + len ? p.offset + p.length : pos + len;
    if (by_ref) {
      ex_.write_ref(data + (start - pos), static_cast<size_t>(end - start));
    } else {
      ex_.write(std::string_view(data + (start - pos), static_cast<size_t>(end - start)));
    }
    piece_done_ = end - p.offset;
    if (piece_done_ < p.length) return;
    ++piece_;
    piece_done_ = 0;
  }
}

void CacheState::serve(CacheStatus status) {
  status_ = status;
  phase_ = Phase::kServing;
  const EntryMeta& m = hot_meta_ != nullptr ? *hot_meta_ : use_entry_meta_ ? reader_.meta() : served_;
  head_text_.clear();
  absl::StrAppend(&head_text_, "HTTP/1.1 ", m.status, " X\r\n", m.head, "\r\n");
  head_resp_.fields = std::span<http::HeaderField>(head_fields_, std::size(head_fields_));
  http::ResponseLimits lim;
  lim.max_head = head_text_.size() + 1;
  if (http::parse_response_head(head_text_, head_resp_, lim, false).status != http::ParseStatus::kComplete) {
    KOSOKU_LOG(kCrit, "cache file \"%s\" has an invalid stored head", path_->path_of(hash_));
    phase_ = Phase::kDone;
    ex_.respond(502);
    return;
  }
  http::ResponseHead& h = ex_.head();
  proxy::build_response_head(head_resp_, ex_.location().module<proxy::ProxyLocationConf>(), h);
  proxy::rewrite_redirects(ex_, ex_.location().module<proxy::ProxyLocationConf>(), h);  // as on the MISS that stored it (nginx)
  const uint64_t size = m.body_size;
  h.content_length = static_cast<int64_t>(size);
  set_cache_status(ex_, status);
  absl::StrAppend(&h.extra, "Age: ", m.freshness.current_age(now_s()), "\r\n");

  pieces_.clear();
  piece_ = 0;
  piece_done_ = 0;
  const http::Request& req = ex_.request();
  if (m.status == 200) {
    // Any set of ranges: the body is read from the entry (or its in-memory copy) in any order.
    const http::ResponseStep step =
        response_step(h, m.last_modified, static_cast<int64_t>(size), http::RangeSupport::kAny);
    switch (step.outcome) {
      case http::ResponseOutcome::kPreconditionFailed:
        phase_ = Phase::kDone;
        ex_.respond(412);
        return;
      case http::ResponseOutcome::kNotModified:
        phase_ = Phase::kDone;
        ex_.send_head();
        ex_.finish();
        return;
      case http::ResponseOutcome::kRangeNotSatisfiable:
        h.accept_ranges = true;
        phase_ = Phase::kDone;
        ex_.respond(416);
        return;
      case http::ResponseOutcome::kFull:
      case http::ResponseOutcome::kPartial:
        break;
    }
    h.accept_ranges = true;
  }
  if (pieces_.empty() && size > 0) pieces_.push_back(Piece{{}, 0, size});
  ex_.send_head();
  if (req.method == http::Method::kHead || pieces_.empty()) {
    finish_response();
    return;
  }
  streaming_ = true;
  pump();
}

// Moves the body forward: literal pieces are copied, body ranges are read from the entry (clamped to the body by
// EntryReader::read) into the free buffer and handed over by reference; bytes that came with the header read are
// copied. A buffer is free again once every byte written from it has been sent.
void CacheState::pump() {
  if (pumping_) return;
  pumping_ = true;
  while (streaming_ && !read_in_flight_) {
    if (read_ready_) {
      read_ready_ = false;
      read_done(ready_data_, ready_error_);
      continue;
    }
    if (piece_ >= pieces_.size()) {
      streaming_ = false;
      pumping_ = false;
      finish_response();
      return;
    }
    Piece& p = pieces_[piece_];
    if (p.length == 0) {
      ex_.write(p.text);
      written_ += p.text.size();
      ++piece_;
      continue;
    }
    if (hot_meta_ != nullptr) {
      // A HotCache copy: the bytes are in memory (copied into the stream, so nothing refers to the copy later).
      std::string_view d = hot_body_.substr(static_cast<size_t>(p.offset + piece_done_),
                                            static_cast<size_t>(p.length - piece_done_));
      ex_.write(d);
      written_ += d.size();
      ++piece_;
      piece_done_ = 0;
      continue;
    }
    const int b = next_buf_;
    const uint64_t after = written_ - end_mark_[b];
    if (end_mark_[b] != 0 && ex_.pending_output() > after) {
      ex_.set_low_water(after);
      break;
    }
    if (buf_[b] == nullptr) buf_[b] = static_cast<char*>(std::malloc(kChunk));
    const uint64_t left = p.length - piece_done_;
    const uint32_t want = static_cast<uint32_t>(left < kChunk ? left : kChunk);
    read_in_flight_ = true;
    reader_.read(p.offset + piece_done_, buf_[b], want);  // the result may arrive before read() returns
  }
  pumping_ = false;
}

void CacheState::on_entry_data(EntryReader&, std::string_view data, int error) {
  read_in_flight_ = false;
  if (aborted_) {
    maybe_release();
    return;
  }
  if (!streaming_) return;
  if (pumping_) {
    read_ready_ = true;
    ready_data_ = data;
    ready_error_ = error;
    return;
  }
  read_done(data, error);
  if (streaming_) pump();
}

void CacheState::read_done(std::string_view data, int error) {
  if (error != 0 || data.empty()) {
    KOSOKU_LOG(kCrit, "read() of cache file \"%s\" failed (%d)", path_->path_of(hash_), -error);
    streaming_ = false;
    phase_ = Phase::kDone;
    ex_.abort_response();  // the head is out: cut the connection rather than send a short body
    return;
  }
  const int b = next_buf_;
  if (data.data() == buf_[b]) {
    ex_.write_ref(data.data(), data.size());
    written_ += data.size();
    end_mark_[b] = written_;
    next_buf_ = 1 - b;
  } else {
    ex_.write(data);  // bytes from the header read (they live in the reader, whose next read reuses them)
    written_ += data.size();
  }
  piece_done_ += data.size();
  if (piece_done_ >= pieces_[piece_].length) {
    ++piece_;
    piece_done_ = 0;
  }
}

void CacheState::on_writable() {
  if (draining_) {
    if (relay_.drained()) pass_done();
    return;
  }
  if (passthrough_ && fetch_ != nullptr) {
    fetch_->upstream().resume();  // the client took data: the relay has room again
    return;
  }
  if (streaming_) pump();
}

void CacheState::on_response_complete() {
  // The bytes still to be sent are the stream's (copied) or this state's buffers (by reference), never the
  // reader's, so the file can go now. A background update or revalidation holds its own descriptor (dup).
  if (read_in_flight_ || reader_.busy()) return;
  reader_.close();
  have_entry_ = false;
}

void CacheState::finish_response() {
  phase_ = Phase::kDone;
  ex_.finish();
}

}  // namespace kosoku::cache
