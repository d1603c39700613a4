#include "core/net/shared_buffer.hh"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <new>

namespace kosoku::net {

namespace {

constexpr unsigned kMinShift = 14;        // 16 KiB: the smallest cached size
constexpr unsigned kMaxShift = 18;        // 256 KiB: the largest (static files read chunks of at most this)
constexpr unsigned kClasses = kMaxShift - kMinShift + 1;
constexpr unsigned kMaxCachedPerClass = 16;  // at most 16 × (16 KiB .. 256 KiB) kept per size class per core

// Trivially destructible, so it stays usable for the whole life of its thread; t_cache_exit frees it when the
// thread ends (a worker's loop thread, a test's thread: the buffers would otherwise leak with the thread).
struct Cache {
  SharedBuffer* head[kClasses] = {};
  unsigned count[kClasses] = {};
  size_t bytes = 0;
  size_t buffers = 0;
  bool closed = false;  // the thread is ending: buffers released from now on are freed, not cached
};
thread_local Cache t_cache;

struct CacheExit {
  bool armed = false;
  ~CacheExit() {
    SharedBuffer::trim_cache();
    t_cache.closed = true;
  }
};
thread_local CacheExit t_cache_exit;

std::atomic<size_t> g_allocated{0};  // heap buffers malloc'd and not yet freed, all threads (cached ones included)
thread_local SharedBuffer::Source* t_source = nullptr;
thread_local uint64_t* t_live_buffers = nullptr;
thread_local uint64_t* t_live_bytes = nullptr;

void count_live(int64_t delta, size_t bytes) {
  if (t_live_buffers == nullptr) return;
  *t_live_buffers += static_cast<uint64_t>(delta);
  *t_live_bytes += static_cast<uint64_t>(delta * static_cast<int64_t>(bytes));
}
constexpr size_t kSourceMin = 64 * 1024;  // smaller buffers (small files) are not worth a DMA block

// The size class of `capacity`, or kClasses if it is too big to be cached.
unsigned class_of(size_t capacity) {
  if (capacity > (size_t{1} << kMaxShift)) return kClasses;
  unsigned shift = std::max<unsigned>(kMinShift, static_cast<unsigned>(std::bit_width(capacity - 1)));
  return shift - kMinShift;
}

}  // namespace

void SharedBuffer::set_source(Source* source) { t_source = source; }

void SharedBuffer::set_stats(uint64_t* buffers, uint64_t* bytes) {
  t_live_buffers = buffers;
  t_live_bytes = bytes;
}

SharedBuffer* SharedBuffer::make(size_t capacity) {
  if (capacity == 0) capacity = 1;
  if (Source* src = t_source;
      src != nullptr && capacity > kSourceMin && capacity + sizeof(SharedBuffer) <= src->block_bytes()) {
    uint64_t iova = kNoIova;
    if (void* mem = src->take(&iova)) {
      auto* b = new (mem) SharedBuffer();
      b->cap_ = static_cast<uint32_t>(src->block_bytes() - sizeof(SharedBuffer));
      b->data_ = static_cast<char*>(mem) + sizeof(SharedBuffer);
      b->source_ = src;
      b->iova_ = iova + sizeof(SharedBuffer);
      count_live(1, b->cap_);
      return b;
    }
  }
  unsigned c = class_of(capacity);
  Cache& cache = t_cache;
  if (c < kClasses && cache.head[c] != nullptr) {
    SharedBuffer* b = cache.head[c];
    cache.head[c] = b->next_;
    --cache.count[c];
    --cache.buffers;
    cache.bytes -= b->cap_;
    b->next_ = nullptr;
    b->refs_ = 1;
    count_live(1, b->cap_);
    return b;
  }
  size_t cap = c < kClasses ? size_t{1} << (c + kMinShift) : capacity;
  void* mem = std::malloc(sizeof(SharedBuffer) + cap);
  if (mem == nullptr) std::abort();
  g_allocated.fetch_add(1, std::memory_order_relaxed);
  t_cache_exit.armed = true;  // registers the thread-exit trim (a thread_local with a destructor starts on use)
  auto* b = new (mem) SharedBuffer();
  b->cap_ = static_cast<uint32_t>(cap);
  b->data_ = static_cast<char*>(mem) + sizeof(SharedBuffer);
  count_live(1, cap);
  return b;
}

void SharedBuffer::release() {
  count_live(-1, cap_);
  if (Source* src = source_) {
    this->~SharedBuffer();
    src->give(this);
    return;
  }
  unsigned c = class_of(cap_);
  Cache& cache = t_cache;
  if (c < kClasses && !cache.closed && cache.count[c] < kMaxCachedPerClass &&
      (size_t{1} << (c + kMinShift)) == cap_) {
    t_cache_exit.armed = true;  // a thread that only releases (never made one) caches too: free it at its end
    next_ = cache.head[c];
    cache.head[c] = this;
    ++cache.count[c];
    ++cache.buffers;
    cache.bytes += cap_;
    return;
  }
  this->~SharedBuffer();
  std::free(this);
  g_allocated.fetch_sub(1, std::memory_order_relaxed);
}

size_t SharedBuffer::cached_buffers() { return t_cache.buffers; }
size_t SharedBuffer::cached_bytes() { return t_cache.bytes; }
size_t SharedBuffer::allocated_buffers() { return g_allocated.load(std::memory_order_relaxed); }

void SharedBuffer::trim_cache() {
  Cache& cache = t_cache;
  for (unsigned c = 0; c < kClasses; ++c) {
    while (SharedBuffer* b = cache.head[c]) {
      cache.head[c] = b->next_;
      b->~SharedBuffer();
      std::free(b);
      g_allocated.fetch_sub(1, std::memory_order_relaxed);
    }
    cache.count[c] = 0;
  }
  cache.bytes = cache.buffers = 0;
}

}  // namespace kosoku::net
