// The rule set: host → list of URI patterns saying which URLs of that host ARE cached (pattern.hh), for
// millions of hosts, shared read-only by every core.
//
// Layout: 4096 shards chosen by the top bits of hash_host(host); each shard is an immutable compact table
// (shard.hh), so a host lookup is one atomic pointer load plus one hash-set probe (O(1)). A change copies only
// the affected shard (~1/4096 of the set: a few KiB even at millions of hosts), publishes it by a pointer
// store and retires the old shard through QSBR (qsbr.hh): readers take no lock and do no atomic
// read-modify-write. Each published shard carries a version unique in this set, which per-core caches
// (memo, compiled sets) compare to know whether what they remember is still current.
//
// Writers (the admin API on any core, the console, the loader) are serialised by a mutex and validate
// patterns (RE2) before touching anything: an invalid pattern is refused with RE2's message and the host's
// old rules stay. Writers are never on the request path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rules/qsbr.hh"
#include "core/rules/shard.hh"

namespace kosoku::rules {

class RuleSet {
 public:
  static constexpr int kShardBits = 12;
  static constexpr size_t kShards = size_t{1} << kShardBits;

  /// One change of a bulk apply(): set `host`'s patterns, or erase the host.
  struct Change {
    std::string host;
    std::vector<std::string> patterns;
    bool erase = false;
  };
  struct Outcome {
    bool ok = false;
    bool existed = false;     // set/erase: the host had rules before
    uint64_t generation = 0;  // the set's generation after the change (see generation())
    std::string error;        // !ok: why (invalid host/pattern, or "no rules" for erase)
  };
  /// A consistent copy of the whole set for the persister: the shards are kept alive by the shared_ptrs.
  struct Snapshot {
    uint64_t generation = 0;
    std::vector<std::shared_ptr<const Shard>> shards;  // null entries: empty shards
  };

  RuleSet() = default;
  RuleSet(const RuleSet&) = delete;
  RuleSet& operator=(const RuleSet&) = delete;

  // ---- request path: threads enrolled in qsbr(), between two quiescent points ----

  /// The shard of a host with hash `hash` (hash_host), or null when no host ever hashed there.
  const Shard* shard(size_t hash) const {
    return shards_[hash >> (64 - kShardBits)].load(std::memory_order_acquire);
  }
  Qsbr& qsbr() { return qsbr_; }

  // ---- changes and admin reads: any thread, serialised ----

  /// Replaces `host`'s pattern list (`host` is normalised here; an empty list means "nothing of this host is
  /// cached"). Refused, changing nothing, on an invalid host or pattern.
  Outcome set(std::string_view host, std::span<const std::string> patterns);
  /// Removes `host`'s rules (it falls back to the default). !ok with error "no rules for host ..." if none.
  Outcome erase(std::string_view host);
  /// Applies many changes as one publication (later changes win for the same host). All-or-nothing: the
  /// first invalid host/pattern refuses the whole batch. `validate` false skips the RE2 check (files this
  /// set wrote itself; a bad pattern then only shows up when compiled, and that host caches nothing).
  Outcome apply(std::vector<Change> changes, bool validate = true);

  /// `host`'s patterns, or nullopt if it has no rules.
  std::optional<std::vector<std::string>> get(std::string_view host) const;
  /// Calls f(const HostRules&) for hosts [offset, offset + limit) in the set's stable iteration order (shard
  /// order, then insertion order; valid between changes). Returns the number of hosts.
  size_t list(size_t offset, size_t limit, const std::function<void(const HostRules&)>& f) const;
  size_t size() const { return hosts_.load(std::memory_order_relaxed); }
  /// Number of changes published so far (0 for a new set); every Outcome reports the value after it.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  Snapshot snapshot() const;

  /// Frees retired shards whose grace period has passed. Returns how many are still waiting.
  size_t reclaim();
  /// reclaim() unless another thread holds the writer lock (for the loops' housekeeping).
  void try_reclaim();
  size_t retired() const;
  /// Heap bytes of the published shards (blobs + indexes), for the memory-footprint test and stats.
  size_t memory_bytes() const;

 private:
  Outcome apply_locked(std::span<const Change> changes);
  size_t reclaim_locked();

  std::array<std::atomic<const Shard*>, kShards> shards_{};
  mutable std::mutex mu_;  // writers, admin reads, owners_, retired_
  std::array<std::shared_ptr<const Shard>, kShards> owners_;
  std::vector<std::pair<uint64_t, std::shared_ptr<const Shard>>> retired_;  // (epoch, shard), epochs ascending
  uint64_t next_version_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> hosts_{0};
  Qsbr qsbr_;
};

}  // namespace kosoku::rules
