#include "core/rules/persist.hh"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/rules/json.hh"

namespace kosoku::rules {

namespace {

std::string errno_text(std::string_view call, std::string_view path, int err) {
  return absl::StrCat(call, "() \"", path, "\" failed (", err, ": ", std::strerror(err), ")");
}

// FNV-1a, 64 bits: stable across processes and builds (absl::Hash is seeded per process).
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
uint64_t fnv1a(uint64_t h, std::string_view data) {
  for (char c : data) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

constexpr std::string_view kTrailerPrefix = "# checksum ";
constexpr std::string_view kChecksumPrefix = "# checksum fnv1a64=";

// Where the file a write replaces is kept.
std::string previous_path(const std::string& path) { return path + ".prev"; }

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

bool load_rules_file(const std::string& path, std::vector<RuleSet::Change>* out, bool* trusted, std::string* error) {
  *trusted = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    *error = errno_text("open", path, errno);
    return false;
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = errno_text("read", path, errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const std::string prev = previous_path(path);
  auto fail = [&](size_t line, std::string_view msg) {
    *error = absl::StrCat(path, ":", line, ": ", msg);
    if (::access(prev.c_str(), F_OK) == 0) absl::StrAppend(error, " (the previous file kosoku wrote is ", prev, ")");
    return false;
  };
  if (text.empty()) {
    return fail(1, "the file is empty: a rules file ends with a \"# checksum ... hosts=N\" line (truncated?)");
  }
  // Counted before anything is parsed, so a cut line is reported as the cut it is.
  if (text.back() != '\n') {
    return fail(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1,
                "the last line has no newline: the file is truncated");
  }
  std::vector<RuleSet::Change> changes;
  size_t line_no = 0;
  uint64_t sum = kFnvOffset;
  size_t records = 0;
  std::string_view trailer;
  size_t trailer_line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();  // not reached: the text ends with '\n' (checked above)
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (absl::StartsWith(line, kTrailerPrefix)) {
      if (trailer_line != 0) {
        return fail(line_no, absl::StrCat("a second \"# checksum\" line (the first is line ", trailer_line, ")"));
      }
      trailer = line;
      trailer_line = line_no;
      continue;
    }
    if (line.empty() || line.front() == '#') continue;
    if (trailer_line != 0) {
      return fail(line_no, absl::StrCat("a host line after the \"# checksum\" trailer of line ", trailer_line));
    }
    sum = fnv1a(sum, line);
    sum = fnv1a(sum, "\n");
    ++records;
    RulesDoc doc;
    std::string err;
    if (!parse_rules_doc(line, &doc, &err)) return fail(line_no, err);
    if (!doc.host || !doc.patterns) return fail(line_no, "a line needs \"host\" and \"patterns\"");
    RuleSet::Change c;
    c.host = std::move(*doc.host);
    c.patterns = std::move(*doc.patterns);
    changes.push_back(std::move(c));
  }
  if (trailer_line == 0) {
    return fail(line_no, absl::StrCat("no \"# checksum fnv1a64=HEX hosts=N\" trailer after ", records,
                                      " host line(s): the file is truncated or was not written by kosoku (a file "
                                      "written by hand ends with \"# checksum none hosts=N\")"));
  }
  // "# checksum fnv1a64=<16 hex digits> hosts=N" or "# checksum none hosts=N".
  std::string_view rest = trailer.substr(kTrailerPrefix.size());
  const size_t space = rest.find(' ');
  const std::string_view sum_field = rest.substr(0, space);
  const std::string_view hosts_field = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  size_t declared = 0;
  const bool hand = sum_field == "none";
  const bool sum_ok = hand || (absl::StartsWith(sum_field, "fnv1a64=") && sum_field.size() == 8 + 16);
  if (!sum_ok || !absl::StartsWith(hosts_field, "hosts=") || hosts_field.size() == 6 ||
      !absl::SimpleAtoi(hosts_field.substr(6), &declared) ||
      hosts_field.find_first_not_of("0123456789", 6) != std::string_view::npos) {
    return fail(trailer_line, absl::StrCat("invalid trailer \"", trailer,
                                           "\": expected \"# checksum fnv1a64=HEX hosts=N\" or \"# checksum none "
                                           "hosts=N\""));
  }
  if (declared != records) {
    return fail(trailer_line, absl::StrCat("the trailer says hosts=", declared, " but the file has ", records,
                                           " host line(s): the file is truncated or was edited"));
  }
  if (!hand && sum_field.substr(8) != absl::StrCat(absl::Hex(sum, absl::kZeroPad16))) {
    return fail(trailer_line, "the checksum of the host lines does not match the trailer: the file was changed "
                              "after kosoku wrote it (a file edited by hand ends with \"# checksum none hosts=N\")");
  }
  *trusted = !hand;
  for (RuleSet::Change& c : changes) out->push_back(std::move(c));
  return true;
}

bool write_rules_file(const std::string& path, const RuleSet::Snapshot& snap, std::string* error) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = errno_text("open", tmp, errno);
    return false;
  }
  std::string buf = "# kosoku cache rules (cache_rules_file): one JSON object per line\n";
  constexpr size_t kFlushAt = 1 << 20;
  bool ok = true;
  uint64_t sum = kFnvOffset;
  size_t records = 0;
  for (const auto& shard : snap.shards) {
    if (shard == nullptr || !ok) continue;
    shard->for_each([&](const HostRules& r) {
      if (!ok) return;
      size_t start = buf.size();
      append_host_json(buf, r);
      buf.push_back('\n');
      sum = fnv1a(sum, std::string_view(buf).substr(start));
      ++records;
      if (buf.size() >= kFlushAt) {
        ok = write_all(fd, buf);
        buf.clear();
      }
    });
  }
  absl::StrAppend(&buf, kChecksumPrefix, absl::Hex(sum, absl::kZeroPad16), " hosts=", records, "\n");
  if (ok) ok = write_all(fd, buf);
  if (!ok) {
    *error = errno_text("write", tmp, errno);
  } else if (::fsync(fd) != 0) {
    *error = errno_text("fsync", tmp, errno);
    ok = false;
  }
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return false;
  }
  // The file being replaced stays as PATH.prev (a hard link: no copy), itself replaced atomically; a failure
  // here costs only the spare copy, never the write.
  const std::string prev = previous_path(path);
  const std::string prev_tmp = prev + ".tmp";
  ::unlink(prev_tmp.c_str());
  if (::link(path.c_str(), prev_tmp.c_str()) == 0 && ::rename(prev_tmp.c_str(), prev.c_str()) != 0) {
    ::unlink(prev_tmp.c_str());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = errno_text("rename", tmp, errno);
    ::unlink(tmp.c_str());
    return false;
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (::fsync(dfd) != 0) {
      *error = errno_text("fsync", dir, errno);
      ok = false;
    }
    ::close(dfd);
  }
  return ok;
}

Persister::Persister(RuleSet& set, std::string path, uint64_t durable_generation)
    : set_(set), path_(std::move(path)), durable_(durable_generation) {
  thread_ = std::thread([this] { run(); });
}

Persister::~Persister() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Persister::request() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_one();
}

std::string Persister::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

bool Persister::flush() {
  uint64_t want = set_.generation();
  request();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return durable() >= want || failed() >= want || stop_; });
  return durable() >= want;
}

void Persister::add_listener(Listener l) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.push_back(l);
}

void Persister::remove_listener(void* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(listeners_, [&](const Listener& l) { return l.ctx == ctx; });
}

void Persister::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return pending_ || stop_; });
    if (!pending_ && stop_) break;
    pending_ = false;
    lock.unlock();
    RuleSet::Snapshot snap = set_.snapshot();
    bool ok = true;
    std::string err;
    if (snap.generation > durable()) ok = write_rules_file(path_, snap, &err);
    snap.shards.clear();  // let retired shards go
    lock.lock();
    if (ok) {
      if (snap.generation > durable()) durable_.store(snap.generation, std::memory_order_release);
      failed_.store(0, std::memory_order_release);
      last_error_.clear();
    } else {
      failed_.store(snap.generation, std::memory_order_release);
      last_error_ = err;
      KOSOKU_LOG(kCrit, "cache_rules_file: %s", err);
    }
    for (const Listener& l : listeners_) l.wake(l.ctx);
    done_cv_.notify_all();
  }
}

}  // namespace kosoku::rules
