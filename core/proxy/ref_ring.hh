// A byte ring whose slices are handed to an output stream by reference (Exchange::write_ref: zero copy,
// flushed at once) and reused once the stream has sent them. The stream reports only how many bytes are still
// pending, so the owner counts every byte it causes to be queued ("out" positions) and each slice records the
// out position just after it: a slice is free once out − pending has passed that mark. Bytes other parties
// queue only make the estimate conservative (slices are freed later, never early).
//
// Memory is allocated on first use and bounded by the capacity; a full ring is the back-pressure signal (the
// proxy stops reading the upstream until the client has taken data).
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

  /// Sets the capacity (bytes) for the next use; frees the memory. Only while idle().
  void reset(size_t capacity) {
    std::free(buf_);
    buf_ = nullptr;
    cap_ = capacity;
    head_ = tail_ = 0;
    first_ = count_ = 0;
  }
  size_t capacity() const { return cap_; }

  /// Frees every slice whose mark is at or below `sent_out` (out bytes known to be sent).
  void release(uint64_t sent_out) {
    while (count_ > 0 && marks_[first_].out <= sent_out) {
      tail_ = marks_[first_].ring_end;
      first_ = (first_ + 1) % kMaxMarks;
      --count_;
    }
    if (count_ == 0) head_ = tail_ = 0;  // empty: restart at the beginning (largest contiguous space)
  }
  /// No slice is referenced by the stream.
  bool idle() const { return count_ == 0; }
  /// Bytes that append() accepts now.
  size_t free() const { return count_ + 2 > kMaxMarks ? 0 : cap_ - static_cast<size_t>(head_ - tail_); }

  /// Copies `data` (at most free() bytes) into the ring and calls emit(ptr, len) for each contiguous slice (one,
  /// or two when it wraps); emit must queue the slice and return the out position just after it.
  template <class Emit>
  void append(std::string_view data, Emit&& emit) {
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
      const uint64_t out = emit(static_cast<const char*>(buf_ + at), n);
      marks_[(first_ + count_) % kMaxMarks] = Mark{head_, out};
      ++count_;
      data.remove_prefix(n);
    }
  }

 private:
  static constexpr size_t kMaxMarks = 128;
  struct Mark {
    uint64_t ring_end;  // head_ after the slice
    uint64_t out;       // out position after the slice was queued
  };
  char* buf_ = nullptr;
  size_t cap_ = 0;
  uint64_t head_ = 0;  // bytes appended (monotonic until the ring empties)
  uint64_t tail_ = 0;  // bytes released
  std::array<Mark, kMaxMarks> marks_{};
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace kosoku::proxy
