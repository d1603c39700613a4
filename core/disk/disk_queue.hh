// Named disk queues: every file open, stat and read of a loop goes through one (the `aio` directive picks the
// queue and the mode). This is kosoku's answer to nginx's `thread_pool` + `aio threads`
// (https://nginx.org/en/docs/ngx_core_module.html#thread_pool), with io_uring as the default engine.
//
// One DiskQueue per (disk_queue NAME, core). Modes (config::AioMode):
//   kIoUring  ops go to the core's io_uring ring (Reactor::sqe). Page-cache hits are served inline first:
//             read = preadv2(RWF_NOWAIT), open = openat2(RESOLVE_CACHED), stat = fstat on the opened fd;
//             only on EAGAIN is the op queued as an SQE. Completion resumes on the same core.
//   kThreads  ops run on a per-core pool of `depth` plain threads; results come back to the loop through an
//             eventfd read in io_uring (same queue semantics, kept for side-by-side comparison).
//   kOff      ops block the loop (the "before" case of nginx's thread-pool benchmark; benchmarks only).
// Queue semantics (all modes): at most `depth` ops in flight; up to `max_queue` more wait in FIFO order;
// beyond that submit() returns kOverflow and logs `disk queue "NAME" overflow: N tasks waiting`
// (rate-limited to one line per second per core); the caller answers 503.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/config/conf.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::disk {

class DiskOp;

/// Receives the completion of a queued DiskOp (never called for ops completed inline or refused).
class DiskCallback {
 public:
  virtual void on_disk_done(DiskOp& op) = 0;

 protected:
  ~DiskCallback() = default;
};

/// One disk operation, owned by the caller and kept alive until completion.
/// Inputs are set by the caller; `result` is set by the queue: >= 0 on success (fd for kOpen, bytes for
/// kRead, 0 for kStat), -errno on failure.
class DiskOp {
 public:
  enum class Kind { kOpen, kStat, kRead, kWrite, kRename, kUnlink, kMkdir };
  Kind kind = Kind::kRead;
  // kOpen: path (NUL-terminated, absolute or relative to the cwd), flags (O_RDONLY|O_CLOEXEC is added);
  //        on success, `st` is also filled (fstat of the new fd).
  // kStat: path → `st` (stat(2) semantics, follows symlinks).
  std::string path;
  int flags = 0;
  // kRead: fd, buf, len (bytes), offset (bytes).
  // kWrite: fd, buf, len, offset: pwrite; result = bytes written (may be short, like pwrite(2)).
  // kRename: path → path2 (rename(2)); kUnlink: path (unlink(2)); kMkdir: path, mode 0700 (mkdir(2)).
  //          Used by the proxy cache (core/cache/) for its temp files, entries and level directories.
  std::string path2;
  int fd = -1;
  char* buf = nullptr;
  uint32_t len = 0;
  uint64_t offset = 0;
  // outputs
  int32_t result = 0;
  struct stat st {};
  DiskCallback* callback = nullptr;
  void* user_data = nullptr;  // the caller's context (e.g. the request this op belongs to); never touched

  // Internal to DiskQueue.
  DiskOp* next_ = nullptr;
  uint64_t submit_ns_ = 0;
  config::AioMode mode_ = config::AioMode::kIoUring;  // engine chosen at submit (waiting ops keep it)
};

/// Where DiskQueue writes its log lines (overflow): level is nginx's (0 emerg .. 7 debug, 3 = error).
/// Default: one line on stderr. Set once at startup, before the loops run (e.g. to forward to base/log).
using DiskLogHook = void (*)(int level, std::string_view msg);
void set_disk_log_hook(DiskLogHook hook);

class DiskQueue {
 public:
  enum class Submit { kDone, kQueued, kOverflow };

  /// stats: this queue's block in the core's CoreStats (must outlive the queue).
  DiskQueue(reactor::Reactor& reactor, const config::DiskQueueConf& conf, stats::DiskQueueStats& stats);
  ~DiskQueue();

  /// kDone: completed inline, `op.result` is set and the callback will not run. kQueued: the callback runs
  /// later on this core. kOverflow: refused (op untouched apart from result = -EAGAIN), logged.
  Submit submit(DiskOp& op, config::AioMode mode);

  const std::string& name() const;

  /// Ops accepted and not yet completed (in flight + waiting). A queue is destroyed only when this is 0
  /// (see the shutdown rule in disk_queue.cc); otherwise the destructor cancels what it can.
  size_t pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kosoku::disk
