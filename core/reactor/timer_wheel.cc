#include "core/reactor/timer_wheel.hh"

#include <cassert>

namespace kosoku::reactor {

Timer::~Timer() {
  if (wheel_ != nullptr) wheel_->cancel(*this);
}

TimerWheel::TimerWheel(unsigned slots) : slots_(slots, nullptr), mask_(slots - 1) {
  assert((slots & (slots - 1)) == 0);
}

TimerWheel::~TimerWheel() {
  for (Timer*& head : slots_) {
    while (head != nullptr) {
      Timer* t = head;
      head = t->next_;
      t->wheel_ = nullptr;
      t->prev_ = t->next_ = nullptr;
    }
  }
}

void TimerWheel::arm(Timer& t, uint64_t deadline_ms) {
  if (t.wheel_ != nullptr) unlink(t);
  // A deadline in the past fires at the next expire().
  if (deadline_ms <= current_) deadline_ms = current_ + 1;
  t.deadline_ = deadline_ms;
  t.wheel_ = this;
  Timer*& head = slots_[deadline_ms & mask_];
  t.prev_ = nullptr;
  t.next_ = head;
  if (head != nullptr) head->prev_ = &t;
  head = &t;
  ++count_;
  if (deadline_ms < min_deadline_) min_deadline_ = deadline_ms;
}

void TimerWheel::unlink(Timer& t) {
  if (t.prev_ != nullptr) {
    t.prev_->next_ = t.next_;
  } else {
    slots_[t.deadline_ & mask_] = t.next_;
  }
  if (t.next_ != nullptr) t.next_->prev_ = t.prev_;
  t.prev_ = t.next_ = nullptr;
  t.wheel_ = nullptr;
  --count_;
}

void TimerWheel::cancel(Timer& t) {
  if (t.wheel_ == this) unlink(t);
}

unsigned TimerWheel::expire(uint64_t now_ms) {
  if (current_ == 0) current_ = now_ms > 0 ? now_ms - 1 : 0;
  unsigned fired = 0;
  if (count_ == 0) {
    current_ = now_ms;
    min_deadline_ = UINT64_MAX;
    return 0;
  }
  if (now_ms < min_deadline_) {
    // Nothing can be due: jump the cursor (slots between hold only later deadlines).
    if (now_ms > current_) current_ = now_ms;
    return 0;
  }
  // Walk every tick from current_+1 to now_ms, but never more than one revolution.
  uint64_t from = current_ + 1;
  if (now_ms >= from + slots_.size()) from = now_ms - slots_.size() + 1;
  uint64_t next_min = UINT64_MAX;
  for (uint64_t tick = from; tick <= now_ms; ++tick) {
    // fire() may cancel, re-arm or destroy any timer, so rescan the slot from its head after each firing.
    bool again = true;
    while (again) {
      again = false;
      for (Timer* t = slots_[tick & mask_]; t != nullptr; t = t->next_) {
        if (t->deadline_ <= now_ms) {
          unlink(*t);
          ++fired;
          current_ = tick;  // timers armed from fire() land strictly after this tick
          t->fire();
          again = true;
          break;
        }
      }
    }
  }
  current_ = now_ms;
  // Recompute the minimum lazily: scan only when something is left (bounded by slot count).
  if (count_ > 0) {
    for (uint64_t i = 1; i <= slots_.size(); ++i) {
      for (Timer* t = slots_[(now_ms + i) & mask_]; t != nullptr; t = t->next_) {
        if (t->deadline_ < next_min) next_min = t->deadline_;
      }
      if (next_min != UINT64_MAX && next_min <= now_ms + i) break;
    }
  }
  min_deadline_ = next_min;
  return fired;
}

uint64_t TimerWheel::next_deadline() const { return count_ == 0 ? UINT64_MAX : min_deadline_; }

}  // namespace kosoku::reactor
