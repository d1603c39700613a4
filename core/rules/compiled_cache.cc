#include "core/rules/compiled_cache.hh"

#include "core/rules/pattern.hh"
#include "core/rules/shard.hh"

namespace kosoku::rules {

CompiledCache::CompiledCache(uint32_t max_sets, uint64_t inactive_ms)
    : max_(max_sets == 0 ? 1 : max_sets), inactive_ms_(inactive_ms) {}

CompiledCache::Result CompiledCache::get(const HostRules& rules, uint64_t version, uint64_t now_ms,
                                         std::string* error) {
  Result r;
  auto it = index_.find(rules.host);
  if (it != index_.end()) {
    Entry& e = *it->second;
    if (e.version != version) {
      if (e.encoded != rules.encoded) {
        e.set = compile_set(rules, error);
        e.failed = e.set == nullptr && !error->empty();
        e.encoded.assign(rules.encoded);
        r.compiled = true;
      }
      e.version = version;
    }
    e.last_used_ms = now_ms;
    lru_.splice(lru_.begin(), lru_, it->second);
    r.set = e.set.get();
    r.failed = e.failed;
    return r;
  }
  if (index_.size() >= max_) {
    index_.erase(lru_.back().host);
    lru_.pop_back();
    ++evictions_;
  }
  lru_.emplace_front();
  Entry& e = lru_.front();
  e.host.assign(rules.host);
  e.encoded.assign(rules.encoded);
  e.version = version;
  e.last_used_ms = now_ms;
  e.set = compile_set(rules, error);
  e.failed = e.set == nullptr && !error->empty();
  index_.emplace(std::string_view(e.host), lru_.begin());
  r.set = e.set.get();
  r.compiled = true;
  r.failed = e.failed;
  return r;
}

size_t CompiledCache::expire(uint64_t now_ms) {
  size_t n = 0;
  while (!lru_.empty() && lru_.back().last_used_ms + inactive_ms_ < now_ms) {
    index_.erase(lru_.back().host);
    lru_.pop_back();
    ++n;
  }
  return n;
}

}  // namespace kosoku::rules
