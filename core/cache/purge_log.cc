#include "core/cache/purge_log.hh"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/log.hh"
#include "core/cache/purge.hh"
#include "core/cache/tags.hh"

namespace kosoku::cache {

namespace {

constexpr std::string_view kReplayName = "purge.replay";

char kind_letter(PurgeTarget::Kind k) {
  switch (k) {
    case PurgeTarget::Kind::kExact: return 'e';
    case PurgeTarget::Kind::kPrefix: return 'p';
    case PurgeTarget::Kind::kAll: return 'a';
    case PurgeTarget::Kind::kGlob: return 'g';
    case PurgeTarget::Kind::kTags: return 't';
  }
  return 'e';
}

std::optional<PurgeTarget::Kind> kind_of(std::string_view s) {
  if (s.size() != 1) return std::nullopt;
  switch (s[0]) {
    case 'e': return PurgeTarget::Kind::kExact;
    case 'p': return PurgeTarget::Kind::kPrefix;
    case 'a': return PurgeTarget::Kind::kAll;
    case 'g': return PurgeTarget::Kind::kGlob;
    case 't': return PurgeTarget::Kind::kTags;
    default: return std::nullopt;
  }
}

std::string error_text(std::string_view call, const std::string& path, int err) {
  return absl::StrCat(call, "() \"", path, "\" failed (", err, ": ", std::strerror(err), ")");
}

// Blocking whole-file read (start-up only). False with errno set.
bool read_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      return n == 0;
    }
    out->append(buf, static_cast<size_t>(n));
  }
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void parse_records(std::string_view text, const std::string& file, std::vector<PurgeRecord>& out) {
  for (std::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (std::optional<PurgeRecord> r = decode_purge_record(line)) {
      out.push_back(std::move(*r));
    } else {
      KOSOKU_LOG(kWarn, "purge log \"%s\": a record that does not parse was skipped (%zu bytes)", file, line.size());
    }
  }
}

}  // namespace

std::string encode_purge_record(const PurgeRecord& r) {
  const PurgeTarget& t = r.target;
  std::string out = absl::StrCat("P1 ", r.at, " ", std::string(1, kind_letter(t.kind)),
                                 " ", r.soft ? 1 : 0, " ",
                                 t.host_end == std::string::npos ? int64_t{-1} : static_cast<int64_t>(t.host_end), " ",
                                 t.key.empty() ? std::string("-") : absl::BytesToHexString(t.key));
  for (const std::string& tag : t.tags) absl::StrAppend(&out, " ", tag);
  out.push_back('\n');
  return out;
}

std::optional<PurgeRecord> decode_purge_record(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::vector<std::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (w.size() < 6 || w[0] != "P1") return std::nullopt;
  PurgeRecord r;
  int64_t host_end = 0;
  std::optional<PurgeTarget::Kind> kind = kind_of(w[2]);
  if (!absl::SimpleAtoi(w[1], &r.at) || !kind || (w[3] != "0" && w[3] != "1") ||
      !absl::SimpleAtoi(w[4], &host_end) || host_end < -1) {
    return std::nullopt;
  }
  r.target.kind = *kind;
  r.soft = w[3] == "1";
  r.target.host_end = host_end < 0 ? std::string::npos : static_cast<size_t>(host_end);
  if (w[5] != "-") {
    if (w[5].size() % 2 != 0 || !std::all_of(w[5].begin(), w[5].end(), absl::ascii_isxdigit)) return std::nullopt;
    r.target.key = absl::HexStringToBytes(w[5]);
  }
  for (size_t i = 6; i < w.size(); ++i) {
    if (!valid_tag(w[i])) return std::nullopt;
    r.target.tags.emplace_back(w[i]);
  }
  if ((r.target.kind == PurgeTarget::Kind::kTags) != !r.target.tags.empty()) return std::nullopt;
  return r;
}

bool purge_record_covers(const PurgeRecord& r, const EntryMeta& m) {
  return m.freshness.request_time <= r.at && purge_target_selects(r.target, m);
}

bool purge_target_selects(const PurgeTarget& t, const EntryMeta& m) {
  switch (t.kind) {
    case PurgeTarget::Kind::kExact:
      return m.key == t.key;
    case PurgeTarget::Kind::kTags: {
      if (!target_matches(t, m.key)) return false;
      bool tagged = false;
      for_each_stored_tag(m.tags, [&](std::string_view tag) {
        tagged = tagged || std::find(t.tags.begin(), t.tags.end(), tag) != t.tags.end();
      });
      return tagged;
    }
    default:
      return target_matches(t, m.key);
  }
}

bool PurgeLog::is_log_file(std::string_view name) {
  return name == kReplayName || name == "purge.replay.tmp" ||
         (absl::StartsWith(name, "purge.") && absl::EndsWith(name, ".log"));
}

void PurgeLog::open(const std::string& dir, int cores) {
  // The previous runs' records: purge.replay (a start that did not finish loading) and every purge.N.log.
  const std::string replay = absl::StrCat(dir, "/", kReplayName);
  bool readable = true;
  auto read = [&](const std::string& f) {
    std::string text;
    if (!read_file(f, &text) && errno != ENOENT) {
      KOSOKU_LOG(kCrit, "%s", error_text("read", f, errno));
      readable = false;
    }
    parse_records(text, f, replay_);
  };
  read(replay);
  std::vector<std::string> logs;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (absl::StartsWith(name, "purge.") && absl::EndsWith(name, ".log")) logs.push_back(absl::StrCat(dir, "/", name));
    }
    ::closedir(d);
  }
  std::sort(logs.begin(), logs.end());
  for (const std::string& f : logs) read(f);
  // A soft record is carried into each run's log and also sits in purge.replay until the loader drops it: keep
  // one copy of each record.
  {
    absl::flat_hash_set<std::string> seen;
    std::vector<PurgeRecord> unique;
    for (PurgeRecord& r : replay_) {
      if (seen.insert(encode_purge_record(r)).second) unique.push_back(std::move(r));
    }
    replay_ = std::move(unique);
  }
  for (size_t i = 0; i < replay_.size(); ++i) {
    if (replay_[i].target.kind == PurgeTarget::Kind::kExact) {
      exact_[replay_[i].target.key].push_back(i);
    } else {
      others_.push_back(i);
    }
  }
  for (int c = 0; c < (cores > 0 ? cores : 1); ++c) files_.push_back(absl::StrCat(dir, "/purge.", c, ".log"));
  if (!readable) return;  // leave every file as it is: the next start reads them again
  // Written whole and renamed, so a crash leaves the old replay or the new one, never half of one. Only then
  // are the old logs removed; if it cannot be written, they stay (and this run appends to them).
  if (!replay_.empty()) {
    std::string all;
    for (const PurgeRecord& r : replay_) all += encode_purge_record(r);
    const std::string tmp = replay + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      KOSOKU_LOG(kCrit, "%s", error_text("open", tmp, errno));
      return;
    }
    const bool ok = write_all(fd, all) && ::fsync(fd) == 0;
    const int e = errno;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), replay.c_str()) != 0) {
      KOSOKU_LOG(kCrit, "%s", error_text(ok ? "rename" : "write", tmp, ok ? errno : e));
      ::unlink(tmp.c_str());
      return;
    }
    replay_path_ = replay;
  }
  for (const std::string& f : logs) ::unlink(f.c_str());
  // Core 0's log starts with the soft records.
  std::string carried;
  size_t soft = 0;
  for (const PurgeRecord& r : replay_) soft += r.soft;
  for (const PurgeRecord& r : replay_) {
    if (!r.soft) continue;
    if (soft > kMaxSoftRecords) {  // the oldest go first
      --soft;
      continue;
    }
    carried += encode_purge_record(r);
  }
  if (carried.empty()) return;
  const int fd = ::open(files_[0].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0 || !write_all(fd, carried)) {
    KOSOKU_LOG(kCrit, "%s: soft purges of earlier runs are not carried over (purge.replay is kept)",
               error_text(fd < 0 ? "open" : "write", files_[0], errno));
    carried_ = false;
  }
  if (fd >= 0) ::close(fd);
}

const std::string& PurgeLog::file(int core) const {
  static const std::string kNone;
  if (files_.empty()) return kNone;
  return files_[static_cast<size_t>(core) % files_.size()];
}

const PurgeRecord* PurgeLog::replayed_cover(const EntryMeta& m) const {
  const PurgeRecord* soft = nullptr;
  auto consider = [&](size_t i) {
    const PurgeRecord& r = replay_[i];
    if (!purge_record_covers(r, m)) return false;
    if (!r.soft) return true;
    if (soft == nullptr || r.at > soft->at) soft = &r;
    return false;
  };
  if (auto it = exact_.find(m.key); it != exact_.end()) {
    for (size_t i : it->second) {
      if (consider(i)) return &replay_[i];
    }
  }
  for (size_t i : others_) {
    if (consider(i)) return &replay_[i];
  }
  return soft;
}

void RecentPurges::add(const PurgeTarget& t) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t n = seq_.load(std::memory_order_relaxed) + 1;
  kept_.emplace_back(n, t);
  if (kept_.size() > kKept) {
    dropped_ = kept_.front().first;
    kept_.pop_front();
  }
  seq_.store(n, std::memory_order_release);
}

bool RecentPurges::cover(const EntryMeta& m, uint64_t since) const {
  if (seq_.load(std::memory_order_acquire) <= since) return false;
  std::lock_guard<std::mutex> lk(mu_);
  if (dropped_ > since) return true;  // a purge after `since` is no longer kept
  for (const auto& [n, t] : kept_) {
    if (n > since && purge_target_selects(t, m)) return true;
  }
  return false;
}

}  // namespace kosoku::cache
