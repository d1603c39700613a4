// Test helpers for the disk tests: a temp directory, and a script of steps run INSIDE a real Reactor::run()
// (Reactor::run() returns once after stop(), so a test queues its waits and checks as steps and runs once).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/reactor/reactor.hh"

namespace kosoku::disk::testing {

/// mkdtemp under $TMPDIR (default /tmp); removed recursively at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kosoku-disk-XXXXXX";
    path_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

  /// Writes `data` to `name` (created or truncated); returns the full path.
  std::string write(std::string_view name, std::string_view data) const {
    std::string p = file(name);
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return {};
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fd);
    return p;
  }

 private:
  std::string path_;
};

/// Deterministic pseudo-random bytes (xorshift), so that byte-exact comparisons catch offset mistakes.
inline std::string pattern_bytes(size_t n, uint64_t seed = 0x9e3779b97f4a7c15ull) {
  std::string s(n, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

/// Steps run in order from a 1 ms timer inside Reactor::run(): a step returns true when it is finished,
/// false to be polled again on the next tick. run() stops the loop when every step finished, or at the
/// deadline (returns false then).
class LoopScript final : public reactor::Timer {
 public:
  explicit LoopScript(reactor::Reactor& r) : r_(r) {}
  ~LoopScript() {
    if (armed()) r_.timers().cancel(*this);
  }

  /// A step that runs once.
  LoopScript& then(std::function<void()> f) {
    steps_.push_back([f = std::move(f)] {
      f();
      return true;
    });
    return *this;
  }
  /// Wait until pred() holds (polled every tick, on the loop thread).
  LoopScript& wait_until(std::function<bool()> pred) {
    steps_.push_back(std::move(pred));
    return *this;
  }
  /// Wait `ms` milliseconds of the loop's clock (Reactor::now_ms()).
  LoopScript& sleep_ms(uint64_t ms) {
    steps_.push_back([this, ms, start = std::optional<uint64_t>()]() mutable {
      if (!start) start = r_.now_ms();
      return r_.now_ms() - *start >= ms;
    });
    return *this;
  }

  /// Runs the reactor (once: Reactor::run() is not restartable). True if every step finished in time.
  bool run(uint64_t timeout_ms = 10000) {
    r_.update_clock();
    deadline_ms_ = r_.now_ms() + timeout_ms;
    r_.timers().arm(*this, r_.now_ms());
    r_.run();
    return steps_.empty() && !timed_out_;
  }

  void fire() override {
    while (!steps_.empty()) {
      if (!steps_.front()()) break;
      steps_.pop_front();
    }
    if (steps_.empty()) {
      r_.stop();
    } else if (r_.now_ms() >= deadline_ms_) {
      timed_out_ = true;
      r_.stop();
    } else {
      r_.timers().arm(*this, r_.now_ms() + 1);
    }
  }

 private:
  reactor::Reactor& r_;
  std::deque<std::function<bool()>> steps_;
  uint64_t deadline_ms_ = 0;
  bool timed_out_ = false;
};

}  // namespace kosoku::disk::testing
