// Tcb: the send buffer, the TCB's analogue of a kernel socket's SO_SNDBUF (tcb.hh "Send side").
//
// Output lives in two queues of OutBlocks. The send buffer (head_ .. tail_) holds owned and shared blocks: every
// byte from data_seq_ (the first unacknowledged octet) on, sent or not, buffered_ bytes, normally at most
// TcpConfig::send_buffer_bytes. It is the retransmission queue; segments copy their payload out of it
// (copy_out), or take it by reference when it is contiguous bytes of a shared buffer (shared_at, zero-copy TX).
// The waiting queue (wait_head_ .. wait_tail_) holds, in order after it, what the application queued while the
// send buffer was full: write_ref blocks by reference, committed blocks as they are. A shared block
// (write_shared) points into a net::SharedBuffer it holds a reference to: it is taken like an owned block,
// without a copy, except that one crossing the limit is split there (the part taken is a block of its own with
// one more reference), so a 256 KiB file chunk cannot put the send buffer far over a small sndbuf=.
//
// take() runs whenever room appears (write, ACK): write_ref bytes are copied into owned blocks (so the
// caller's buffer is free once its bytes are taken, as after a kernel send()), owned blocks are moved whole
// (the one that crosses the limit overshoots it; the overshoot counts as pending until acknowledged). Hence
// pending_output() = waiting bytes + overshoot, the output is FIFO, and pending bytes are always its tail:
// when pending_output() has dropped by everything written after a block, the block was taken, which is the
// net::Stream contract for write_ref.
//
// Cost: none for shared bytes (the io_uring read's buffer is the retransmission queue; under 2 KiB they are
// copied like write_ref bytes, which is cheaper than a block of their own); one copy of write_ref
// bytes into the buffer (64 KiB blocks; up to kMaxSpare acknowledged ones are
// kept for reuse, so a long transfer does not malloc/free and fault in fresh pages per block; they go with
// the other buffers after kReleaseIdleMs idle or in TIME-WAIT), one copy per segment into the frame. copy_out
// finds its block through a cursor (the block read last), so a multi-MB buffer is not walked from the head
// for every segment.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

namespace {
constexpr size_t kMinBlock = 16 * 1024;   // reserve(): smallest block; the one kept for reuse when idle
constexpr size_t kCopyBlock = 64 * 1024;  // copy_in(): largest block taken write_ref bytes go to
constexpr unsigned kMaxSpare = 8;         // acknowledged kCopyBlock blocks kept for reuse (512 KiB)
// write_shared(): fewer bytes than about a segment are copied (into the block the response head is in) — a
// block and a reference cost more than the copy, and a payload this short is never sent by reference.
constexpr size_t kCopySharedBelow = 2048;
// The send buffer limit: send_buffer_bytes (or the listener's sndbuf=), but never below one block (segments are
// sent only from the send buffer: a limit of 0 would never send anything).
size_t send_limit(uint32_t send_bytes) { return std::max<size_t>(send_bytes, kMinBlock); }

/// Appends `b` to the singly linked queue head .. tail.
template <class Block>
void link_tail(Block*& head, Block*& tail, Block* b) {
  if (tail != nullptr) {
    tail->next = b;
  } else {
    head = b;
  }
  tail = b;
}
}  // namespace

void Tcb::set_buffer_limits(uint32_t recv_bytes, uint32_t send_bytes) {
  recv_limit_ = recv_bytes;
  send_limit_ = send_bytes;
  // The smallest scale that lets the 16-bit window field cover the whole receive buffer (RFC 7323 §2.3).
  rcv_wscale_ = 0;
  while (rcv_wscale_ < 14 && (recv_bytes >> rcv_wscale_) > 65535) ++rcv_wscale_;
}

size_t Tcb::pending_output() const {
  size_t limit = send_limit(send_limit_);
  return wait_bytes_ + (buffered_ > limit ? buffered_ - limit : 0);
}

Tcb::OutBlock* Tcb::new_block(size_t cap) {
  if (cap == kCopyBlock && spare_ != nullptr) {  // no malloc (and no fresh pages to fault in) per 64 KiB
    OutBlock* b = spare_;
    spare_ = b->next;
    --spare_count_;
    *b = OutBlock{nullptr, nullptr, nullptr, static_cast<uint32_t>(cap), 0, 0};
    return b;
  }
  auto* b = static_cast<OutBlock*>(std::malloc(sizeof(OutBlock) + cap));
  if (b == nullptr) std::abort();
  *b = OutBlock{nullptr, nullptr, nullptr, static_cast<uint32_t>(cap), 0, 0};
  out_block_bytes_ += cap;
  update_memory();
  return b;
}

void Tcb::append_block(OutBlock* b) { link_tail(head_, tail_, b); }

void Tcb::append_wait(OutBlock* b) { link_tail(wait_head_, wait_tail_, b); }

std::span<char> Tcb::reserve(size_t min_bytes) {
  if (fin_queued_ || state_ == TcpState::kClosed) {
    scratch_.resize(std::max(min_bytes, scratch_.size()));
    return {scratch_.data(), scratch_.size()};
  }
  // Behind waiting output the bytes must wait too; otherwise they go straight into the send buffer.
  bool waiting = wait_head_ != nullptr;
  OutBlock* t = waiting ? wait_tail_ : tail_;
  if (t == nullptr || t->ref != nullptr || t->cap - t->end < min_bytes) {
    t = new_block(std::max(min_bytes, kMinBlock));
    if (waiting) {
      append_wait(t);
    } else {
      append_block(t);
    }
  }
  return {t->data + t->end, t->cap - t->end};
}

void Tcb::commit(size_t n) {
  if (fin_queued_ || state_ == TcpState::kClosed || n == 0) return;
  if (wait_head_ != nullptr) {
    wait_tail_->end += static_cast<uint32_t>(n);
    wait_bytes_ += n;
  } else {
    tail_->end += static_cast<uint32_t>(n);
    buffered_ += n;  // beyond send_buffer_bytes the overshoot shows in pending_output()
  }
  out_bytes_ += n;
}

void Tcb::write_ref(const char* data, size_t len) {
  if (fin_queued_ || state_ == TcpState::kClosed || len == 0) return;
  out_bytes_ += len;
  size_t limit = send_limit(send_limit_);
  if (wait_head_ == nullptr && buffered_ < limit) {
    size_t k = std::min(len, limit - buffered_);
    copy_in(data, k);
    data += k;
    len -= k;
    if (len == 0) return;
  }
  auto* b = static_cast<OutBlock*>(std::malloc(sizeof(OutBlock)));
  if (b == nullptr) std::abort();
  *b = OutBlock{nullptr, data, nullptr, static_cast<uint32_t>(len), 0, static_cast<uint32_t>(len)};
  append_wait(b);
  wait_bytes_ += len;
}

void Tcb::write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
  if (fin_queued_ || state_ == TcpState::kClosed || len == 0) return;
  if (len < kCopySharedBelow && wait_head_ == nullptr && buffered_ + len <= send_limit(send_limit_)) {
    out_bytes_ += len;  // a small file: copied behind the response head, no block of its own
    copy_in(data, len);
    return;
  }
  auto* b = static_cast<OutBlock*>(std::malloc(sizeof(OutBlock)));
  if (b == nullptr) std::abort();
  *b = OutBlock{nullptr, data, &buf, static_cast<uint32_t>(len), 0, static_cast<uint32_t>(len)};
  buf.ref();
  out_block_bytes_ += len;
  out_bytes_ += len;
  // In order behind any waiting output; take() moves what fits under the limit into the send buffer now,
  // splitting the block at the limit (the rest waits by reference, counted in pending_output()).
  append_wait(b);
  wait_bytes_ += len;
  take();
  update_memory();
}

void Tcb::free_block(OutBlock* b) {
  if (b->shared != nullptr) {
    out_block_bytes_ -= b->cap;
    b->shared->unref();
  } else if (b->ref == nullptr) {
    out_block_bytes_ -= b->cap;
  }
  std::free(b);
}

void Tcb::flush() { output(); }

void Tcb::copy_in(const char* src, size_t n) {
  buffered_ += n;
  while (n > 0) {
    if (tail_ == nullptr || tail_->ref != nullptr || tail_->end == tail_->cap) {
      append_block(new_block(std::clamp(n, kMinBlock, kCopyBlock)));
    }
    size_t k = std::min<size_t>(n, tail_->cap - tail_->end);
    std::memcpy(tail_->data + tail_->end, src, k);
    tail_->end += static_cast<uint32_t>(k);
    src += k;
    n -= k;
  }
}

size_t Tcb::take() {
  size_t limit = send_limit(send_limit_);
  size_t before = wait_bytes_;
  while (wait_head_ != nullptr && buffered_ < limit) {
    OutBlock* b = wait_head_;
    size_t n = b->end - b->begin;
    if (b->shared != nullptr && n > limit - buffered_) {
      // A shared block bigger than the room left: its first part goes in as a block of its own (one more
      // reference to the buffer), the rest stays first in the waiting queue. begin is 0 while waiting.
      uint32_t k = static_cast<uint32_t>(limit - buffered_);
      auto* part = static_cast<OutBlock*>(std::malloc(sizeof(OutBlock)));
      if (part == nullptr) std::abort();
      *part = OutBlock{nullptr, b->ref, b->shared, k, 0, k};
      b->shared->ref();
      b->ref += k;
      b->cap -= k;
      b->end -= k;
      append_block(part);
      buffered_ += k;
      wait_bytes_ -= k;
      break;  // the limit is reached
    }
    size_t k = b->by_ref() ? std::min(n, limit - buffered_) : n;
    if (b->by_ref()) {
      copy_in(b->ref + b->begin, k);
      b->begin += static_cast<uint32_t>(k);
    }
    wait_bytes_ -= k;
    if (b->by_ref() && b->begin != b->end) continue;  // the limit is reached
    wait_head_ = b->next;
    if (wait_head_ == nullptr) wait_tail_ = nullptr;
    b->next = nullptr;
    if (b->by_ref()) {
      std::free(b);
    } else {  // an owned or shared block changes queues as it is
      append_block(b);
      buffered_ += n;
    }
  }
  return before - wait_bytes_;
}

net::SharedBuffer* Tcb::shared_at(size_t offset, size_t len, const uint8_t** bytes) {
  if (head_ == nullptr) return nullptr;
  SeqNum seq = data_seq_ + static_cast<uint32_t>(offset);
  OutBlock* b = head_;
  SeqNum base = data_seq_ - head_->begin;  // sequence number of b->bytes()[0]
  if (cur_block_ != nullptr && seq >= cur_base_ + cur_block_->begin) {
    b = cur_block_;
    base = cur_base_;
  }
  while (b != nullptr && seq >= base + b->end) {
    SeqNum end = base + b->end;
    b = b->next;
    if (b != nullptr) base = end - b->begin;
  }
  if (b == nullptr || b->shared == nullptr) return nullptr;
  // The bytes may run on into following blocks that continue the same buffer in memory: the parts take()
  // split off at the limit, and the reads core/static placed back to back in one buffer.
  SeqNum last = seq + static_cast<uint32_t>(len);
  const OutBlock* c = b;
  SeqNum c_base = base;
  while (last > c_base + c->end) {
    const OutBlock* n = c->next;
    if (n == nullptr || n->shared != b->shared || n->bytes() + n->begin != c->bytes() + c->end) return nullptr;
    c_base = c_base + c->end - n->begin;
    c = n;
  }
  cur_block_ = b;
  cur_base_ = base;
  *bytes = reinterpret_cast<const uint8_t*>(b->bytes()) + static_cast<uint32_t>(seq - base);
  return b->shared;
}

size_t Tcb::copy_out(size_t offset, uint8_t* dst, size_t len) {
  if (head_ == nullptr) return 0;
  SeqNum seq = data_seq_ + static_cast<uint32_t>(offset);
  OutBlock* b = head_;
  SeqNum base = data_seq_ - head_->begin;  // sequence number of b->data[0]
  if (cur_block_ != nullptr && seq >= cur_base_ + cur_block_->begin) {
    b = cur_block_;
    base = cur_base_;
  }
  size_t done = 0;
  while (b != nullptr && done < len) {
    SeqNum end = base + b->end;
    if (seq >= end) {
      b = b->next;
      if (b != nullptr) base = end - b->begin;
      continue;
    }
    size_t take = std::min<size_t>(static_cast<uint32_t>(end - seq), len - done);
    std::memcpy(dst + done, b->bytes() + static_cast<uint32_t>(seq - base), take);
    done += take;
    seq += static_cast<uint32_t>(take);
    cur_block_ = b;
    cur_base_ = base;
  }
  return done;
}

void Tcb::drop_acked(size_t n) {
  out_bytes_ -= n;
  buffered_ -= n;
  while (n > 0 && head_ != nullptr) {
    size_t avail = head_->end - head_->begin;
    size_t take = std::min(n, avail);
    head_->begin += static_cast<uint32_t>(take);
    n -= take;
    if (head_->begin == head_->end) {
      if (head_ == cur_block_) cur_block_ = nullptr;
      if (head_ == tail_ && head_->ref == nullptr && head_->cap <= kMinBlock) {
        head_->begin = head_->end = 0;  // keep the last small block for reuse (the next response head)
        break;
      }
      if (head_ == tail_) tail_ = nullptr;
      OutBlock* next = head_->next;
      if (head_->ref == nullptr && head_->cap == kCopyBlock && spare_count_ < kMaxSpare) {
        head_->next = spare_;  // stays counted in out_block_bytes_ until free_spares()
        spare_ = head_;
        ++spare_count_;
      } else {
        free_block(head_);
      }
      head_ = next;
    }
  }
  if (out_bytes_ == 0) arm_release();  // everything acknowledged: the buffers may go if this lasts
  update_memory();
}

void Tcb::free_spares() {
  while (spare_ != nullptr) {
    OutBlock* next = spare_->next;
    out_block_bytes_ -= spare_->cap;
    std::free(spare_);
    spare_ = next;
  }
  spare_count_ = 0;
}

void Tcb::drop_unsent() {
  for (OutBlock* b = wait_head_; b != nullptr;) {  // never taken: dropped
    OutBlock* next = b->next;
    free_block(b);
    b = next;
  }
  wait_head_ = wait_tail_ = nullptr;
  wait_bytes_ = 0;
  size_t sent = snd_max_ > data_seq_ ? std::min<size_t>(snd_max_ - data_seq_, buffered_) : 0;
  size_t keep = std::max(sent, std::min<size_t>(buffered_, send_limit(send_limit_)));
  size_t seen = 0;
  OutBlock* last = nullptr;
  for (OutBlock* b = head_; b != nullptr;) {
    size_t n = b->end - b->begin;
    if (seen < keep || (b == head_ && keep == 0)) {  // kept (the head block stays for reuse)
      if (seen + n > keep) b->end = b->begin + static_cast<uint32_t>(keep - seen);
      seen += b->end - b->begin;
      last = b;
      b = b->next;
      continue;
    }
    OutBlock* next = b->next;
    free_block(b);
    b = next;
  }
  if (last != nullptr) last->next = nullptr;
  head_ = last != nullptr ? head_ : nullptr;
  tail_ = last;
  cur_block_ = nullptr;
  buffered_ = out_bytes_ = keep;
  update_memory();
}

}  // namespace kosoku::tcpip
