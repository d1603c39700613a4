#include "core/cache/cache_loader.hh"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"

namespace kosoku::cache {

namespace {

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

// One header read of the loader.
struct CacheMaintainer::Read final : EntryReader::Callback {
  CacheMaintainer* owner = nullptr;
  EntryReader reader;
  std::string file;
  Hash128 hash;
  bool busy = false;
  void on_entry_open(EntryReader&, int error) override { owner->read_done(*this, error); }
  void on_entry_data(EntryReader&, std::string_view, int) override {}
};

CacheMaintainer::CacheMaintainer(reactor::Reactor& r, CachePath& path, disk::DiskQueue& q, config::AioMode aio)
    : r_(r), path_(path), q_(q), aio_(aio) {
  for (size_t i = 0; i < kMaxReads; ++i) {
    reads_.push_back(std::make_unique<Read>());
    reads_.back()->owner = this;
  }
  DIR* d = opendir(path_.dir().c_str());
  if (d == nullptr) {
    KOSOKU_LOG(kCrit, "opendir() \"%s\" failed (%d: %s)", path_.dir(), errno, std::strerror(errno));
    walked_ = true;
  } else {
    stack_.push_back(Dir{path_.dir(), d, 0, false});
  }
  const CachePathConf& c = path_.conf();
  r_.timers().arm(*this, r_.now_ms() + std::max<uint64_t>(c.manager_sleep_ms, 1000));
}

CacheMaintainer::~CacheMaintainer() {
  for (Dir& d : stack_) closedir(d.dir);
  if (armed()) r_.timers().cancel(*this);
}

size_t CacheMaintainer::in_flight() const {
  size_t n = 0;
  for (const auto& rd : reads_) n += rd->busy ? 1 : 0;
  return n;
}

bool CacheMaintainer::poll() {
  if (done_ || stopped_) return false;
  // Free read slots first take files found earlier.
  while (!pending_.empty() && in_flight() < kMaxReads) {
    auto [file, h] = std::move(pending_.back());
    pending_.pop_back();
    start_read(std::move(file), h);
  }
  if (!walked_ && pending_.empty()) walk(path_.conf().loader_files);
  if (walked_ && pending_.empty() && in_flight() == 0) finish_loading();
  return !done_;  // busy: the loop does not sleep while the loader has work
}

void CacheMaintainer::walk(size_t budget) {
  const std::vector<uint8_t>& levels = path_.conf().levels;
  while (budget > 0 && !stack_.empty() && pending_.size() < kMaxReads * 4) {
    Dir& d = stack_.back();
    errno = 0;
    const dirent* e = readdir(d.dir);
    if (e == nullptr) {
      closedir(d.dir);
      stack_.pop_back();
      continue;
    }
    --budget;
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    visit(stack_.back(), e);
  }
  (void)levels;
  if (stack_.empty()) walked_ = true;
}

void CacheMaintainer::visit(Dir& d, const dirent* e) {
  const std::vector<uint8_t>& levels = path_.conf().levels;
  std::string_view name = e->d_name;
  std::string full = absl::StrCat(d.path, "/", name);
  unsigned char type = e->d_type;
  if (type == DT_UNKNOWN) {
    struct stat st;
    if (lstat(full.c_str(), &st) != 0) return;
    type = S_ISDIR(st.st_mode) ? DT_DIR : (S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN);
  }
  if (type == DT_DIR) {
    bool descend = false;
    bool temp = false;
    if (d.temp) {
      descend = false;
    } else if (d.depth == 0 && name == "temp" && path_.conf().use_temp_path) {
      descend = temp = true;
    } else if (d.depth < levels.size() && name.size() == levels[d.depth] && is_hex(name)) {
      descend = true;
    }
    if (!descend) return;  // not ours (nginx leaves unknown directories alone too)
    DIR* sub = opendir(full.c_str());
    if (sub == nullptr) return;
    Dir child{std::move(full), sub, d.depth + 1, temp};
    stack_.push_back(std::move(child));  // `d` may dangle from here on
    return;
  }
  if (type != DT_REG) return;
  if (d.depth == 0 && PurgeLog::is_log_file(name)) return;  // the purge log (purge_log.hh)
  Hash128 h;
  bool entry = !d.temp && d.depth == levels.size() && from_hex(name, &h) && is_hex(name);
  if (entry && !levels.empty()) {
    // The file must sit in its own level directories (PATH/c/29/...9c).
    std::string expected = path_.path_of(h);
    entry = expected == full;
  }
  if (!entry) {
    unlink(std::move(full));  // temp leftovers and strays (nginx: "delete unknown file")
    return;
  }
  if (in_flight() < kMaxReads) {
    start_read(std::move(full), h);
  } else {
    pending_.emplace_back(std::move(full), h);
  }
}

void CacheMaintainer::start_read(std::string file, const Hash128& h) {
  for (auto& rd : reads_) {
    if (rd->busy) continue;
    rd->busy = true;
    rd->file = std::move(file);
    rd->hash = h;
    rd->reader.open(rd->file, h, {}, q_, aio_, rd.get());
    return;
  }
  pending_.emplace_back(std::move(file), h);
}

void CacheMaintainer::read_done(Read& rd, int error) {
  rd.busy = false;
  if (error == -ENOENT) return;  // removed meanwhile (a purge, or a request replacing it)
  if (error != 0) {
    KOSOKU_LOG(kCrit, "cache file \"%s\" is invalid (%d), removed", rd.file, -error);
    rd.reader.close();
    unlink(rd.file);
    return;
  }
  const EntryMeta& m = rd.reader.meta();
  // A purge of an earlier run covers the file: it stays purged (a soft purge: loaded, and marked stale below).
  const PurgeRecord* purged = path_.purge_log().replayed_cover(m);
  if (purged != nullptr && !purged->soft) {
    ++stats_.purged;
    rd.reader.close();
    unlink(rd.file);
    return;
  }
  CacheZone& z = path_.zone();
  const int64_t now = r_.wall_time();
  const Freshness& f = m.freshness;
  int64_t expires = (f.flags & kFlagAlwaysRevalidate) ? 0 : f.expires_at();
  uint64_t fs_size = m.header_size + m.body_size;
  std::optional<EntryView> evicted;
  auto drop = [&] {
    if (evicted && evicted->exists()) remove_file_async(q_, aio_, path_.path_of(evicted->hash));
    evicted.reset();
  };
  CacheZone::Commit c{expires, fs_size, 0, 0, true};
  if (!m.primary.zero()) {
    uint16_t id = z.vary().intern(m.vary);
    if (id == 0) {
      rd.reader.close();
      unlink(rd.file);
      return;
    }
    auto p = z.peek(m.primary);
    if (!p || !(p->flags & kEntryPrimary)) {
      uint64_t old = 0;
      z.set_primary(m.primary, id, now, &evicted, &old);
      drop();
      z.keys().put(m.primary, m.key);
    }
    c.extra_flags = kEntryVariant;
    c.parent = m.primary.tag();
  }
  z.commit(m.hash, c, now, &evicted);
  drop();
  z.keys().put(m.hash, m.key);
  // The tag index is rebuilt from the files; a newer entry a request stored meanwhile keeps its own tags.
  if (std::optional<EntryView> v = z.peek(m.hash);
      !m.tags.empty() && v && v->expires_at == expires && v->fs_size == fs_size) {
    z.tags().put(m.hash, m.tags);
  }
  if (std::optional<EntryView> v = z.peek(m.hash);
      purged != nullptr && v && v->expires_at == expires && v->fs_size == fs_size) {
    z.mark_stale(*v, purged->at);
  }
  ++stats_.loaded;
  rd.reader.close();
}

void CacheMaintainer::unlink(std::string file) {
  ++stats_.removed;
  remove_file_async(q_, aio_, std::move(file));
}

void CacheMaintainer::finish_loading() {
  done_ = true;
  path_.set_loaded();
  // The earlier runs' purges are applied. When no file was left for a hard one, their log is done with (the
  // soft ones live on in core 0's log); else it is kept for one more start, in case an unlink failed.
  if (!path_.purge_log().replay_path().empty() && stats_.purged == 0) {
    remove_file_async(q_, aio_, path_.purge_log().replay_path());
  }
  KOSOKU_LOG(kNotice, "http file cache: %s %.3fM, %u entries loaded, %u files removed", path_.dir(),
             static_cast<double>(path_.zone().bytes()) / (1024.0 * 1024.0), static_cast<unsigned>(stats_.loaded),
             static_cast<unsigned>(stats_.removed));
}

size_t CacheMaintainer::manage(int64_t now_s) {
  CacheZone& z = path_.zone();
  const CachePathConf& c = path_.conf();
  size_t budget = c.manager_files;
  size_t removed = 0;
  std::vector<EntryView> out;
  const int64_t inactive_s = static_cast<int64_t>(c.inactive_ms / 1000);
  const uint32_t cutoff = z.relative_time(now_s - inactive_s);
  if (now_s - inactive_s > z.epoch()) {
    z.sweep(kSweepBuckets,
            [&](const EntryView& v) {
              if (out.size() >= budget) return false;
              return v.last_access < cutoff;
            },
            &out);
  }
  for (const EntryView& v : out) {
    if (v.exists()) remove_file_async(q_, aio_, path_.path_of(v.hash));
    ++stats_.inactive;
    ++removed;
  }
  while (c.max_size > 0 && z.bytes() > c.max_size && removed < budget + out.size()) {
    std::optional<EntryView> v = z.evict_lru(kSweepBuckets);
    if (!v) break;
    remove_file_async(q_, aio_, path_.path_of(v->hash));
    ++stats_.evicted;
    ++removed;
  }
  return removed;
}

void CacheMaintainer::fire() {
  if (stopped_) return;
  size_t removed = manage(r_.wall_time());
  const CachePathConf& c = path_.conf();
  // Busy (a full pass removed its budget): come back after manager_sleep; otherwise once a second.
  uint64_t next = removed >= c.manager_files ? std::max<uint64_t>(c.manager_sleep_ms, 1) : 1000;
  r_.timers().arm(*this, r_.now_ms() + next);
}

}  // namespace kosoku::cache
