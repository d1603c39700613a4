// Error log: level filtering before formatting, nginx line format, ring of recent lines, reopen after
// rename (logrotate), stderr target, concurrent writers, rate limiting.
#include "core/base/log.hh"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kosoku::base {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kosoku-log-test-XXXXXX";
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

std::vector<std::string> read_lines(const std::string& path) {
  std::string s = read_file(path);
  std::vector<std::string> out = absl::StrSplit(s, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// A value whose formatting is observable: each conversion by StrFormat increments `conversions`.
struct Counted {
  int* conversions;
  friend absl::FormatConvertResult<absl::FormatConversionCharSet::kString> AbslFormatConvert(
      const Counted& c, const absl::FormatConversionSpec&, absl::FormatSink* sink) {
    ++*c.conversions;
    sink->Append("counted");
    return {true};
  }
};

TEST(LogLevel, NamesRoundTrip) {
  const char* names[] = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(log_level_name(static_cast<LogLevel>(i)), names[i]);
    ASSERT_TRUE(parse_log_level(names[i]).has_value());
    EXPECT_EQ(static_cast<int>(*parse_log_level(names[i])), i);
  }
  EXPECT_FALSE(parse_log_level("warning").has_value());
  EXPECT_FALSE(parse_log_level("ERROR").has_value());
  EXPECT_FALSE(parse_log_level("").has_value());
}

TEST(ErrorLog, FilteredLinesAreNeitherEvaluatedNorFormatted) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("error.log"), LogLevel::kWarn), 0);
  int evaluated = 0;
  int conversions = 0;
  auto side_effect = [&] { return ++evaluated; };
  KOSOKU_LOG_TO(log, LogLevel::kInfo, "info %d %s", side_effect(), Counted{&conversions});
  KOSOKU_LOG_TO(log, LogLevel::kDebug, "debug %d %s", side_effect(), Counted{&conversions});
  KOSOKU_LOG_TO(log, LogLevel::kNotice, "notice %d %s", side_effect(), Counted{&conversions});
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(conversions, 0);
  EXPECT_EQ(log.lines(), 0u);
  EXPECT_EQ(read_file(dir.file("error.log")), "");

  KOSOKU_LOG_TO(log, LogLevel::kWarn, "warn %d %s", side_effect(), Counted{&conversions});
  KOSOKU_LOG_TO(log, LogLevel::kEmerg, "emerg %d %s", side_effect(), Counted{&conversions});
  EXPECT_EQ(evaluated, 2);
  EXPECT_EQ(conversions, 2);
  EXPECT_EQ(log.lines(), 2u);

  log.set_level(LogLevel::kDebug);
  KOSOKU_LOG_TO(log, LogLevel::kDebug, "debug %d %s", side_effect(), Counted{&conversions});
  EXPECT_EQ(evaluated, 3);
  auto lines = read_lines(dir.file("error.log"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[0].ends_with("[warn] " + std::to_string(getpid()) + "#" + std::to_string(getpid()) +
                                 ": warn 1 counted"))
      << lines[0];
  EXPECT_NE(lines[1].find("[emerg] "), std::string::npos);
  EXPECT_TRUE(lines[1].ends_with(": emerg 2 counted"));
  EXPECT_TRUE(lines[2].ends_with(": debug 3 counted"));
}

TEST(ErrorLog, GlobalMacroFiltersOnGlobalLevel) {
  TempDir dir;
  ErrorLog& g = ErrorLog::global();
  ASSERT_EQ(g.open(dir.file("global.log"), LogLevel::kError), 0);
  int evaluated = 0;
  KOSOKU_LOG(kWarn, "not written %d", ++evaluated);
  KOSOKU_LOG(kError, "written %d", ++evaluated);
  EXPECT_EQ(evaluated, 1);
  auto lines = read_lines(dir.file("global.log"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].ends_with(": written 1"));
  ASSERT_EQ(g.open("stderr", LogLevel::kWarn), 0);
}

TEST(ErrorLog, LineFormatMatchesNginx) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("error.log"), LogLevel::kWarn), 0);
  time_t before = time(nullptr);
  std::thread t([&] {
    set_log_core(3);
    EXPECT_EQ(log_core(), 3);
    KOSOKU_LOG_TO(log, LogLevel::kError, "disk queue \"%s\" overflow: %d tasks waiting", "default", 7);
  });
  t.join();
  time_t after = time(nullptr);
  auto lines = read_lines(dir.file("error.log"));
  ASSERT_EQ(lines.size(), 1u);
  std::regex re(R"(^(\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}) \[error\] (\d+)#3: disk queue "default" overflow: 7 tasks waiting$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, re)) << lines[0];
  EXPECT_EQ(m[2].str(), std::to_string(getpid()));
  // Local time of the write, to the second.
  bool time_ok = false;
  for (time_t s = before - 1; s <= after; ++s) {
    tm lt;
    localtime_r(&s, &lt);
    char buf[32];
    strftime(buf, sizeof(buf), "%Y/%m/%d %H:%M:%S", &lt);
    if (m[1].str() == buf) time_ok = true;
  }
  EXPECT_TRUE(time_ok) << m[1].str();
  // The file is O_APPEND.
  EXPECT_TRUE(fcntl(log.fd(), F_GETFL) & O_APPEND);
  EXPECT_EQ(log.path(), dir.file("error.log"));
}

TEST(ErrorLog, NonLoopThreadPrintsItsThreadId) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kWarn), 0);
  long tid = 0;
  std::thread t([&] {
    tid = syscall(SYS_gettid);
    KOSOKU_LOG_TO(log, LogLevel::kWarn, "from a helper thread");
  });
  t.join();
  auto lines = read_lines(dir.file("e.log"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].ends_with(absl::StrCat("[warn] ", getpid(), "#", tid, ": from a helper thread"))) << lines[0];
}

TEST(ErrorLog, RingKeepsLast256LinesAndWraps) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kInfo), 0);
  EXPECT_TRUE(log.recent(10).empty());
  for (int i = 0; i < 3; ++i) KOSOKU_LOG_TO(log, LogLevel::kInfo, "line %d", i);
  auto r = log.recent(10);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[0].ends_with(": line 0"));
  EXPECT_TRUE(r[2].ends_with(": line 2"));
  EXPECT_NE(r[0].find(" [info] "), std::string::npos);
  EXPECT_EQ(r[0].find('\n'), std::string::npos);

  for (int i = 3; i < 300; ++i) KOSOKU_LOG_TO(log, LogLevel::kInfo, "line %d", i);
  EXPECT_EQ(log.lines(), 300u);
  auto all = log.recent(1000);
  ASSERT_EQ(all.size(), ErrorLog::kRingLines);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(all[i].ends_with(absl::StrCat(": line ", 300 - 256 + i))) << i << " " << all[i];
  }
  auto last3 = log.recent(3);
  ASSERT_EQ(last3.size(), 3u);
  EXPECT_TRUE(last3[0].ends_with(": line 297"));
  EXPECT_TRUE(last3[1].ends_with(": line 298"));
  EXPECT_TRUE(last3[2].ends_with(": line 299"));
  // The ring holds the same text as the file.
  auto file = read_lines(dir.file("e.log"));
  ASSERT_EQ(file.size(), 300u);
  EXPECT_EQ(file[299], last3[2]);
  EXPECT_EQ(file[44], all[0]);
}

TEST(ErrorLog, LongLinesAreTruncatedToMaxLine) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kWarn), 0);
  std::string big(5000, 'x');
  KOSOKU_LOG_TO(log, LogLevel::kError, "%s", big);
  std::string content = read_file(dir.file("e.log"));
  EXPECT_EQ(content.size(), ErrorLog::kMaxLine);
  EXPECT_EQ(content.back(), '\n');
  EXPECT_EQ(content[content.size() - 2], 'x');
}

TEST(ErrorLog, ControlBytesOfAMessageAreEscapedSoOneWriteIsOneLine) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kWarn), 0);
  // A decoded URI that tries to start a forged line, move the terminal, and carries a NUL and DEL.
  const std::string path("/srv/a\r\n2026/01/01 00:00:00 [emerg] 1#0: forged\x1b[2J\0\x7f\t\"q\\", 57);
  KOSOKU_LOG_TO(log, LogLevel::kError, "open() \"%s\" failed (%d: %s)", path, 2, "No such file or directory");
  auto lines = read_lines(dir.file("e.log"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("open() \"/srv/a\\x0D\\x0A2026/01/01 00:00:00 [emerg] 1#0: forged\\x1B[2J\\x00\\x7F\\x09"
                          "\"q\\\" failed (2: No such file or directory)"),
            std::string::npos)
      << lines[0];
  // The ring keeps the same escaped line.
  EXPECT_EQ(log.recent(1)[0], lines[0]);
  // log_escaped(): nginx's access-log escaping for client values the line quotes ('"' and '\\' too).
  EXPECT_EQ(log_escaped(path), "/srv/a\\x0D\\x0A2026/01/01 00:00:00 [emerg] 1#0: forged\\x1B[2J\\x00\\x7F\\x09"
                               "\\x22q\\x5C");
  EXPECT_EQ(log_escaped("caf\xc3\xa9 ok"), "caf\\xC3\\xA9 ok");
  KOSOKU_LOG_TO(log, LogLevel::kError, "open() \"%s\" failed", log_escaped(path));
  lines = read_lines(dir.file("e.log"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("open() \"/srv/a\\x0D\\x0A2026/01/01 00:00:00 [emerg] 1#0: forged\\x1B[2J\\x00\\x7F\\x09"
                          "\\x22q\\x5C\" failed"),
            std::string::npos)
      << lines[1];
}

TEST(ErrorLog, TruncationNeverCutsAnEscape) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kWarn), 0);
  std::string big(5000, '\n');
  KOSOKU_LOG_TO(log, LogLevel::kError, "%s", big);
  std::string content = read_file(dir.file("e.log"));
  EXPECT_LE(content.size(), ErrorLog::kMaxLine);
  ASSERT_EQ(content.find('\n'), content.size() - 1);
  EXPECT_EQ(content.substr(content.size() - 5), "\\x0A\n");
}

TEST(ErrorLog, ReopenAfterRenameLikeLogrotate) {
  TempDir dir;
  std::string path = dir.file("error.log");
  ErrorLog log;
  ASSERT_EQ(log.open(path, LogLevel::kWarn), 0);
  int fd = log.fd();
  KOSOKU_LOG_TO(log, LogLevel::kError, "before rotation");
  ASSERT_EQ(rename(path.c_str(), (path + ".1").c_str()), 0);
  KOSOKU_LOG_TO(log, LogLevel::kError, "still to the old file");
  EXPECT_FALSE(log.reopen_if_requested());

  request_log_reopen();  // what the SIGUSR1 handler does
  KOSOKU_LOG_TO(log, LogLevel::kError, "after rotation");  // reopens before writing
  EXPECT_FALSE(log.reopen_if_requested());
  EXPECT_EQ(log.fd(), fd);  // same fd number, new file

  auto old_lines = read_lines(path + ".1");
  ASSERT_EQ(old_lines.size(), 2u);
  EXPECT_TRUE(old_lines[0].ends_with(": before rotation"));
  EXPECT_TRUE(old_lines[1].ends_with(": still to the old file"));
  auto new_lines = read_lines(path);
  ASSERT_EQ(new_lines.size(), 1u);
  EXPECT_TRUE(new_lines[0].ends_with(": after rotation"));

  // Explicit reopen() from another thread, and reopen_if_requested() without a write.
  ASSERT_EQ(rename(path.c_str(), (path + ".2").c_str()), 0);
  std::thread t([&] { EXPECT_EQ(log.reopen(), 0); });
  t.join();
  KOSOKU_LOG_TO(log, LogLevel::kError, "third file");
  ASSERT_EQ(rename(path.c_str(), (path + ".3").c_str()), 0);
  request_log_reopen();
  EXPECT_TRUE(log.reopen_if_requested());
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);  // created by the reopen
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(read_lines(path + ".2").size(), 1u);
  ASSERT_EQ(read_lines(path + ".3").size(), 1u);
  EXPECT_TRUE(read_lines(path + ".3")[0].ends_with(": third file"));
}

TEST(ErrorLog, OpenFailureKeepsPreviousTarget) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kWarn), 0);
  EXPECT_EQ(log.open(dir.file("missing/dir/e.log"), LogLevel::kDebug), -ENOENT);
  EXPECT_EQ(log.level(), LogLevel::kWarn);
  EXPECT_EQ(log.path(), dir.file("e.log"));
  KOSOKU_LOG_TO(log, LogLevel::kWarn, "still here");
  EXPECT_EQ(read_lines(dir.file("e.log")).size(), 1u);
}

// Captures what is written to fd 2 while alive.
class StderrCapture {
 public:
  StderrCapture() {
    fflush(stderr);
    saved_ = dup(2);
    EXPECT_EQ(pipe(p_), 0);
    dup2(p_[1], 2);
  }
  std::string finish() {
    dup2(saved_, 2);
    close(saved_);
    close(p_[1]);
    // Read what is there without waiting for EOF: the log may keep its own dup of the write end.
    fcntl(p_[0], F_SETFL, O_NONBLOCK);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(p_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    close(p_[0]);
    return out;
  }

 private:
  int saved_ = -1;
  int p_[2] = {-1, -1};
};

TEST(ErrorLog, StderrTarget) {
  TempDir dir;
  ErrorLog log;
  EXPECT_EQ(log.path(), "stderr");
  EXPECT_EQ(log.fd(), 2);
  {
    StderrCapture cap;
    ASSERT_EQ(log.open("stderr", LogLevel::kInfo), 0);
    KOSOKU_LOG_TO(log, LogLevel::kInfo, "to stderr %d", 1);
    std::string out = cap.finish();
    EXPECT_TRUE(out.ends_with(": to stderr 1\n")) << out;
    EXPECT_NE(out.find(" [info] "), std::string::npos);
  }
  // file → stderr keeps the fd number (other threads may hold it) and points it at fd 2's file.
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kInfo), 0);
  int fd = log.fd();
  EXPECT_NE(fd, 2);
  KOSOKU_LOG_TO(log, LogLevel::kInfo, "to the file");
  {
    StderrCapture cap;
    ASSERT_EQ(log.open("stderr", LogLevel::kInfo), 0);
    EXPECT_EQ(log.fd(), fd);
    KOSOKU_LOG_TO(log, LogLevel::kInfo, "back to stderr");
    std::string out = cap.finish();
    EXPECT_TRUE(out.ends_with(": back to stderr\n")) << out;
  }
  EXPECT_EQ(read_lines(dir.file("e.log")).size(), 1u);
  EXPECT_EQ(log.reopen(), 0);  // a no-op for stderr
}

TEST(ErrorLog, ConcurrentWritersNeverTearLines) {
  TempDir dir;
  ErrorLog log;
  ASSERT_EQ(log.open(dir.file("e.log"), LogLevel::kInfo), 0);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  const std::regex re(R"(^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[info\] \d+#(\d): seq (\d+) payload x{100}$)");
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      for (const std::string& l : log.recent(ErrorLog::kRingLines)) {
        if (!std::regex_match(l, re)) torn.fetch_add(1);
      }
    }
  });
  std::vector<std::thread> writers;
  std::string payload(100, 'x');
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      set_log_core(t);
      for (int i = 0; i < kPerThread; ++i) KOSOKU_LOG_TO(log, LogLevel::kInfo, "seq %d payload %s", i, payload);
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(log.lines(), static_cast<uint64_t>(kThreads * kPerThread));
  auto lines = read_lines(dir.file("e.log"));
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kPerThread));
  int next[kThreads] = {};
  for (const std::string& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    int core = std::stoi(m[1].str());
    ASSERT_LT(core, kThreads);
    EXPECT_EQ(std::stoi(m[2].str()), next[core]);  // each core's lines in order, none lost
    ++next[core];
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kPerThread);
}

TEST(LogRateLimiter, OneLinePerInterval) {
  LogRateLimiter rl(1000);
  EXPECT_EQ(rl.interval_ms(), 1000u);
  EXPECT_TRUE(rl.allow(5000));
  EXPECT_EQ(rl.suppressed_before(), 0u);
  EXPECT_FALSE(rl.allow(5000));
  EXPECT_FALSE(rl.allow(5500));
  EXPECT_FALSE(rl.allow(5999));
  EXPECT_EQ(rl.total_suppressed(), 3u);
  EXPECT_TRUE(rl.allow(6000));
  EXPECT_EQ(rl.suppressed_before(), 3u);
  EXPECT_FALSE(rl.allow(6999));
  EXPECT_TRUE(rl.allow(9000));
  EXPECT_EQ(rl.suppressed_before(), 1u);
  EXPECT_TRUE(rl.allow(10000));
  EXPECT_EQ(rl.suppressed_before(), 0u);
  EXPECT_EQ(rl.total_suppressed(), 4u);
  LogRateLimiter first_at_zero(1000);
  EXPECT_TRUE(first_at_zero.allow(0));
  EXPECT_FALSE(first_at_zero.allow(999));
}

TEST(LogRateLimiter, LimitedMacrosWriteOneLinePerIntervalAndCountSuppressed) {
  TempDir dir;
  ErrorLog& g = ErrorLog::global();
  ASSERT_EQ(g.open(dir.file("limited.log"), LogLevel::kWarn), 0);
  LogRateLimiter rl(1000);
  int evaluated = 0;
  for (uint64_t now : {100u, 200u, 300u, 1100u, 1200u, 2100u}) {
    KOSOKU_LOG_LIMITED(rl, now, kError, "overflow %d", ++evaluated);
  }
  EXPECT_EQ(evaluated, 3);  // arguments are only evaluated for allowed lines
  // Below the level: neither limited nor written.
  KOSOKU_LOG_LIMITED(rl, 5000, kInfo, "filtered %d", ++evaluated);
  EXPECT_EQ(evaluated, 3);
  for (int i = 0; i < 5; ++i) KOSOKU_LOG_EVERY_MS(60000, kWarn, "every minute %d", i);
  auto lines = read_lines(dir.file("limited.log"));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(lines[0].ends_with("[error] " + std::to_string(getpid()) + "#" + std::to_string(getpid()) +
                                 ": overflow 1"))
      << lines[0];
  EXPECT_TRUE(lines[1].ends_with(": overflow 2, 2 similar messages suppressed")) << lines[1];
  EXPECT_TRUE(lines[2].ends_with(": overflow 3, 1 similar message suppressed")) << lines[2];
  EXPECT_TRUE(lines[3].ends_with(": every minute 0")) << lines[3];
  ASSERT_EQ(g.open("stderr", LogLevel::kWarn), 0);
}

}  // namespace
}  // namespace kosoku::base
