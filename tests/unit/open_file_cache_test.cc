// OpenFileCache on a real Reactor and DiskQueue with real files (core/disk/open_file_cache.hh).
#include "core/disk/open_file_cache.hh"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::disk {
namespace {

using config::AioMode;
using testing::LoopScript;
using testing::TempDir;
using Result = OpenFileCache::Result;

// One lookup: the request plus its completion flag.
struct Lookup final : OpenRequest::Callback {
  OpenRequest req;
  Result result = Result::kQueued;
  bool done = false;
  int callbacks = 0;
  void on_open_done(OpenRequest&) override {
    done = true;
    ++callbacks;
  }
};

std::string read_all(const FileRef& f) {
  std::string s(f->size(), '\0');
  ssize_t n = pread(f->fd(), s.data(), s.size(), 0);
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return s;
}

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

class OpenFileCacheTest : public ::testing::Test {
 protected:
  OpenFileCacheTest() {
    qconf_.name = "default";
    qconf_.depth = 4;
    qconf_.max_queue = 64;
    queue_ = std::make_unique<DiskQueue>(reactor_, qconf_, qstats_);
    cache_ = std::make_unique<OpenFileCache>(reactor_, stats_);
    conf_.enabled = true;
    conf_.max = 100;
    conf_.inactive_ms = 60000;
    conf_.valid_ms = 60000;
    conf_.min_uses = 1;
    conf_.errors = false;
  }
  ~OpenFileCacheTest() override {
    cache_.reset();
    queue_.reset();
  }

  // Starts a lookup; `done` is set at once for kDone/kOverflow, by the callback for kQueued.
  Result start(Lookup& l, const std::string& path, AioMode mode = AioMode::kIoUring) {
    l.done = false;
    l.req.callback = &l;
    l.result = cache_->open(path, conf_, *queue_, mode, l.req);
    if (l.result != Result::kQueued) l.done = true;
    return l.result;
  }

  reactor::Reactor reactor_{0, 64};
  config::DiskQueueConf qconf_;
  stats::DiskQueueStats qstats_;
  stats::CoreStats stats_;
  config::OpenFileCacheConf conf_;
  std::unique_ptr<DiskQueue> queue_;
  std::unique_ptr<OpenFileCache> cache_;
  TempDir dir_;
};

TEST_F(OpenFileCacheTest, HitAfterMissReturnsTheSameFile) {
  std::string path = dir_.write("index.html", "<h1>hi</h1>");
  Lookup a, b;
  // The dentry of a file just created is cached: openat2(RESOLVE_CACHED) + fstat complete inline.
  ASSERT_EQ(start(a, path), Result::kDone);
  ASSERT_TRUE(a.req.file);
  EXPECT_EQ(a.req.error, 0);
  EXPECT_EQ(read_all(a.req.file), "<h1>hi</h1>");
  EXPECT_FALSE(a.req.file->is_dir());
  EXPECT_EQ(a.req.file->size(), 11u);
  EXPECT_EQ(stats_.ofc_misses, 1u);
  EXPECT_EQ(stats_.ofc_hits, 0u);
  EXPECT_EQ(stats_.ofc_entries, 1u);
  EXPECT_EQ(fcntl(a.req.file->fd(), F_GETFL) & O_NONBLOCK, 0) << "O_NONBLOCK is cleared on regular files";

  ASSERT_EQ(start(b, path), Result::kDone);
  EXPECT_EQ(b.req.file.get(), a.req.file.get());
  EXPECT_EQ(stats_.ofc_hits, 1u);
  EXPECT_EQ(stats_.ofc_misses, 1u);
  EXPECT_EQ(qstats_.submitted, 1u) << "a hit does no disk operation";
  EXPECT_EQ(cache_->size(), 1u);

  // Directories are opened and cached too.
  Lookup d;
  ASSERT_EQ(start(d, dir_.path()), Result::kDone);
  ASSERT_TRUE(d.req.file);
  EXPECT_TRUE(d.req.file->is_dir());
  EXPECT_EQ(cache_->size(), 2u);
}

TEST_F(OpenFileCacheTest, MinUsesKeepsTheFdOnlyAfterNUses) {
  conf_.min_uses = 2;
  std::string path = dir_.write("a", "aaaa");
  Lookup l1, l2, l3;
  ASSERT_EQ(start(l1, path), Result::kDone);
  int fd1 = l1.req.file->fd();
  l1.req.file.reset();
  EXPECT_FALSE(fd_open(fd1)) << "one use < min_uses: the fd is not kept";
  EXPECT_EQ(cache_->size(), 1u) << "the entry counts uses";

  ASSERT_EQ(start(l2, path), Result::kDone);
  int fd2 = l2.req.file->fd();
  OpenFile* f2 = l2.req.file.get();
  l2.req.file.reset();
  EXPECT_TRUE(fd_open(fd2)) << "second use reached min_uses: the cache keeps the fd";
  EXPECT_EQ(stats_.ofc_misses, 2u);
  EXPECT_EQ(stats_.ofc_hits, 0u);

  ASSERT_EQ(start(l3, path), Result::kDone);
  EXPECT_EQ(l3.req.file.get(), f2);
  EXPECT_EQ(l3.req.file->fd(), fd2);
  EXPECT_EQ(stats_.ofc_hits, 1u);
}

// A missing name is looked up by the filesystem the first time (no negative dentry yet: openat2 with
// RESOLVE_CACHED says EAGAIN and the open is queued), so these lookups are awaited in the loop.
TEST_F(OpenFileCacheTest, ErrorsOffAreNotCached) {
  std::string missing = dir_.file("missing");
  Lookup a, b;
  size_t size_after_a = 99;
  LoopScript script(reactor_);
  script.then([&] { start(a, missing); })
      .wait_until([&] { return a.done; })
      .then([&] {
        size_after_a = cache_->size();
        start(b, missing);
      })
      .wait_until([&] { return b.done; });
  ASSERT_TRUE(script.run());
  EXPECT_FALSE(a.req.file);
  EXPECT_EQ(a.req.error, ENOENT);
  EXPECT_EQ(size_after_a, 0u);
  EXPECT_EQ(b.req.error, ENOENT);
  EXPECT_EQ(cache_->size(), 0u);
  EXPECT_EQ(stats_.ofc_misses, 2u);
  EXPECT_EQ(stats_.ofc_hits, 0u);
  EXPECT_EQ(qstats_.submitted, 2u) << "each lookup opened";
}

TEST_F(OpenFileCacheTest, ErrorsOnAreCachedUntilValidExpires) {
  conf_.errors = true;
  conf_.valid_ms = 50;
  const std::string path = dir_.file("later");
  const std::string file = dir_.write("file", "x");
  Lookup a, b, c, n1, n2;
  uint64_t disk_ops = 0;
  LoopScript script(reactor_);
  script.then([&] { start(a, path); })
      .wait_until([&] { return a.done; })
      .then([&] {
        EXPECT_EQ(a.req.error, ENOENT);
        EXPECT_EQ(cache_->size(), 1u);
        start(n1, file + "/sub");
      })
      .wait_until([&] { return n1.done; })
      .then([&] {
        EXPECT_EQ(n1.req.error, ENOTDIR);
        disk_ops = qstats_.submitted;
        EXPECT_EQ(start(n2, file + "/sub"), Result::kDone);
        EXPECT_EQ(n2.req.error, ENOTDIR);
        EXPECT_EQ(stats_.ofc_hits, 1u);
        dir_.write("later", "now it exists");
        EXPECT_EQ(start(b, path), Result::kDone);
        EXPECT_EQ(b.req.error, ENOENT) << "cached error, still within open_file_cache_valid";
        EXPECT_EQ(stats_.ofc_hits, 2u);
        EXPECT_EQ(qstats_.submitted, disk_ops) << "cached errors need no disk op";
      })
      .sleep_ms(60)
      .then([&] { start(c, path); })
      .wait_until([&] { return c.done; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(c.req.error, 0);
  ASSERT_TRUE(c.req.file);
  EXPECT_EQ(read_all(c.req.file), "now it exists");
  EXPECT_EQ(cache_->size(), 2u);
}

class OpenFileCacheModeTest : public OpenFileCacheTest, public ::testing::WithParamInterface<AioMode> {};

// A file replaced by rename() is served from the cache until open_file_cache_valid passes, then noticed by
// the stat revalidation and reopened; an unchanged file is revalidated without reopening.
TEST_P(OpenFileCacheModeTest, RenameOverIsNoticedAfterValid) {
  const AioMode mode = GetParam();
  conf_.valid_ms = 50;
  const std::string path = dir_.write("page.html", "old version");
  Lookup l1, l2, l3, l4, l5;
  uint64_t hits_before_reval = 0;
  uint64_t disk_before_reval = 0;
  LoopScript script(reactor_);
  script.then([&] { start(l1, path, mode); })
      .wait_until([&] { return l1.done; })
      .then([&] {
        ASSERT_TRUE(l1.req.file);
        EXPECT_EQ(read_all(l1.req.file), "old version");
        std::string tmp = dir_.write("page.html.tmp", "the new version, longer");
        ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0);
        EXPECT_EQ(start(l2, path, mode), Result::kDone);
        EXPECT_EQ(l2.req.file.get(), l1.req.file.get()) << "within valid: the cached (old) file";
      })
      .sleep_ms(60)
      .then([&] {
        Result r = start(l3, path, mode);
        if (mode != AioMode::kOff) {
          EXPECT_EQ(r, Result::kQueued) << "the revalidation stat is queued";
        }
      })
      .wait_until([&] { return l3.done; })
      .then([&] {
        ASSERT_TRUE(l3.req.file);
        EXPECT_NE(l3.req.file.get(), l1.req.file.get());
        EXPECT_NE(l3.req.file->st().st_ino, l1.req.file->st().st_ino);
        EXPECT_EQ(read_all(l3.req.file), "the new version, longer");
        EXPECT_EQ(read_all(l1.req.file), "old version") << "the old reference keeps the old file open";
        EXPECT_EQ(start(l4, path, mode), Result::kDone);
        EXPECT_EQ(l4.req.file.get(), l3.req.file.get());
        hits_before_reval = stats_.ofc_hits;
        disk_before_reval = qstats_.submitted;
      })
      .sleep_ms(60)
      .then([&] { start(l5, path, mode); })
      .wait_until([&] { return l5.done; });
  ASSERT_TRUE(script.run());
  ASSERT_TRUE(l5.req.file);
  EXPECT_EQ(l5.req.file.get(), l3.req.file.get()) << "unchanged: same fd after the revalidation";
  EXPECT_EQ(qstats_.submitted, disk_before_reval + 1) << "one stat, no reopen";
  EXPECT_EQ(stats_.ofc_hits, hits_before_reval);
  EXPECT_EQ(cache_->size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(AllModes, OpenFileCacheModeTest,
                         ::testing::Values(AioMode::kIoUring, AioMode::kThreads, AioMode::kOff),
                         [](const ::testing::TestParamInfo<AioMode>& i) {
                           return i.param == AioMode::kIoUring ? std::string("IoUring")
                                  : i.param == AioMode::kThreads ? std::string("Threads")
                                                                  : std::string("Off");
                         });

TEST_F(OpenFileCacheTest, DeletedFileIsNoticedAfterValid) {
  conf_.valid_ms = 50;
  std::string path = dir_.write("gone", "bye");
  Lookup a, b;
  ASSERT_EQ(start(a, path), Result::kDone);
  ASSERT_EQ(unlink(path.c_str()), 0);
  LoopScript script(reactor_);
  script.sleep_ms(60).then([&] { start(b, path); }).wait_until([&] { return b.done; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(b.req.error, ENOENT);
  EXPECT_FALSE(b.req.file);
  EXPECT_EQ(cache_->size(), 0u) << "errors off: the entry is dropped";
  EXPECT_EQ(read_all(a.req.file), "bye");
}

TEST_F(OpenFileCacheTest, EvictsLeastRecentlyUsedAtMax) {
  conf_.max = 2;
  std::string pa = dir_.write("a", "A"), pb = dir_.write("b", "B"), pc = dir_.write("c", "C");
  Lookup a1, b1, a2, c1, a3, b2, c2;
  ASSERT_EQ(start(a1, pa), Result::kDone);
  ASSERT_EQ(start(b1, pb), Result::kDone);
  ASSERT_EQ(start(a2, pa), Result::kDone);  // hit: a becomes most recent
  EXPECT_EQ(stats_.ofc_hits, 1u);
  ASSERT_EQ(start(c1, pc), Result::kDone);  // evicts b
  EXPECT_EQ(cache_->size(), 2u);
  EXPECT_EQ(stats_.ofc_entries, 2u);
  ASSERT_EQ(start(a3, pa), Result::kDone);
  EXPECT_EQ(stats_.ofc_hits, 2u) << "a survived";
  EXPECT_EQ(read_all(b1.req.file), "B") << "an evicted file stays open for its holders";
  ASSERT_EQ(start(b2, pb), Result::kDone);  // miss, evicts c
  EXPECT_NE(b2.req.file.get(), b1.req.file.get());
  EXPECT_EQ(stats_.ofc_misses, 4u);
  ASSERT_EQ(start(c2, pc), Result::kDone);
  EXPECT_EQ(stats_.ofc_misses, 5u) << "c was evicted";
  EXPECT_EQ(cache_->size(), 2u);
}

TEST_F(OpenFileCacheTest, InactiveEntriesExpire) {
  conf_.inactive_ms = 200;
  std::string pa = dir_.write("a", "A"), pb = dir_.write("b", "B");
  Lookup a1, b1, b2, b3, a2;
  int fd_a = -1;
  size_t size_after_expire = 0;
  LoopScript script(reactor_);
  script
      .then([&] {
        ASSERT_EQ(start(a1, pa), Result::kDone);
        ASSERT_EQ(start(b1, pb), Result::kDone);
        fd_a = a1.req.file->fd();
        a1.req.file.reset();
        b1.req.file.reset();
      })
      .sleep_ms(120)
      .then([&] { ASSERT_EQ(start(b2, pb), Result::kDone); })  // b used again
      .sleep_ms(120)
      .then([&] {
        cache_->expire();
        size_after_expire = cache_->size();
        EXPECT_FALSE(fd_open(fd_a)) << "a expired: its fd is closed";
        ASSERT_EQ(start(b3, pb), Result::kDone);
        ASSERT_EQ(start(a2, pa), Result::kDone);
      });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(size_after_expire, 1u);
  EXPECT_EQ(stats_.ofc_hits, 2u);    // b2, b3
  EXPECT_EQ(stats_.ofc_misses, 3u);  // a1, b1, a2
}

TEST_F(OpenFileCacheTest, InactiveEntryIsDroppedAtLookup) {
  conf_.inactive_ms = 50;
  conf_.min_uses = 2;
  std::string pa = dir_.write("a", "A");
  Lookup a1, a2, a3;
  LoopScript script(reactor_);
  script.then([&] { ASSERT_EQ(start(a1, pa), Result::kDone); })
      .sleep_ms(60)
      .then([&] {
        // Without expire(): the stale entry is dropped at lookup, so its use count restarts at 1 and the
        // fd is not kept (min_uses=2 counts uses within `inactive`).
        ASSERT_EQ(start(a2, pa), Result::kDone);
        int fd = a2.req.file->fd();
        a2.req.file.reset();
        EXPECT_FALSE(fd_open(fd));
        ASSERT_EQ(start(a3, pa), Result::kDone);
      });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(stats_.ofc_misses, 3u);
  EXPECT_EQ(stats_.ofc_hits, 0u);
}

TEST_F(OpenFileCacheTest, DisabledOpensEveryTime) {
  conf_.enabled = false;
  std::string path = dir_.write("f", "data");
  Lookup a, b;
  ASSERT_EQ(start(a, path), Result::kDone);
  ASSERT_EQ(start(b, path), Result::kDone);
  ASSERT_TRUE(a.req.file);
  ASSERT_TRUE(b.req.file);
  EXPECT_NE(a.req.file->fd(), b.req.file->fd());
  int fd = a.req.file->fd();
  a.req.file.reset();
  EXPECT_FALSE(fd_open(fd)) << "the last FileRef closes the fd";
  EXPECT_EQ(cache_->size(), 0u);
  EXPECT_EQ(stats_.ofc_hits + stats_.ofc_misses, 0u);
  EXPECT_EQ(qstats_.submitted, 2u);
}

// Threads mode always queues: three lookups of one path share one open.
TEST_F(OpenFileCacheTest, ConcurrentLookupsOfOnePathWaitForTheFirst) {
  std::string path = dir_.write("shared", "shared body");
  Lookup l[3];
  for (Lookup& x : l) EXPECT_EQ(start(x, path, AioMode::kThreads), Result::kQueued);
  EXPECT_EQ(qstats_.submitted, 1u);
  LoopScript script(reactor_);
  script.wait_until([&] { return l[0].done && l[1].done && l[2].done; });
  ASSERT_TRUE(script.run());
  for (Lookup& x : l) {
    EXPECT_EQ(x.callbacks, 1);
    ASSERT_TRUE(x.req.file);
    EXPECT_EQ(x.req.file.get(), l[0].req.file.get());
  }
  EXPECT_EQ(read_all(l[2].req.file), "shared body");
  EXPECT_EQ(stats_.ofc_misses, 3u);
  Lookup hit;
  EXPECT_EQ(start(hit, path, AioMode::kThreads), Result::kDone);
  EXPECT_EQ(hit.req.file.get(), l[0].req.file.get());
  EXPECT_EQ(stats_.ofc_hits, 1u);
}

TEST_F(OpenFileCacheTest, QueueOverflowIsReported) {
  cache_.reset();
  queue_.reset();
  qconf_.depth = 1;
  qconf_.max_queue = 0;
  queue_ = std::make_unique<DiskQueue>(reactor_, qconf_, qstats_);
  cache_ = std::make_unique<OpenFileCache>(reactor_, stats_);
  std::string pa = dir_.write("a", "A"), pb = dir_.write("b", "B");
  Lookup a1, b1, a2, b2;
  EXPECT_EQ(start(a1, pa, AioMode::kThreads), Result::kQueued);
  EXPECT_EQ(start(b1, pb, AioMode::kThreads), Result::kOverflow);
  EXPECT_EQ(b1.req.error, EAGAIN);
  EXPECT_EQ(start(a2, pa, AioMode::kThreads), Result::kQueued) << "joins the pending lookup, no disk op";
  EXPECT_EQ(qstats_.overflows, 1u);
  LoopScript script(reactor_);
  script.wait_until([&] { return a1.done && a2.done; })
      .then([&] { start(b2, pb, AioMode::kThreads); })
      .wait_until([&] { return b2.done; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(read_all(a2.req.file), "A");
  EXPECT_EQ(read_all(b2.req.file), "B");
}

// O_NONBLOCK open: a FIFO in the document root never blocks the loop.
TEST_F(OpenFileCacheTest, FifoOpenDoesNotBlock) {
  std::string fifo = dir_.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Lookup l;
  LoopScript script(reactor_);
  script.then([&] { start(l, fifo); }).wait_until([&] { return l.done; });
  ASSERT_TRUE(script.run(2000));
  ASSERT_TRUE(l.req.file);
  EXPECT_TRUE(S_ISFIFO(l.req.file->st().st_mode));
}

}  // namespace
}  // namespace kosoku::disk
