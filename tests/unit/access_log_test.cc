// Access log writer, through a real Reactor and its io_uring: writes of whole lines, double buffering and
// drops, flush interval, flush_sync with a write in flight, reopen after rename (logrotate), several cores
// appending to one path.
#include "core/access_log/access_log.hh"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kosoku::access_log {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kosoku-access-log-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

off_t file_size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// Runs steps on the loop (from a 1 ms timer), in order: a step returning false is retried on the next tick.
// Stops the reactor after the last step or after timeout_ms. Reactor::run() runs once per Reactor, so each
// test is one script.
class Script final : public reactor::Timer {
 public:
  using Step = std::function<bool()>;
  Script(reactor::Reactor& r, std::vector<Step> steps, uint64_t timeout_ms)
      : r_(r), steps_(std::move(steps)), deadline_(r.now_ms() + timeout_ms) {}
  void fire() override {
    while (next_ < steps_.size() && steps_[next_]()) ++next_;
    if (next_ == steps_.size() || r_.now_ms() > deadline_) {
      r_.stop();
      return;
    }
    r_.timers().arm(*this, r_.now_ms() + 1);
  }
  bool finished() const { return next_ == steps_.size(); }

 private:
  reactor::Reactor& r_;
  std::vector<Step> steps_;
  size_t next_ = 0;
  uint64_t deadline_;
};

bool run_script(reactor::Reactor& r, std::vector<Script::Step> steps, uint64_t timeout_ms = 5000) {
  Script s(r, std::move(steps), timeout_ms);
  r.timers().arm(s, r.now_ms() + 1);
  r.run();
  return s.finished();
}

// "L00000007\n": 10 bytes per line.
std::string line10(int i) { return absl::StrFormat("L%08d", i); }

TEST(AccessLogFile, WritesWholeLinesThroughTheRing) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("access.log"));
  EXPECT_EQ(f.buffer_bytes(), 64u * 1024);
  ASSERT_EQ(f.open(), 0);
  ASSERT_EQ(f.open(), 0);  // idempotent
  bool ok = run_script(r, {[&] {
                             EXPECT_TRUE(f.append("GET /a 200"));
                             EXPECT_TRUE(f.append("GET /b 404\n"));  // newline kept, not doubled
                             EXPECT_EQ(f.buffered_bytes(), 22u);
                             f.flush();
                             EXPECT_TRUE(f.write_in_flight());
                             EXPECT_EQ(read_file(dir.file("access.log")), "");  // not submitted yet
                             return true;
                           },
                           [&] { return !f.write_in_flight(); }});
  ASSERT_TRUE(ok);
  EXPECT_EQ(read_file(dir.file("access.log")), "GET /a 200\nGET /b 404\n");
  EXPECT_EQ(f.stats().lines, 2u);
  EXPECT_EQ(f.stats().writes, 1u);
  EXPECT_EQ(f.stats().bytes_written, 22u);
  EXPECT_EQ(f.stats().dropped_lines, 0u);
  EXPECT_EQ(f.buffered_bytes(), 0u);
}

TEST(AccessLogFile, DoubleBufferThenDropsWhenBothAreFull) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("access.log"), /*buffer_bytes=*/100, /*flush_interval_ms=*/60000);
  ASSERT_EQ(f.open(), 0);
  bool ok = run_script(r, {[&] {
                             // Lines 0-9 fill the first buffer exactly; line 10 does not fit: the first buffer
                             // is written (in flight until the loop submits) and line 10 goes to the second.
                             for (int i = 0; i < 10; ++i) EXPECT_TRUE(f.append(line10(i)));
                             EXPECT_FALSE(f.write_in_flight());
                             EXPECT_TRUE(f.append(line10(10)));
                             EXPECT_TRUE(f.write_in_flight());
                             for (int i = 11; i < 20; ++i) EXPECT_TRUE(f.append(line10(i)));
                             EXPECT_EQ(f.buffered_bytes(), 200u);
                             // Both buffers full: dropped and counted, nothing blocks or grows.
                             for (int i = 20; i < 25; ++i) EXPECT_FALSE(f.append(line10(i)));
                             EXPECT_EQ(f.stats().dropped_lines, 5u);
                             EXPECT_EQ(f.buffered_bytes(), 200u);
                             return true;
                           },
                           // The second buffer is written as soon as the first write completes.
                           [&] { return !f.write_in_flight() && f.buffered_bytes() == 0; }});
  ASSERT_TRUE(ok);
  std::string expected;
  for (int i = 0; i < 20; ++i) absl::StrAppend(&expected, line10(i), "\n");
  EXPECT_EQ(read_file(dir.file("access.log")), expected);
  EXPECT_EQ(f.stats().lines, 20u);
  EXPECT_EQ(f.stats().writes, 2u);
  EXPECT_EQ(f.stats().bytes_written, 200u);
  EXPECT_EQ(f.stats().dropped_lines, 5u);
  // A line longer than a buffer can never be written whole: dropped.
  EXPECT_FALSE(f.append(std::string(100, 'x')));  // 101 bytes with the newline
  EXPECT_TRUE(f.append(std::string(99, 'y')));    // exactly 100
  EXPECT_EQ(f.stats().dropped_lines, 6u);
}

TEST(AccessLogFile, DefaultBufferIs64KiB) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("access.log"));
  ASSERT_EQ(f.open(), 0);
  std::string expected;
  bool ok = run_script(r, {[&] {
    // 100-byte lines: 655 fit in 65536 bytes; the 656th starts the first write.
    for (int i = 0; i < 1000; ++i) {
      std::string l = absl::StrFormat("%08d %090d", i, 0);
      EXPECT_EQ(l.size(), 99u);
      EXPECT_TRUE(f.append(l));
      absl::StrAppend(&expected, l, "\n");
      if (i == 654) {
        EXPECT_FALSE(f.write_in_flight());
      }
      if (i == 655) {
        EXPECT_TRUE(f.write_in_flight());
      }
    }
    EXPECT_EQ(f.buffered_bytes(), 100000u);
    return true;
  }});
  ASSERT_TRUE(ok);
  // The loop stopped right after submitting: flush_sync() waits for that write through the ring, then
  // writes the second buffer with write(2).
  EXPECT_EQ(f.flush_sync(), 0);
  EXPECT_FALSE(f.write_in_flight());
  EXPECT_EQ(read_file(dir.file("access.log")), expected);
  EXPECT_EQ(f.stats().writes, 2u);
  EXPECT_EQ(f.stats().bytes_written, 100000u);
  EXPECT_EQ(f.stats().dropped_lines, 0u);
}

TEST(AccessLogFile, FlushIfDueAfterTheInterval) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("access.log"), AccessLogFile::kDefaultBufferBytes, 1000);
  ASSERT_EQ(f.open(), 0);
  bool ok = run_script(r, {[&] {
                             uint64_t t0 = r.now_ms();
                             f.flush_if_due(t0 + 5000);  // empty: nothing to do
                             EXPECT_FALSE(f.write_in_flight());
                             f.append("one");
                             f.append("two");
                             f.flush_if_due(t0 + 999);
                             EXPECT_FALSE(f.write_in_flight());
                             f.flush_if_due(t0 + 1000);
                             EXPECT_TRUE(f.write_in_flight());
                             return true;
                           },
                           [&] { return !f.write_in_flight(); }});
  ASSERT_TRUE(ok);
  EXPECT_EQ(read_file(dir.file("access.log")), "one\ntwo\n");
}

TEST(AccessLogFile, FlushSyncFromTheLoopWaitsForTheInflightWrite) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("access.log"), 100, 60000);
  ASSERT_EQ(f.open(), 0);
  bool ok = run_script(r, {[&] {
    for (int i = 0; i < 14; ++i) EXPECT_TRUE(f.append(line10(i)));
    EXPECT_TRUE(f.write_in_flight());
    EXPECT_EQ(f.flush_sync(), 0);  // drives the ring until lines 0-9 are written, then writes 10-13
    EXPECT_FALSE(f.write_in_flight());
    EXPECT_EQ(f.buffered_bytes(), 0u);
    return true;
  }});
  ASSERT_TRUE(ok);
  std::string expected;
  for (int i = 0; i < 14; ++i) absl::StrAppend(&expected, line10(i), "\n");
  EXPECT_EQ(read_file(dir.file("access.log")), expected);
  EXPECT_EQ(f.stats().writes, 2u);
}

TEST(AccessLogFile, DestructorWritesWhatIsBuffered) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  {
    AccessLogFile f(r, dir.file("access.log"));
    ASSERT_EQ(f.open(), 0);
    f.append("last words");
  }
  EXPECT_EQ(read_file(dir.file("access.log")), "last words\n");
}

TEST(AccessLogFile, ReopenAfterRenameLikeLogrotate) {
  TempDir dir;
  std::string path = dir.file("access.log");
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, path);
  ASSERT_EQ(f.open(), 0);
  int fd = f.fd();
  bool ok = run_script(r, {[&] {
                             f.append("before");
                             f.flush();
                             return true;
                           },
                           [&] { return !f.write_in_flight(); },
                           [&] {
                             // logrotate: rename, then SIGUSR1 (whose handler calls request_log_reopen()).
                             EXPECT_EQ(rename(path.c_str(), (path + ".1").c_str()), 0);
                             f.append("after rename, before reopen");
                             base::request_log_reopen();
                             f.flush_if_due(r.now_ms());  // reopens (not due: nothing written)
                             EXPECT_EQ(f.stats().reopens, 1u);
                             EXPECT_FALSE(f.write_in_flight());
                             EXPECT_EQ(f.fd(), fd);  // same fd number, new file
                             EXPECT_EQ(file_size(path), 0);
                             f.append("after reopen");
                             f.flush();
                             return true;
                           },
                           [&] { return !f.write_in_flight(); }});
  ASSERT_TRUE(ok);
  // Lines buffered when the signal came go to the new file: the buffer is written after the reopen.
  EXPECT_EQ(read_file(path + ".1"), "before\n");
  EXPECT_EQ(read_file(path), "after rename, before reopen\nafter reopen\n");
}

TEST(AccessLogFile, ReopenWhileAWriteIsQueuedKeepsLinesWhole) {
  TempDir dir;
  std::string path = dir.file("access.log");
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, path, 100, 60000);
  ASSERT_EQ(f.open(), 0);
  bool ok = run_script(r, {[&] {
                             for (int i = 0; i < 15; ++i) f.append(line10(i));  // 0-9 queued, 10-14 buffered
                             EXPECT_TRUE(f.write_in_flight());
                             EXPECT_EQ(rename(path.c_str(), (path + ".1").c_str()), 0);
                             EXPECT_EQ(f.reopen(), 0);
                             f.flush();
                             return true;
                           },
                           [&] { return !f.write_in_flight() && f.buffered_bytes() == 0; }});
  ASSERT_TRUE(ok);
  // Each write lands whole in one of the files; together they hold every line once, in order.
  std::string a = read_file(path + ".1"), b = read_file(path);
  std::string first, second;
  for (int i = 0; i < 10; ++i) absl::StrAppend(&first, line10(i), "\n");
  for (int i = 10; i < 15; ++i) absl::StrAppend(&second, line10(i), "\n");
  EXPECT_TRUE((a == first && b == second) || (a.empty() && b == first + second)) << a << "|" << b;
  EXPECT_EQ(f.stats().reopens, 1u);
}

TEST(AccessLogFile, OpenFailureCountsDrops) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogFile f(r, dir.file("no/such/dir/access.log"));
  EXPECT_EQ(f.open(), -ENOENT);
  EXPECT_TRUE(f.append("lost"));
  EXPECT_EQ(f.flush_sync(), -EBADF);
  EXPECT_EQ(f.stats().dropped_lines, 1u);
  AccessLogs logs(r);
  int err = 0;
  EXPECT_EQ(logs.get(dir.file("no/such/dir/x.log"), AccessLogFile::kDefaultBufferBytes,
                     AccessLogFile::kDefaultFlushIntervalMs, &err),
            nullptr);
  EXPECT_EQ(err, ENOENT);
}

TEST(AccessLogs, OneFilePerPathFlushedByTheTimer) {
  TempDir dir;
  reactor::Reactor r(0, 64);
  AccessLogs logs(r, /*tick_ms=*/10);
  AccessLogFile* a = logs.get(dir.file("a.log"), 4096, /*flush_interval_ms=*/50);
  AccessLogFile* b = logs.get(dir.file("b.log"), 4096, 50);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(logs.get(dir.file("a.log")), a);
  EXPECT_EQ(logs.size(), 2u);
  logs.start();
  uint64_t t0 = 0, t_written = 0;
  bool ok = run_script(r, {[&] {
                             t0 = r.now_ms();
                             a->append("to a");
                             b->append("to b");
                             return true;
                           },
                           [&] {
                             if (file_size(dir.file("a.log")) <= 0 || file_size(dir.file("b.log")) <= 0) return false;
                             t_written = r.now_ms();
                             return true;
                           }},
                       3000);
  ASSERT_TRUE(ok);
  EXPECT_GE(t_written - t0, 50u);   // not before the flush interval
  EXPECT_LT(t_written - t0, 1000u); // but soon after it
  EXPECT_EQ(read_file(dir.file("a.log")), "to a\n");
  EXPECT_EQ(read_file(dir.file("b.log")), "to b\n");
}

TEST(AccessLogFile, TwoCoresAppendingToOnePathNeverSplitLines) {
  TempDir dir;
  std::string path = dir.file("shared.log");
  constexpr int kCores = 2;
  constexpr int kLines = 3000;
  std::vector<std::thread> threads;
  std::vector<AccessLogStats> stats(kCores);
  for (int c = 0; c < kCores; ++c) {
    threads.emplace_back([&, c] {
      reactor::Reactor r(c, 64);
      AccessLogFile f(r, path, 4096, 60000);  // small buffers: many writes, both cores interleaving
      ASSERT_EQ(f.open(), 0);
      int next = 0;
      bool ok = run_script(r, {[&] {
                                 // 100 lines per tick; a drop (both buffers busy) is retried next tick.
                                 for (int n = 0; n < 100 && next < kLines; ++n) {
                                   if (!f.append(absl::StrFormat("core=%d seq=%05d %s", c, next, std::string(60, 'a' + c)))) break;
                                   ++next;
                                 }
                                 if (next < kLines) return false;
                                 f.flush();
                                 return true;
                               },
                               [&] { return !f.write_in_flight() && f.buffered_bytes() == 0; }},
                           20000);
      EXPECT_TRUE(ok);
      stats[c] = f.stats();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> lines = absl::StrSplit(read_file(path), '\n');
  ASSERT_EQ(lines.back(), "");
  lines.pop_back();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kCores * kLines));
  const std::regex re(R"(^core=(\d) seq=(\d{5}) ([ab]){60}$)");
  int next[kCores] = {};
  for (const std::string& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    int c = std::stoi(m[1].str());
    EXPECT_EQ(m[3].str()[0], 'a' + c);
    EXPECT_EQ(std::stoi(m[2].str()), next[c]);
    ++next[c];
  }
  for (int c = 0; c < kCores; ++c) {
    EXPECT_EQ(next[c], kLines);
    EXPECT_EQ(stats[c].lines, static_cast<uint64_t>(kLines));
    EXPECT_GT(stats[c].writes, 10u);
  }
}

}  // namespace
}  // namespace kosoku::access_log
