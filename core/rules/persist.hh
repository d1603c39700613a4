// `cache_rules_file`: the rule set on disk, and the thread that keeps it there.
//
// Format: text, one JSON object per line, `{"host":"example.com","patterns":["\\.jpg$"]}` (json.hh); empty
// lines and lines starting with '#' are ignored; a later line for the same host wins. The last line is the
// trailer, `# checksum fnv1a64=HEX hosts=N`: FNV-1a 64 over the host lines (each with its '\n') and their
// count. Written whole and atomically: write PATH.tmp, fsync it, hard-link the current PATH to PATH.prev (the
// previous good file, kept for the operator), rename PATH.tmp over PATH, fsync the directory; so a crash
// leaves the old or the new file, never a torn one (a stale PATH.tmp is never read).
//
// A file that does not match its own trailer is refused, never loaded in part: no trailer (an empty file, a
// file cut at a line boundary), a trailer that is not the last line, a line cut in the middle (no newline at
// the end), `hosts=N` that is not the number of host lines, or a checksum that does not match. The error is
// `PATH:LINE: message` and names PATH.prev when it exists; kosoku then refuses to start (and `kosoku -t`
// fails with the same message). Restoring PATH.prev by itself was weighed and left out: it would serve rules
// one change old without anyone deciding it (a host's lost "nocache" could put private pages in the cache);
// the operator restores it with one `mv` after reading the message.
//
// A file written by hand ends with `# checksum none hosts=N` instead: the count is still checked (so a cut
// is still caught) and every pattern is validated by RE2. A file whose trailer carries kosoku's checksum was
// written by kosoku from validated rules, so loading it skips the RE2 validation (~7 us per host: 7 s at
// start for a million hosts). The checksum guards against damage and edits, not attacks: whoever can write
// the file can write any rules anyway.
//
// Writes happen on a dedicated thread (never on a loop): a change calls request(); the thread takes a
// snapshot of the set (shared_ptrs to the immutable shards, so it reads without holding any lock while it
// writes) and writes it. Changes made while a write runs are coalesced into the next write. durable() is
// the generation (RuleSet::generation) of the last file that reached the disk; waiting admin requests
// compare their change's generation with it. Listeners (each loop's Reactor::wake) are called after each
// write attempt.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/rules/rule_set.hh"

namespace kosoku::rules {

/// Reads a rules file into changes. A missing file is an empty set (true). A malformed line or a file that
/// does not match its trailer (see above) gives false with *error = "PATH:LINE: message" and nothing in
/// *out. *trusted: the trailer carries kosoku's checksum and it matches.
bool load_rules_file(const std::string& path, std::vector<RuleSet::Change>* out, bool* trusted, std::string* error);

/// Writes `snap` to `path` atomically, trailer included, keeping the file it replaces as PATH.prev (see
/// above). False with *error = "write() \"PATH.tmp\" failed (...)"; PATH is then untouched.
bool write_rules_file(const std::string& path, const RuleSet::Snapshot& snap, std::string* error);

class Persister {
 public:
  struct Listener {
    void (*wake)(void* ctx) = nullptr;
    void* ctx = nullptr;
  };

  /// Starts the writer thread. `durable_generation`: the generation the file already holds (after loading).
  Persister(RuleSet& set, std::string path, uint64_t durable_generation);
  /// Writes any pending change, then stops the thread.
  ~Persister();
  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  const std::string& path() const { return path_; }
  /// A change was published: write the set soon. Any thread; does not block on I/O.
  void request();
  /// Generation of the last durable file.
  uint64_t durable() const { return durable_.load(std::memory_order_acquire); }
  /// Generation of the last failed write attempt (0: none since the last success) and its error.
  uint64_t failed() const { return failed_.load(std::memory_order_acquire); }
  std::string last_error() const;
  /// Blocks until the file holds at least the set's current generation or a write failed (tests, shutdown).
  bool flush();

  void add_listener(Listener l);
  void remove_listener(void* ctx);

 private:
  void run();

  RuleSet& set_;
  std::string path_;
  std::atomic<uint64_t> durable_;
  std::atomic<uint64_t> failed_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the writer waits for work
  std::condition_variable done_cv_;  // flush() waits for a write
  bool pending_ = false;
  bool stop_ = false;
  std::string last_error_;
  std::vector<Listener> listeners_;
  std::thread thread_;
};

}  // namespace kosoku::rules
