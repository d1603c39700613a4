// Chunked transfer coding decoder; see chunked.hh.
#include "core/http/chunked.hh"

#include "core/http/chars.hh"

namespace kosoku::http {
namespace {

/// Bytes allowed inside chunk-ext and trailer lines: HTAB, SP, VCHAR, obs-text.
bool is_text(char c) { return chars::is(c, chars::kFieldVchar); }

}  // namespace

ChunkedStep ChunkedDecoder::fail(size_t consumed, uint16_t status, std::string_view reason) {
  state_ = State::kError;
  ChunkedStep s;
  s.status = ChunkedStatus::kError;
  s.consumed = consumed;
  s.http_status = status;
  s.reason = reason;
  return s;
}

ChunkedStep ChunkedDecoder::decode(std::string_view in) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    const char c = in[i];
    switch (state_) {
      case State::kSizeFirst: {
        const int h = chars::hex_value(c);
        if (h < 0) return fail(i, 400, "invalid chunk size");
        size_ = static_cast<uint64_t>(h);
        line_bytes_ = 0;
        state_ = State::kSize;
        ++i;
        break;
      }
      case State::kSize: {
        const int h = chars::hex_value(c);
        if (h >= 0) {
          if (size_ > (UINT64_MAX >> 4)) return fail(i, 400, "chunk size too large");
          size_ = (size_ << 4) | static_cast<uint64_t>(h);
          ++i;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else if (c == ';') {
          state_ = State::kExt;
        } else if (chars::is_ows(c)) {
          state_ = State::kSizeBws;
        } else {
          return fail(i, 400, "invalid chunk size line");
        }
        break;
      }
      case State::kSizeBws:
        if (chars::is_ows(c)) {
          if (++line_bytes_ > limits_.max_chunk_ext) return fail(i, 400, "chunk extension too long");
          ++i;
        } else if (c == ';') {
          state_ = State::kExt;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else {
          return fail(i, 400, "invalid chunk size line");
        }
        break;
      case State::kExt:
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (!is_text(c)) {
          return fail(i, 400, "invalid character in chunk extension");
        } else if (++line_bytes_ > limits_.max_chunk_ext) {
          return fail(i, 400, "chunk extension too long");
        }
        ++i;
        break;
      case State::kSizeLf:
        if (c != '\n') return fail(i, 400, "chunk size line not ended by CRLF");
        ++i;
        if (size_ == 0) {
          trailer_bytes_ = 0;
          state_ = State::kTrailerLine;
          break;
        }
        if (limits_.max_body_size != 0 &&
            (size_ > limits_.max_body_size || body_size_ > limits_.max_body_size - size_)) {
          return fail(i, 413, "request body too large");
        }
        remaining_ = size_;
        state_ = State::kData;
        break;
      case State::kData: {
        const size_t avail = n - i;
        const size_t take = remaining_ < avail ? static_cast<size_t>(remaining_) : avail;
        remaining_ -= take;
        body_size_ += take;
        if (remaining_ == 0) state_ = State::kDataCr;
        ChunkedStep s;
        s.status = ChunkedStatus::kData;
        s.data = in.substr(i, take);
        s.consumed = i + take;
        return s;
      }
      case State::kDataCr:
        if (c != '\r') return fail(i, 400, "chunk data not followed by CRLF");
        state_ = State::kDataLf;
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return fail(i, 400, "chunk data not followed by CRLF");
        state_ = State::kSizeFirst;
        ++i;
        break;
      case State::kTrailerLine:
        if (c == '\r') {
          state_ = State::kEndLf;
          ++i;
          break;
        }
        state_ = State::kTrailerText;
        break;
      case State::kTrailerText:
        if (++trailer_bytes_ > limits_.max_trailer_section) return fail(i, 431, "trailer section too large");
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (!is_text(c)) {
          return fail(i, 400, "invalid character in trailer section");
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return fail(i, 400, "trailer line not ended by CRLF");
        if (++trailer_bytes_ > limits_.max_trailer_section) return fail(i, 431, "trailer section too large");
        state_ = State::kTrailerLine;
        ++i;
        break;
      case State::kEndLf: {
        if (c != '\n') return fail(i, 400, "chunked body not ended by CRLF");
        state_ = State::kDone;
        ChunkedStep s;
        s.status = ChunkedStatus::kDone;
        s.consumed = i + 1;
        return s;
      }
      case State::kDone: {
        ChunkedStep s;
        s.status = ChunkedStatus::kDone;
        return s;
      }
      case State::kError:
        return fail(0, 400, "chunked decoder already failed");
    }
  }
  if (state_ == State::kDone) {
    ChunkedStep s;
    s.status = ChunkedStatus::kDone;
    s.consumed = i;
    return s;
  }
  if (state_ == State::kError) return fail(i, 400, "chunked decoder already failed");
  ChunkedStep s;
  s.consumed = i;
  return s;
}

}  // namespace kosoku::http
