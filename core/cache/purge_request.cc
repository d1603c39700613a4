#include "core/cache/purge_request.hh"

#include <arpa/inet.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_variables.hh"
#include "core/http/variables.hh"
#include "core/cache/purge.hh"
#include "core/cache/tags.hh"

namespace kosoku::cache {

namespace {

// proxy_cache_purge ... from ADDR[/N]: the client's address against the list.
bool from_allowed(const std::vector<PurgeConf::From>& list, std::string_view addr_text) {
  if (list.empty()) return true;
  std::string a(addr_text);
  uint8_t bytes[16] = {};
  int family = AF_INET;
  if (inet_pton(AF_INET, a.c_str(), bytes) != 1) {
    if (inet_pton(AF_INET6, a.c_str(), bytes) != 1) return false;
    family = AF_INET6;
  }
  for (const PurgeConf::From& f : list) {
    if (f.all) return true;
    if (f.family != family) continue;
    int bits = f.prefix;
    bool ok = true;
    for (int i = 0; bits > 0 && ok; ++i, bits -= 8) {
      uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
      ok = (bytes[i] & mask) == f.addr[i];
    }
    if (ok) return true;
  }
  return false;
}

// The purge of one request: PurgeJob's unlinks through the DiskQueue, then the answer (purge_request.hh).
class PurgeState final : public http::ContentState, public disk::DiskCallback {
 public:
  // Unlinks in flight at once. The first goes alone: on a read-only or failing disk it fails, and the purge
  // stops there with one log line instead of a window's worth.
  static constexpr size_t kWindow = 8;

  PurgeState(http::Exchange& ex, CachePath& path, const PurgeTarget& target, std::string key, disk::DiskQueue& q,
             config::AioMode aio)
      : ex_(ex), job_(path, target), key_(std::move(key)), q_(q), aio_(aio) {
    target_kind_.kind = target.kind;
    for (Slot& s : slots_) s.op.callback = this;
  }

  void start() { pump(); }

  void on_abort() override {
    aborted_ = true;
    if (answered_) {
      ex_.release();
      return;
    }
    maybe_done();
  }
  void on_writable() override {}

  void on_disk_done(disk::DiskOp& op) override {
    Slot& s = *static_cast<Slot*>(op.user_data);
    s.busy = false;
    --in_flight_;
    completed(s, op.result);
    pump();
  }

 private:
  struct Slot {
    disk::DiskOp op;
    const EntryView* victim = nullptr;
    bool busy = false;
  };

  void completed(Slot& s, int result) {
    if (result < 0 && result != -ENOENT) {
      KOSOKU_LOG(kCrit, "unlink() \"%s\" failed (%d: %s) while purging \"%s\", client: %s", s.op.path, -result,
                 std::strerror(-result), key_, ex_.remote_addr());
      disk_error_ = true;
    }
    job_.unlinked(*s.victim, result);
  }

  void pump() {
    if (pumping_) return;  // an inline completion inside the loop below
    pumping_ = true;
    while (!aborted_ && in_flight_ < (job_.result().removed > 0 ? kWindow : 1)) {
      Slot* s = free_slot();
      const EntryView* v = s != nullptr ? job_.next() : nullptr;
      if (v == nullptr) break;
      s->victim = v;
      s->op.kind = disk::DiskOp::Kind::kUnlink;
      s->op.path = job_.path().path_of(v->hash);
      s->op.user_data = s;
      s->op.result = 0;
      switch (q_.submit(s->op, aio_)) {
        case disk::DiskQueue::Submit::kQueued:
          s->busy = true;
          ++in_flight_;
          break;
        case disk::DiskQueue::Submit::kDone:
          completed(*s, s->op.result);
          break;
        case disk::DiskQueue::Submit::kOverflow:
          // Nothing was tried on the disk; the queue logs its overflow, this line names the purge it stopped.
          KOSOKU_LOG(kError, "purge of \"%s\" in cache \"%s\" stopped: disk queue \"%s\" overflow, client: %s", key_,
                     job_.path().zone().name(), q_.name(), ex_.remote_addr());
          job_.unlinked(*v, -EAGAIN);
          break;
      }
    }
    pumping_ = false;
    maybe_done();
  }

  Slot* free_slot() {
    for (Slot& s : slots_) {
      if (!s.busy) return &s;
    }
    return nullptr;
  }

  // Done when nothing is in flight outside pump(): pump() stops submitting only when the job has no file left
  // (or failed), or after an abort, so there is nothing more to wait for.
  void maybe_done() {
    if (answered_ || pumping_ || in_flight_ > 0) return;
    answered_ = true;
    job_.finish();
    if (aborted_) {
      ex_.release();
      return;
    }
    const PurgeResult& r = job_.result();
    job_.path().count_purge(target_kind_, false, r);
    if (r.failed > 0) {
      const int status = disk_error_ ? 500 : 503;
      ex_.respond(status,
                  absl::StrCat("Purge failed\nKey: ", key_, "\nEntries: ", r.removed, "\nNot removed: ", r.failed,
                               disk_error_ ? absl::StrCat(" (unlink() failed: ", r.error, ": ", std::strerror(r.error), ")")
                                           : std::string(" (disk queue overflow)"),
                               "\n"),
                  "text/plain");
      return;
    }
    if (r.removed == 0) {
      ex_.respond(404);
      return;
    }
    ex_.respond(200, absl::StrCat("Successful purge\nKey: ", key_, "\nEntries: ", r.removed, "\n"), "text/plain");
  }

  http::Exchange& ex_;
  PurgeJob job_;
  PurgeTarget target_kind_;  // the kind of the target, for the counters
  std::string key_;
  disk::DiskQueue& q_;
  config::AioMode aio_;
  std::array<Slot, kWindow> slots_;
  size_t in_flight_ = 0;
  bool pumping_ = false;
  bool aborted_ = false;
  bool answered_ = false;
  bool disk_error_ = false;
};

// The request's purge options: `Surrogate-Key: a b` (a tag purge; several fields add up) and
// `Fastly-Soft-Purge: 1` (mark stale instead of remove).
struct PurgeOptions {
  std::string tags;  // the Surrogate-Key values, joined by spaces
  bool have_tags = false;
  bool soft = false;
};

PurgeOptions purge_options(const http::Request& req) {
  PurgeOptions o;
  for (const http::HeaderField& f : req.headers()) {
    if (absl::EqualsIgnoreCase(f.name, "surrogate-key")) {
      if (o.have_tags) o.tags.push_back(' ');
      o.tags.append(f.value);
      o.have_tags = true;
    } else if (absl::EqualsIgnoreCase(f.name, "fastly-soft-purge")) {
      o.soft = f.value == "1";
    }
  }
  return o;
}

}  // namespace

void start_purge(CacheModule& m, http::Exchange& ex, CachePath& path, const config::Template& key_template) {
  const PurgeConf& pc = ex.location().module<cache::CacheLocConf>().purge;
  const bool method_form = pc.mode == PurgeConf::Mode::kMethod;
  http::RequestVariables vars(ex, ex.core().reactor);
  const PurgeKeyRules rules{method_form, pc.wildcard, pc.any_host};
  const PurgeOptions opt = purge_options(ex.request());
  PurgeKey pk;
  std::string shown;
  if (opt.have_tags) {
    pk = build_tag_scope(key_template, vars, rules);
    std::string error;
    if (!parse_purge_tags(opt.tags, pk.target.tags, error)) {
      KOSOKU_LOG(kError, "purge refused: \"Surrogate-Key\" has %s, client: %s", error, ex.remote_addr());
      ex.respond(400);
      return;
    }
    shown = absl::StrCat("tags: ", opt.tags.size() > 256 ? absl::StrCat(opt.tags.substr(0, 256), "...") : opt.tags);
    if (!pk.target.key.empty()) absl::StrAppend(&shown, " within ", pk.target.key);
    shown = base::log_escaped(shown);
  } else {
    pk = build_purge_key(key_template, vars, rules);
    shown = pk.target.kind == PurgeTarget::Kind::kExact ? pk.target.key : absl::StrCat(pk.target.key, "*");
  }
  if (method_form && !from_allowed(pc.from, ex.remote_addr())) {
    KOSOKU_LOG(kError, "purge forbidden by \"proxy_cache_purge ... from\", client: %s, key: \"%s\"", ex.remote_addr(),
               shown);
    ex.respond(403);
    return;
  }
  if (!pk.refusal.empty()) {
    KOSOKU_LOG(kError, "purge of \"%s\" refused: %s, client: %s, host: \"%s\"", shown, pk.refusal, ex.remote_addr(),
               ex.host());
    ex.respond(403);
    return;
  }
  if (!path.loaded()) {
    KOSOKU_LOG(kWarn, "purge of \"%s\" refused: cache \"%s\" is still loading, client: %s", shown, path.zone().name(),
               ex.remote_addr());
    ex.head().extra.append("Retry-After: 1\r\n");
    ex.respond(503);
    return;
  }
  ++m.counters().purges;
  if (opt.soft) {
    // Nothing to wait for: the entries are marked in the keys zone, which every core reads.
    const PurgeResult r = soft_purge(path, pk.target, m.reactor().wall_time());
    path.count_purge(pk.target, true, r);
    if (r.removed == 0) {
      ex.respond(404);
      return;
    }
    ex.respond(200, absl::StrCat("Successful soft purge\nKey: ", shown, "\nEntries: ", r.removed, "\n"), "text/plain");
    return;
  }
  auto st = std::make_unique<PurgeState>(ex, path, pk.target, shown, m.queue_for(path, ex), ex.location().aio);
  PurgeState* p = st.get();
  ex.state() = std::move(st);
  p->start();
}

}  // namespace kosoku::cache
