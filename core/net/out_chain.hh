// A stream's output chain, shared by both network backends: the kernel-socket stream (net/kernel_stack.cc) sends
// from it with sendmsg(2), kosoku's TCP (kernel-bypass/tcpip/tcb_send_buffer.cc) keeps its send buffer, which is
// also its retransmission queue, and its queue of waiting output in two of them.
//
// The chain is a singly linked FIFO of OutBlocks of three kinds, one per way net::Stream takes output:
//   - copied: the bytes live in the block (data[], cap bytes), written through reserve/commit (Stream::reserve)
//     or copied in (copy_in);
//   - by reference: `ref` points at bytes the writer owns and keeps unchanged until the block is released
//     (Stream::write_ref's promise);
//   - shared: `ref` points into `shared`, a net::SharedBuffer the block holds one reference to, dropped when the
//     block is freed (Stream::write_shared: file chunks go from the disk read to the wire without a copy).
// A block's live bytes are bytes()[begin, end); bytes() is data for a copied block, ref for the others.
//
// Positions: the chain counts its live bytes (bytes()) and the bytes it ever dropped at the front (front(), a
// 64-bit stream position that never wraps), so the TCP sender can read at an offset from the front (copy_out,
// shared_at) through a cursor — the block read last and the position of its bytes()[0] — instead of walking a
// multi-megabyte chain from the head for every segment. Whatever empties, frees or truncates a block resets the
// cursor.
//
// No virtual call and no allocation beyond the block itself: the policies that differ between the backends
// (which blocks are kept for reuse, which emptied block stays) are template arguments, inlined. Blocks are
// malloc'd; BlockPool keeps emptied copied blocks of one size for reuse. Per core, nothing is thread-safe.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/net/shared_buffer.hh"

namespace kosoku::net {

struct OutBlock {
  OutBlock* next;
  const char* ref;       // bytes elsewhere (by reference or shared), or null: bytes in data[]
  SharedBuffer* shared;  // shared: the buffer `ref` points into, one reference held until the block is freed
  uint32_t cap;          // copied: bytes of data[]; by reference and shared: the bytes at ref
  uint32_t begin;
  uint32_t end;
  char data[];

  const char* bytes() const { return ref != nullptr ? ref : data; }
  size_t size() const { return end - begin; }
  bool copied() const { return ref == nullptr; }
  bool by_ref() const { return ref != nullptr && shared == nullptr; }

  /// A copied block with room for `cap` bytes, empty.
  static OutBlock* make_copied(size_t cap);
  /// A block of `len` bytes at `data`, which the caller keeps unchanged until the block is freed.
  static OutBlock* make_ref(const char* data, size_t len);
  /// A block of `len` bytes at `data` inside `buf`; takes one reference to `buf`.
  static OutBlock* make_shared(SharedBuffer& buf, const char* data, size_t len);
  /// Frees `b`, dropping its reference to a shared buffer.
  static void destroy(OutBlock* b) {
    if (b->shared != nullptr) b->shared->unref();
    std::free(b);
  }
};

/// Emptied copied blocks of kCap bytes kept for reuse, at most kMax (a linked list through OutBlock::next).
template <size_t kCap, unsigned kMax>
class BlockPool {
 public:
  static constexpr size_t kBlockBytes = kCap;
  BlockPool() = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() { clear(); }

  /// An empty copied block of kCap bytes, or null when the pool is empty.
  OutBlock* take() {
    OutBlock* b = head_;
    if (b == nullptr) return nullptr;
    head_ = b->next;
    --count_;
    b->next = nullptr;
    b->begin = b->end = 0;
    return b;
  }
  /// Keeps `b` if it is a copied block of kCap bytes and the pool has room (true); otherwise false and the
  /// caller still owns it.
  bool keep(OutBlock* b) {
    if (!b->copied() || b->cap != kCap || count_ >= kMax) return false;
    b->next = head_;
    head_ = b;
    ++count_;
    return true;
  }
  unsigned size() const { return count_; }
  /// Frees every kept block.
  void clear() {
    while (head_ != nullptr) {
      OutBlock* n = head_->next;
      std::free(head_);
      head_ = n;
    }
    count_ = 0;
  }

 private:
  OutBlock* head_ = nullptr;
  unsigned count_ = 0;
};

class OutChain {
 public:
  OutChain() = default;
  OutChain(const OutChain&) = delete;
  OutChain& operator=(const OutChain&) = delete;
  /// The owner frees the blocks (clear()) with its own policy before the chain goes.
  ~OutChain() = default;

  OutBlock* head() const { return head_; }
  OutBlock* tail() const { return tail_; }
  /// No block at all (a chain may also hold an emptied block kept for reuse: then bytes() is 0, empty() false).
  bool empty() const { return head_ == nullptr; }
  /// Live bytes in the chain.
  size_t bytes() const { return bytes_; }
  /// Bytes ever dropped at the front (drop_front, pop_front): the stream position of the first live byte.
  uint64_t front() const { return front_; }

  /// Appends `b` (its live bytes join the chain).
  void push_back(OutBlock* b) {
    b->next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = b;
    } else {
      head_ = b;
    }
    tail_ = b;
    bytes_ += b->size();
  }
  /// Unlinks the first block with its live bytes (moved to another chain, not dropped).
  OutBlock* pop_front() {
    OutBlock* b = head_;
    if (b == nullptr) return nullptr;
    head_ = b->next;
    if (head_ == nullptr) tail_ = nullptr;
    if (cur_ == b) cur_ = nullptr;
    b->next = nullptr;
    bytes_ -= b->size();
    front_ += b->size();
    return b;
  }
  /// The first `k` (< size) bytes of the first block, a by-reference or shared block, become a block of their
  /// own (shared: one more reference), returned unlinked; the rest stays first in the chain.
  OutBlock* split_front(uint32_t k);

  /// The tail block if it is a copied block with at least `min_bytes` free, else null (reserve() appends one).
  OutBlock* writable_tail(size_t min_bytes) const {
    OutBlock* t = tail_;
    return t != nullptr && t->copied() && t->cap - t->end >= min_bytes ? t : nullptr;
  }
  /// n bytes were written into writable_tail()'s free space.
  void commit(size_t n) {
    tail_->end += static_cast<uint32_t>(n);
    bytes_ += n;
  }
  /// Copies `n` bytes to the end: into the tail block's free space, then into copied blocks from
  /// new_block(bytes still to copy) -> OutBlock*.
  template <class NewBlock>
  void copy_in(const char* src, size_t n, NewBlock&& new_block) {
    bytes_ += n;
    while (n > 0) {
      if (tail_ == nullptr || !tail_->copied() || tail_->end == tail_->cap) {
        push_back(new_block(n));  // empty: bytes_ already counts what goes in
      }
      size_t k = std::min<size_t>(n, tail_->cap - tail_->end);
      std::memcpy(tail_->data + tail_->end, src, k);
      tail_->end += static_cast<uint32_t>(k);
      src += k;
      n -= k;
    }
  }

  /// Drops the first n (<= bytes()) live bytes. Each block emptied is unlinked and handed to release(b),
  /// except the last block when keep_last(b) is true: it stays, emptied (begin = end = 0), for the next bytes.
  template <class Release, class KeepLast>
  void drop_front(size_t n, Release&& release, KeepLast&& keep_last) {
    bytes_ -= n;
    front_ += n;
    while (n > 0 && head_ != nullptr) {
      size_t take = std::min(n, head_->size());
      head_->begin += static_cast<uint32_t>(take);
      n -= take;
      if (head_->begin != head_->end) continue;
      if (head_ == cur_) cur_ = nullptr;
      if (head_ == tail_ && keep_last(*head_)) {
        head_->begin = head_->end = 0;
        break;
      }
      if (head_ == tail_) tail_ = nullptr;
      OutBlock* next = head_->next;
      release(head_);
      head_ = next;
    }
  }
  template <class Release>
  void drop_front(size_t n, Release&& release) {
    drop_front(n, release, [](const OutBlock&) { return false; });
  }
  /// Keeps the first `keep` (<= bytes()) live bytes and hands every block after them to release(b); with
  /// keep = 0 the first block stays, emptied, for reuse.
  template <class Release>
  void truncate(size_t keep, Release&& release) {
    size_t seen = 0;
    OutBlock* last = nullptr;
    for (OutBlock* b = head_; b != nullptr;) {
      if (seen < keep || (b == head_ && keep == 0)) {
        if (seen + b->size() > keep) b->end = b->begin + static_cast<uint32_t>(keep - seen);
        seen += b->size();
        last = b;
        b = b->next;
        continue;
      }
      OutBlock* next = b->next;
      release(b);
      b = next;
    }
    if (last != nullptr) last->next = nullptr;
    if (last == nullptr) head_ = nullptr;
    tail_ = last;
    cur_ = nullptr;
    bytes_ = keep;
  }
  /// Hands every block to release(b); the chain is then empty (front() stays where it was).
  template <class Release>
  void clear(Release&& release) {
    for (OutBlock* b = head_; b != nullptr;) {
      OutBlock* next = b->next;
      release(b);
      b = next;
    }
    front_ += bytes_;
    head_ = tail_ = cur_ = nullptr;
    bytes_ = 0;
  }

  /// Fills up to `max` iovecs with the live bytes from the front (empty blocks skipped); returns the count.
  unsigned gather(iovec* iov, unsigned max) const {
    unsigned n = 0;
    for (const OutBlock* b = head_; b != nullptr && n < max; b = b->next) {
      if (b->end == b->begin) continue;
      iov[n].iov_base = const_cast<char*>(b->bytes()) + b->begin;
      iov[n].iov_len = b->size();
      ++n;
    }
    return n;
  }
  /// Copies up to `len` bytes from `offset` bytes past the front into dst; returns the count (less at the end).
  size_t copy_out(size_t offset, void* dst, size_t len);
  /// If the `len` bytes at `offset` past the front are contiguous bytes of one shared buffer (in one shared
  /// block, or in consecutive blocks that continue it in memory): the buffer, and *bytes where they start;
  /// else null.
  SharedBuffer* shared_at(size_t offset, size_t len, const char** bytes);

 private:
  OutBlock* head_ = nullptr;
  OutBlock* tail_ = nullptr;
  size_t bytes_ = 0;
  uint64_t front_ = 0;
  /// Where a read at stream position `pos` starts walking: the cursor if `pos` is at or past it, else the
  /// head (non-empty chain); *base gets the stream position of that block's bytes()[0].
  OutBlock* start_for(uint64_t pos, uint64_t* base) const;

  OutBlock* cur_ = nullptr;  // the cursor: the block copy_out / shared_at read last...
  uint64_t cur_base_ = 0;    // ...and the stream position of its bytes()[0]
};

}  // namespace kosoku::net
