// A byte ring whose slices are handed to an output stream by reference (Exchange::write_ref: zero copy,
// flushed at once) and reused once the stream has sent them. The stream reports only how many bytes are still
// pending, so the owner counts every byte it causes to be queued ("out" positions) and each slice records the
// out position just after it: a slice is free once out − pending has passed that mark. Bytes other parties
// queue only make the estimate conservative (slices are freed later, never early).
//
// Three regions, in order: handed (referenced by the stream, not yet known sent: nginx's "busy" buffers),
// staged (read from the upstream, not yet handed: held back while the handed bytes exceed the busy limit),
// and free. append() copies into the free region; hand(limit) moves staged bytes to the stream while fewer
// than `limit` bytes are handed (proxy_busy_buffers_size); release() frees handed bytes the stream has sent.
//
// Memory is allocated on first use and bounded by the capacity (proxy_buffers N × SIZE, or proxy_buffer_size
// without buffering); a full ring is the back-pressure signal (the proxy stops reading the upstream until the
// client has taken data).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace kosoku::proxy {

class RefRing {
 public:
  RefRing() = default;
  ~RefRing() { std::free(buf_); }
  RefRing(const RefRing&) = delete;
  RefRing& operator=(const RefRing&) = delete;

  /// Sets the capacity (bytes) for the next use; frees the memory when the capacity changes (kept for the
  /// next request of the connection otherwise). Only while idle().
  void reset(size_t capacity) {
    if (capacity != cap_) {
      std::free(buf_);
      buf_ = nullptr;
      cap_ = capacity;
    }
    head_ = given_ = tail_ = 0;
    first_ = count_ = 0;
  }
  size_t capacity() const { return cap_; }
  /// Bytes of memory held (0 until the first append, then the capacity).
  size_t memory() const { return buf_ == nullptr ? 0 : cap_; }

  /// Frees every handed slice whose mark is at or below `sent_out` (out bytes known to be sent).
  void release(uint64_t sent_out) {
    while (count_ > 0 && marks_[first_].out <= sent_out) {
      tail_ = marks_[first_].ring_end;
      first_ = (first_ + 1) % kMaxMarks;
      --count_;
    }
    // Empty: restart at the beginning (largest contiguous space).
    if (count_ == 0 && given_ == head_) head_ = given_ = tail_ = 0;
  }
  /// Nothing is handed to the stream and nothing is staged.
  bool idle() const { return count_ == 0 && given_ == head_; }
  /// Handed bytes not yet released (nginx's busy buffers).
  size_t busy() const { return static_cast<size_t>(given_ - tail_); }
  /// Bytes appended but not yet handed.
  size_t staged() const { return static_cast<size_t>(head_ - given_); }
  /// Bytes that append() accepts now.
  size_t free() const { return cap_ - static_cast<size_t>(head_ - tail_); }

  /// Copies `data` (at most free() bytes) into the ring, staged until hand().
  void append(std::string_view data) {
    if (data.empty()) return;
    if (buf_ == nullptr) {
      buf_ = static_cast<char*>(std::malloc(cap_));
      if (buf_ == nullptr) std::abort();
    }
    while (!data.empty()) {
      const size_t at = static_cast<size_t>(head_ % cap_);
      size_t n = cap_ - at;
      if (n > data.size()) n = data.size();
      std::memcpy(buf_ + at, data.data(), n);
      head_ += n;
      data.remove_prefix(n);
    }
  }

  /// Hands staged bytes to the stream while busy() < `limit`: calls emit(ptr, len) for each contiguous slice;
  /// emit must queue the slice and return the out position just after it. Returns the bytes handed.
  template <class Emit>
  size_t hand(size_t limit, Emit&& emit) {
    size_t handed = 0;
    while (given_ < head_ && busy() < limit && count_ < kMaxMarks) {
      const size_t at = static_cast<size_t>(given_ % cap_);
      size_t n = cap_ - at;
      if (n > staged()) n = staged();
      if (n > limit - busy()) n = limit - busy();
      given_ += n;
      const uint64_t out = emit(static_cast<const char*>(buf_ + at), n);
      marks_[(first_ + count_) % kMaxMarks] = Mark{given_, out};
      ++count_;
      handed += n;
    }
    return handed;
  }

 private:
  static constexpr size_t kMaxMarks = 128;
  struct Mark {
    uint64_t ring_end;  // given_ after the slice
    uint64_t out;       // out position after the slice was queued
  };
  char* buf_ = nullptr;
  size_t cap_ = 0;
  uint64_t head_ = 0;   // bytes appended (monotonic until the ring empties)
  uint64_t given_ = 0;  // bytes handed to the stream
  uint64_t tail_ = 0;   // bytes released
  std::array<Mark, kMaxMarks> marks_{};
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace kosoku::proxy
