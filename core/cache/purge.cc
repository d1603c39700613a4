#include "core/cache/purge.hh"

#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_paths.hh"
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

PurgeJob::PurgeJob(CachePath& path, const PurgeTarget& target) : path_(path) {
  CacheZone& z = path.zone();
  auto add = [&](const EntryView& v) {
    if (v.exists()) {
      files_.push_back(v);
    } else {
      fileless_.push_back(v);
    }
  };
  std::vector<Hash128> hashes;
  switch (target.kind) {
    case PurgeTarget::Kind::kAll:
      z.for_each(add);
      return;
    case PurgeTarget::Kind::kPrefix:
    case PurgeTarget::Kind::kGlob:
      z.keys().for_each([&](const Hash128& h, std::string_view key) {
        if (target_matches(target, key)) hashes.push_back(h);
      });
      break;
    case PurgeTarget::Kind::kTags: {
      for (const std::string& tag : target.tags) z.tags().entries_of(tag, hashes);
      std::sort(hashes.begin(), hashes.end(), [](const Hash128& a, const Hash128& b) {
        return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
      });
      hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
      if (!target.key.empty()) {
        std::erase_if(hashes, [&](const Hash128& h) {
          std::optional<std::string> key = z.keys().get(h);
          return !key || !target_matches(target, *key);
        });
      }
      break;
    }
    case PurgeTarget::Kind::kExact: {
      const Hash128 h = hash_key(target.key);
      hashes.push_back(h);
      // Every Vary variant of the key, even when its primary entry is gone (a variant must never outlive a purge
      // of its key). Only zones that ever stored a Vary response have variants to look for.
      if (!z.vary().get(1).empty()) {
        const uint64_t tag = h.tag();
        z.for_each([&](const EntryView& v) {
          if ((v.flags & kEntryVariant) && v.parent == tag) add(v);
        });
      }
      break;
    }
  }
  for (const Hash128& h : hashes) {
    if (std::optional<EntryView> v = z.peek(h)) add(*v);
  }
}

const EntryView* PurgeJob::next() {
  if (result_.failed > 0 || next_ >= files_.size()) return nullptr;
  return &files_[next_++];
}

void PurgeJob::unlinked(const EntryView& v, int result) {
  if (result != 0 && result != -ENOENT) {
    if (result_.failed++ == 0) {
      result_.error = -result;
      result_.failed_file = path_.path_of(v.hash);
    }
    return;
  }
  // The file is gone. If the entry changed meanwhile (a new version committed over the same file name), the
  // new entry stays: whether the unlink took its file or not, a lookup that finds no file is a miss.
  path_.zone().forget(v);
  ++result_.removed;
  result_.bytes += v.fs_size;
}

void PurgeJob::finish() {
  if (finished_) return;
  finished_ = true;
  if (result_.failed > 0 || next_ < files_.size()) return;  // a file failed, or the purge was cut short
  for (const EntryView& v : fileless_) {
    std::optional<EntryView> gone = path_.zone().forget(v);
    if (gone && (gone->flags & kEntryPrimary)) ++result_.removed;  // a placeholder is not a cached response
  }
}

PurgeResult purge(CachePath& path, const PurgeTarget& target, const std::function<int(const std::string&)>& unlink_file) {
  PurgeJob job(path, target);
  while (const EntryView* v = job.next()) job.unlinked(*v, unlink_file(path.path_of(v->hash)));
  job.finish();
  return job.result();
}

PurgeResult soft_purge(CachePath& path, const PurgeTarget& target, int64_t now_s) {
  PurgeJob job(path, target);
  PurgeResult r;
  while (const EntryView* v = job.next()) {
    if (path.zone().mark_stale(*v, now_s)) {
      ++r.removed;
      r.bytes += v->fs_size;
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
                      " soft_served_stale=", c.soft_served_stale.load(kRelaxed), "\n");
    }
    return out;
  }
  const bool soft = w.size() >= 4 && w[1] == "soft-purge";
  if (w.size() >= 4 && (w[1] == "purge" || soft)) {
    CachePath* p = reg->find(w[2]);
    if (p == nullptr) return absl::StrCat("unknown cache zone \"", w[2], "\"\n");
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
    if (soft) {
      PurgeResult r = soft_purge(*p, target, time(nullptr));
      p->count_purge(target, true, r);
      return absl::StrCat(r.removed > 0 ? "marked stale " : "not found ", r.removed, " entries\n");
    }
    PurgeResult r = purge(*p, target, [](const std::string& f) {
      return ::unlink(f.c_str()) == 0 ? 0 : -errno;
    });
    p->count_purge(target, false, r);
    if (r.failed > 0) {
      return absl::StrCat("failed: unlink() \"", r.failed_file, "\" failed (", r.error, ": ", std::strerror(r.error),
                          "); purged ", r.removed, " entries, ", r.bytes, " bytes before it\n");
    }
    return absl::StrCat(r.removed > 0 ? "purged " : "not found ", r.removed, " entries, ", r.bytes, " bytes\n");
  }
  return std::string(kConsoleUsage);
}

}  // namespace kosoku::cache
