#include "core/reactor/reactor.hh"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace kosoku::reactor {

namespace {

constexpr unsigned kCqeBatch = 256;
constexpr uint64_t kMaxWaitMs = 1000;

const char kDays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
const char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Tries the fastest setup first and falls back for older kernels: SINGLE_ISSUER + DEFER_TASKRUN (6.1) keep
// completions on this thread; COOP_TASKRUN (5.19) avoids IPIs; SUBMIT_ALL keeps submitting past an error;
// TASKRUN_FLAG (5.19) raises IORING_SQ_TASKRUN while completions wait as task work, so a busy loop can tell
// without a system call whether entering the kernel would reap anything.
int setup_ring(io_uring* ring, unsigned entries) {
  const unsigned flag_sets[] = {
      IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
          IORING_SETUP_CQSIZE,
      IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE,
      IORING_SETUP_CQSIZE,
  };
  int rc = -EINVAL;
  for (unsigned flags : flag_sets) {
    io_uring_params p{};
    p.flags = flags;
    p.cq_entries = entries * 4;
    rc = io_uring_queue_init_params(entries, ring, &p);
    if (rc == 0) return 0;
    if (rc != -EINVAL) break;
  }
  return rc;
}

}  // namespace

// Reads the wake eventfd through the ring, re-arming after each completion.
class Reactor::WakeOp final : public IoOp {
 public:
  explicit WakeOp(Reactor& r) : r_(r) {}
  void complete(int32_t res, uint32_t) override {
    armed_ = false;
    if (res == -ECANCELED) return;
    if (!r_.stopping()) r_.arm_wake();
  }
  uint64_t value = 0;
  bool armed_ = false;

 private:
  Reactor& r_;
};

Reactor::Reactor(int core_id, unsigned ring_entries) : core_id_(core_id) {
  int rc = setup_ring(&ring_, ring_entries);
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_queue_init");
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    int e = errno;
    io_uring_queue_exit(&ring_);
    throw std::system_error(e, std::generic_category(), "eventfd");
  }
  wake_op_ = new WakeOp(*this);
  update_clock();
  timers_.expire(now_ms_);
  arm_wake();
}

Reactor::~Reactor() {
  io_uring_queue_exit(&ring_);  // cancels the pending eventfd read
  close(wake_fd_);
  delete wake_op_;
}

io_uring_sqe* Reactor::sqe(IoOp* op) {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  while (s == nullptr) {
    io_uring_submit(&ring_);
    s = io_uring_get_sqe(&ring_);
  }
  io_uring_sqe_set_data(s, op);
  return s;
}

void Reactor::arm_wake() {
  if (wake_op_->armed_) return;
  io_uring_prep_read(sqe(wake_op_), wake_fd_, &wake_op_->value, sizeof(wake_op_->value), 0);
  wake_op_->armed_ = true;
}

void Reactor::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Reactor::stop() {
  stop_.store(true, std::memory_order_relaxed);
  wake();
}

void Reactor::post(Task* t) {
  if (t->queued_) return;
  t->queued_ = true;
  t->next_task_ = nullptr;
  if (tasks_tail_ != nullptr) {
    tasks_tail_->next_task_ = t;
  } else {
    tasks_head_ = t;
  }
  tasks_tail_ = t;
}

void Reactor::run_tasks() {
  // Run only what is queued now; tasks posted meanwhile run in the next pass (no starvation of I/O).
  Task* t = tasks_head_;
  Task* last = tasks_tail_;
  tasks_head_ = tasks_tail_ = nullptr;
  while (t != nullptr) {
    Task* next = t->next_task_;
    bool was_last = (t == last);
    t->queued_ = false;
    t->next_task_ = nullptr;
    t->run();
    if (was_last) break;
    t = next;
  }
}

void Reactor::update_clock() {
  now_ns_ = clock_.now_ns();
  now_ms_ = now_ns_ / 1000000ull;
  wall_s_ = clock_.wall_s();
  if (wall_s_ != date_s_) {
    date_s_ = wall_s_;
    time_t t = wall_s_;
    tm g;
    gmtime_r(&t, &g);
    snprintf(http_date_, sizeof(http_date_), "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[g.tm_wday], g.tm_mday,
             kMonths[g.tm_mon], g.tm_year + 1900, g.tm_hour, g.tm_min, g.tm_sec);
  }
}

bool Reactor::kernel_has_work() const {
  if (io_uring_sq_ready(&ring_) > 0) return true;
  const unsigned kflags = IO_URING_READ_ONCE(*ring_.sq.kflags);
  if ((kflags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0) return true;
  return now_ns_ - last_enter_ns_ >= kBusyEnterIntervalNs;
}

void Reactor::run() {
  struct Done {
    IoOp* op;
    int32_t res;
    uint32_t flags;
  };
  Done batch[kCqeBatch];
  while (!stopping()) {
    // 1. clock
    update_clock();
    // 2. reap completions (copy first so handlers may submit freely), dispatch
    for (;;) {
      unsigned n = 0;
      unsigned head;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        batch[n++] = Done{static_cast<IoOp*>(io_uring_cqe_get_data(cqe)), cqe->res, cqe->flags};
        if (n == kCqeBatch) break;
      }
      if (n == 0) break;
      io_uring_cq_advance(&ring_, n);
      for (unsigned i = 0; i < n; ++i) {
        if (batch[i].op != nullptr) batch[i].op->complete(batch[i].res, batch[i].flags);
      }
      if (n < kCqeBatch) break;
    }
    bool busy = false;
    for (Poller* p : pollers_) busy |= p->poll();
    // 3. resumed requests and deferred work
    run_tasks();
    // 4. timers
    timers_.expire(now_ms_);
    // 5. submit and wait for a completion or the next deadline
    uint64_t wait_ms = kMaxWaitMs;
    if (tasks_head_ != nullptr || busy) {
      wait_ms = 0;
    } else {
      uint64_t next = timers_.next_deadline();
      if (next != UINT64_MAX) wait_ms = next > now_ms_ ? std::min(next - now_ms_, kMaxWaitMs) : 0;
    }
    if (stopping()) break;
    if (wait_ms == 0) {
      if (kernel_has_work()) {
        // Also runs deferred task work (DEFER_TASKRUN rings post CQEs only when asked).
        io_uring_submit_and_get_events(&ring_);
        last_enter_ns_ = now_ns_;
        ++kernel_enters_;
      }
    } else {
      __kernel_timespec ts{static_cast<long long>(wait_ms / 1000), static_cast<long long>((wait_ms % 1000) * 1000000)};
      io_uring_cqe* cqe = nullptr;
      io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      last_enter_ns_ = now_ns_;
      ++kernel_enters_;
    }
    ++iterations_;
  }
  io_uring_submit(&ring_);
}

}  // namespace kosoku::reactor
