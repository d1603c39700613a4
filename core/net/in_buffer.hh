// A stream's input buffer, shared by both network backends (net/kernel_stack.cc, kernel-bypass/tcpip/tcb.hh):
// the received, not yet consumed bytes of one connection in one contiguous run (net::Stream::input()), so the
// HTTP parser sees the request head whole however the network cut it.
//
// Bytes are appended at the end (append) and consumed from the front (consume); the front is moved back to the
// start of the memory only when an append would not fit otherwise (one memmove of what is unread), and the
// memory doubles, from kFirstBytes, when even that is not enough. A buffer whose bytes are all consumed starts
// again at offset 0 (the memory is kept until release()).
//
// InBufferPool: a bounded free list of kFirstBytes buffers (per core, on the request path), so a backend whose
// streams give their buffer back whenever it empties (an idle keep-alive stream then holds none) takes it again
// without a malloc. A buffer that grows past kFirstBytes leaves the pool's size class: its first block goes back
// to the pool, the bigger memory is malloc'd and freed. Without a pool, growth is a realloc.
//
// Per core, like every stream: nothing here is thread-safe. Allocation failure aborts, as everywhere on the
// request path.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

namespace kosoku::net {

class InBufferPool {
 public:
  /// Keeps at most `max_buffers` free buffers; beyond that, given-back memory is freed.
  explicit InBufferPool(size_t max_buffers) : max_(max_buffers) {}
  InBufferPool(const InBufferPool&) = delete;
  InBufferPool& operator=(const InBufferPool&) = delete;
  ~InBufferPool() {
    for (char* b : free_) std::free(b);
  }
  /// A buffer of InBuffer::kFirstBytes (from the list, or malloc'd).
  char* take();
  /// Takes back a buffer of InBuffer::kFirstBytes (or frees it when the list is full).
  void give(char* b);
  size_t size() const { return free_.size(); }

 private:
  std::vector<char*> free_;
  size_t max_;
};

class InBuffer {
 public:
  static constexpr size_t kFirstBytes = 4096;  // the first allocation; growth doubles it

  InBuffer() = default;
  InBuffer(const InBuffer&) = delete;
  InBuffer& operator=(const InBuffer&) = delete;
  /// Frees the memory (give it to a pool first with release(pool) if it came from one).
  ~InBuffer() { std::free(buf_); }

  /// The unconsumed bytes (valid until the next append, consume, clear or release).
  std::span<const char> view() const { return {buf_ + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  /// Bytes of memory held (0 after release()).
  size_t capacity() const { return cap_; }

  /// Appends n bytes (growing as the header says; `pool`: where a kFirstBytes buffer comes from and goes back
  /// to). Returns true when the memory grew, i.e. capacity() changed (for memory accounting).
  bool append(const char* p, size_t n, InBufferPool* pool = nullptr) {
    if (end_ + n <= cap_) {
      std::memcpy(buf_ + end_, p, n);
      end_ += n;
      return false;
    }
    return append_slow(p, n, pool);
  }
  /// At least n writable bytes at the end (growing as append does), for a producer that writes in place (TLS
  /// decrypting into the buffer): write into them, then appended(k) with k <= the span's size.
  std::span<char> prepare(size_t n, InBufferPool* pool = nullptr);
  void appended(size_t k) { end_ += k; }
  /// Drops the first n bytes (n <= size()); when none remain, the next byte goes to offset 0.
  void consume(size_t n) {
    begin_ += n;
    if (begin_ >= end_) begin_ = end_ = 0;
  }
  /// Drops every byte, keeps the memory.
  void clear() { begin_ = end_ = 0; }
  /// Drops every byte and gives the memory back: to `pool` if it is a kFirstBytes buffer and a pool is given,
  /// otherwise to the allocator.
  void release(InBufferPool* pool = nullptr);

 private:
  bool append_slow(const char* p, size_t n, InBufferPool* pool);
  bool make_room(size_t n, InBufferPool* pool);

  char* buf_ = nullptr;
  size_t cap_ = 0, begin_ = 0, end_ = 0;
};

}  // namespace kosoku::net
