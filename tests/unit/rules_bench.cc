// Micro-benchmark (not a test; not globbed by CMake): ns per cache-rule decision (RulesCore::decide, what
// `$cache_rule` costs a request) for a host with 10 patterns — memo hit, memo miss (unique URIs: memo probe +
// compiled-set lookup + RE2::Set match + memo insert/evict), no memo, a host without rules — plus the cost
// of compiling a 10-pattern set on first use and of validating a host's patterns when a rules file is loaded.
// Build (optimised, against a release build's Abseil) and run, e.g.:
//   A=build/release/third_party/abseil/absl
//   g++ -std=c++20 -O2 -DNDEBUG -I. -isystem third_party/abseil tests/unit/rules_bench.cc core/rules/*.cc \
//     core/base/log.cc core/reactor/reactor.cc core/reactor/timer_wheel.cc -o /tmp/rb \
//     $(find $A -name '*.a' | sort) $(find $A -name '*.a' | sort) /usr/lib/x86_64-linux-gnu/libre2.a \
//     /usr/lib/x86_64-linux-gnu/liburing.a -lpthread && /tmp/rb
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/rules/pattern.hh"
#include "core/rules/persist.hh"
#include "core/rules/rules_core.hh"
#include "core/rules/store.hh"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double ns_per_call(F&& f, int iterations) {
  for (int i = 0; i < iterations / 10; ++i) f(i);  // warm-up
  auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) f(i);
  auto t1 = Clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
}

// A typical customer's list: images, styles, scripts, fonts, a static tree, some pages.
std::vector<std::string> ten_patterns() {
  return {R"(.+\.(jpg|jpeg|png|gif|webp)$)", R"(.+\.css$)", R"(.+\.js$)", R"(.+\.(woff2?|ttf|eot)$)", "^/static/",
          "^/assets/", R"(.+\.html$)", "^/media/[0-9]+/", R"(.+\.(mp4|webm)$)", R"(^/api/v[0-9]+/public/)"};
}

}  // namespace

int main() {
  using namespace kosoku::rules;
  volatile bool sink = false;

  // Memo hit / miss / off on a 10-pattern host, in a set of 100k hosts.
  for (uint32_t memo : {100000u, 0u}) {
    RulesConf conf;
    conf.memo_max = memo;
    RuleStore store(conf, "");
    std::vector<RuleSet::Change> hosts;
    for (int i = 0; i < 100000; ++i) hosts.push_back({"c" + std::to_string(i) + ".example.net", ten_patterns(), false});
    hosts.push_back({"www.customer.example", ten_patterns(), false});
    store.set().apply(std::move(hosts), false);
    RulesCore core(store);
    std::vector<std::string> uris;
    for (int i = 0; i < 1 << 20; ++i) uris.push_back("/media/" + std::to_string(i) + "/photo-" + std::to_string(i) + ".jpg");
    std::vector<std::string> hot = {"/static/app.js", "/index.html", "/a/b/c.png", "/blog/post?x=1", "/fonts/x.woff2",
                                    "/api/v1/private/me", "/css/site.css", "/media/12/v.mp4"};
    if (memo != 0) {
      double hit = ns_per_call([&](int i) { sink = core.decide("www.customer.example", hot[i & 7]); }, 2000000);
      std::printf("memo hit   (10-pattern host):                    %7.1f ns/decision\n", hit);
      double miss = ns_per_call([&](int i) { sink = core.decide("www.customer.example", uris[i & ((1 << 20) - 1)]); },
                                1000000);
      std::printf("memo miss  (10-pattern host, 1M unique URIs from DRAM, insert+evict): %7.1f ns/decision\n", miss);
      std::printf("           (memo hits %llu, misses %llu, evictions %llu)\n",
                  (unsigned long long)core.counters().memo_hits, (unsigned long long)core.counters().memo_misses,
                  (unsigned long long)core.memo().evictions());
    } else {
      double off = ns_per_call([&](int i) { sink = core.decide("www.customer.example", hot[i & 7]); }, 1000000);
      std::printf("no memo    (10-pattern host: set lookup + RE2::Set match): %7.1f ns/decision\n", off);
    }
    double none = ns_per_call([&](int i) { sink = core.decide("no-rules.example.org", hot[i & 7]); }, 2000000);
    std::printf("host without rules (default):                    %7.1f ns/decision\n", none);
  }

  // Memo miss with the URIs hot in the CPU cache (as a just-parsed request's are): a 4-entry memo cycled
  // with 8 URIs, so every decision misses, matches and inserts (evicting).
  {
    RulesConf conf;
    conf.memo_max = 4;
    RuleStore store(conf, "");
    store.set().apply({{"www.customer.example", ten_patterns(), false}}, false);
    RulesCore core(store);
    std::vector<std::string> hot = {"/static/app.js", "/index.html", "/a/b/c.png", "/blog/post",
                                    "/fonts/x.woff2", "/api/v1/private/me", "/css/site.css", "/media/12/v.mp4"};
    double miss = ns_per_call([&](int i) { sink = core.decide("www.customer.example", hot[i & 7]); }, 1000000);
    std::printf("memo miss  (10-pattern host, URIs in CPU cache, match+insert+evict): %7.1f ns/decision (hits %llu)\n",
                miss, (unsigned long long)core.counters().memo_hits);
  }

  // First use of a host: compile its 10 patterns into one RE2::Set (per core).
  {
    RulesConf conf;
    RuleStore store(conf, "");
    std::vector<RuleSet::Change> hosts;
    for (int i = 0; i < 2000; ++i) hosts.push_back({"h" + std::to_string(i) + ".example", ten_patterns(), false});
    store.set().apply(std::move(hosts), false);
    RulesCore core(store);
    double first = ns_per_call([&](int i) { sink = core.decide("h" + std::to_string(i % 2000) + ".example", "/x.png"); },
                               2000);
    std::printf("first use of a host (compile 10 patterns + match): %7.1f us\n", first / 1000);
  }

  // Loading a rules file validates every host's patterns (RE2 parse + compile as one set).
  {
    std::vector<std::string> two = {R"(.+\.(jpg|png|gif)$)", R"(.+\.html$)"};
    std::vector<std::string> ten = ten_patterns();
    std::string err;
    double v2 = ns_per_call([&](int) { sink = validate_patterns(two, &err); }, 20000);
    double v10 = ns_per_call([&](int) { sink = validate_patterns(ten, &err); }, 5000);
    std::printf("validate at load: 2 patterns %.1f us/host, 10 patterns %.1f us/host (1M hosts x 2: %.1f s)\n",
                v2 / 1000, v10 / 1000, v2 * 1e6 / 1e9);
  }
  // Start-up: load a rules file of 1M hosts (2 patterns each) written by kosoku (checksum trailer: trusted,
  // no RE2 validation).
  {
    std::string path = "/tmp/kosoku_rules_bench_" + std::to_string(getpid()) + ".jsonl";
    RuleSet set;
    std::vector<RuleSet::Change> hosts;
    for (int i = 0; i < 1000000; ++i) {
      hosts.push_back({"customer" + std::to_string(100000 + i) + ".example.net", {R"(\.(jpg|png)$)", "^/static/"},
                       false});
    }
    set.apply(std::move(hosts), false);
    std::string err;
    auto t0 = Clock::now();
    bool ok = write_rules_file(path, set.snapshot(), &err);
    auto t1 = Clock::now();
    RulesConf conf;
    conf.file = path;
    RuleStore store(conf, path);
    bool loaded = store.load(&err);
    auto t2 = Clock::now();
    std::printf("rules file, 1M hosts: write+fsync %.2f s, load %.2f s (trusted=%d ok=%d/%d)\n",
                std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                store.loaded_trusted(), ok, loaded);
    unlink(path.c_str());
  }
  return sink ? 0 : 0;
}
