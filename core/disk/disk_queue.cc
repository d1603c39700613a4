// DiskQueue: one named disk queue on one core (contract and modes: disk_queue.hh).
//
// Choices made here:
// - Inline first (aio io_uring). A read tries preadv2(RWF_NOWAIT) before anything else, so a page-cache hit
//   completes inside submit() and never waits for a loop iteration. A SHORT inline read is returned as it is
//   (kDone, result < len): POSIX read semantics, and the caller submits the rest (which again goes inline or,
//   on EAGAIN, is queued). Telling "end of file" from "the rest is not cached" would cost an fstat per read.
//   EAGAIN (not cached) and EOPNOTSUPP (a filesystem without nowait reads) queue an IORING_OP_READ.
//   An open tries openat2(RESOLVE_CACHED) (path walk only through cached dentries, Linux 5.12), then fstat
//   on the new fd to fill `st` (no path walk, the inode is in memory); EAGAIN queues IORING_OP_OPENAT2
//   followed by the same fstat at completion. O_CREAT/O_TRUNC/O_TMPFILE opens go straight to the queue
//   (RESOLVE_CACHED refuses them). An open of a FIFO or device without O_NONBLOCK can still block inline
//   (RESOLVE_CACHED covers only the path walk): callers that may meet such files pass O_NONBLOCK, as
//   OpenFileCache does (nginx: NGX_FILE_NONBLOCK).
//   Writes (the proxy cache's) try pwritev2(RWF_NOWAIT) inline the same way; rename, unlink and mkdir are
//   always queued (IORING_OP_RENAMEAT / UNLINKAT / MKDIRAT, Linux 5.11 / 5.15).
//   A stat has no inline variant (statx has no "cached only" flag): it is always queued as IORING_OP_STATX
//   with AT_STATX_DONT_SYNC (no forced revalidation on network filesystems).
//   Inline hits do not take a depth slot and are served even when the queue is full.
// - Depth: at most conf.depth ops are in the kernel / the pool at once (shared by io_uring and threads ops
//   of this queue); the rest wait in one FIFO (intrusive, through DiskOp::next_, no allocation), up to
//   conf.max_queue; beyond that submit() returns kOverflow. In-flight io_uring ops each use a Slot (the
//   IoOp whose address is the SQE's user_data, plus the statx buffer), allocated on first need and reused.
// - aio threads: a pool of up to `depth` threads per (queue, core), started lazily (one more whenever an op
//   is handed over and no started thread is idle). Ops are handed over through a mutex + condvar list and
//   come back through a second list and an eventfd, which the loop reads with an IORING_OP_READ that is
//   armed only while pool ops are outstanding; callbacks run on the loop thread. Pool threads block all
//   signals and never touch the ring (SINGLE_ISSUER rings stay single-issuer).
// - Latency: submit → completion of queued ops, measured with CLOCK_MONOTONIC (the loop's coarse clock
//   would round to iterations), recorded in stats.latency. Inline ops only count in stats.inline_done.
// - Overflow log: `disk queue "NAME" overflow: N tasks waiting`, at most one line per second per queue per
//   core (each queue instance belongs to one core), at level error (nginx logs its thread-pool overflow at
//   NGX_LOG_ERR), through the DiskLogHook.
//
// Shutdown rule: destroy a DiskQueue on its loop thread, before its Reactor, after the owner stopped
// submitting and ran the loop until pending() == 0 (main drains the queues before it stops the loops).
// If ops are still pending anyway, the destructor never calls their callbacks and never lets a late
// completion touch freed memory: waiting ops are dropped (result = -ECANCELED); pool threads finish the op
// they are running and are joined (an op blocked forever, e.g. the open of a FIFO without a writer, blocks
// the join); fds opened by undelivered opens are closed; in-flight SQEs get an IORING_OP_ASYNC_CANCEL and
// the queue's internal state is kept alive ("orphaned") until their CQEs arrive, then freed by the last
// one. The kernel may still write into the `buf` of an orphaned read until its CQE, which is why the drain
// comes first: callers keep read buffers alive until completion.
#include "core/disk/disk_queue.hh"

#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kosoku::disk {

namespace {

constexpr int kLogError = 3;  // nginx NGX_LOG_ERR, 0-based as in conf.hh
constexpr uint64_t kOverflowLogIntervalMs = 1000;

void default_log(int level, std::string_view msg) {
  static const char* const kNames[] = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"};
  const char* name = (level >= 0 && level <= 7) ? kNames[level] : "error";
  fprintf(stderr, "[%s] %.*s\n", name, static_cast<int>(msg.size()), msg.data());
}

std::atomic<DiskLogHook> g_log_hook{&default_log};

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// openat2 without RESOLVE_CACHED support (ENOSYS: kernel < 5.6) disables the inline open attempt for good.
std::atomic<bool> g_no_openat2{false};

int open_flags(const DiskOp& op) { return op.flags | O_RDONLY | O_CLOEXEC; }

// The kernel API needs a mode with O_CREAT/O_TMPFILE (kosoku only reads; the umask applies).
mode_t open_mode(int flags) {
  return ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) ? 0644 : 0;
}

bool refuses_resolve_cached(int flags) {
  return (flags & (O_CREAT | O_TRUNC)) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

// Fills op.st from the fd just opened; on failure closes it and returns -errno.
int32_t finish_open(DiskOp& op, int fd) {
  if (fstat(fd, &op.st) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

void stat_from_statx(const struct statx& x, struct stat& st) {
  st = {};
  st.st_dev = makedev(x.stx_dev_major, x.stx_dev_minor);
  st.st_ino = x.stx_ino;
  st.st_mode = x.stx_mode;
  st.st_nlink = x.stx_nlink;
  st.st_uid = x.stx_uid;
  st.st_gid = x.stx_gid;
  st.st_rdev = makedev(x.stx_rdev_major, x.stx_rdev_minor);
  st.st_size = static_cast<off_t>(x.stx_size);
  st.st_blksize = static_cast<blksize_t>(x.stx_blksize);
  st.st_blocks = static_cast<blkcnt_t>(x.stx_blocks);
  st.st_atim = {static_cast<time_t>(x.stx_atime.tv_sec), static_cast<long>(x.stx_atime.tv_nsec)};
  st.st_mtim = {static_cast<time_t>(x.stx_mtime.tv_sec), static_cast<long>(x.stx_mtime.tv_nsec)};
  st.st_ctim = {static_cast<time_t>(x.stx_ctime.tv_sec), static_cast<long>(x.stx_ctime.tv_nsec)};
}

// Makes a blocking call, again while it fails with EINTR; returns its result (>= 0) or -errno.
template <typename Call>
int64_t without_eintr(Call call) {
  for (;;) {
    const int64_t r = call();
    if (r >= 0) return r;
    if (errno != EINTR) return -errno;
  }
}

// The blocking implementation (aio off, and the pool threads of aio threads).
void run_blocking(DiskOp& op) {
  const auto offset = static_cast<off_t>(op.offset);
  switch (op.kind) {
    case DiskOp::Kind::kRead:
      op.result = static_cast<int32_t>(without_eintr([&] { return pread(op.fd, op.buf, op.len, offset); }));
      break;
    case DiskOp::Kind::kOpen: {
      const int flags = open_flags(op);
      const int64_t fd = without_eintr([&] { return openat(AT_FDCWD, op.path.c_str(), flags, open_mode(flags)); });
      op.result = fd >= 0 ? finish_open(op, static_cast<int>(fd)) : static_cast<int32_t>(fd);
      break;
    }
    case DiskOp::Kind::kStat:
      op.result = stat(op.path.c_str(), &op.st) == 0 ? 0 : -errno;
      break;
    case DiskOp::Kind::kWrite:
      op.result = static_cast<int32_t>(without_eintr([&] { return pwrite(op.fd, op.buf, op.len, offset); }));
      break;
    case DiskOp::Kind::kRename:
      op.result = rename(op.path.c_str(), op.path2.c_str()) == 0 ? 0 : -errno;
      break;
    case DiskOp::Kind::kUnlink:
      op.result = unlink(op.path.c_str()) == 0 ? 0 : -errno;
      break;
    case DiskOp::Kind::kMkdir:
      op.result = mkdir(op.path.c_str(), 0700) == 0 ? 0 : -errno;
      break;
  }
}

// A read or write (`rw`: preadv2 or pwritev2) with RWF_NOWAIT. Returns true if op.result is final; false on
// EAGAIN (it would wait for the disk), EOPNOTSUPP (no nowait I/O on this filesystem) or EINTR: queue it.
bool try_nowait_io(DiskOp& op, ssize_t (*rw)(int, const iovec*, int, off_t, int)) {
  if (op.len == 0) {
    op.result = 0;
    return true;
  }
  iovec iov{op.buf, op.len};
  ssize_t n = rw(op.fd, &iov, 1, static_cast<off_t>(op.offset), RWF_NOWAIT);
  if (n >= 0) {
    op.result = static_cast<int32_t>(n);
    return true;
  }
  if (errno == EAGAIN || errno == EOPNOTSUPP || errno == EINTR) return false;
  op.result = -errno;
  return true;
}

// Tries the op without waiting (aio io_uring). Returns true if op.result is final.
bool try_inline(DiskOp& op) {
  switch (op.kind) {
    case DiskOp::Kind::kRead:
      return try_nowait_io(op, &preadv2);  // a page-cache hit completes here
    case DiskOp::Kind::kOpen: {
      int flags = open_flags(op);
      if (refuses_resolve_cached(flags) || g_no_openat2.load(std::memory_order_relaxed)) return false;
      open_how how{};
      how.flags = static_cast<uint64_t>(flags);
      how.resolve = RESOLVE_CACHED;
      long fd = syscall(SYS_openat2, AT_FDCWD, op.path.c_str(), &how, sizeof(how));
      if (fd >= 0) {
        op.result = finish_open(op, static_cast<int>(fd));
        return true;
      }
      if (errno == ENOSYS) g_no_openat2.store(true, std::memory_order_relaxed);
      // EAGAIN: a dentry is not cached. EINVAL: RESOLVE_CACHED unknown (< 5.12) or flags openat2 refuses;
      // the queued open gives the definitive answer.
      if (errno == EAGAIN || errno == ENOSYS || errno == EINVAL || errno == EINTR) return false;
      op.result = -errno;
      return true;
    }
    case DiskOp::Kind::kWrite:
      // A buffered write that only dirties page-cache pages completes inline; one that would block on
      // writeback or a block allocation (EAGAIN) is queued.
      return try_nowait_io(op, &pwritev2);
    case DiskOp::Kind::kStat:
    case DiskOp::Kind::kRename:
    case DiskOp::Kind::kUnlink:
    case DiskOp::Kind::kMkdir:
      return false;  // path operations have no "cached only" variant: always queued
  }
  return false;
}

// CQE target for our ASYNC_CANCEL requests (static storage: always valid).
class NoopOp final : public reactor::IoOp {
 public:
  void complete(int32_t, uint32_t) override {}
};
NoopOp g_noop_op;

}  // namespace

void set_disk_log_hook(DiskLogHook hook) {
  g_log_hook.store(hook != nullptr ? hook : &default_log, std::memory_order_relaxed);
}

struct DiskQueue::Impl {
  // One in-flight io_uring op.
  struct Slot final : reactor::IoOp {
    Impl* q = nullptr;
    DiskOp* op = nullptr;
    DiskOp::Kind kind = DiskOp::Kind::kRead;
    Slot* next_free = nullptr;
    bool busy = false;
    open_how how{};
    struct statx stx {};
    void complete(int32_t res, uint32_t) override { q->ring_done(*this, res); }
  };
  // The eventfd read that brings pool results back to the loop.
  struct EventOp final : reactor::IoOp {
    Impl* q = nullptr;
    uint64_t value = 0;
    void complete(int32_t res, uint32_t) override { q->event_done(res); }
  };

  Impl(reactor::Reactor& r, const config::DiskQueueConf& c, stats::DiskQueueStats& s)
      : reactor(r), conf(c), stats(s), depth(c.depth > 0 ? c.depth : 1) {
    event_op.q = this;
  }

  reactor::Reactor& reactor;
  config::DiskQueueConf conf;
  stats::DiskQueueStats& stats;
  uint32_t depth;

  uint32_t in_flight = 0;  // io_uring + pool
  uint32_t waiting = 0;
  DiskOp* wait_head = nullptr;
  DiskOp* wait_tail = nullptr;

  std::vector<std::unique_ptr<Slot>> slots;
  Slot* free_slots = nullptr;
  uint32_t kernel_refs = 0;  // SQEs of ours whose CQE has not arrived (slots + event_op)
  bool orphaned = false;

  bool logged_overflow = false;
  uint64_t last_overflow_log_ms = 0;

  // aio threads
  std::mutex mu;
  std::condition_variable cv;
  DiskOp* todo_head = nullptr;  // guarded by mu
  DiskOp* todo_tail = nullptr;
  DiskOp* done_head = nullptr;  // guarded by mu
  DiskOp* done_tail = nullptr;
  uint32_t todo_count = 0;      // guarded by mu
  uint32_t sleeping = 0;        // guarded by mu: threads waiting for work
  bool stop_threads = false;    // guarded by mu
  std::vector<std::thread> threads;  // loop thread only
  uint32_t pool_in_flight = 0;  // loop thread only: handed over, not yet delivered
  int event_fd = -1;
  bool event_armed = false;
  EventOp event_op;

  Submit submit(DiskOp& op, config::AioMode mode);
  void start(DiskOp& op);
  void finish(DiskOp& op);
  void pump();
  void ring_done(Slot& s, int32_t res);
  void arm_event();
  void event_done(int32_t res);
  bool start_thread();
  void worker();
  void log_overflow();
  void shutdown();
};

DiskQueue::Submit DiskQueue::Impl::submit(DiskOp& op, config::AioMode mode) {
  bool done = false;
  if (mode == config::AioMode::kOff) {
    run_blocking(op);
    done = true;
  } else if (mode == config::AioMode::kIoUring) {
    done = try_inline(op);
  }
  if (done) {
    ++stats.submitted;
    ++stats.inline_done;
    if (op.result < 0) ++stats.errors;
    return Submit::kDone;
  }
  op.mode_ = mode;
  op.next_ = nullptr;
  if (in_flight >= depth) {
    if (waiting >= conf.max_queue) {
      op.result = -EAGAIN;
      ++stats.overflows;
      log_overflow();
      return Submit::kOverflow;
    }
    op.submit_ns_ = mono_ns();
    if (wait_tail != nullptr) {
      wait_tail->next_ = &op;
    } else {
      wait_head = &op;
    }
    wait_tail = &op;
    stats.waiting = ++waiting;
    ++stats.submitted;
    return Submit::kQueued;
  }
  op.submit_ns_ = mono_ns();
  ++stats.submitted;
  start(op);
  return Submit::kQueued;
}

void DiskQueue::Impl::log_overflow() {
  uint64_t now = reactor.now_ms();
  if (logged_overflow && now - last_overflow_log_ms < kOverflowLogIntervalMs) return;
  logged_overflow = true;
  last_overflow_log_ms = now;
  std::string line = absl::StrCat("disk queue \"", conf.name, "\" overflow: ", waiting, " tasks waiting");
  g_log_hook.load(std::memory_order_relaxed)(kLogError, line);
}

void DiskQueue::Impl::start(DiskOp& op) {
  stats.in_flight = ++in_flight;
  if (op.mode_ == config::AioMode::kThreads) {
    bool need_thread;
    {
      std::lock_guard<std::mutex> lk(mu);
      op.next_ = nullptr;
      if (todo_tail != nullptr) {
        todo_tail->next_ = &op;
      } else {
        todo_head = &op;
      }
      todo_tail = &op;
      ++todo_count;
      need_thread = todo_count > sleeping && threads.size() < depth;
    }
    ++pool_in_flight;
    if (!need_thread || !start_thread()) cv.notify_one();
    arm_event();
    return;
  }
  Slot* s = free_slots;
  if (s != nullptr) {
    free_slots = s->next_free;
  } else {
    slots.push_back(std::make_unique<Slot>());
    s = slots.back().get();
    s->q = this;
  }
  s->busy = true;
  s->op = &op;
  s->kind = op.kind;
  io_uring_sqe* sqe = reactor.sqe(s);
  switch (op.kind) {
    case DiskOp::Kind::kRead:
      io_uring_prep_read(sqe, op.fd, op.buf, op.len, op.offset);
      break;
    case DiskOp::Kind::kOpen:
      s->how = {};
      s->how.flags = static_cast<uint64_t>(open_flags(op));
      s->how.mode = open_mode(open_flags(op));
      io_uring_prep_openat2(sqe, AT_FDCWD, op.path.c_str(), &s->how);
      break;
    case DiskOp::Kind::kStat:
      io_uring_prep_statx(sqe, AT_FDCWD, op.path.c_str(), AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &s->stx);
      break;
    case DiskOp::Kind::kWrite:
      io_uring_prep_write(sqe, op.fd, op.buf, op.len, op.offset);
      break;
    case DiskOp::Kind::kRename:
      io_uring_prep_renameat(sqe, AT_FDCWD, op.path.c_str(), AT_FDCWD, op.path2.c_str(), 0);
      break;
    case DiskOp::Kind::kUnlink:
      io_uring_prep_unlinkat(sqe, AT_FDCWD, op.path.c_str(), 0);
      break;
    case DiskOp::Kind::kMkdir:
      io_uring_prep_mkdirat(sqe, AT_FDCWD, op.path.c_str(), 0700);
      break;
  }
  ++kernel_refs;
}

void DiskQueue::Impl::ring_done(Slot& s, int32_t res) {
  --kernel_refs;
  s.busy = false;
  DiskOp* op = s.op;
  s.op = nullptr;
  s.next_free = free_slots;
  free_slots = &s;
  if (orphaned) {
    // The op may be gone: only release what the kernel gave us.
    if (s.kind == DiskOp::Kind::kOpen && res >= 0) close(res);
    if (kernel_refs == 0) delete this;
    return;
  }
  switch (s.kind) {
    case DiskOp::Kind::kRead:
      op->result = res;
      break;
    case DiskOp::Kind::kOpen:
      op->result = res >= 0 ? finish_open(*op, res) : res;
      break;
    case DiskOp::Kind::kStat:
      if (res == 0) stat_from_statx(s.stx, op->st);
      op->result = res;
      break;
    case DiskOp::Kind::kWrite:
    case DiskOp::Kind::kRename:
    case DiskOp::Kind::kUnlink:
    case DiskOp::Kind::kMkdir:
      op->result = res;
      break;
  }
  finish(*op);
}

void DiskQueue::Impl::finish(DiskOp& op) {
  stats.in_flight = --in_flight;
  ++stats.completed;
  if (op.result < 0) ++stats.errors;
  stats.latency.record_ns(mono_ns() - op.submit_ns_);
  pump();  // waiting ops go first: a callback that submits again queues behind them
  if (op.callback != nullptr) op.callback->on_disk_done(op);
}

void DiskQueue::Impl::pump() {
  while (in_flight < depth && wait_head != nullptr) {
    DiskOp* op = wait_head;
    wait_head = op->next_;
    if (wait_head == nullptr) wait_tail = nullptr;
    op->next_ = nullptr;
    stats.waiting = --waiting;
    start(*op);
  }
}

void DiskQueue::Impl::arm_event() {
  if (event_armed) return;
  io_uring_prep_read(reactor.sqe(&event_op), event_fd, &event_op.value, sizeof(event_op.value), 0);
  event_armed = true;
  ++kernel_refs;
}

void DiskQueue::Impl::event_done(int32_t res) {
  --kernel_refs;
  event_armed = false;
  if (orphaned) {
    if (kernel_refs == 0) delete this;
    return;
  }
  DiskOp* list;
  {
    std::lock_guard<std::mutex> lk(mu);
    list = done_head;
    done_head = done_tail = nullptr;
  }
  while (list != nullptr) {
    DiskOp* op = list;
    list = op->next_;
    op->next_ = nullptr;
    --pool_in_flight;
    finish(*op);  // may start more pool ops (and arm the read again)
  }
  if (pool_in_flight > 0) arm_event();
}

bool DiskQueue::Impl::start_thread() {
  if (event_fd < 0) {
    event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd < 0) abort();  // EMFILE/ENOMEM at the first aio threads op: no way to deliver results
  }
  // Threads inherit the signal mask: block everything while creating one so signals stay with the loops.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool ok = true;
  try {
    threads.emplace_back([this] { worker(); });
  } catch (const std::system_error&) {
    ok = false;  // EAGAIN (thread limit): the threads already started take the op
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!ok) {
    if (threads.empty()) abort();  // no thread at all would leave the op waiting forever
    return false;
  }
  std::string tname = absl::StrCat("disk-", conf.name).substr(0, 15);
  pthread_setname_np(threads.back().native_handle(), tname.c_str());
  return true;
}

void DiskQueue::Impl::worker() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    while (!stop_threads && todo_head == nullptr) {
      ++sleeping;
      cv.wait(lk);
      --sleeping;
    }
    if (stop_threads) return;
    DiskOp* op = todo_head;
    todo_head = op->next_;
    if (todo_head == nullptr) todo_tail = nullptr;
    --todo_count;
    lk.unlock();
    op->next_ = nullptr;
    run_blocking(*op);
    lk.lock();
    if (done_tail != nullptr) {
      done_tail->next_ = op;
    } else {
      done_head = op;
    }
    done_tail = op;
    lk.unlock();
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd, &one, sizeof(one));
    lk.lock();
  }
}

void DiskQueue::Impl::shutdown() {
  for (DiskOp* op = wait_head; op != nullptr;) {
    DiskOp* next = op->next_;
    op->next_ = nullptr;
    op->result = -ECANCELED;
    op = next;
  }
  wait_head = wait_tail = nullptr;
  waiting = 0;
  if (!threads.empty()) {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop_threads = true;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
    // Never started, or done but not delivered: no callback will run; do not leak the fds.
    for (DiskOp* op = todo_head; op != nullptr;) {
      DiskOp* next = op->next_;
      op->next_ = nullptr;
      op->result = -ECANCELED;
      op = next;
    }
    for (DiskOp* op = done_head; op != nullptr;) {
      DiskOp* next = op->next_;
      op->next_ = nullptr;
      if (op->kind == DiskOp::Kind::kOpen && op->result >= 0) close(op->result);
      op->result = -ECANCELED;
      op = next;
    }
    todo_head = todo_tail = done_head = done_tail = nullptr;
  }
  stats.in_flight = 0;
  stats.waiting = 0;
  if (kernel_refs > 0) {
    for (auto& s : slots) {
      if (s->busy) io_uring_prep_cancel(reactor.sqe(&g_noop_op), s.get(), 0);
    }
    if (event_armed) io_uring_prep_cancel(reactor.sqe(&g_noop_op), &event_op, 0);
    io_uring_submit(reactor.ring());
    orphaned = true;  // freed by the last CQE (ring_done / event_done)
  }
  if (event_fd >= 0) close(event_fd);  // an armed read keeps its own reference to the file
  event_fd = -1;
}

DiskQueue::DiskQueue(reactor::Reactor& reactor, const config::DiskQueueConf& conf, stats::DiskQueueStats& stats)
    : impl_(std::make_unique<Impl>(reactor, conf, stats)) {
  if (stats.name.empty()) stats.name = conf.name;
}

DiskQueue::~DiskQueue() {
  Impl* q = impl_.release();
  q->shutdown();
  if (!q->orphaned) delete q;
}

DiskQueue::Submit DiskQueue::submit(DiskOp& op, config::AioMode mode) { return impl_->submit(op, mode); }

const std::string& DiskQueue::name() const { return impl_->conf.name; }

size_t DiskQueue::pending() const { return impl_->in_flight + impl_->waiting; }

}  // namespace kosoku::disk
