#include "core/cache/purge_request.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_variables.hh"
#include "core/http/variables.hh"
#include "core/cache/purge.hh"
#include "core/cache/purge_doc.hh"
#include "core/cache/purge_log.hh"
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

class PurgeAnswer;

// One purge on a loop (purge.hh): its record in this core's purge log, the selection a step per loop
// iteration, the answer, then the unlinks, at most kWindow in flight. Owns itself: it completes whether or not
// the request that started it is still there (the record is written, so the purge happens either way).
class PurgeRun final : public reactor::Task, public disk::DiskCallback {
 public:
  // Unlinks in flight at once. The first goes alone: on a read-only or failing disk it fails, and the unlinks
  // stop there with one log line instead of a window's worth.
  static constexpr size_t kWindow = 8;

  /// `targets`: one, or several from a JSON body (each selected in turn; the answer counts them all).
  PurgeRun(CachePath& path, std::vector<PurgeTarget> targets, bool soft, std::string shown, std::string client,
           disk::DiskQueue& q, config::AioMode aio, reactor::Reactor& r)
      : path_(path), targets_(std::move(targets)), soft_(soft), shown_(std::move(shown)), client_(std::move(client)),
        q_(q), aio_(aio), reactor_(r) {
    for (Slot& s : slots_) s.op.callback = this;
  }

  void start(PurgeAnswer* requester);
  /// The request went away: nobody is told the outcome.
  void detach() { requester_ = nullptr; }

  // Selection work per loop iteration: small slices until kSliceNs has passed, so the loop's other requests
  // wait at most about that long for a purge, however many entries it selects.
  static constexpr uint64_t kSliceNs = 500'000;
  static constexpr size_t kSliceEntries = 256;

  void run() override {  // one selection step
    if (!selection_) selection_.emplace(path_, targets_[current_], soft_, reactor_.wall_time());
    const auto start = std::chrono::steady_clock::now();
    bool done = false;
    while (!(done = selection_->step(kSliceEntries)) &&
           std::chrono::steady_clock::now() - start < std::chrono::nanoseconds(kSliceNs)) {
    }
    if (!done) {
      reactor_.post(this);
      return;
    }
    const PurgeResult& r = selection_->result();
    path_.count_purge(targets_[current_], soft_, r);
    result_.removed += r.removed;
    result_.bytes += r.bytes;
    std::vector<Hash128>& f = selection_->files();
    files_.insert(files_.end(), f.begin(), f.end());
    selection_.reset();
    if (++current_ < targets_.size()) {
      reactor_.post(this);
      return;
    }
    selected();
  }

  void on_disk_done(disk::DiskOp& op) override {
    if (&op == &log_op_) {
      log_step(op.result);
      return;
    }
    Slot& s = *static_cast<Slot*>(op.user_data);
    s.busy = false;
    --in_flight_;
    unlinked(s, op.result);
    pump();
  }

 private:
  struct Slot {
    disk::DiskOp op;
    bool busy = false;
  };

  // The record: open, append, close (no descriptor stays open), then the selection; a failure answers that
  // nothing was purged.
  void submit_log_op();
  void log_step(int32_t result);
  void refuse(const char* call, int32_t result);
  void selected();
  void answer(int status, std::string body);
  void unlinked(Slot& s, int result);
  void pump();
  void maybe_finish() {
    if (pumping_ || in_flight_ > 0 || retry_.armed() || (next_ < files_.size() && !stopped_)) return;
    delete this;
  }

  // Re-pumps the unlinks after a full disk queue.
  struct Retry final : reactor::Timer {
    explicit Retry(PurgeRun& r) : run(r) {}
    void fire() override { run.pump(); }
    PurgeRun& run;
  };
  static constexpr uint64_t kRetryMs = 10;

  CachePath& path_;
  std::vector<PurgeTarget> targets_;
  size_t current_ = 0;  // the target being selected
  bool soft_;
  std::string shown_;
  std::string client_;
  disk::DiskQueue& q_;
  config::AioMode aio_;
  reactor::Reactor& reactor_;
  std::optional<PurgeSelection> selection_;
  PurgeResult result_;  // every target's
  PurgeAnswer* requester_ = nullptr;
  std::string record_;
  disk::DiskOp log_op_;
  int log_fd_ = -1;
  std::vector<Hash128> files_;
  size_t next_ = 0;
  std::array<Slot, kWindow> slots_;
  size_t in_flight_ = 0;
  size_t unlinked_ = 0;
  bool pumping_ = false;
  bool stopped_ = false;  // an unlink failed: no further file is tried
  Retry retry_{*this};
};

// The request's side of a purge: reads a JSON body when there is one (purge_doc.hh), then waits for its
// PurgeRun's answer.
class PurgeAnswer final : public http::ContentState, public http::BodySink {
 public:
  explicit PurgeAnswer(http::Exchange& ex) : ex_(ex) {}
  ~PurgeAnswer() override {
    if (run_ != nullptr) run_->detach();
  }
  void attach(PurgeRun* run) { run_ = run; }
  /// Reads the request body (at most kMaxPurgeBody bytes), then calls `then(body)`.
  void read_body(std::function<void(PurgeAnswer&, std::string_view)> then) {
    then_ = std::move(then);
    ex_.read_body(this);
  }
  /// The outcome (called once, by the run, or by the body's reader).
  void answered(int status, std::string body) {
    run_ = nullptr;
    if (aborted_) {
      ex_.release();
      return;
    }
    if (body.empty()) {
      ex_.respond(status);
    } else {
      ex_.respond(status, body, "text/plain");
    }
  }
  void on_abort() override {
    aborted_ = true;
    if (run_ != nullptr) {
      run_->detach();
      run_ = nullptr;
    }
    ex_.release();
  }
  void on_writable() override {}

  void on_body_data(std::string_view data) override {
    if (too_large_ || body_.size() + data.size() > kMaxPurgeBody) {
      too_large_ = true;
      body_.clear();
      return;
    }
    body_.append(data);
  }
  void on_body_end() override {
    if (too_large_) {
      answered(413, absl::StrCat("Purge failed\nthe body is larger than ", kMaxPurgeBody, " bytes\n"));
      return;
    }
    then_(*this, body_);
  }
  void on_body_error(int status) override { answered(status == 0 ? 400 : status, ""); }

 private:
  http::Exchange& ex_;
  PurgeRun* run_ = nullptr;
  std::function<void(PurgeAnswer&, std::string_view)> then_;
  std::string body_;
  bool too_large_ = false;
  bool aborted_ = false;
};

void PurgeRun::start(PurgeAnswer* requester) {
  requester_ = requester;
  requester->attach(this);
  for (const PurgeTarget& t : targets_) path_.recent_purges().add(t);
  const std::string& log = path_.purge_log().file(reactor_.core_id());
  if (log.empty()) {
    run();
    return;
  }
  // A leading newline: a record after a short append of the previous one still starts a line of its own.
  record_ = "\n";
  for (const PurgeTarget& t : targets_) record_ += encode_purge_record(PurgeRecord{reactor_.wall_time(), soft_, t});
  log_op_.kind = disk::DiskOp::Kind::kOpen;
  log_op_.path = log;
  log_op_.flags = O_WRONLY | O_CREAT | O_APPEND;
  log_op_.callback = this;
  submit_log_op();
}

void PurgeRun::submit_log_op() {
  switch (q_.submit(log_op_, aio_)) {
    case disk::DiskQueue::Submit::kQueued:
      return;
    case disk::DiskQueue::Submit::kDone:
      log_step(log_op_.result);
      return;
    case disk::DiskQueue::Submit::kOverflow:
      if (log_fd_ >= 0) ::close(log_fd_);
      KOSOKU_LOG(kError, "purge of \"%s\" in cache \"%s\" refused: disk queue \"%s\" overflow, client: %s", shown_,
                 path_.zone().name(), q_.name(), client_);
      answer(503, "");
      delete this;
      return;
  }
}

void PurgeRun::log_step(int32_t result) {
  if (log_op_.kind == disk::DiskOp::Kind::kOpen) {
    if (result < 0) {
      refuse("open", result);
      return;
    }
    log_fd_ = result;
    log_op_.kind = disk::DiskOp::Kind::kWrite;
    log_op_.fd = log_fd_;
    log_op_.buf = record_.data();
    log_op_.len = static_cast<uint32_t>(record_.size());
    log_op_.offset = 0;  // O_APPEND: at the end
    submit_log_op();
    return;
  }
  ::close(log_fd_);
  log_fd_ = -1;
  if (result >= 0 && static_cast<size_t>(result) != record_.size()) result = -EIO;  // a short append
  if (result < 0) {
    refuse("write", result);
    return;
  }
  run();  // the selection
}

void PurgeRun::refuse(const char* call, int32_t result) {
  KOSOKU_LOG(kCrit, "%s() \"%s\" failed (%d: %s): purge of \"%s\" refused, client: %s", call, log_op_.path,
             -result, std::strerror(-result), shown_, client_);
  answer(500, absl::StrCat("Purge failed\nKey: ", shown_, "\nEntries: 0 (the purge log could not be written: ",
                           -result, ": ", std::strerror(-result), ")\n"));
  delete this;
}

void PurgeRun::selected() {
  if (result_.removed == 0) {
    answer(404, "");
  } else {
    answer(200, absl::StrCat(soft_ ? "Successful soft purge" : "Successful purge", "\nKey: ", shown_,
                             "\nEntries: ", result_.removed, "\n"));
  }
  pump();
}

void PurgeRun::answer(int status, std::string body) {
  if (PurgeAnswer* a = requester_) {
    requester_ = nullptr;
    a->answered(status, std::move(body));
  }
}

void PurgeRun::unlinked(Slot& s, int result) {
  if (result < 0 && result != -ENOENT) {
    if (!stopped_) {
      KOSOKU_LOG(kCrit,
                 "unlink() \"%s\" failed (%d: %s) while purging \"%s\", client: %s; the purge log keeps it purged",
                 s.op.path, -result, std::strerror(-result), shown_, client_);
    }
    stopped_ = true;
    path_.purge_counters().unlink_failures.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ++unlinked_;
}

void PurgeRun::pump() {
  if (pumping_) return;  // an inline completion inside the loop below
  pumping_ = true;
  while (!stopped_ && next_ < files_.size() && in_flight_ < (unlinked_ > 0 ? kWindow : 1)) {
    const Hash128 h = files_[next_++];
    if (!purge_unlink_due(path_, h)) continue;  // a newer entry's file replaced it already
    Slot* s = nullptr;
    for (Slot& c : slots_) {
      if (!c.busy) {
        s = &c;
        break;
      }
    }
    s->op.kind = disk::DiskOp::Kind::kUnlink;
    s->op.path = path_.path_of(h);
    s->op.user_data = s;
    s->op.result = 0;
    switch (q_.submit(s->op, aio_)) {
      case disk::DiskQueue::Submit::kQueued:
        s->busy = true;
        ++in_flight_;
        break;
      case disk::DiskQueue::Submit::kDone:
        unlinked(*s, s->op.result);
        break;
      case disk::DiskQueue::Submit::kOverflow:
        // The queue is full (it logs that): this file again in a while, after what is in flight.
        --next_;
        if (!retry_.armed()) reactor_.timers().arm(retry_, reactor_.now_ms() + kRetryMs);
        pumping_ = false;
        return;
    }
  }
  pumping_ = false;
  maybe_finish();
}

// The request's purge options: `Surrogate-Key: a b` (a tag purge; several fields add up),
// `Fastly-Soft-Purge: 1` (mark stale instead of remove), and a JSON body (Content-Type: application/json).
struct PurgeOptions {
  std::string tags;  // the Surrogate-Key values, joined by spaces
  bool have_tags = false;
  bool soft = false;
  bool json = false;
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
  if (const http::HeaderField* ct = req.find(http::HeaderToken::kContentType)) {
    o.json = absl::StartsWithIgnoreCase(ct->value, "application/json") && req.body != http::BodyFraming::kNone;
  }
  return o;
}

void launch(CacheModule& m, http::Exchange& ex, PurgeAnswer& answer, CachePath& path, std::vector<PurgeTarget> targets,
            bool soft, std::string shown) {
  ++m.counters().purges;
  auto* run = new PurgeRun(path, std::move(targets), soft, std::move(shown), std::string(ex.remote_addr()),
                           m.queue_for(path, ex), ex.location().aio, m.reactor());
  run->start(&answer);
}

// A JSON body's purge (purge_doc.hh), once the body has arrived.
void json_purge(CacheModule& m, http::Exchange& ex, PurgeAnswer& answer, CachePath& path,
                const config::Template& key_template, const PurgeKeyRules& rules, std::string_view body) {
  PurgeDoc doc;
  std::string error;
  if (!parse_purge_doc(body, &doc, &error)) {
    KOSOKU_LOG(kError, "purge refused: the JSON body has %s, client: %s", base::log_escaped(error), ex.remote_addr());
    answer.answered(400, absl::StrCat("Purge failed\n", error, "\n"));
    return;
  }
  http::RequestVariables vars(ex, ex.core().reactor);
  std::string host = absl::AsciiStrToLower(ex.request().host_name);
  DocTargets dt = doc_targets(doc, key_template, vars, rules, host);
  if (dt.status != 0) {
    KOSOKU_LOG(kError, "purge refused: %s, client: %s, host: \"%s\"", base::log_escaped(dt.refusal), ex.remote_addr(),
               ex.host());
    answer.answered(dt.status, absl::StrCat("Purge failed\n", dt.refusal, "\n"));
    return;
  }
  std::string shown = absl::StrCat("json: ", doc.tags.size(), " tags, ", doc.hosts.size(), " hosts, ",
                                   doc.prefixes.size(), " prefixes");
  launch(m, ex, answer, path, std::move(dt.targets), doc.soft, std::move(shown));
}

}  // namespace

void start_purge(CacheModule& m, http::Exchange& ex, CachePath& path, const config::Template& key_template) {
  const PurgeConf& pc = ex.location().module<cache::CacheLocConf>().purge;
  const bool method_form = pc.mode == PurgeConf::Mode::kMethod;
  const PurgeKeyRules rules{method_form, pc.wildcard, pc.any_host};
  const PurgeOptions opt = purge_options(ex.request());
  if (method_form && !from_allowed(pc.from, ex.remote_addr())) {
    KOSOKU_LOG(kError, "purge forbidden by \"proxy_cache_purge ... from\", client: %s, request: \"%s\"",
               ex.remote_addr(), base::log_escaped(ex.request().target));
    ex.respond(403);
    return;
  }
  if (!path.loaded()) {
    KOSOKU_LOG(kWarn, "purge refused: cache \"%s\" is still loading, client: %s", path.zone().name(),
               ex.remote_addr());
    ex.head().extra.append("Retry-After: 1\r\n");
    ex.respond(503);
    return;
  }
  auto owned = std::make_unique<PurgeAnswer>(ex);
  PurgeAnswer& answer = *owned;
  ex.state() = std::move(owned);
  if (opt.json) {
    answer.read_body([&m, &ex, &path, &key_template, rules](PurgeAnswer& a, std::string_view body) {
      json_purge(m, ex, a, path, key_template, rules, body);
    });
    return;
  }
  http::RequestVariables vars(ex, ex.core().reactor);
  PurgeKey pk;
  std::string shown;
  if (opt.have_tags) {
    pk = build_tag_scope(key_template, vars, rules);
    std::string error;
    if (!parse_purge_tags(opt.tags, pk.target.tags, error)) {
      KOSOKU_LOG(kError, "purge refused: \"Surrogate-Key\" has %s, client: %s", error, ex.remote_addr());
      answer.answered(400, "");
      return;
    }
    shown = absl::StrCat("tags: ", opt.tags.size() > 256 ? absl::StrCat(opt.tags.substr(0, 256), "...") : opt.tags);
    if (!pk.target.key.empty()) absl::StrAppend(&shown, " within ", pk.target.key);
    shown = base::log_escaped(shown);
  } else {
    pk = build_purge_key(key_template, vars, rules);
    shown = pk.target.kind == PurgeTarget::Kind::kExact ? pk.target.key : absl::StrCat(pk.target.key, "*");
  }
  if (!pk.refusal.empty()) {
    KOSOKU_LOG(kError, "purge of \"%s\" refused: %s, client: %s, host: \"%s\"", shown, pk.refusal, ex.remote_addr(),
               ex.host());
    answer.answered(403, "");
    return;
  }
  std::vector<PurgeTarget> targets;
  targets.push_back(std::move(pk.target));
  launch(m, ex, answer, path, std::move(targets), opt.soft, std::move(shown));
}

}  // namespace kosoku::cache
