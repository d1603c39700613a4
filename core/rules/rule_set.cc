#include "core/rules/rule_set.hh"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/rules/host_name.hh"
#include "core/rules/pattern.hh"

namespace kosoku::rules {

namespace {

size_t shard_of(size_t hash) { return hash >> (64 - RuleSet::kShardBits); }

// Normalises and checks a host given to a writer; false with *error if it is unusable.
bool check_host(std::string_view in, std::string* out, std::string* error) {
  std::string scratch;
  std::string_view h = normalize_host(in, scratch);
  if (!valid_host(h)) {
    *error = absl::StrCat("invalid host \"", in, "\"");
    return false;
  }
  out->assign(h);
  return true;
}

}  // namespace

RuleSet::Outcome RuleSet::set(std::string_view host, std::span<const std::string> patterns) {
  std::vector<Change> c(1);
  c[0].patterns.assign(patterns.begin(), patterns.end());
  c[0].host.assign(host);
  return apply(std::move(c), true);
}

RuleSet::Outcome RuleSet::erase(std::string_view host) {
  Outcome out;
  Change c;
  if (!check_host(host, &c.host, &out.error)) return out;
  c.erase = true;
  std::lock_guard<std::mutex> lock(mu_);
  size_t h = hash_host(c.host);
  const Shard* s = owners_[shard_of(h)].get();
  if (s == nullptr || !s->find(c.host, h)) {
    out.error = absl::StrCat("no rules for host \"", c.host, "\"");
    out.generation = generation();
    return out;
  }
  return apply_locked(std::span<const Change>(&c, 1));
}

RuleSet::Outcome RuleSet::apply(std::vector<Change> changes, bool validate) {
  Outcome out;
  for (Change& c : changes) {
    std::string host;
    if (!check_host(c.host, &host, &out.error)) return out;
    c.host = std::move(host);
    if (c.erase) {
      c.patterns.clear();
      continue;
    }
    if (validate) {
      if (!validate_patterns(c.patterns, &out.error)) return out;
    } else {
      bool sizes_ok = c.patterns.size() <= kMaxPatterns;
      for (const std::string& p : c.patterns) sizes_ok = sizes_ok && p.size() <= kMaxPatternBytes;
      if (!sizes_ok) {
        out.error = absl::StrCat("too many or too long patterns for host \"", c.host, "\"");
        return out;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  return apply_locked(changes);
}

RuleSet::Outcome RuleSet::apply_locked(std::span<const Change> changes) {
  Outcome out;
  // Group the changes by shard, keeping their order.
  absl::flat_hash_map<size_t, std::vector<const Change*>> by_shard;
  for (const Change& c : changes) by_shard[shard_of(hash_host(c.host))].push_back(&c);
  if (!changes.empty()) {
    const Change& first = changes.front();
    size_t h = hash_host(first.host);
    const Shard* s = owners_[shard_of(h)].get();
    out.existed = s != nullptr && s->find(first.host, h).has_value();
  }

  std::vector<std::pair<size_t, std::shared_ptr<const Shard>>> fresh;
  fresh.reserve(by_shard.size());
  int64_t delta = 0;
  for (auto& [index, list] : by_shard) {
    absl::flat_hash_map<std::string_view, const Change*> latest;
    latest.reserve(list.size());
    for (const Change* c : list) latest[c->host] = c;
    const Shard* old = owners_[index].get();
    std::string blob;
    size_t old_count = 0;
    if (old != nullptr) {
      old_count = old->size();
      old->for_each([&](const HostRules& r) {
        if (!latest.contains(r.host)) append_record_encoded(blob, r.host, r.encoded);
      });
    }
    for (const Change* c : list) {
      if (latest[c->host] != c || c->erase) continue;
      append_record(blob, c->host, c->patterns);
    }
    auto shard = std::make_shared<const Shard>(next_version_++, std::move(blob));
    delta += static_cast<int64_t>(shard->size()) - static_cast<int64_t>(old_count);
    fresh.emplace_back(index, std::move(shard));
  }
  // Publish, then retire what was unpublished under one new epoch.
  std::vector<std::shared_ptr<const Shard>> old_shards;
  for (auto& [index, shard] : fresh) {
    shards_[index].store(shard.get(), std::memory_order_release);
    if (owners_[index]) old_shards.push_back(std::move(owners_[index]));
    owners_[index] = std::move(shard);
  }
  hosts_.store(static_cast<size_t>(static_cast<int64_t>(hosts_.load(std::memory_order_relaxed)) + delta),
               std::memory_order_relaxed);
  uint64_t gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  uint64_t epoch = qsbr_.advance();
  for (auto& s : old_shards) retired_.emplace_back(epoch, std::move(s));
  reclaim_locked();
  out.ok = true;
  out.generation = gen;
  return out;
}

std::optional<std::vector<std::string>> RuleSet::get(std::string_view host) const {
  std::string scratch;
  std::string_view h = normalize_host(host, scratch);
  std::lock_guard<std::mutex> lock(mu_);
  size_t hash = hash_host(h);
  const Shard* s = owners_[shard_of(hash)].get();
  if (s == nullptr) return std::nullopt;
  auto r = s->find(h, hash);
  if (!r) return std::nullopt;
  return r->patterns();
}

size_t RuleSet::list(size_t offset, size_t limit, const std::function<void(const HostRules&)>& f) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t pos = 0;
  size_t end = offset + limit < offset ? SIZE_MAX : offset + limit;
  for (const auto& s : owners_) {
    if (s == nullptr || s->size() == 0) continue;
    if (pos >= end) break;
    if (pos + s->size() <= offset) {
      pos += s->size();
      continue;
    }
    s->for_each([&](const HostRules& r) {
      if (pos >= offset && pos < end) f(r);
      ++pos;
    });
  }
  return hosts_.load(std::memory_order_relaxed);
}

RuleSet::Snapshot RuleSet::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.generation = generation();
  s.shards.assign(owners_.begin(), owners_.end());
  return s;
}

size_t RuleSet::reclaim_locked() {
  uint64_t min = qsbr_.min_seen();
  size_t n = 0;
  while (n < retired_.size() && retired_[n].first <= min) ++n;
  retired_.erase(retired_.begin(), retired_.begin() + static_cast<ptrdiff_t>(n));
  return retired_.size();
}

size_t RuleSet::reclaim() {
  std::lock_guard<std::mutex> lock(mu_);
  return reclaim_locked();
}

void RuleSet::try_reclaim() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock() && !retired_.empty()) reclaim_locked();
}

size_t RuleSet::retired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_.size();
}

size_t RuleSet::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& s : owners_) {
    // make_shared: the control block and the Shard in one allocation.
    if (s != nullptr) total += s->memory_bytes() + sizeof(Shard) + 2 * sizeof(void*);
  }
  return total;
}

}  // namespace kosoku::rules
