#include "core/net/in_buffer.hh"

namespace kosoku::net {

char* InBufferPool::take() {
  if (free_.empty()) {
    auto* b = static_cast<char*>(std::malloc(InBuffer::kFirstBytes));
    if (b == nullptr) std::abort();
    return b;
  }
  char* b = free_.back();
  free_.pop_back();
  return b;
}

void InBufferPool::give(char* b) {
  if (free_.size() < max_) {
    free_.push_back(b);
  } else {
    std::free(b);
  }
}

bool InBuffer::make_room(size_t n, InBufferPool* pool) {
  bool grew = false;
  if (begin_ > 0) {  // room at the front: move what is unread there first
    std::memmove(buf_, buf_ + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ + n > cap_) {
    size_t cap = cap_ != 0 ? cap_ : kFirstBytes;
    while (cap < end_ + n) cap *= 2;
    if (pool != nullptr && buf_ == nullptr && cap == kFirstBytes) {
      buf_ = pool->take();
    } else if (pool != nullptr && cap_ == kFirstBytes) {
      char* bigger = static_cast<char*>(std::malloc(cap));  // the pooled buffer goes back to the pool
      if (bigger != nullptr) std::memcpy(bigger, buf_, end_);
      pool->give(buf_);
      buf_ = bigger;
    } else {
      buf_ = static_cast<char*>(std::realloc(buf_, cap));
    }
    if (buf_ == nullptr) std::abort();
    cap_ = cap;
    grew = true;
  }
  return grew;
}

bool InBuffer::append_slow(const char* p, size_t n, InBufferPool* pool) {
  bool grew = make_room(n, pool);
  std::memcpy(buf_ + end_, p, n);
  end_ += n;
  return grew;
}

std::span<char> InBuffer::prepare(size_t n, InBufferPool* pool) {
  if (end_ + n > cap_) make_room(n, pool);
  return {buf_ + end_, cap_ - end_};
}

void InBuffer::release(InBufferPool* pool) {
  begin_ = end_ = 0;
  if (buf_ == nullptr) return;
  if (pool != nullptr && cap_ == kFirstBytes) {
    pool->give(buf_);
  } else {
    std::free(buf_);
  }
  buf_ = nullptr;
  cap_ = 0;
}

}  // namespace kosoku::net
