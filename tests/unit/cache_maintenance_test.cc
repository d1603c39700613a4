// Purge (core/cache/purge.hh), the cache loader and manager (cache_loader.hh), split_clients and the cache's
// variable helpers — on real files and a real Reactor where disk work is involved.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/cache_loader.hh"
#include "core/cache/cache_paths.hh"
#include "core/cache/cache_store.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/purge.hh"
#include "core/cache/purge_log.hh"
#include "core/cache/split_clients.hh"
#include "core/http/variables.hh"
#include "gtest/gtest.h"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::cache {
namespace {

using disk::testing::LoopScript;
using disk::testing::TempDir;

constexpr int64_t kNow = 1700000000;

TEST(PurgeMatchTest, Glob) {
  EXPECT_TRUE(purge_match("http:a/img/*", "http:a/img/x.png"));
  EXPECT_TRUE(purge_match("http:a/img/*", "http:a/img/"));
  EXPECT_FALSE(purge_match("http:a/img/*", "http:a/im"));
  EXPECT_TRUE(purge_match("*.jpg", "http:a/b/c.jpg"));
  EXPECT_FALSE(purge_match("*.jpg", "http:a/b/c.jpgx"));
  EXPECT_TRUE(purge_match("http:*/a*b*c", "http:host/aXXbYYc"));
  EXPECT_FALSE(purge_match("http:*/a*b*c", "http:host/aXXcYYb"));
  EXPECT_TRUE(purge_match("*", ""));
  EXPECT_TRUE(purge_match("exact", "exact"));
  EXPECT_FALSE(purge_match("exact", "exact2"));
  EXPECT_TRUE(is_wildcard("/x*"));
  EXPECT_FALSE(is_wildcard("/x"));
}

TEST(SplitClientsTest, MatchesNginx) {
  // `split_clients "${arg_s}" $v { 0.5% .one; 2.0% .two; 30% three; 20.25% four; * rest; }` — the values real
  // nginx 1.22.1 returned for these strings (recorded with /usr/sbin/nginx, `return 200 "$v"`).
  SplitClientsConf sc;
  uint64_t last = 0;
  for (auto [pc, v] : std::vector<std::pair<uint32_t, std::string>>{{50, ".one"}, {200, ".two"}, {3000, "three"},
                                                                      {2025, "four"}, {0, "rest"}}) {
    SplitPart p;
    p.percent = pc;
    p.value = v;
    if (pc != 0) {
      last += static_cast<uint64_t>(pc) * 0xffffffffull / 10000;
      p.threshold = static_cast<uint32_t>(last);
    }
    sc.parts.push_back(p);
  }
  const std::vector<std::pair<std::string, std::string>> nginx = {
      {"a", "rest"},   {"b", "four"},  {"c", "three"}, {"d", "rest"},  {"e", "rest"},   {"f", "rest"},
      {"g", "four"},   {"h", "three"}, {"i", "rest"},  {"j", "rest"},  {"k", "rest"},   {"l", "four"},
      {"m", "rest"},   {"n", "four"},  {"o", "four"},  {"p", "three"}, {"abc", "three"}, {"hello", "rest"},
      {"127.0.0.1AAA", "rest"}, {"x", "three"}, {"y", "rest"}, {"z", "four"}, {"1", "three"}, {"2", "three"},
      {"3", "rest"}};
  for (const auto& [in, want] : nginx) EXPECT_EQ(split_value(sc, in), want) << in;
  sc.parts.pop_back();  // without `*`, unmatched hashes give ""
  EXPECT_EQ(split_value(sc, "a"), "");
}

TEST(CacheVariablesTest, ArgsAndCookies) {
  // The cache expands $arg_NAME / $cookie_NAME through the shared request variables (http/variables.hh).
  using http::find_arg;
  using http::find_cookie;
  std::string_view v;
  EXPECT_TRUE(find_arg("a=1&nocache=yes&b=", "nocache", &v));
  EXPECT_EQ(v, "yes");
  EXPECT_TRUE(find_arg("a=1&NoCache=Y", "nocache", &v));
  EXPECT_EQ(v, "Y");
  EXPECT_TRUE(find_arg("b=&c", "b", &v));
  EXPECT_EQ(v, "");
  EXPECT_TRUE(find_arg("b=&c", "c", &v));
  EXPECT_EQ(v, "");
  EXPECT_FALSE(find_arg("ab=1", "a", &v));
  EXPECT_TRUE(find_cookie("session=abc; nocache=1;theme=dark", "nocache", &v));
  EXPECT_EQ(v, "1");
  EXPECT_TRUE(find_cookie("session=abc; nocache=1;theme=dark", "THEME", &v));
  EXPECT_EQ(v, "dark");
  EXPECT_FALSE(find_cookie("session=abc", "sess", &v));
  EXPECT_TRUE(find_cookie("a=1;  theme = dark ;b", "theme", &v));
  EXPECT_EQ(v, "dark");
  EXPECT_FALSE(find_cookie("flag; other=1", "flag", &v));  // an item without '=' is no cookie
}

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    qconf_.name = "default";
    queue_ = std::make_unique<disk::DiskQueue>(reactor_, qconf_, qstats_);
    pconf_.path = dir_.path();
    pconf_.zone = "z";
    pconf_.zone_size = 1 << 20;
    pconf_.levels = {1, 2};
    pconf_.use_temp_path = true;
    std::filesystem::create_directory(dir_.path() + "/temp");
  }
  void TearDown() override { queue_.reset(); }

  // Writes an entry for `key` (a variant when `material` is set) through StoreWriter, in `script`.
  void store(LoopScript& script, CachePath& path, std::string key, std::string body, std::string material = {},
             int64_t lifetime = 60) {
    script.then([&, key, body, material, lifetime] {
      EntryMeta m;
      m.key = key;
      m.hash = material.empty() ? hash_key(key) : hash_variant(key, material);
      m.head = "Content-Type: text/plain\r\n";
      m.freshness.response_time = kNow;
      m.freshness.lifetime = lifetime;
      StoreWriter::Target t;
      t.path = &path;
      t.queue = queue_.get();
      t.now_s = kNow;
      if (!material.empty()) {
        m.vary = "accept-language";
        m.primary = hash_key(key);
        t.primary = m.primary;
        t.vary_id = path.zone().vary().intern(m.vary);
      }
      ++writing_;
      StoreWriter* w = StoreWriter::start(t, m, [this](bool ok) {
        --writing_;
        if (ok) ++stored_;
      });
      w->append(body);
      w->finish(static_cast<int64_t>(body.size()));
    });
    script.wait_until([this] { return writing_ == 0; });
  }

  reactor::Reactor reactor_{0, 64};
  config::DiskQueueConf qconf_;
  stats::DiskQueueStats qstats_;
  std::unique_ptr<disk::DiskQueue> queue_;
  TempDir dir_;
  CachePathConf pconf_;
  int writing_ = 0;
  int stored_ = 0;
};

TEST_F(MaintenanceTest, PurgeExactWildcardVariantsAndAll) {
  CachePath path(pconf_, dir_.path(), kNow);
  LoopScript script(reactor_);
  store(script, path, "http:a/img/1.png", "one");
  store(script, path, "http:a/img/2.png", "two");
  store(script, path, "http:a/page.html", "page");
  store(script, path, "http:a/c23", "lang=en", "accept-language:en\n");
  store(script, path, "http:a/c23", "lang=fr", "accept-language:fr\n");
  std::vector<std::string> unlinked;
  PurgeResult exact, variants, wild, miss, all;
  script.then([&] {
    auto rm = [&](const std::string& f) {
      unlinked.push_back(f);
      return ::unlink(f.c_str()) == 0 ? 0 : -errno;
    };
    exact = purge(path, console_target("http:a/page.html"), rm, kNow);
    variants = purge(path, console_target("http:a/c23"), rm, kNow);
    miss = purge(path, console_target("http:a/page.html"), rm, kNow);
    wild = purge(path, console_target("http:a/img/*"), rm, kNow);
  });
  ASSERT_TRUE(script.run());
  ASSERT_EQ(stored_, 5);
  EXPECT_EQ(exact.removed, 1u);
  EXPECT_GT(exact.bytes, 4u);
  EXPECT_EQ(variants.removed, 3u);  // the primary and both variants
  EXPECT_EQ(miss.removed, 0u);
  EXPECT_EQ(wild.removed, 2u);
  EXPECT_EQ(unlinked.size(), 5u);  // the primary has no file
  EXPECT_EQ(path.zone().entries(), 0u);
  EXPECT_EQ(path.zone().bytes(), 0u);
  EXPECT_EQ(path.zone().keys().size(), 0u);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path())) {
    EXPECT_FALSE(e.is_regular_file()) << e.path();
  }
  // Purge all.
  std::optional<EntryView> ev;
  path.zone().commit(hash_key("x"), CacheZone::Commit{kNow + 5, 10, 0, 0}, kNow, &ev);
  path.zone().commit(hash_key("y"), CacheZone::Commit{kNow + 5, 10, 0, 0}, kNow, &ev);
  all = purge(path, console_target("*"), [](const std::string&) { return -ENOENT; }, kNow);
  EXPECT_EQ(all.removed, 2u);
  EXPECT_EQ(path.zone().entries(), 0u);
}

// A purge forgets every selected entry before it answers, whether or not its file can be unlinked afterwards (the
// purge log keeps it purged across a restart, purge_log_test.cc); the unlinks stop at the first failure, which
// the result names.
TEST_F(MaintenanceTest, PurgeForgetsEntriesAndStopsUnlinkingAtTheFirstFailure) {
  CachePath path(pconf_, dir_.path(), kNow);
  LoopScript script(reactor_);
  for (int i = 0; i < 4; ++i) store(script, path, "http:a/img/" + std::to_string(i), "body");
  PurgeResult r;
  std::vector<std::string> tried;
  script.then([&] {
    r = purge(path, console_target("http:a/img/*"), [&](const std::string& f) {
      tried.push_back(f);
      if (tried.size() == 2) return -EROFS;
      return ::unlink(f.c_str()) == 0 ? 0 : -errno;
    }, kNow);
  });
  ASSERT_TRUE(script.run());
  ASSERT_EQ(stored_, 4);
  EXPECT_EQ(tried.size(), 2u);  // stopped at the failure
  EXPECT_EQ(r.removed, 4u);
  EXPECT_EQ(r.failed, 1u);
  EXPECT_EQ(r.error, EROFS);
  EXPECT_EQ(r.failed_file, tried[1]);
  EXPECT_EQ(path.zone().entries(), 0u);
  EXPECT_EQ(path.zone().keys().size(), 0u);
  size_t files = 0;
  for (int i = 0; i < 4; ++i) files += std::filesystem::exists(path.path_of(hash_key("http:a/img/" + std::to_string(i))));
  EXPECT_EQ(files, 3u);  // the failed one and the two never tried
}

// A purge of a key removes its primary and every variant from the zone, even when a variant's file stays.
TEST_F(MaintenanceTest, PurgeRemovesThePrimaryEvenWhenAVariantFileStays) {
  CachePath path(pconf_, dir_.path(), kNow);
  LoopScript script(reactor_);
  store(script, path, "http:a/v", "en", "accept-language:en\n");
  store(script, path, "http:a/v", "fr", "accept-language:fr\n");
  PurgeResult failed;
  script.then([&] { failed = purge(path, console_target("http:a/v"), [](const std::string&) { return -EIO; }, kNow); });
  ASSERT_TRUE(script.run());
  EXPECT_EQ(failed.removed, 3u);
  EXPECT_EQ(failed.failed, 1u);
  EXPECT_EQ(path.zone().entries(), 0u);
}

// A fill in flight when its entry is purged is stored stale: what it fetched may predate the purge.
TEST_F(MaintenanceTest, AFillThatStraddlesAPurgeIsStoredStale) {
  CachePath path(pconf_, dir_.path(), kNow);
  CacheZone& z = path.zone();
  const Hash128 h = hash_key("http:a/filling");
  ASSERT_EQ(z.try_lock(h, 1000, 5000, kNow, nullptr), CacheZone::LockResult::kAcquired);
  PurgeResult r = purge(path, console_target("http:a/filling"), [](const std::string&) { return -ENOENT; }, kNow);
  EXPECT_EQ(r.removed, 0u);  // a placeholder is not a cached response
  z.commit(h, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow + 1, nullptr);
  std::optional<EntryView> v = z.peek(h);
  ASSERT_TRUE(v && v->exists());
  EXPECT_TRUE(v->flags & kEntryStale);
  EXPECT_LE(v->expires_at, kNow + 1);
  // A lock released without a file ends the mark: the next fill is fresh.
  const Hash128 g = hash_key("http:a/aborted");
  ASSERT_EQ(z.try_lock(g, 1000, 5000, kNow, nullptr), CacheZone::LockResult::kAcquired);
  purge(path, console_target("http:a/aborted"), [](const std::string&) { return -ENOENT; }, kNow);
  z.unlock(g);
  ASSERT_EQ(z.try_lock(g, 2000, 5000, kNow, nullptr), CacheZone::LockResult::kAcquired);
  z.commit(g, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow + 2, nullptr);
  EXPECT_FALSE(z.peek(g)->flags & kEntryStale);
  EXPECT_EQ(z.peek(g)->expires_at, kNow + 60);
}

// forget(): only the version that was selected goes, and a fill's lock (and its waiters) survive a purge.
TEST_F(MaintenanceTest, ForgetRemovesOnlyTheSelectedVersionAndKeepsLocks) {
  CachePath path(pconf_, dir_.path(), kNow);
  CacheZone& z = path.zone();
  std::optional<EntryView> ev;
  const Hash128 a = hash_key("a"), b = hash_key("b");
  z.commit(a, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);
  const EntryView seen = *z.peek(a);
  z.commit(a, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);  // a new version: same size, new gen
  EXPECT_FALSE(z.forget(seen).has_value());
  EXPECT_TRUE(z.peek(a)->exists());
  EXPECT_TRUE(z.forget(*z.peek(a)).has_value());
  EXPECT_FALSE(z.peek(a).has_value());

  z.commit(b, CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);
  ASSERT_EQ(z.try_lock(b, 1000, 5000, kNow, &ev), CacheZone::LockResult::kAcquired);
  ASSERT_TRUE(z.add_waiter(b, 1, 1000));
  EXPECT_TRUE(z.forget(*z.peek(b)).has_value());
  std::optional<EntryView> left = z.peek(b);
  ASSERT_TRUE(left.has_value());
  EXPECT_FALSE(left->exists());
  EXPECT_NE(left->lock_until_ms, 0u);
  EXPECT_EQ(z.bytes(), 0u);
  EXPECT_EQ(z.unlock(b), 1ull << 1);  // the waiter is still registered
}

TEST_F(MaintenanceTest, LoaderRebuildsZoneAndRemovesLeftovers) {
  auto first = std::make_unique<CachePath>(pconf_, dir_.path(), kNow);
  {
    LoopScript script(reactor_);
    store(script, *first, "http:a/1", "body one");
    store(script, *first, "http:a/2", std::string(40000, 'x'));  // header read needs no second read; body large
    store(script, *first, "http:a/v", "lang=en", "accept-language:en\n");
    ASSERT_TRUE(script.run());
  }
  ASSERT_EQ(stored_, 3);
  const uint64_t bytes = first->zone().bytes();
  // Leftovers: a temp file from a crash, a stray file in a level dir, a corrupt entry, a misplaced entry.
  dir_.write("temp/0123.0.7", "partial");
  std::string p1 = first->path_of(hash_key("http:a/1"));
  std::string level_dir = p1.substr(0, p1.rfind('/'));
  std::string stray = level_dir + "/junk.txt";
  { FILE* f = fopen(stray.c_str(), "w"); fputs("x", f); fclose(f); }
  std::string corrupt_hex = to_hex(hash_key("corrupt"));
  std::string corrupt = first->path_of(hash_key("corrupt"));
  std::filesystem::create_directories(corrupt.substr(0, corrupt.rfind('/')));
  { FILE* f = fopen(corrupt.c_str(), "w"); fputs(std::string(200, 'c').c_str(), f); fclose(f); }
  std::string misplaced = dir_.path() + "/" + to_hex(hash_key("http:a/1"));
  std::filesystem::copy_file(p1, misplaced);

  // "Restart": a fresh zone for the same directory, loaded on a new loop.
  reactor::Reactor r2{0, 64};
  stats::DiskQueueStats qs2;
  disk::DiskQueue q2(r2, qconf_, qs2);
  CachePath second(pconf_, dir_.path(), kNow);
  CacheMaintainer m(r2, second, q2, config::AioMode::kIoUring);
  r2.add_poller(&m);
  LoopScript script(r2);
  script.wait_until([&] { return !m.loading(); });
  script.sleep_ms(20);  // the unlinks
  ASSERT_TRUE(script.run());
  EXPECT_TRUE(second.loaded());
  EXPECT_EQ(m.stats().loaded, 3u);
  EXPECT_EQ(m.stats().removed, 4u);  // temp leftover, stray, corrupt, misplaced
  EXPECT_EQ(second.zone().bytes(), bytes);
  auto e1 = second.zone().peek(hash_key("http:a/1"));
  ASSERT_TRUE(e1.has_value());
  EXPECT_TRUE(e1->exists());
  EXPECT_EQ(e1->expires_at, kNow + 60);
  EXPECT_EQ(second.zone().keys().get(hash_key("http:a/2")), "http:a/2");
  auto prim = second.zone().peek(hash_key("http:a/v"));
  ASSERT_TRUE(prim.has_value());
  EXPECT_EQ(prim->flags, kEntryPrimary);
  EXPECT_EQ(second.zone().vary().get(prim->vary_id), "accept-language");
  auto var = second.zone().peek(hash_variant("http:a/v", "accept-language:en\n"));
  ASSERT_TRUE(var.has_value());
  EXPECT_EQ(var->flags, kEntryExists | kEntryVariant);
  EXPECT_FALSE(std::filesystem::exists(stray));
  EXPECT_FALSE(std::filesystem::exists(corrupt));
  EXPECT_FALSE(std::filesystem::exists(misplaced));
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path() + "/temp"));
  EXPECT_TRUE(std::filesystem::exists(p1));
}

TEST_F(MaintenanceTest, ManagerRemovesInactiveAndEvictsToMaxSize) {
  pconf_.inactive_ms = 10000;
  pconf_.max_size = 0;
  CachePath path(pconf_, dir_.path(), kNow);
  CacheMaintainer m(reactor_, path, *queue_, config::AioMode::kIoUring);
  std::optional<EntryView> ev;
  for (int i = 0; i < 10; ++i) {
    Hash128 h = hash_key("k" + std::to_string(i));
    path.zone().commit(h, CacheZone::Commit{kNow + 1000, 1000, 0, 0}, kNow + i, &ev);
  }
  // A placeholder that only counted uses goes too when inactive.
  path.zone().count_use(hash_key("placeholder"), kNow, &ev);
  EXPECT_EQ(m.manage(kNow + 12), 3u);  // inactive=10s at kNow+12: last used before kNow+2 → k0, k1, placeholder
  EXPECT_EQ(path.zone().entries(), 8u);
  EXPECT_EQ(m.stats().inactive, 3u);
  // max_size: 3000 bytes → the 5 least recently used of the remaining 8 go.
  pconf_.max_size = 3000;
  EXPECT_EQ(m.manage(kNow + 12), 5u);
  EXPECT_EQ(path.zone().bytes(), 3000u);
  EXPECT_TRUE(path.zone().peek(hash_key("k9")).has_value());
  EXPECT_TRUE(path.zone().peek(hash_key("k7")).has_value());
  EXPECT_FALSE(path.zone().peek(hash_key("k6")).has_value());
  EXPECT_EQ(m.stats().evicted, 5u);
  LoopScript drain(reactor_);  // the queued unlinks complete (their ops must not outlive the queue)
  drain.wait_until([&] { return queue_->pending() == 0; });
  ASSERT_TRUE(drain.run());
}

TEST_F(MaintenanceTest, ConsoleCommand) {
  EXPECT_EQ(console_command("cache stats"), "no proxy_cache_path configured\n");
  config::MainConf conf;
  pconf_.path = dir_.path() + "/console";
  conf.http.module<cache::CacheHttpConf>().paths.push_back(pconf_);
  std::string err;
  auto reg = CacheRegistry::create(conf, "/", 1, kNow, &err);
  ASSERT_NE(reg, nullptr) << err;
  set_registry(reg.get());
  CachePath& path = *reg->find("z");
  std::optional<EntryView> ev;
  path.zone().commit(hash_key("http:a/x"), CacheZone::Commit{kNow + 60, 100, 0, 0}, kNow, &ev);
  path.zone().keys().put(hash_key("http:a/x"), "http:a/x");
  path.zone().tags().put(hash_key("http:a/x"), "t1 t2");
  EXPECT_EQ(console_command("cache purge z http:a/x"),
            "the cache loader has not finished: entries not yet loaded could not be purged\n");
  path.set_loaded();
  EXPECT_EQ(console_command("cache stats"),
            "z " + dir_.path() + "/console entries=1 bytes=100 max_size=0 loaded=yes tags=2 tagged=2\n"
            "  purges: exact=0 prefix=0 all=0 tag=0 soft=0 removed=0 removed_bytes=0 soft_marked=0 "
            "soft_served_stale=0 unlink_failures=0\n");
  EXPECT_EQ(console_command("cache soft-purge z tag t2"), "marked stale 1 entries\n");
  EXPECT_TRUE(path.zone().peek(hash_key("http:a/x"))->flags & kEntryStale);
  EXPECT_EQ(console_command("cache purge z tag nope"), "not found 0 entries, 0 bytes\n");
  EXPECT_EQ(console_command("cache purge z http:a/*"), "purged 1 entries, 100 bytes\n");
  EXPECT_EQ(console_command("cache purge z http:a/x"), "not found 0 entries, 0 bytes\n");
  EXPECT_EQ(console_command("cache purge nope x"), "unknown cache zone \"nope\"\n");
  EXPECT_NE(console_command("cache").find("usage: cache stats | cache purge ZONE KEY|PATTERN*|*|tag TAG..."),
            std::string::npos);
  EXPECT_NE(console_command("cache stats").find("exact=1 prefix=1 all=0 tag=2 soft=1 removed=1 removed_bytes=100 "
                                                "soft_marked=1"),
            std::string::npos);
  // The console's purges are in the purge log (core 0's) like the loops'.
  std::ifstream log(dir_.path() + "/console/purge.0.log");
  std::string line;
  size_t records = 0;
  while (std::getline(log, line)) records += decode_purge_record(line).has_value();
  EXPECT_EQ(records, 4u);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() + "/console/temp"));  // created at start
  set_registry(nullptr);
}

}  // namespace
}  // namespace kosoku::cache
