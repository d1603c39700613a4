// The on-disk entry (core/cache/cache_store.hh): the header format, StoreWriter (temp file, rename only when
// complete, zone commit, lock waiters woken, abandon on abort/size mismatch) and EntryReader (validation,
// body reads clamped to the body: C13) — on a real Reactor with a real DiskQueue and real files.
#include "core/cache/cache_store.hh"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/cache_paths.hh"
#include "gtest/gtest.h"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::cache {
namespace {

using disk::testing::LoopScript;
using disk::testing::pattern_bytes;
using disk::testing::TempDir;

constexpr int64_t kNow = 1700000000;

EntryMeta sample_meta(std::string key) {
  EntryMeta m;
  m.key = std::move(key);
  m.hash = hash_key(m.key);
  m.status = 200;
  m.etag = "\"v1\"";
  m.last_modified = kNow - 100;
  m.head = "Content-Type: text/plain\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\n";
  m.freshness.date = kNow;
  m.freshness.request_time = kNow - 1;
  m.freshness.response_time = kNow;
  m.freshness.corrected_initial_age = 1;
  m.freshness.lifetime = 60;
  return m;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().string().substr(dir.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CacheFormatTest, EncodeDecodeRoundTrip) {
  EntryMeta m = sample_meta("http:example.com/a");
  m.vary = "accept-language";
  m.primary = hash_key("p");
  m.freshness.flags = kFlagNoStale;
  m.freshness.stale_if_error = 30;
  m.body_size = 12345;
  std::string bytes = encode_header(m);
  EXPECT_EQ(bytes.size(), kFixedHeader + 18 + 4 + 15 + m.head.size());
  EXPECT_EQ(m.header_size, bytes.size());
  EXPECT_EQ(bytes.substr(0, 8), "KSKCACH\n");
  EntryMeta d;
  size_t needed = 0;
  ASSERT_EQ(decode_header(bytes, &d, &needed), DecodeStatus::kOk);
  EXPECT_EQ(d.key, m.key);
  EXPECT_EQ(d.hash, m.hash);
  EXPECT_EQ(d.primary, m.primary);
  EXPECT_EQ(d.etag, "\"v1\"");
  EXPECT_EQ(d.vary, "accept-language");
  EXPECT_EQ(d.head, m.head);
  EXPECT_EQ(d.status, 200);
  EXPECT_EQ(d.last_modified, kNow - 100);
  EXPECT_EQ(d.body_size, 12345u);
  EXPECT_EQ(d.header_size, bytes.size());
  EXPECT_EQ(d.freshness.lifetime, 60);
  EXPECT_EQ(d.freshness.corrected_initial_age, 1);
  EXPECT_EQ(d.freshness.flags, kFlagNoStale);
  EXPECT_EQ(d.freshness.stale_if_error, 30);
  EXPECT_EQ(d.freshness.stale_while_revalidate, -1);
  // Partial input asks for exactly what it needs; garbage is corrupt.
  EXPECT_EQ(decode_header(std::string_view(bytes).substr(0, 100), &d, &needed), DecodeStatus::kNeedMore);
  EXPECT_EQ(needed, kFixedHeader);
  EXPECT_EQ(decode_header(std::string_view(bytes).substr(0, 150), &d, &needed), DecodeStatus::kNeedMore);
  EXPECT_EQ(needed, bytes.size());
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(decode_header(bad, &d, &needed), DecodeStatus::kCorrupt);
  bad = bytes;
  bad[12] = static_cast<char>(bad[12] + 1);  // header_size inconsistent with the lengths
  EXPECT_EQ(decode_header(bad, &d, &needed), DecodeStatus::kCorrupt);
}

TEST(CacheFormatTest, TagsRoundTripAfterTheHead) {
  EntryMeta m = sample_meta("http:example.com/t");
  m.tags = "article-42 section-news";
  std::string bytes = encode_header(m);
  EXPECT_EQ(bytes.size(), kFixedHeader + m.key.size() + m.etag.size() + m.head.size() + m.tags.size());
  EXPECT_EQ(bytes.substr(bytes.size() - m.tags.size()), m.tags);
  EntryMeta d;
  size_t needed = 0;
  ASSERT_EQ(decode_header(bytes, &d, &needed), DecodeStatus::kOk);
  EXPECT_EQ(d.tags, m.tags);
  EXPECT_EQ(d.head, m.head);
  // A file written before tags were stored (tags_len 0) reads with no tags.
  m.tags.clear();
  ASSERT_EQ(decode_header(encode_header(m), &d, &needed), DecodeStatus::kOk);
  EXPECT_EQ(d.tags, "");
}

class CacheStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    qconf_.name = "default";
    qconf_.depth = 4;
    queue_ = std::make_unique<disk::DiskQueue>(reactor_, qconf_, qstats_);
  }
  void TearDown() override { queue_.reset(); }

  std::unique_ptr<CachePath> make_path(bool use_temp_path, std::vector<uint8_t> levels = {1, 2}) {
    pconf_.path = dir_.path();
    pconf_.zone = "z";
    pconf_.zone_size = 1 << 20;
    pconf_.levels = std::move(levels);
    pconf_.use_temp_path = use_temp_path;
    if (use_temp_path) std::filesystem::create_directory(dir_.path() + "/temp");
    return std::make_unique<CachePath>(pconf_, dir_.path(), kNow);
  }
  StoreWriter::Target target(CachePath& p) {
    StoreWriter::Target t;
    t.path = &p;
    t.hub = &hub_;
    t.queue = queue_.get();
    t.now_s = kNow;
    return t;
  }

  reactor::Reactor reactor_{0, 64};
  config::DiskQueueConf qconf_;
  stats::DiskQueueStats qstats_;
  std::unique_ptr<disk::DiskQueue> queue_;
  TempDir dir_;
  CachePathConf pconf_;
  WakeHub hub_{2};
};

struct ReadBack final : EntryReader::Callback {
  int open_error = 1;
  std::string body;
  int data_error = 0;
  bool data_done = false;
  void on_entry_open(EntryReader&, int error) override { open_error = error; }
  void on_entry_data(EntryReader&, std::string_view data, int error) override {
    body.assign(data);
    data_error = error;
    data_done = true;
  }
};

TEST_F(CacheStoreTest, WriterCommitsCompleteEntryAndReaderReadsItBack) {
  auto path = make_path(false);
  EntryMeta m = sample_meta("http:example.com/big");
  const std::string body = pattern_bytes(600 * 1024 + 17);
  const Hash128 h = m.hash;
  // Another core waits for this key's lock.
  std::optional<EntryView> ev;
  ASSERT_EQ(path->zone().try_lock(h, 10, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  ASSERT_TRUE(path->zone().add_waiter(h, 1, 11));
  int done = -1;
  StoreWriter::Target t = target(*path);
  t.holds_lock = true;
  t.locked = h;
  LoopScript script(reactor_);
  StoreWriter* w = nullptr;
  script.then([&] {
    w = StoreWriter::start(t, m, [&](bool ok) { done = ok; });
    w->append(std::string_view(body).substr(0, 1000));
    w->append(std::string_view(body).substr(1000, 300000));
  });
  script.then([&] {
    w->append(std::string_view(body).substr(301000));
    w->finish(static_cast<int64_t>(body.size()));
  });
  script.wait_until([&] { return done != -1; });
  // Read it back in the same loop: header, prefetched bytes, reads from disk, reads past the end.
  const std::string final_path = path->path_of(h);
  ReadBack rb;
  EntryReader r;
  std::string buf(100000, '\0');
  std::vector<std::string> reads;
  script.then([&] { r.open(final_path, h, "http:example.com/big", *queue_, config::AioMode::kIoUring, &rb); });
  script.wait_until([&] { return rb.open_error != 1; });
  const std::vector<std::pair<uint64_t, uint32_t>> ranges = {
      {10, 20}, {500000, 100000}, {body.size() - 5, 100}, {body.size(), 100}, {~0ull - 5, 100}};
  for (const auto& [off, len] : ranges) {
    script.then([&, off = off, len = len] {
      ASSERT_EQ(rb.open_error, 0);
      rb.data_done = false;
      r.read(off, buf.data(), len);
    });
    script.wait_until([&] { return rb.data_done; });
    script.then([&] { reads.push_back(rb.body); });
  }
  ASSERT_TRUE(script.run());
  EXPECT_EQ(done, 1);
  EXPECT_EQ(files_under(dir_.path()), (std::vector<std::string>{final_path.substr(dir_.path().size())}));
  std::string file = read_file(final_path);
  EntryMeta d;
  size_t needed;
  ASSERT_EQ(decode_header(file, &d, &needed), DecodeStatus::kOk);
  EXPECT_EQ(d.body_size, body.size());
  EXPECT_EQ(file.substr(d.header_size), body);
  auto v = path->zone().peek(h);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->exists());
  EXPECT_EQ(v->fs_size, file.size());
  EXPECT_EQ(v->expires_at, kNow + 59);
  EXPECT_EQ(v->lock_until_ms, 0u);
  EXPECT_EQ(path->zone().bytes(), file.size());
  EXPECT_EQ(path->zone().keys().get(h), "http:example.com/big");
  std::vector<Hash128> woken;
  EXPECT_FALSE(hub_.drain(1, [&](const Hash128& x) { woken.push_back(x); }));
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0], h);

  ASSERT_EQ(rb.open_error, 0);
  EXPECT_EQ(r.meta().key, "http:example.com/big");
  EXPECT_EQ(r.meta().body_size, body.size());
  EXPECT_EQ(r.prefetched(), std::string_view(body).substr(0, EntryReader::kFirstRead - r.meta().header_size));
  ASSERT_EQ(reads.size(), 5u);
  EXPECT_EQ(reads[0], body.substr(10, 20));              // from the prefetched bytes
  EXPECT_EQ(reads[1], body.substr(500000, 100000));      // from disk
  EXPECT_EQ(reads[2], body.substr(body.size() - 5));     // clamped to the body (C13)
  EXPECT_EQ(reads[3], "");
  EXPECT_EQ(reads[4], "");                               // an overflowing offset never wraps into the header
}

TEST_F(CacheStoreTest, AbortRemovesTempFileAndReleasesLock) {
  auto path = make_path(false);
  EntryMeta m = sample_meta("http:example.com/cut");
  std::optional<EntryView> ev;
  ASSERT_EQ(path->zone().try_lock(m.hash, 10, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  ASSERT_TRUE(path->zone().add_waiter(m.hash, 0, 11));
  StoreWriter::Target t = target(*path);
  t.holds_lock = true;
  t.locked = m.hash;
  int done = -1;
  LoopScript script(reactor_);
  StoreWriter* w = nullptr;
  script.then([&] {
    w = StoreWriter::start(t, m, [&](bool ok) { done = ok; });
    w->append("partial body");
  });
  script.sleep_ms(5);
  script.then([&] { w->abort(); });  // the origin cut the response off
  script.wait_until([&] { return done != -1; });
  script.sleep_ms(5);
  ASSERT_TRUE(script.run());
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(files_under(dir_.path()).empty());
  auto v = path->zone().peek(m.hash);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->exists());
  EXPECT_EQ(v->lock_until_ms, 0u);
  std::vector<Hash128> woken;
  hub_.drain(0, [&](const Hash128& x) { woken.push_back(x); });
  EXPECT_EQ(woken.size(), 1u);
}

// A full disk (simulated with RLIMIT_FSIZE: writes past the limit fail with EFBIG, as ENOSPC would) abandons
// the entry: no file, no temp file, the lock released with its waiters woken — and nothing else breaks.
TEST_F(CacheStoreTest, FullDiskAbandonsTheEntry) {
  auto path = make_path(false);
  EntryMeta m = sample_meta("http:example.com/full");
  std::optional<EntryView> ev;
  ASSERT_EQ(path->zone().try_lock(m.hash, 10, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  ASSERT_TRUE(path->zone().add_waiter(m.hash, 1, 11));
  StoreWriter::Target t = target(*path);
  t.holds_lock = true;
  t.locked = m.hash;
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  struct sigaction ign{}, prev{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &prev);
  rlimit lim = old;
  lim.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int done = -1;
  const std::string body = pattern_bytes(300 * 1024);
  LoopScript script(reactor_);
  script.then([&] {
    StoreWriter* w = StoreWriter::start(t, m, [&](bool ok) { done = ok; });
    for (size_t off = 0; off < body.size(); off += 50000) w->append(std::string_view(body).substr(off, 50000));
    w->finish(static_cast<int64_t>(body.size()));
  });
  script.wait_until([&] { return done != -1; });
  script.sleep_ms(5);
  bool ran = script.run();
  setrlimit(RLIMIT_FSIZE, &old);
  sigaction(SIGXFSZ, &prev, nullptr);
  ASSERT_TRUE(ran);
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(files_under(dir_.path()).empty());
  auto v = path->zone().peek(m.hash);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->exists());
  EXPECT_EQ(v->lock_until_ms, 0u);
  EXPECT_EQ(path->zone().bytes(), 0u);
  std::vector<Hash128> woken;
  hub_.drain(1, [&](const Hash128& x) { woken.push_back(x); });
  EXPECT_EQ(woken.size(), 1u);
}

TEST_F(CacheStoreTest, ContentLengthMismatchIsNotStored) {
  auto path = make_path(true);
  EntryMeta m = sample_meta("http:example.com/short");
  int done = -1;
  LoopScript script(reactor_);
  script.then([&] {
    StoreWriter* w = StoreWriter::start(target(*path), m, [&](bool ok) { done = ok; });
    w->append("0123456789");
    w->finish(11);
  });
  script.wait_until([&] { return done != -1; });
  script.sleep_ms(5);
  ASSERT_TRUE(script.run());
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(files_under(dir_.path()).empty());
  EXPECT_FALSE(path->zone().peek(m.hash).has_value());
}

TEST_F(CacheStoreTest, UseTempPathOnWritesUnderTempThenRenames) {
  auto path = make_path(true, {2});
  EntryMeta m = sample_meta("http:example.com/t");
  int done = -1;
  LoopScript script(reactor_);
  script.then([&] {
    StoreWriter* w = StoreWriter::start(target(*path), m, [&](bool ok) { done = ok; });
    EXPECT_EQ(files_under(dir_.path()).size(), 0u);  // the open is queued (O_CREAT never completes inline)
    w->append("hello");
    w->finish(-1);
  });
  script.wait_until([&] { return done != -1; });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(done, 1);
  std::string hex = to_hex(m.hash);
  EXPECT_EQ(files_under(dir_.path()), (std::vector<std::string>{"/" + hex.substr(30) + "/" + hex}));
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path() + "/temp"));
}

TEST_F(CacheStoreTest, VariantCommitSetsPrimaryAndRemovesItsOldFile) {
  auto path = make_path(false);
  const std::string key = "http:example.com/c23";
  Hash128 primary = hash_key(key);
  // A plain entry for the key is on disk first.
  int done = -1;
  LoopScript script(reactor_);
  script.then([&] {
    StoreWriter* w = StoreWriter::start(target(*path), sample_meta(key), [&](bool ok) { done = ok; });
    w->append("plain");
    w->finish(5);
  });
  script.wait_until([&] { return done == 1; });
  script.then([&] {
    done = -1;
    EntryMeta v = sample_meta(key);
    v.vary = "accept-language";
    v.hash = hash_variant(key, "accept-language:en\n");
    v.primary = primary;
    StoreWriter::Target t = target(*path);
    t.primary = primary;
    t.vary_id = path->zone().vary().intern(v.vary);
    t.holds_lock = true;
    t.locked = primary;
    std::optional<EntryView> ev;
    path->zone().try_lock(primary, 1, 5000, kNow, &ev);
    StoreWriter* w = StoreWriter::start(t, v, [&](bool ok) { done = ok; });
    w->append("lang=en");
    w->finish(7);
  });
  script.wait_until([&] { return done == 1; });
  script.sleep_ms(10);  // the old primary file's unlink
  ASSERT_TRUE(script.run());
  auto p = path->zone().peek(primary);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->flags, kEntryPrimary);
  EXPECT_EQ(p->lock_until_ms, 0u);
  EXPECT_EQ(path->zone().vary().get(p->vary_id), "accept-language");
  Hash128 vh = hash_variant(key, "accept-language:en\n");
  auto v = path->zone().peek(vh);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->flags, kEntryExists | kEntryVariant);
  EXPECT_EQ(v->parent, primary.tag());
  EXPECT_FALSE(std::filesystem::exists(path->path_of(primary)));
  EXPECT_TRUE(std::filesystem::exists(path->path_of(vh)));
  EXPECT_EQ(path->zone().bytes(), std::filesystem::file_size(path->path_of(vh)));
}

TEST_F(CacheStoreTest, ReaderRejectsCorruptTruncatedAndCollidingFiles) {
  auto path = make_path(false);
  EntryMeta m = sample_meta("http:example.com/r");
  int done = -1;
  LoopScript script(reactor_);
  script.then([&] {
    StoreWriter* w = StoreWriter::start(target(*path), m, [&](bool ok) { done = ok; });
    w->append("0123456789");
    w->finish(10);
  });
  script.wait_until([&] { return done != -1; });
  const std::string p = path->path_of(m.hash);
  const std::string trunc = dir_.file("trunc");
  const std::string junk = dir_.write("junk", std::string(300, 'j'));
  script.then([&] {
    std::string file = read_file(p);
    dir_.write("trunc", file.substr(0, file.size() - 1));
  });
  struct Case {
    std::string file;
    Hash128 hash;
    std::string key;
  };
  const std::vector<Case> cases = {
      {p, m.hash, m.key},
      {p, m.hash, "http:example.com/other"},  // md5 collision check
      {p, hash_key("x"), ""},
      {p + ".missing", m.hash, ""},
      {trunc, m.hash, ""},
      {junk, m.hash, ""},
  };
  std::vector<int> results;
  ReadBack rb;
  EntryReader r;
  for (const Case& c : cases) {
    script.then([&, &c = c] {
      rb.open_error = 1;
      r.open(c.file, c.hash, c.key, *queue_, config::AioMode::kOff, &rb);
    });
    script.wait_until([&] { return rb.open_error != 1; });
    script.then([&] { results.push_back(rb.open_error); });
  }
  ASSERT_TRUE(script.run());
  ASSERT_EQ(done, 1);
  EXPECT_EQ(results, (std::vector<int>{0, -EINVAL, -EINVAL, -ENOENT, -EINVAL, -EINVAL}));
}

}  // namespace
}  // namespace kosoku::cache
