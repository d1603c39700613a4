#include "core/cache/purge.hh"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_paths.hh"

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

PurgeResult purge(CachePath& path, std::string_view pattern, const std::function<void(std::string)>& unlink_file) {
  CacheZone& z = path.zone();
  PurgeResult res;
  auto drop = [&](const EntryView& v) {
    ++res.removed;
    if (v.exists()) {
      res.bytes += v.fs_size;
      unlink_file(path.path_of(v.hash));
    }
  };
  std::vector<Hash128> victims;
  if (pattern == "*") {
    z.for_each([&](const EntryView& v) { victims.push_back(v.hash); });
  } else if (is_wildcard(pattern)) {
    z.keys().for_each([&](const Hash128& h, std::string_view key) {
      if (purge_match(pattern, key)) victims.push_back(h);
    });
  } else {
    const Hash128 h = hash_key(pattern);
    victims.push_back(h);
    // Every Vary variant of the key, even when its primary entry is gone (a variant must never outlive a purge
    // of its key). Only zones that ever stored a Vary response have variants to look for.
    if (!z.vary().get(1).empty()) {
      const uint64_t tag = h.tag();
      z.for_each([&](const EntryView& v) {
        if ((v.flags & kEntryVariant) && v.parent == tag) victims.push_back(v.hash);
      });
    }
  }
  for (const Hash128& h : victims) {
    std::optional<EntryView> v = z.remove(h);
    if (!v) continue;
    if (!v->exists() && !(v->flags & kEntryPrimary)) continue;  // a placeholder is not a cached response
    drop(*v);
  }
  return res;
}

std::string console_command(std::string_view line) {
  std::vector<std::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
  CacheRegistry* reg = registry();
  if (reg == nullptr) return "no proxy_cache_path configured\n";
  if (w.size() >= 2 && w[1] == "stats") {
    std::string out;
    for (const auto& p : reg->paths()) {
      CacheZone& z = p->zone();
      absl::StrAppend(&out, z.name(), " ", p->dir(), " entries=", z.entries(), " bytes=", z.bytes(),
                      " max_size=", p->conf().max_size, " loaded=", p->loaded() ? "yes" : "no", "\n");
    }
    return out;
  }
  if (w.size() == 4 && w[1] == "purge") {
    CachePath* p = reg->find(w[2]);
    if (p == nullptr) return absl::StrCat("unknown cache zone \"", w[2], "\"\n");
    PurgeResult r = purge(*p, w[3], [](std::string f) { ::unlink(f.c_str()); });
    return absl::StrCat(r.removed > 0 ? "purged " : "not found ", r.removed, " entries, ", r.bytes, " bytes\n");
  }
  return "usage: cache stats | cache purge ZONE KEY|PATTERN*|*\n";
}

}  // namespace kosoku::cache
