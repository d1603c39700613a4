// Tcb: the send buffer, the TCB's analogue of a kernel socket's SO_SNDBUF (tcb.hh "Send side").
//
// Output lives in two net::OutChains (core/net/out_chain.hh). The send buffer (send_) holds copied and shared
// blocks: every byte from data_seq_ (the first unacknowledged octet, send_.front()) on, sent or not,
// send_.bytes() bytes, normally at most TcpConfig::send_buffer_bytes. It is the retransmission queue; segments
// copy their payload out of it (OutChain::copy_out), or take it by reference when it is contiguous bytes of a
// shared buffer (OutChain::shared_at, zero-copy TX). The waiting queue (wait_) holds, in order after it, what
// the application queued while the send buffer was full: write_ref blocks by reference, committed blocks as
// they are. A shared block
// (write_shared) points into a net::SharedBuffer it holds a reference to: it is taken like a copied block,
// without a copy, except that one crossing the limit is split there (the part taken is a block of its own with
// one more reference), so a 256 KiB file chunk cannot put the send buffer far over a small sndbuf=.
//
// take() runs whenever room appears (write, ACK): write_ref bytes are copied into copied blocks (so the
// caller's buffer is free once its bytes are taken, as after a kernel send()), copied blocks are moved whole
// (the one that crosses the limit overshoots it; the overshoot counts as pending until acknowledged). Hence
// pending_output() = waiting bytes + overshoot, the output is FIFO, and pending bytes are always its tail:
// when pending_output() has dropped by everything written after a block, the block was taken, which is the
// net::Stream contract for write_ref.
//
// Cost: none for shared bytes (the io_uring read's buffer is the retransmission queue; under 2 KiB they are
// copied like write_ref bytes, which is cheaper than a block of their own); one copy of write_ref
// bytes into the buffer (kCopyBlock blocks, 64 KiB; up to 8 acknowledged ones, Tcb::spares_, are
// kept for reuse, so a long transfer does not malloc/free and fault in fresh pages per block; they go with
// the other buffers after kReleaseIdleMs idle or in TIME-WAIT), one copy per segment into the frame. copy_out
// finds its block through the chain's cursor (the block read last), so a multi-MB buffer is not walked from
// the head for every segment.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

namespace {
constexpr size_t kMinBlock = 16 * 1024;   // reserve(): smallest block; the one kept for reuse when idle
// write_shared(): fewer bytes than about a segment are copied (into the block the response head is in) — a
// block and a reference cost more than the copy, and a payload this short is never sent by reference.
constexpr size_t kCopySharedBelow = 2048;
// The send buffer limit: send_buffer_bytes (or the listener's sndbuf=), but never below one block (segments are
// sent only from the send buffer: a limit of 0 would never send anything).
size_t send_limit(uint32_t send_bytes) { return std::max<size_t>(send_bytes, kMinBlock); }
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
  size_t buffered = send_.bytes();
  return wait_.bytes() + (buffered > limit ? buffered - limit : 0);
}

Tcb::OutBlock* Tcb::new_block(size_t cap) {
  if (cap == kCopyBlock) {  // no malloc (and no fresh pages to fault in) per 64 KiB
    if (OutBlock* b = spares_.take()) return b;  // still counted in out_block_bytes_
  }
  OutBlock* b = OutBlock::make_copied(cap);
  out_block_bytes_ += cap;
  update_memory();
  return b;
}

std::span<char> Tcb::reserve(size_t min_bytes) {
  if (fin_queued_ || state_ == TcpState::kClosed) {
    scratch_.resize(std::max(min_bytes, scratch_.size()));
    return {scratch_.data(), scratch_.size()};
  }
  // Behind waiting output the bytes must wait too; otherwise they go straight into the send buffer.
  net::OutChain& chain = wait_.empty() ? send_ : wait_;
  OutBlock* t = chain.writable_tail(min_bytes);
  if (t == nullptr) {
    t = new_block(std::max(min_bytes, kMinBlock));
    chain.push_back(t);
  }
  return {t->data + t->end, t->cap - t->end};
}

void Tcb::commit(size_t n) {
  if (fin_queued_ || state_ == TcpState::kClosed || n == 0) return;
  // Into the send buffer, beyond send_buffer_bytes too: the overshoot shows in pending_output().
  (wait_.empty() ? send_ : wait_).commit(n);
}

void Tcb::write_ref(const char* data, size_t len) {
  if (fin_queued_ || state_ == TcpState::kClosed || len == 0) return;
  size_t limit = send_limit(send_limit_);
  if (wait_.empty() && send_.bytes() < limit) {
    size_t k = std::min(len, limit - send_.bytes());
    copy_in(data, k);
    data += k;
    len -= k;
    if (len == 0) return;
  }
  wait_.push_back(OutBlock::make_ref(data, len));
}

void Tcb::write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
  if (fin_queued_ || state_ == TcpState::kClosed || len == 0) return;
  if (len < kCopySharedBelow && wait_.empty() && send_.bytes() + len <= send_limit(send_limit_)) {
    copy_in(data, len);  // a small file: copied behind the response head, no block of its own
    return;
  }
  out_block_bytes_ += len;
  // In order behind any waiting output; take() moves what fits under the limit into the send buffer now,
  // splitting the block at the limit (the rest waits by reference, counted in pending_output()).
  wait_.push_back(OutBlock::make_shared(buf, data, len));
  take();
  update_memory();
}

void Tcb::free_block(OutBlock* b) {
  if (!b->by_ref()) out_block_bytes_ -= b->cap;  // copied and shared blocks are counted
  OutBlock::destroy(b);
}

void Tcb::flush() { output(); }

void Tcb::copy_in(const char* src, size_t n) {
  send_.copy_in(src, n, [this](size_t left) { return new_block(std::clamp(left, kMinBlock, kCopyBlock)); });
}

size_t Tcb::take() {
  size_t limit = send_limit(send_limit_);
  size_t before = wait_.bytes();
  while (!wait_.empty() && send_.bytes() < limit) {
    OutBlock* b = wait_.head();
    size_t n = b->size();
    size_t room = limit - send_.bytes();
    if (b->shared != nullptr && n > room) {
      // A shared block bigger than the room left: its first part goes in as a block of its own (one more
      // reference to the buffer), the rest stays first in the waiting queue.
      send_.push_back(wait_.split_front(static_cast<uint32_t>(room)));
      break;  // the limit is reached
    }
    if (b->by_ref()) {  // copied as far as the limit allows; the block goes once all of it is taken
      size_t k = std::min(n, room);
      copy_in(b->bytes() + b->begin, k);
      wait_.drop_front(k, [](OutBlock* done) { OutBlock::destroy(done); });
      continue;
    }
    send_.push_back(wait_.pop_front());  // a copied or shared block changes queues as it is
  }
  return before - wait_.bytes();
}

void Tcb::drop_acked(size_t n) {
  send_.drop_front(
      n,
      [this](OutBlock* b) {
        if (!spares_.keep(b)) free_block(b);  // a kept 64 KiB block stays counted until free_spares()
      },
      // The last small copied block stays for reuse (the next response head).
      [](const OutBlock& b) { return b.copied() && b.cap <= kMinBlock; });
  if (out_bytes() == 0) arm_release();  // everything acknowledged: the buffers may go if this lasts
  update_memory();
}

void Tcb::free_spares() {
  out_block_bytes_ -= spares_.size() * kCopyBlock;
  spares_.clear();
}

void Tcb::drop_unsent() {
  wait_.clear([this](OutBlock* b) { free_block(b); });  // never taken: dropped
  size_t buffered = send_.bytes();
  size_t sent = snd_max_ > data_seq_ ? std::min<size_t>(snd_max_ - data_seq_, buffered) : 0;
  size_t keep = std::max(sent, std::min<size_t>(buffered, send_limit(send_limit_)));
  send_.truncate(keep, [this](OutBlock* b) { free_block(b); });  // the head block stays for reuse
  update_memory();
}

}  // namespace kosoku::tcpip
