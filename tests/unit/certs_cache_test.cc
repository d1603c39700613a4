// The per-core certificate cache (core/certs/cert_cache.hh) on a real Reactor and DiskQueue over real
// files: loads through the disk queue, hits, the wildcard step, version invalidation after a replacement,
// the LRU bound, inactive expiry, failed loads, deleted certificates and waiters.
#include <filesystem>
#include <memory>
#include <string>

#include "core/certs/cert_cache.hh"
#include "core/certs/pem.hh"
#include "core/certs/store.hh"
#include "core/config/conf.hh"
#include "core/disk/disk_queue.hh"
#include "gtest/gtest.h"
#include "tests/unit/certs_test_util.hh"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::certs {
namespace {

using disk::testing::LoopScript;
using disk::testing::TempDir;
using testing::make_cert;

class Waiter final : public CertWaiter {
 public:
  void on_cert_ready() override { ++calls; }
  int calls = 0;
};

class CertCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    qconf_.name = "default";
    queue_ = std::make_unique<disk::DiskQueue>(reactor_, qconf_, qstats_);
    store_ = std::make_unique<CertStore>(dir_.path() + "/certs");
    std::string err;
    ASSERT_TRUE(store_->open(&err)) << err;
  }
  void TearDown() override {
    cache_.reset();
    queue_.reset();
  }
  // `poller` false: not registered with the loop (Reactor has no remove_poller: a test that destroys the
  // cache while the loop runs must not register it).
  void make_cache(uint32_t max, uint64_t inactive_ms = 600000, config::AioMode mode = config::AioMode::kIoUring,
                  bool poller = true) {
    CertsConf c;
    c.cache_max = max;
    c.cache_inactive_ms = inactive_ms;
    cache_ = std::make_unique<CertCache>(reactor_, *queue_, *store_, c, mode);
    if (poller) reactor_.add_poller(cache_.get());
  }
  // Stores `host` with a fresh certificate for CN=cn; returns its fingerprint.
  std::string put(const std::string& host, const std::string& cn, std::string pem = {}) {
    if (pem.empty()) pem = make_cert(cn).bundle();
    StoreJob j;
    j.host = host;
    j.pem = pem;
    store_->run_job(j);
    EXPECT_TRUE(j.ok) << j.error;
    CertBundle b;
    std::string err;
    if (!parse_bundle(pem, &b, &err)) return "";
    return describe(b.leaf, b.chain, b.key).sha256;
  }
  // A step of `script`: find() until it is not pending (the loop runs the disk queue meanwhile); *out is
  // the fingerprint found, "" if absent. Reactor::run() runs once per test, so tests are scripts.
  void get(LoopScript& script, std::string name, std::string* out, Waiter* w = nullptr) {
    auto local = std::make_shared<Waiter>();
    auto asked = std::make_shared<bool>(false);
    script.wait_until([this, name, out, w, local, asked] {
      Waiter* wt = w != nullptr ? w : local.get();
      if (*asked && wt->waiting()) return false;
      *asked = true;
      const LoadedCert* c = nullptr;
      switch (cache_->find(name, wt, &c)) {
        case CertCache::Result::kFound:
          EXPECT_NE(c->leaf, nullptr);
          EXPECT_NE(c->key, nullptr);
          EXPECT_NE(c->chain, nullptr);
          *out = describe(c->leaf, c->chain, c->key).sha256;
          return true;
        case CertCache::Result::kAbsent:
          *out = "";
          return true;
        case CertCache::Result::kPending:
          return false;
      }
      return true;
    });
  }

  TempDir dir_;
  reactor::Reactor reactor_{0, 64};
  config::DiskQueueConf qconf_;
  stats::DiskQueueStats qstats_;
  std::unique_ptr<disk::DiskQueue> queue_;
  std::unique_ptr<CertStore> store_;
  std::unique_ptr<CertCache> cache_;
};

TEST_F(CertCacheTest, LoadsThroughTheDiskQueueThenHits) {
  make_cache(10);
  const std::string fp = put("a.example", "a.example");
  std::string r1 = "x", r2 = "x", r3 = "x";
  LoopScript s(reactor_);
  get(s, "a.example", &r1);
  s.then([&] {
    EXPECT_EQ(cache_->counters().misses, 1u);
    EXPECT_EQ(cache_->counters().loads, 1u);
    EXPECT_GE(qstats_.submitted, 2u);  // open + read, through the queue
  });
  get(s, "a.example", &r2);
  get(s, "b.example", &r3);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r1, fp);
  EXPECT_EQ(r2, fp);
  EXPECT_EQ(r3, "");
  EXPECT_EQ(cache_->counters().hits, 1u);
  EXPECT_EQ(cache_->counters().misses, 1u);
  EXPECT_EQ(cache_->counters().absent, 1u);
}

TEST_F(CertCacheTest, WildcardCoversOneLabel) {
  make_cache(10);
  const std::string wild = put("*.example.com", "*.example.com");
  const std::string exact = put("www.example.com", "www.example.com");
  std::string r[4];
  LoopScript s(reactor_);
  get(s, "a.example.com", &r[0]);
  get(s, "www.example.com", &r[1]);
  get(s, "a.b.example.com", &r[2]);
  get(s, "example.com", &r[3]);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r[0], wild);
  EXPECT_EQ(r[1], exact);  // the exact name wins
  EXPECT_EQ(r[2], "");     // one label only
  EXPECT_EQ(r[3], "");
}

TEST_F(CertCacheTest, ReplacementInvalidatesTheLoadedVersion) {
  make_cache(10);
  const std::string v1 = put("a.example", "one");
  std::string v2, r1, r2, r3;
  LoopScript s(reactor_);
  get(s, "a.example", &r1);
  s.then([&] { v2 = put("a.example", "two"); });
  get(s, "a.example", &r2);
  s.then([&] {
    EXPECT_EQ(cache_->counters().misses, 2u);
    EXPECT_EQ(cache_->size(), 1u);
    StoreJob d;  // deleted: absent at once, and the core's entry goes
    d.kind = StoreJob::Kind::kDelete;
    d.host = "a.example";
    store_->run_job(d);
    EXPECT_TRUE(d.ok);
  });
  get(s, "a.example", &r3);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r1, v1);
  ASSERT_NE(v1, v2);
  EXPECT_EQ(r2, v2);
  EXPECT_EQ(r3, "");
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_F(CertCacheTest, LruBoundAndInactiveExpiry) {
  make_cache(2, 1000);
  const std::string a = put("a.example", "a"), b = put("b.example", "b"), c = put("c.example", "c");
  std::string r[6];
  uint64_t misses = 0;
  LoopScript s(reactor_);
  get(s, "a.example", &r[0]);
  get(s, "b.example", &r[1]);
  get(s, "a.example", &r[2]);  // a is now the most recent
  get(s, "c.example", &r[3]);  // evicts b
  s.then([&] {
    EXPECT_EQ(cache_->size(), 2u);
    EXPECT_EQ(cache_->counters().evictions, 1u);
    misses = cache_->counters().misses;
  });
  get(s, "a.example", &r[4]);
  s.then([&] { EXPECT_EQ(cache_->counters().misses, misses); });  // still cached
  get(s, "b.example", &r[5]);
  s.then([&] {
    EXPECT_EQ(cache_->counters().misses, misses + 1);  // loaded again
    EXPECT_EQ(cache_->expire_idle(reactor_.now_ms() + 500), 0u);
    EXPECT_EQ(cache_->expire_idle(reactor_.now_ms() + 5000), 2u);
  });
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r[0], a);
  EXPECT_EQ(r[1], b);
  EXPECT_EQ(r[2], a);
  EXPECT_EQ(r[3], c);
  EXPECT_EQ(r[4], a);
  EXPECT_EQ(r[5], b);
  EXPECT_EQ(cache_->size(), 0u);
  EXPECT_EQ(cache_->counters().entries, 0u);
}

TEST_F(CertCacheTest, UnreadableFileIsAbsentAndRetriedLater) {
  make_cache(10);
  put("bad.example", "", "garbage, not PEM");
  put("gone.example", "gone");
  std::filesystem::remove(store_->path_of("gone.example"));  // removed behind the store's back
  std::string fp, r[4];
  LoopScript s(reactor_);
  get(s, "bad.example", &r[0]);
  s.then([&] { EXPECT_EQ(cache_->counters().failures, 1u); });
  get(s, "bad.example", &r[1]);  // not retried before kRetryMs
  s.then([&] {
    EXPECT_EQ(cache_->counters().failures, 1u);
    fp = put("bad.example", "fixed");  // a good file under a new version is loaded at once
  });
  get(s, "bad.example", &r[2]);
  get(s, "gone.example", &r[3]);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r[0], "");
  EXPECT_EQ(r[1], "");
  EXPECT_EQ(r[2], fp);
  EXPECT_EQ(r[3], "");
  EXPECT_EQ(cache_->counters().failures, 2u);
}

TEST_F(CertCacheTest, WaiterIsToldAtMostOnceOrCancelled) {
  make_cache(10);
  const std::string fp = put("w.example", "w");
  put("p.example", "p");
  // The load may complete inline (a page-cache hit: kFound at once) or be queued (kPending, then
  // on_cert_ready): both end in kFound, and a waiter is told at most once.
  Waiter w, c;
  std::string r;
  CertCache::Result pr = CertCache::Result::kAbsent;
  LoopScript s(reactor_);
  get(s, "w.example", &r, &w);
  s.then([&] {
    EXPECT_LE(w.calls, 1);
    EXPECT_FALSE(w.waiting());
    cache_->cancel(&w);  // harmless when not waiting
    const LoadedCert* out = nullptr;
    pr = cache_->find("p.example", &c, &out);
    if (pr == CertCache::Result::kPending) {
      EXPECT_TRUE(c.waiting());
      cache_->cancel(&c);
      EXPECT_FALSE(c.waiting());
    }
  });
  s.sleep_ms(50);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r, fp);
  EXPECT_NE(pr, CertCache::Result::kAbsent);
  EXPECT_EQ(c.calls, 0);
}

// Through the disk queue's thread pool every op completes later: the pending path, the waiter's
// notification, and a second handshake joining the same load.
TEST_F(CertCacheTest, PendingLoadTellsEveryWaiterOnce) {
  make_cache(10, 600000, config::AioMode::kThreads);
  const std::string fp = put("a.example", "a");
  Waiter w1, w2, gone;
  CertCache::Result r1{}, r2{}, r3{}, again{};
  std::string fp_again;
  LoopScript s(reactor_);
  s.then([&] {
    const LoadedCert* out = nullptr;
    r1 = cache_->find("a.example", &w1, &out);
    r2 = cache_->find("a.example", &w2, &out);
    r3 = cache_->find("a.example", &gone, &out);
    cache_->cancel(&gone);
  });
  s.wait_until([&] { return w1.calls > 0 && w2.calls > 0; });
  s.then([&] {
    const LoadedCert* out = nullptr;
    again = cache_->find("a.example", &w1, &out);
    if (again == CertCache::Result::kFound) fp_again = describe(out->leaf, out->chain, out->key).sha256;
  });
  s.sleep_ms(20);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r1, CertCache::Result::kPending);
  EXPECT_EQ(r2, CertCache::Result::kPending);
  EXPECT_EQ(r3, CertCache::Result::kPending);
  EXPECT_EQ(w1.calls, 1);
  EXPECT_EQ(w2.calls, 1);
  EXPECT_EQ(gone.calls, 0);
  EXPECT_EQ(again, CertCache::Result::kFound);
  EXPECT_EQ(fp_again, fp);
  EXPECT_EQ(cache_->counters().misses, 1u);
  EXPECT_EQ(cache_->counters().loads, 1u);
  EXPECT_GE(qstats_.completed, 2u);
}

// A replacement published while the old version is being read: the waiters get the new one.
TEST_F(CertCacheTest, VersionChangeDuringLoadReadsAgain) {
  make_cache(10, 600000, config::AioMode::kThreads);
  put("a.example", "one");
  std::string v2;
  Waiter w;
  CertCache::Result r{};
  std::string got;
  LoopScript s(reactor_);
  s.then([&] {
    const LoadedCert* out = nullptr;
    r = cache_->find("a.example", &w, &out);
    v2 = put("a.example", "two");
    cache_->find("a.example", &w, &out);  // sees the new version while the first load runs
  });
  s.wait_until([&] { return w.calls > 0; });
  s.then([&] {
    const LoadedCert* out = nullptr;
    if (cache_->find("a.example", nullptr, &out) == CertCache::Result::kFound) {
      got = describe(out->leaf, out->chain, out->key).sha256;
    }
  });
  ASSERT_TRUE(s.run());
  EXPECT_EQ(r, CertCache::Result::kPending);
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(got, v2);
}

// The core goes away while a load is in flight: the entry outlives the cache until its op completes.
TEST_F(CertCacheTest, DestroyedWhileLoading) {
  make_cache(10, 600000, config::AioMode::kThreads, false);
  put("a.example", "a");
  Waiter w;
  LoopScript s(reactor_);
  s.then([&] {
    const LoadedCert* out = nullptr;
    EXPECT_EQ(cache_->find("a.example", &w, &out), CertCache::Result::kPending);
    cache_.reset();
    EXPECT_FALSE(w.waiting());
  });
  s.sleep_ms(50);
  ASSERT_TRUE(s.run());
  EXPECT_EQ(w.calls, 0);
}

}  // namespace
}  // namespace kosoku::certs
