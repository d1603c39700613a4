#include "core/cache/purge.hh"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_paths.hh"
#include "core/cache/purge_log.hh"
#include "core/cache/tags.hh"

namespace kosoku::cache {

bool purge_match(std::string_view p, std::string_view k) {
  // Iterative glob with one backtrack point (the last '*'): linear in practice, never exponential.
  size_t pi = 0, ki = 0, star = std::string_view::npos, mark = 0;
  while (ki < k.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ki;
    } else if (pi < p.size() && p[pi] == k[ki]) {
      ++pi;
      ++ki;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ki = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

PurgeSelection::PurgeSelection(CachePath& path, const PurgeTarget& target, bool soft, int64_t now_s)
    : path_(path), target_(target), soft_(soft), now_s_(now_s) {
  switch (target_.kind) {
    case PurgeTarget::Kind::kAll:
      phase_ = Phase::kBuckets;
      break;
    case PurgeTarget::Kind::kPrefix:
    case PurgeTarget::Kind::kGlob:
      phase_ = Phase::kShards;
      shard_cost_ = std::max<size_t>(1, path_.zone().keys().size() / KeyIndex::shard_count());
      break;
    case PurgeTarget::Kind::kTags:
      // An entry with several of the tags comes more than once: its second take finds it gone.
      for (const std::string& tag : target_.tags) path_.zone().tags().entries_of(tag, hashes_);
      phase_ = Phase::kHashes;
      break;
    case PurgeTarget::Kind::kExact:
      phase_ = Phase::kExact;
      break;
  }
}

void PurgeSelection::take(const EntryView& v) {
  CacheZone& z = path_.zone();
  if (soft_) {
    if (z.mark_stale(v, now_s_)) {
      ++result_.removed;
      result_.bytes += v.fs_size;
    }
    return;
  }
  std::optional<EntryView> gone = z.forget(v);
  if (!gone) return;
  if (gone->exists()) {
    files_.push_back(gone->hash);
    ++result_.removed;
    result_.bytes += gone->fs_size;
  } else if (gone->flags & kEntryPrimary) {
    ++result_.removed;  // a placeholder is not a cached response
  }
}

void PurgeSelection::take_hash(const Hash128& h) {
  if (std::optional<EntryView> v = path_.zone().peek(h)) take(*v);
}

bool PurgeSelection::step(size_t entries) {
  CacheZone& z = path_.zone();
  size_t budget = entries;
  while (budget > 0 && phase_ != Phase::kDone) {
    switch (phase_) {
      case Phase::kExact: {
        const Hash128 h = hash_key(target_.key);
        take_hash(h);
        // Every Vary variant of the key, even when its primary entry is gone (a variant must never outlive a
        // purge of its key). Only zones that ever stored a Vary response have variants to look for.
        variants_of_ = h.tag();
        phase_ = z.vary().get(1).empty() ? Phase::kDone : Phase::kVariants;
        cursor_ = 0;
        --budget;
        break;
      }
      case Phase::kVariants:
      case Phase::kBuckets: {
        const size_t chunk = std::max<size_t>(1, std::min(kStepBuckets, budget / CacheZone::kWays));
        const size_t last = std::min(cursor_ + chunk, z.bucket_count());
        std::vector<EntryView> views;
        z.for_each_in(cursor_, last, [&](const EntryView& v) {
          if (phase_ == Phase::kBuckets || ((v.flags & kEntryVariant) && v.parent == variants_of_)) views.push_back(v);
        });
        for (const EntryView& v : views) take(v);
        cursor_ = last;
        budget = budget > chunk * CacheZone::kWays ? budget - chunk * CacheZone::kWays : 0;
        if (cursor_ >= z.bucket_count()) phase_ = Phase::kDone;
        break;
      }
      case Phase::kShards: {
        std::vector<Hash128> hashes;
        z.keys().for_each_in_shard(cursor_, [&](const Hash128& h, std::string_view key) {
          if (target_matches(target_, key)) hashes.push_back(h);
        });
        for (const Hash128& h : hashes) take_hash(h);
        ++cursor_;
        budget = budget > shard_cost_ ? budget - shard_cost_ : 0;
        if (cursor_ >= KeyIndex::shard_count()) phase_ = Phase::kDone;
        break;
      }
      case Phase::kHashes: {
        const size_t last = std::min(cursor_ + budget, hashes_.size());
        for (size_t i = cursor_; i < last; ++i) {
          // Within the target's key scope (a tag purge stays within the request's host).
          std::optional<std::string> key;
          if (!target_.key.empty() && (!(key = z.keys().get(hashes_[i])) || !target_matches(target_, *key))) continue;
          take_hash(hashes_[i]);
        }
        budget -= last - cursor_;
        cursor_ = last;
        if (cursor_ >= hashes_.size()) {
          phase_ = Phase::kDone;
          std::vector<Hash128>().swap(hashes_);
        }
        break;
      }
      case Phase::kDone:
        break;
    }
  }
  return phase_ == Phase::kDone;
}

bool purge_unlink_due(CachePath& path, const Hash128& h) {
  std::optional<EntryView> v = path.zone().peek(h);
  return !v || !v->exists();
}

PurgeResult purge(CachePath& path, const PurgeTarget& target, const std::function<int(const std::string&)>& unlink_file,
                  int64_t now_s, bool soft) {
  PurgeResult failed;
  path.recent_purges().add(target);
  if (const std::string& log = path.purge_log().file(0); !log.empty()) {
    const std::string rec = "\n" + encode_purge_record(PurgeRecord{now_s, soft, target});
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const bool ok = fd >= 0 && ::write(fd, rec.data(), rec.size()) == static_cast<ssize_t>(rec.size());
    const int e = errno;
    if (fd >= 0) ::close(fd);
    if (!ok) {
      failed.log_error = e != 0 ? e : EIO;
      return failed;
    }
  }
  PurgeSelection sel(path, target, soft, now_s);
  while (!sel.step(SIZE_MAX)) {
  }
  PurgeResult r = sel.result();
  for (const Hash128& h : sel.files()) {
    if (!purge_unlink_due(path, h)) continue;
    const std::string file = path.path_of(h);
    const int rc = unlink_file(file);
    if (rc != 0 && rc != -ENOENT) {
      ++r.failed;
      r.error = -rc;
      r.failed_file = file;
      break;
    }
  }
  return r;
}

PurgeTarget console_target(std::string_view key) {
  PurgeTarget t;
  t.key.assign(key);
  if (key == "*") {
    t.kind = PurgeTarget::Kind::kAll;
  } else if (is_wildcard(key)) {
    t.kind = PurgeTarget::Kind::kGlob;
  }
  return t;
}

constexpr std::string_view kConsoleUsage =
    "usage: cache stats | cache purge ZONE KEY|PATTERN*|*|tag TAG... | cache soft-purge ZONE KEY|PATTERN*|*|tag TAG...\n";

std::string console_command(std::string_view line) {
  std::vector<std::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
  CacheRegistry* reg = registry();
  if (reg == nullptr) return "no proxy_cache_path configured\n";
  if (w.size() >= 2 && w[1] == "stats") {
    std::string out;
    for (const auto& p : reg->paths()) {
      CacheZone& z = p->zone();
      absl::StrAppend(&out, z.name(), " ", p->dir(), " entries=", z.entries(), " bytes=", z.bytes(),
                      " max_size=", p->conf().max_size, " loaded=", p->loaded() ? "yes" : "no",
                      " tags=", z.tags().tags(), " tagged=", z.tags().pairs(), "\n");
      const CachePath::PurgeCounters& c = p->purge_counters();
      constexpr auto kRelaxed = std::memory_order_relaxed;
      absl::StrAppend(&out, "  purges: exact=", c.exact.load(kRelaxed), " prefix=", c.prefix.load(kRelaxed),
                      " all=", c.all.load(kRelaxed), " tag=", c.tags.load(kRelaxed), " soft=", c.soft.load(kRelaxed),
                      " removed=", c.entries.load(kRelaxed), " removed_bytes=", c.bytes.load(kRelaxed),
                      " soft_marked=", c.soft_entries.load(kRelaxed),
                      " soft_served_stale=", c.soft_served_stale.load(kRelaxed),
                      " unlink_failures=", c.unlink_failures.load(kRelaxed), "\n");
    }
    return out;
  }
  const bool soft = w.size() >= 4 && w[1] == "soft-purge";
  if (w.size() >= 4 && (w[1] == "purge" || soft)) {
    CachePath* p = reg->find(w[2]);
    if (p == nullptr) return absl::StrCat("unknown cache zone \"", w[2], "\"\n");
    if (!p->loaded()) return "the cache loader has not finished: entries not yet loaded could not be purged\n";
    PurgeTarget target;
    if (w[3] == "tag" && w.size() >= 5) {
      target.kind = PurgeTarget::Kind::kTags;
      for (size_t i = 4; i < w.size(); ++i) {
        if (!valid_tag(w[i])) return absl::StrCat("invalid tag \"", w[i], "\"\n");
        target.tags.emplace_back(w[i]);
      }
    } else if (w.size() == 4) {
      target = console_target(w[3]);
    } else {
      return std::string(kConsoleUsage);
    }
    PurgeResult r = purge(
        *p, target, [](const std::string& f) { return ::unlink(f.c_str()) == 0 ? 0 : -errno; }, time(nullptr), soft);
    if (r.log_error != 0) {
      return absl::StrCat("failed: write() \"", p->dir(), "/purge.0.log\" failed (", r.log_error, ": ",
                          std::strerror(r.log_error), "); nothing purged\n");
    }
    p->count_purge(target, soft, r);
    if (soft) return absl::StrCat(r.removed > 0 ? "marked stale " : "not found ", r.removed, " entries\n");
    if (r.failed > 0) {
      return absl::StrCat("purged ", r.removed, " entries, ", r.bytes, " bytes; unlink() \"", r.failed_file,
                          "\" failed (", r.error, ": ", std::strerror(r.error),
                          "): the purge log keeps those entries purged, the next start removes their files\n");
    }
    return absl::StrCat(r.removed > 0 ? "purged " : "not found ", r.removed, " entries, ", r.bytes, " bytes\n");
  }
  return std::string(kConsoleUsage);
}

}  // namespace kosoku::cache
