// DiskQueue on a real Reactor with real files (core/disk/disk_queue.hh).
#include "core/disk/disk_queue.hh"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::disk {
namespace {

using config::AioMode;
using testing::LoopScript;
using testing::TempDir;
using testing::pattern_bytes;

struct CountingCallback final : DiskCallback {
  int done = 0;
  std::vector<DiskOp*> order;
  void on_disk_done(DiskOp& op) override {
    ++done;
    order.push_back(&op);
  }
};

std::vector<std::string>* g_log_lines = nullptr;
void capture_log(int level, std::string_view msg) {
  if (g_log_lines != nullptr) g_log_lines->emplace_back(msg);
}

class DiskQueueTest : public ::testing::Test {
 protected:
  void make_queue(uint32_t depth, uint32_t max_queue, const char* name = "default") {
    conf_.name = name;
    conf_.depth = depth;
    conf_.max_queue = max_queue;
    queue_ = std::make_unique<DiskQueue>(reactor_, conf_, stats_);
  }
  void TearDown() override {
    queue_.reset();
    set_disk_log_hook(nullptr);
    g_log_lines = nullptr;
  }

  reactor::Reactor reactor_{0, 64};
  config::DiskQueueConf conf_;
  stats::DiskQueueStats stats_;
  std::unique_ptr<DiskQueue> queue_;
  TempDir dir_;
};

// True if the first page of the file at fd is in the page cache (mincore never faults pages in).
bool page_resident(int fd, size_t len) {
  void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return true;
  unsigned char vec[1] = {0};
  int rc = mincore(p, 4096, vec);
  munmap(p, len);
  return rc != 0 || (vec[0] & 1) != 0;
}

TEST_F(DiskQueueTest, InlineReadOfCachedPageIsCountedInline) {
  make_queue(4, 16);
  std::string data = pattern_bytes(64 * 1024);
  std::string path = dir_.write("hot.bin", data);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string buf(4096, '\0');
  DiskOp op;
  op.kind = DiskOp::Kind::kRead;
  op.fd = fd;
  op.buf = buf.data();
  op.len = 4096;
  op.offset = 8192;
  CountingCallback cb;
  op.callback = &cb;
  // Just written: the pages are in the page cache, so preadv2(RWF_NOWAIT) serves it inside submit().
  ASSERT_EQ(queue_->submit(op, AioMode::kIoUring), DiskQueue::Submit::kDone);
  EXPECT_EQ(op.result, 4096);
  EXPECT_EQ(buf, data.substr(8192, 4096));
  EXPECT_EQ(stats_.submitted, 1u);
  EXPECT_EQ(stats_.inline_done, 1u);
  EXPECT_EQ(stats_.completed, 0u);
  EXPECT_EQ(stats_.latency.count, 0u);
  EXPECT_EQ(cb.done, 0);
  EXPECT_EQ(queue_->pending(), 0u);

  // A read crossing the end of file is short, still inline; at the end it returns 0.
  op.offset = data.size() - 100;
  ASSERT_EQ(queue_->submit(op, AioMode::kIoUring), DiskQueue::Submit::kDone);
  EXPECT_EQ(op.result, 100);
  EXPECT_EQ(buf.substr(0, 100), data.substr(data.size() - 100));
  op.offset = data.size();
  ASSERT_EQ(queue_->submit(op, AioMode::kIoUring), DiskQueue::Submit::kDone);
  EXPECT_EQ(op.result, 0);
  // A bad fd is an inline error.
  op.fd = -1;
  ASSERT_EQ(queue_->submit(op, AioMode::kIoUring), DiskQueue::Submit::kDone);
  EXPECT_EQ(op.result, -EBADF);
  EXPECT_EQ(stats_.inline_done, 4u);
  EXPECT_EQ(stats_.errors, 1u);
  close(fd);
}

TEST_F(DiskQueueTest, ReadAfterDontNeedIsQueuedUnlessStillResident) {
  make_queue(4, 16);
  std::string data = pattern_bytes(256 * 1024, 7);
  std::string path = dir_.write("cold.bin", data);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);  // clean pages can be dropped
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  struct statfs sfs {};
  ASSERT_EQ(fstatfs(fd, &sfs), 0);
  const bool tmpfs = sfs.f_type == TMPFS_MAGIC;
  const bool resident = page_resident(fd, data.size());
  if (tmpfs) {
    EXPECT_TRUE(resident) << "tmpfs pages cannot be dropped";
  }

  std::string buf(4096, '\0');
  DiskOp op;
  op.kind = DiskOp::Kind::kRead;
  op.fd = fd;
  op.buf = buf.data();
  op.len = 4096;
  op.offset = 0;
  CountingCallback cb;
  op.callback = &cb;
  DiskQueue::Submit s = queue_->submit(op, AioMode::kIoUring);
  if (resident || s == DiskQueue::Submit::kDone) {
    // tmpfs (or a page the kernel kept, or read back in between mincore() and the read: readahead of another
    // process on the same device): honestly a page-cache hit.
    EXPECT_EQ(s, DiskQueue::Submit::kDone);
    EXPECT_EQ(stats_.inline_done, 1u);
    EXPECT_EQ(op.result, 4096);
    EXPECT_EQ(buf, data.substr(0, 4096));
    std::printf("[ note ] page still resident after FADV_DONTNEED (tmpfs=%d): queued read not exercised here\n",
                tmpfs);
  } else {
    ASSERT_EQ(s, DiskQueue::Submit::kQueued);
    EXPECT_EQ(stats_.inline_done, 0u);
    EXPECT_EQ(stats_.in_flight, 1u);
    LoopScript script(reactor_);
    script.wait_until([&] { return cb.done == 1; });
    ASSERT_TRUE(script.run());
    EXPECT_EQ(op.result, 4096);
    EXPECT_EQ(buf, data.substr(0, 4096));
    EXPECT_EQ(stats_.completed, 1u);
    EXPECT_EQ(stats_.in_flight, 0u);
    EXPECT_EQ(stats_.latency.count, 1u);
  }
  close(fd);
}

// open and stat results must describe the same file as a plain stat(2).
void expect_same_stat(const struct stat& got, const std::string& path) {
  struct stat want {};
  ASSERT_EQ(stat(path.c_str(), &want), 0);
  EXPECT_EQ(got.st_dev, want.st_dev);
  EXPECT_EQ(got.st_ino, want.st_ino);
  EXPECT_EQ(got.st_size, want.st_size);
  EXPECT_EQ(got.st_mode, want.st_mode);
  EXPECT_EQ(got.st_mtim.tv_sec, want.st_mtim.tv_sec);
  EXPECT_EQ(got.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
}

class DiskQueueModeTest : public DiskQueueTest, public ::testing::WithParamInterface<AioMode> {};

// Open, stat and many reads (random offsets and lengths, some past the end) in each mode, all in flight at
// once with depth 3: every byte must match, every result must match pread(2).
TEST_P(DiskQueueModeTest, ResultsAreByteExact) {
  const AioMode mode = GetParam();
  make_queue(3, 1000);
  const std::string data = pattern_bytes(300 * 1000 + 17, 42);
  const std::string path = dir_.write("data.bin", data);
  CountingCallback cb;

  DiskOp open_op;
  open_op.kind = DiskOp::Kind::kOpen;
  open_op.path = path;
  open_op.callback = &cb;
  DiskOp stat_op;
  stat_op.kind = DiskOp::Kind::kStat;
  stat_op.path = path;
  stat_op.callback = &cb;
  DiskOp missing;
  missing.kind = DiskOp::Kind::kOpen;
  missing.path = dir_.file("no/such/file");
  missing.callback = &cb;
  DiskOp notdir;
  notdir.kind = DiskOp::Kind::kStat;
  notdir.path = path + "/x";
  notdir.callback = &cb;

  int expected_callbacks = 0;
  for (DiskOp* op : {&open_op, &stat_op, &missing, &notdir}) {
    DiskQueue::Submit s = queue_->submit(*op, mode);
    ASSERT_NE(s, DiskQueue::Submit::kOverflow);
    if (s == DiskQueue::Submit::kQueued) ++expected_callbacks;
    if (mode == AioMode::kOff) {
      EXPECT_EQ(s, DiskQueue::Submit::kDone);
    } else if (mode == AioMode::kThreads) {
      EXPECT_EQ(s, DiskQueue::Submit::kQueued);
    } else if (op->kind == DiskOp::Kind::kStat) {
      EXPECT_EQ(s, DiskQueue::Submit::kQueued) << "a stat is always queued in io_uring mode";
    } else if (op == &open_op) {
      EXPECT_EQ(s, DiskQueue::Submit::kDone) << "a file just created has cached dentries";
    }
  }

  constexpr int kReads = 64;
  std::vector<DiskOp> reads(kReads);
  std::vector<std::string> bufs(kReads);
  std::mt19937 rng(1234);
  LoopScript script(reactor_);
  script.wait_until([&] { return cb.done == expected_callbacks; })
      .then([&] {
        ASSERT_GE(open_op.result, 0);
        expect_same_stat(open_op.st, path);
        EXPECT_EQ(stat_op.result, 0);
        expect_same_stat(stat_op.st, path);
        EXPECT_EQ(missing.result, -ENOENT);
        EXPECT_EQ(notdir.result, -ENOTDIR);
        for (int i = 0; i < kReads; ++i) {
          DiskOp& op = reads[i];
          op.kind = DiskOp::Kind::kRead;
          op.fd = open_op.result;
          op.len = 1 + rng() % 20000;
          op.offset = rng() % (data.size() + 5000);  // some start past the end
          bufs[i].assign(op.len, '\xee');
          op.buf = bufs[i].data();
          op.callback = &cb;
          DiskQueue::Submit s = queue_->submit(op, mode);
          ASSERT_NE(s, DiskQueue::Submit::kOverflow);
          if (s == DiskQueue::Submit::kQueued) ++expected_callbacks;
        }
        if (mode == AioMode::kThreads) {
          EXPECT_EQ(stats_.in_flight, 3u);
          EXPECT_EQ(stats_.waiting, kReads - 3u);
        }
      })
      .wait_until([&] { return cb.done == expected_callbacks; });
  ASSERT_TRUE(script.run());
  for (int i = 0; i < kReads; ++i) {
    const DiskOp& op = reads[i];
    size_t want = op.offset >= data.size() ? 0 : std::min<size_t>(op.len, data.size() - op.offset);
    ASSERT_EQ(op.result, static_cast<int32_t>(want)) << "read " << i;
    if (want > 0) {
      ASSERT_EQ(bufs[i].substr(0, want), data.substr(op.offset, want)) << "read " << i;
    }
  }
  EXPECT_EQ(stats_.submitted, 4u + kReads);
  EXPECT_EQ(stats_.inline_done + stats_.completed, 4u + kReads);
  EXPECT_EQ(stats_.completed, static_cast<uint64_t>(expected_callbacks));
  EXPECT_EQ(stats_.latency.count, static_cast<uint64_t>(expected_callbacks));
  EXPECT_EQ(stats_.errors, 2u);
  EXPECT_EQ(stats_.in_flight, 0u);
  EXPECT_EQ(stats_.waiting, 0u);
  EXPECT_EQ(queue_->pending(), 0u);
  if (mode == AioMode::kThreads) {
    EXPECT_EQ(stats_.completed, 4u + kReads) << "threads mode never completes inline";
  }
  close(open_op.result);
}

INSTANTIATE_TEST_SUITE_P(AllModes, DiskQueueModeTest,
                         ::testing::Values(AioMode::kIoUring, AioMode::kThreads, AioMode::kOff),
                         [](const ::testing::TestParamInfo<AioMode>& i) {
                           return i.param == AioMode::kIoUring ? std::string("IoUring")
                                  : i.param == AioMode::kThreads ? std::string("Threads")
                                                                  : std::string("Off");
                         });

// depth=1, max_queue=1, threads: the first open of a FIFO blocks its pool thread (no writer yet), the second
// waits, the third is refused and logged once. The loop keeps running meanwhile.
TEST_F(DiskQueueTest, ThreadsOverflowWithBlockedFifoOpen) {
  std::vector<std::string> lines;
  g_log_lines = &lines;
  set_disk_log_hook(&capture_log);
  make_queue(1, 1, "slow");
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  CountingCallback cb;
  DiskOp ops[4];
  for (DiskOp& op : ops) {
    op.kind = DiskOp::Kind::kOpen;
    op.path = fifo;
    op.callback = &cb;
  }
  EXPECT_EQ(queue_->submit(ops[0], AioMode::kThreads), DiskQueue::Submit::kQueued);
  EXPECT_EQ(queue_->submit(ops[1], AioMode::kThreads), DiskQueue::Submit::kQueued);
  EXPECT_EQ(queue_->submit(ops[2], AioMode::kThreads), DiskQueue::Submit::kOverflow);
  EXPECT_EQ(ops[2].result, -EAGAIN);
  EXPECT_EQ(queue_->submit(ops[3], AioMode::kThreads), DiskQueue::Submit::kOverflow);
  EXPECT_EQ(stats_.in_flight, 1u);
  EXPECT_EQ(stats_.waiting, 1u);
  EXPECT_EQ(stats_.overflows, 2u);
  EXPECT_EQ(stats_.submitted, 2u);
  ASSERT_EQ(lines.size(), 1u) << "rate-limited to one line per second";
  EXPECT_EQ(lines[0], "disk queue \"slow\" overflow: 1 tasks waiting");

  int writer = -1;
  int ticks_while_blocked = 0;
  LoopScript script(reactor_);
  script.sleep_ms(30)
      .then([&] {
        EXPECT_EQ(cb.done, 0) << "the FIFO open cannot finish without a writer";
        ++ticks_while_blocked;
      })
      .wait_until([&] {
        // The pool thread is a reader blocked in open(): a non-blocking writer open succeeds once it is there.
        writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        return writer >= 0;
      })
      .wait_until([&] { return cb.done == 2; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(ticks_while_blocked, 1);
  ASSERT_EQ(cb.order.size(), 2u);
  EXPECT_EQ(cb.order[0], &ops[0]);
  EXPECT_EQ(cb.order[1], &ops[1]);
  for (int i = 0; i < 2; ++i) {
    ASSERT_GE(ops[i].result, 0);
    EXPECT_TRUE(S_ISFIFO(ops[i].st.st_mode));
    close(ops[i].result);
  }
  close(writer);
  EXPECT_EQ(stats_.completed, 2u);
  EXPECT_EQ(stats_.in_flight, 0u);
  EXPECT_EQ(stats_.waiting, 0u);
  EXPECT_EQ(stats_.latency.count, 2u);
  EXPECT_GE(stats_.latency.sum_us, 30000u) << "the first open waited at least the 30 ms sleep";
}

// In io_uring mode a stat is always queued, and completions are reaped only by the loop: the third of
// three stats submitted back to back with depth=1, max_queue=1 overflows, deterministically.
TEST_F(DiskQueueTest, IoUringOverflowAndFifoOrder) {
  std::vector<std::string> lines;
  g_log_lines = &lines;
  set_disk_log_hook(&capture_log);
  make_queue(1, 1, "ring");
  std::string path = dir_.write("f", "x");
  CountingCallback cb;
  DiskOp ops[3];
  for (DiskOp& op : ops) {
    op.kind = DiskOp::Kind::kStat;
    op.path = path;
    op.callback = &cb;
  }
  EXPECT_EQ(queue_->submit(ops[0], AioMode::kIoUring), DiskQueue::Submit::kQueued);
  EXPECT_EQ(queue_->submit(ops[1], AioMode::kIoUring), DiskQueue::Submit::kQueued);
  EXPECT_EQ(queue_->submit(ops[2], AioMode::kIoUring), DiskQueue::Submit::kOverflow);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "disk queue \"ring\" overflow: 1 tasks waiting");
  LoopScript script(reactor_);
  script.wait_until([&] { return cb.done == 2; });
  ASSERT_TRUE(script.run());
  ASSERT_EQ(cb.order.size(), 2u);
  EXPECT_EQ(cb.order[0], &ops[0]);
  EXPECT_EQ(cb.order[1], &ops[1]);
  EXPECT_EQ(ops[0].result, 0);
  EXPECT_EQ(ops[1].result, 0);
  EXPECT_EQ(ops[1].st.st_size, 1);
  EXPECT_EQ(stats_.overflows, 1u);
  EXPECT_EQ(stats_.completed, 2u);
}

// One overflow line per second per queue; the interval follows the loop's clock.
TEST_F(DiskQueueTest, OverflowLogIsRateLimitedPerSecond) {
  std::vector<std::string> lines;
  g_log_lines = &lines;
  set_disk_log_hook(&capture_log);
  make_queue(1, 0, "tiny");
  std::string path = dir_.write("f", "x");
  CountingCallback cb;
  DiskOp ops[3];
  for (DiskOp& op : ops) {
    op.kind = DiskOp::Kind::kStat;
    op.path = path;
    op.callback = &cb;
  }
  size_t lines_after_burst = 0;
  LoopScript script(reactor_);
  script
      .then([&] {
        EXPECT_EQ(queue_->submit(ops[0], AioMode::kIoUring), DiskQueue::Submit::kQueued);
        EXPECT_EQ(queue_->submit(ops[1], AioMode::kIoUring), DiskQueue::Submit::kOverflow);
        EXPECT_EQ(queue_->submit(ops[2], AioMode::kIoUring), DiskQueue::Submit::kOverflow);
        lines_after_burst = lines.size();
      })
      .wait_until([&] { return cb.done == 1; })
      .sleep_ms(1000)
      .then([&] {
        EXPECT_EQ(queue_->submit(ops[0], AioMode::kIoUring), DiskQueue::Submit::kQueued);
        EXPECT_EQ(queue_->submit(ops[1], AioMode::kIoUring), DiskQueue::Submit::kOverflow);
      })
      .wait_until([&] { return cb.done == 2; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(lines_after_burst, 1u);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "disk queue \"tiny\" overflow: 0 tasks waiting");
  EXPECT_EQ(stats_.overflows, 3u);
}

// O_CREAT cannot use RESOLVE_CACHED, so this open is always queued (IORING_OP_OPENAT2 + fstat).
TEST_F(DiskQueueTest, QueuedOpenFillsStat) {
  make_queue(2, 2);
  std::string path = dir_.write("existing", "hello");
  CountingCallback cb;
  DiskOp op;
  op.kind = DiskOp::Kind::kOpen;
  op.path = path;
  op.flags = O_CREAT;
  op.callback = &cb;
  ASSERT_EQ(queue_->submit(op, AioMode::kIoUring), DiskQueue::Submit::kQueued);
  LoopScript script(reactor_);
  script.wait_until([&] { return cb.done == 1; });
  ASSERT_TRUE(script.run());
  ASSERT_GE(op.result, 0);
  expect_same_stat(op.st, path);
  EXPECT_EQ(fcntl(op.result, F_GETFD), FD_CLOEXEC);
  char b[8] = {};
  EXPECT_EQ(pread(op.result, b, sizeof(b), 0), 5);
  EXPECT_EQ(std::string(b), "hello");
  close(op.result);
}

// Destroying a queue with work still pending never runs callbacks and never lets a late CQE or a pool
// thread touch freed memory (ASan checks this); the orphaned state is freed by the last CQE.
TEST_F(DiskQueueTest, DestroyWithPendingOpsIsSafe) {
  make_queue(1, 4);
  std::string path = dir_.write("f", "abc");
  CountingCallback cb;
  auto ops = std::make_unique<DiskOp[]>(6);
  for (int i = 0; i < 6; ++i) {
    ops[i].kind = DiskOp::Kind::kStat;
    ops[i].path = path;
    ops[i].callback = &cb;
  }
  EXPECT_EQ(queue_->submit(ops[0], AioMode::kIoUring), DiskQueue::Submit::kQueued);
  EXPECT_EQ(queue_->submit(ops[1], AioMode::kIoUring), DiskQueue::Submit::kQueued);  // waiting
  queue_.reset();
  EXPECT_EQ(ops[1].result, -ECANCELED);

  config::DiskQueueConf tconf{"threads", 2, 4};
  stats::DiskQueueStats tstats;
  auto tq = std::make_unique<DiskQueue>(reactor_, tconf, tstats);
  for (int i = 2; i < 6; ++i) EXPECT_EQ(tq->submit(ops[i], AioMode::kThreads), DiskQueue::Submit::kQueued);
  tq.reset();  // joins the pool; the armed eventfd read is cancelled
  ops.reset();
  LoopScript script(reactor_);
  script.sleep_ms(20);  // let the loop reap the cancelled/finished CQEs of the orphans
  ASSERT_TRUE(script.run());
  EXPECT_EQ(cb.done, 0);
}

}  // namespace
}  // namespace kosoku::disk
