// Unit tests for core/proxy/upstream: peer choice (nginx's smooth weighted round robin, max_fails /
// fail_timeout, backup, hash, consistent hash) driven with an explicit clock, on upstream groups loaded from
// real configuration text.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/config/loader.hh"
#include "core/proxy/upstream.hh"

namespace kosoku::proxy {
namespace {

/// Loads `upstream u { BODY }` plus a location using it; the group is conf->http.module<proxy::ProxyHttpConf>().upstreams[0].
std::unique_ptr<const config::MainConf> load_upstream(const std::string& body) {
  const std::string text = absl::StrCat("http { upstream u { ", body,
                                        " } server { listen 127.0.0.1:8080; location / { proxy_pass http://u; } } }");
  config::LoadResult r = config::load_from_string(text, "test.conf");
  EXPECT_TRUE(r.conf != nullptr) << r.error.message;
  return std::move(r.conf);
}

/// Server names chosen by `n` attempts (one peer per attempt, reported kOk).
std::string sequence(Balancer& b, int n, uint64_t now = 1000) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    Balancer::Attempt a;
    b.start(a, "", 0);
    const int p = b.next(a, now);
    out += p < 0 ? '-' : static_cast<char>('a' + p);
    b.done(a, PeerResult::kOk, now);
  }
  return out;
}

TEST(Crc32, KnownVectors) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc32(""), 0u);
  Crc32 c;
  c.update("1234");
  c.update("56789");
  EXPECT_EQ(c.final(), 0xCBF43926u);
}

TEST(Balancer, SmoothWeightedRoundRobinIsNginxSequence) {
  // nginx's documented example: weights 5, 1, 1 give a a b a c a a (smooth, not a a a a a b c).
  auto conf = load_upstream("server 10.0.0.1 weight=5; server 10.0.0.2; server 10.0.0.3;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  EXPECT_EQ(sequence(b, 14), "aabacaaaabacaa");
}

TEST(Balancer, WeightsGiveProportions) {
  auto conf = load_upstream("server 10.0.0.1:81 weight=3; server 10.0.0.2:81 weight=2; server 10.0.0.3:81;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  std::map<char, int> count;
  for (char c : sequence(b, 600)) ++count[c];
  EXPECT_EQ(count['a'], 300);
  EXPECT_EQ(count['b'], 200);
  EXPECT_EQ(count['c'], 100);
}

TEST(Balancer, EqualWeightsAlternate) {
  auto conf = load_upstream("server 10.0.0.1; server 10.0.0.2;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  EXPECT_EQ(sequence(b, 6), "ababab");
  EXPECT_FALSE(b.single());
}

TEST(Balancer, TriedPeersAreNotChosenAgainInOneAttempt) {
  auto conf = load_upstream("server 10.0.0.1; server 10.0.0.2; server 10.0.0.3;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "", 0);
  EXPECT_EQ(a.tries, 3u);
  std::set<int> seen;
  for (int i = 0; i < 3; ++i) {
    const int p = b.next(a, 1000);
    ASSERT_GE(p, 0);
    EXPECT_TRUE(seen.insert(p).second) << "peer " << p << " chosen twice";
    b.done(a, PeerResult::kNext, 1000);  // 403/404-style: no failure counted
  }
  EXPECT_EQ(a.tries, 0u);
  EXPECT_EQ(b.next(a, 1000), -1);  // all tried: "no live upstreams"
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.peer(i).fails, 0u);
}

TEST(Balancer, NextUpstreamTriesCapsTries) {
  auto conf = load_upstream("server 10.0.0.1; server 10.0.0.2; server 10.0.0.3; server 10.0.0.4 down;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "", 0);
  EXPECT_EQ(a.tries, 3u);  // down servers do not count
  b.start(a, "", 2);
  EXPECT_EQ(a.tries, 2u);
}

TEST(Balancer, MaxFailsTakesServerOutForFailTimeout) {
  auto conf = load_upstream("server 10.0.0.1 max_fails=2 fail_timeout=10s; server 10.0.0.2;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  uint64_t now = 100000;
  auto fail_a = [&] {
    // Attempts until peer a is chosen, then report a failure.
    for (;;) {
      Balancer::Attempt a;
      b.start(a, "", 0);
      const int p = b.next(a, now);
      const bool is_a = p == 0;
      b.done(a, is_a ? PeerResult::kFailed : PeerResult::kOk, now);
      if (is_a) return;
    }
  };
  fail_a();
  EXPECT_EQ(b.peer(0).fails, 1u);
  EXPECT_EQ(b.peer(0).effective_weight, 1 - 1 / 2);  // weight / max_fails = 0 for weight 1
  fail_a();
  EXPECT_EQ(b.peer(0).fails, 2u);
  // Out for fail_timeout: only b is chosen.
  EXPECT_EQ(sequence(b, 6, now + 1000), "bbbbbb");
  EXPECT_EQ(sequence(b, 3, now + 10000), "bbb");  // still within fail_timeout (<=)
  // After fail_timeout a is tried again; a success clears its failure count.
  const std::string after = sequence(b, 4, now + 10001);
  EXPECT_NE(after.find('a'), std::string::npos) << after;
  EXPECT_EQ(b.peer(0).fails, 0u);
}

TEST(Balancer, FailureLowersEffectiveWeightThenRecovers) {
  auto conf = load_upstream("server 10.0.0.1 weight=10 max_fails=5; server 10.0.0.2 weight=10;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "", 0);
  ASSERT_EQ(b.next(a, 5000), 0);
  b.done(a, PeerResult::kFailed, 5000);
  EXPECT_EQ(b.peer(0).effective_weight, 8);  // 10 - 10/5
  // Each later choice pass raises it by one until it is back at the configured weight.
  sequence(b, 4, 5001);
  EXPECT_EQ(b.peer(0).effective_weight, 10);
}

TEST(Balancer, BackupOnlyWhenPrimariesUnavailable) {
  auto conf = load_upstream(
      "server 10.0.0.1 max_fails=1 fail_timeout=5s; server 10.0.0.2 max_fails=1 fail_timeout=5s; "
      "server 10.0.0.9 backup;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  EXPECT_EQ(b.server(2).name, "10.0.0.9");
  EXPECT_EQ(sequence(b, 4), "abab");
  // One attempt that fails on both primaries moves on to the backup.
  Balancer::Attempt a;
  b.start(a, "", 0);
  EXPECT_EQ(a.tries, 3u);
  for (int i = 0; i < 2; ++i) {
    const int p = b.next(a, 2000);
    ASSERT_TRUE(p == 0 || p == 1);
    b.done(a, PeerResult::kFailed, 2000);
  }
  EXPECT_EQ(b.next(a, 2000), 2);
  EXPECT_TRUE(a.in_backup);
  b.done(a, PeerResult::kOk, 2000);
  // While both primaries are out, new requests go to the backup; afterwards back to the primaries.
  EXPECT_EQ(sequence(b, 3, 3000), "ccc");
  const std::string later = sequence(b, 4, 7001);  // fail_timeout passed
  EXPECT_NE(later.find('a'), std::string::npos) << later;
  EXPECT_NE(later.find('b'), std::string::npos) << later;
  EXPECT_EQ(later.find('c'), std::string::npos) << later;
}

TEST(Balancer, DownServerIsNeverChosen) {
  auto conf = load_upstream("server 10.0.0.1 down; server 10.0.0.2; server 10.0.0.3;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  const std::string s = sequence(b, 20);
  EXPECT_EQ(s.find('a'), std::string::npos) << s;
}

TEST(Balancer, SingleServerIgnoresFailuresAndHasNoRetry) {
  auto conf = load_upstream("server 10.0.0.1 max_fails=1;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  EXPECT_TRUE(b.single());
  for (int i = 0; i < 3; ++i) {
    Balancer::Attempt a;
    b.start(a, "", 0);
    EXPECT_EQ(b.next(a, 1000), 0);
    b.done(a, PeerResult::kFailed, 1000);
    EXPECT_EQ(a.tries, 0u);
    EXPECT_EQ(b.peer(0).fails, 0u);
  }
  auto down = load_upstream("server 10.0.0.1 down;");
  Balancer d(*down->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  d.start(a, "", 0);
  EXPECT_EQ(d.next(a, 1000), -1);
}

TEST(Balancer, AllFailedStayOutUntilTheirFailTimeout) {
  auto conf = load_upstream("server 10.0.0.1; server 10.0.0.2;");  // max_fails=1 fail_timeout=10s
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "", 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_GE(b.next(a, 1000), 0);
    b.done(a, PeerResult::kFailed, 1000);
  }
  EXPECT_EQ(b.peer(0).fails + b.peer(1).fails, 2u);
  EXPECT_EQ(b.next(a, 1000), -1);
  // nginx >= 1.3.x keeps the counts: the next requests within fail_timeout get "no live upstreams" at once
  // (the old reset made every other request retry both dead servers).
  EXPECT_EQ(b.peer(0).fails + b.peer(1).fails, 2u);
  for (uint64_t now : {1001u, 5000u, 11000u}) {
    Balancer::Attempt next;
    b.start(next, "", now);
    EXPECT_EQ(b.next(next, now), -1) << now;
  }
  // After fail_timeout the peers are chosen again (their weights recover step by step, as in nginx).
  EXPECT_EQ(sequence(b, 4, 11001).find('-'), std::string::npos);
}

TEST(Balancer, UntryAllowsTheSamePeerAgain) {
  auto conf = load_upstream("server 10.0.0.1; server 10.0.0.2;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "", 0);
  const int first = b.next(a, 1000);
  b.untry(a);
  b.done(a, PeerResult::kNext, 1000);
  EXPECT_EQ(a.current, -1);
  b.done(a, PeerResult::kFailed, 1000);  // reported once: no failure counted
  EXPECT_EQ(b.peer(first).fails, 0u);
  const int second = b.next(a, 1000);
  b.done(a, PeerResult::kNext, 1000);
  const int third = b.next(a, 1000);
  EXPECT_NE(second, third);
  EXPECT_TRUE(first == second || first == third);
}

std::map<std::string, int> hash_map_keys(Balancer& b, int keys, uint64_t now = 1000) {
  std::map<std::string, int> m;
  for (int i = 0; i < keys; ++i) {
    const std::string key = absl::StrCat("/object/", i);
    Balancer::Attempt a;
    b.start(a, key, 0);
    const int p = b.next(a, now);
    m[key] = p;
    b.done(a, PeerResult::kOk, now);
  }
  return m;
}

TEST(Balancer, PlainHashIsStableAndSpreads) {
  auto conf = load_upstream("hash $request_uri; server 10.0.0.1; server 10.0.0.2; server 10.0.0.3;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  const auto first = hash_map_keys(b, 3000);
  const auto again = hash_map_keys(b, 3000);
  EXPECT_EQ(first, again);  // the same key always lands on the same server
  std::map<int, int> per;
  for (const auto& [k, p] : first) ++per[p];
  ASSERT_EQ(per.size(), 3u);
  for (const auto& [p, n] : per) EXPECT_GT(n, 800) << "server " << p;
  // nginx's formula for the first try: ((crc32(KEY) >> 16) & 0x7fff) % total_weight.
  for (int i = 0; i < 50; ++i) {
    const std::string key = absl::StrCat("/object/", i);
    EXPECT_EQ(first.at(key), static_cast<int>(((crc32(key) >> 16) & 0x7fff) % 3)) << key;
  }
}

TEST(Balancer, PlainHashRehashesAwayFromAFailedServer) {
  auto conf = load_upstream("hash $request_uri; server 10.0.0.1; server 10.0.0.2; server 10.0.0.3;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer::Attempt a;
  b.start(a, "/k", 0);
  const int p = b.next(a, 1000);
  b.done(a, PeerResult::kFailed, 1000);
  const int q = b.next(a, 1000);
  ASSERT_GE(q, 0);
  EXPECT_NE(p, q);
}

TEST(Balancer, ConsistentHashRingHas160PointsPerWeight) {
  auto conf = load_upstream("hash $request_uri consistent; server 127.0.0.1:8080 weight=2; server 127.0.0.1:8081;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  const auto& pts = b.points();
  EXPECT_GE(pts.size(), 470u);  // 480 minus (rare) duplicate hashes
  EXPECT_LE(pts.size(), 480u);
  for (size_t i = 1; i < pts.size(); ++i) EXPECT_LT(pts[i - 1].hash, pts[i].hash);
  // Point hashes follow Cache::Memcached::Fast: crc32(HOST "\0" PORT PREV_HASH), PREV_HASH little-endian.
  Crc32 c;
  c.update(std::string_view("127.0.0.1\0" "8081", 14));
  c.update(std::string_view("\0\0\0\0", 4));
  const uint32_t first_point = c.final();
  bool found = false;
  for (const auto& p : pts) found = found || (p.hash == first_point && p.server == 1);
  EXPECT_TRUE(found);
  size_t on_first = 0;
  for (const auto& p : pts) on_first += p.server == 0;
  EXPECT_NEAR(static_cast<double>(on_first) / pts.size(), 2.0 / 3.0, 0.01);
}

TEST(Balancer, ConsistentHashMovesOnlyTheKeysOfARemovedServer) {
  auto four = load_upstream(
      "hash $request_uri consistent; server 10.0.0.1:80; server 10.0.0.2:80; server 10.0.0.3:80; server 10.0.0.4:80;");
  auto three = load_upstream("hash $request_uri consistent; server 10.0.0.1:80; server 10.0.0.2:80; server 10.0.0.3:80;");
  Balancer b4(*four->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  Balancer b3(*three->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  const auto m4 = hash_map_keys(b4, 4000);
  const auto m3 = hash_map_keys(b3, 4000);
  EXPECT_EQ(m4, hash_map_keys(b4, 4000));  // stable
  int moved = 0, on_removed = 0;
  for (const auto& [k, p] : m4) {
    if (p == 3) {
      ++on_removed;
      continue;
    }
    if (m3.at(k) != p) ++moved;
  }
  EXPECT_EQ(moved, 0);  // keys of the remaining servers stay where they were
  EXPECT_GT(on_removed, 600);
  EXPECT_LT(on_removed, 1400);  // about a quarter
}

TEST(Balancer, ConsistentHashSkipsAFailedServerToTheNextPoint) {
  auto conf = load_upstream(
      "hash $request_uri consistent; server 10.0.0.1:80 max_fails=1 fail_timeout=30s; server 10.0.0.2:80 "
      "max_fails=1 fail_timeout=30s; server 10.0.0.3:80 max_fails=1 fail_timeout=30s;");
  Balancer b(*conf->http.module<proxy::ProxyHttpConf>().upstreams[0]);
  const auto before = hash_map_keys(b, 2000, 1000);
  // Fail server 0 once (max_fails=1): its keys move, the others' keys do not.
  Balancer::Attempt a;
  std::string key;
  for (const auto& [k, p] : before) {
    if (p == 0) {
      key = k;
      break;
    }
  }
  b.start(a, key, 0);
  ASSERT_EQ(b.next(a, 2000), 0);
  b.done(a, PeerResult::kFailed, 2000);
  const auto during = hash_map_keys(b, 2000, 3000);
  for (const auto& [k, p] : before) {
    if (p == 0) {
      EXPECT_NE(during.at(k), 0) << k;
    } else {
      EXPECT_EQ(during.at(k), p) << k;
    }
  }
}

}  // namespace
}  // namespace kosoku::proxy
