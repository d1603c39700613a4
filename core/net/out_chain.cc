#include "core/net/out_chain.hh"

namespace kosoku::net {

namespace {
OutBlock* alloc_block(size_t data_bytes) {
  auto* b = static_cast<OutBlock*>(std::malloc(sizeof(OutBlock) + data_bytes));
  if (b == nullptr) std::abort();
  return b;
}
}  // namespace

OutBlock* OutBlock::make_copied(size_t cap) {
  OutBlock* b = alloc_block(cap);
  *b = OutBlock{nullptr, nullptr, nullptr, static_cast<uint32_t>(cap), 0, 0};
  return b;
}

OutBlock* OutBlock::make_ref(const char* data, size_t len) {
  OutBlock* b = alloc_block(0);
  auto n = static_cast<uint32_t>(len);
  *b = OutBlock{nullptr, data, nullptr, n, 0, n};
  return b;
}

OutBlock* OutBlock::make_shared(SharedBuffer& buf, const char* data, size_t len) {
  OutBlock* b = alloc_block(0);
  auto n = static_cast<uint32_t>(len);
  *b = OutBlock{nullptr, data, &buf, n, 0, n};
  buf.ref();
  return b;
}

OutBlock* OutChain::split_front(uint32_t k) {
  OutBlock* b = head_;
  const char* at = b->bytes() + b->begin;
  OutBlock* part = b->shared != nullptr ? OutBlock::make_shared(*b->shared, at, k) : OutBlock::make_ref(at, k);
  uint32_t cut = b->begin + k;  // the rest starts at bytes 0 again
  b->ref += cut;
  b->cap -= cut;
  b->end -= cut;
  b->begin = 0;
  if (cur_ == b) cur_ = nullptr;
  bytes_ -= k;
  front_ += k;
  return part;
}

OutBlock* OutChain::start_for(uint64_t pos, uint64_t* base) const {
  if (cur_ != nullptr && pos >= cur_base_ + cur_->begin) {
    *base = cur_base_;
    return cur_;
  }
  *base = front_ - head_->begin;  // stream position of head_->bytes()[0]
  return head_;
}

size_t OutChain::copy_out(size_t offset, void* dst, size_t len) {
  if (head_ == nullptr) return 0;
  uint64_t pos = front_ + offset;
  uint64_t base;
  OutBlock* b = start_for(pos, &base);
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (b != nullptr && done < len) {
    uint64_t end = base + b->end;
    if (pos >= end) {
      b = b->next;
      if (b != nullptr) base = end - b->begin;
      continue;
    }
    size_t take = std::min<size_t>(end - pos, len - done);
    std::memcpy(out + done, b->bytes() + (pos - base), take);
    done += take;
    pos += take;
    cur_ = b;
    cur_base_ = base;
  }
  return done;
}

SharedBuffer* OutChain::shared_at(size_t offset, size_t len, const char** bytes) {
  if (head_ == nullptr) return nullptr;
  uint64_t pos = front_ + offset;
  uint64_t base;
  OutBlock* b = start_for(pos, &base);
  while (b != nullptr && pos >= base + b->end) {
    uint64_t end = base + b->end;
    b = b->next;
    if (b != nullptr) base = end - b->begin;
  }
  if (b == nullptr || b->shared == nullptr) return nullptr;
  // The bytes may run on into following blocks that continue the same buffer in memory: the parts split off
  // at a limit (split_front), and the reads core/static placed back to back in one buffer.
  uint64_t last = pos + len;
  const OutBlock* c = b;
  uint64_t c_base = base;
  while (last > c_base + c->end) {
    const OutBlock* n = c->next;
    if (n == nullptr || n->shared != b->shared || n->bytes() + n->begin != c->bytes() + c->end) return nullptr;
    c_base = c_base + c->end - n->begin;
    c = n;
  }
  cur_ = b;
  cur_base_ = base;
  *bytes = b->bytes() + (pos - base);
  return b->shared;
}

}  // namespace kosoku::net
