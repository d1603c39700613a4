// Dynamic per-host cache rules (core/rules/): host normalisation, the compact shard, the rule set's
// matching semantics, invalid patterns keeping the old rules, the per-core memo and compiled-set cache and
// their invalidation, QSBR reclamation with two real threads, persistence, the console, the JSON reader, the
// config directives, and the memory footprint of one million hosts.
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/config/loader.hh"
#include "core/rules/admin_handler.hh"
#include "core/rules/compiled_cache.hh"
#include "core/rules/console.hh"
#include "core/rules/host_name.hh"
#include "core/rules/json.hh"
#include "core/rules/memo.hh"
#include "core/rules/pattern.hh"
#include "core/rules/persist.hh"
#include "core/rules/rule_set.hh"
#include "core/rules/rules_core.hh"
#include "core/rules/store.hh"
#include "gtest/gtest.h"

namespace kosoku::rules {
namespace {

std::vector<std::string> P(std::initializer_list<const char*> l) { return {l.begin(), l.end()}; }

RulesConf conf_with(bool default_cache = true, uint32_t memo = 1000, uint32_t compiled = 64) {
  RulesConf c;
  c.default_cache = default_cache;
  c.memo_max = memo;
  c.compiled_max = compiled;
  return c;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kosoku_rules_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- host names ----

TEST(RulesHost, Normalize) {
  std::string scratch;
  EXPECT_EQ(normalize_host("example.com", scratch), "example.com");
  EXPECT_EQ(normalize_host("Example.COM.:8080", scratch), "example.com");
  EXPECT_EQ(normalize_host("www.example.com.", scratch), "www.example.com");
  EXPECT_EQ(normalize_host("[::1]:8080", scratch), "[::1]");
  EXPECT_EQ(normalize_host("[::1]", scratch), "[::1]");
  EXPECT_EQ(normalize_host("", scratch), "");
  // No copy when nothing needs lower-casing.
  std::string_view in = "a.example:80";
  EXPECT_EQ(normalize_host(in, scratch).data(), in.data());
}

TEST(RulesHost, Valid) {
  EXPECT_TRUE(valid_host("example.com"));
  EXPECT_TRUE(valid_host("a-b_c.example"));
  EXPECT_TRUE(valid_host("[2001:db8::1]"));
  EXPECT_FALSE(valid_host(""));
  EXPECT_FALSE(valid_host("Example.com"));  // not normalised
  EXPECT_FALSE(valid_host("a/b"));
  EXPECT_FALSE(valid_host("a b"));
  EXPECT_FALSE(valid_host(".example.com"));
  EXPECT_FALSE(valid_host(std::string(254, 'a')));
  EXPECT_TRUE(valid_host(std::string(253, 'a')));
}

// ---- JSON ----

TEST(RulesJson, ParsesTheDocument) {
  RulesDoc d;
  std::string err;
  ASSERT_TRUE(parse_rules_doc(R"( {"host":"a.com", "x":{"y":[1,2.5e3,true,null]}, "patterns":["\\.jpg$","\u00e9\ud83d\ude00"]} )",
                              &d, &err))
      << err;
  ASSERT_TRUE(d.host && d.patterns);
  EXPECT_EQ(*d.host, "a.com");
  EXPECT_EQ(*d.patterns, P({"\\.jpg$", "\xc3\xa9\xf0\x9f\x98\x80"}));
  ASSERT_TRUE(parse_rules_doc("{}", &d, &err));
  EXPECT_FALSE(d.host || d.patterns);
  ASSERT_TRUE(parse_rules_doc(R"({"patterns":[]})", &d, &err));
  EXPECT_TRUE(d.patterns && d.patterns->empty());
}

TEST(RulesJson, Errors) {
  RulesDoc d;
  std::string err;
  EXPECT_FALSE(parse_rules_doc(R"({"patterns":["a"})", &d, &err));
  EXPECT_EQ(err, "invalid JSON at byte 16: expected ']'");
  EXPECT_FALSE(parse_rules_doc(R"({"patterns":"a"})", &d, &err));
  EXPECT_FALSE(parse_rules_doc(R"({"patterns":[1]})", &d, &err));
  EXPECT_EQ(err, "invalid JSON at byte 13: \"patterns\" must be an array of strings");
  EXPECT_FALSE(parse_rules_doc(R"({"host":1})", &d, &err));
  EXPECT_FALSE(parse_rules_doc(R"({"a":"\ud800"})", &d, &err));
  EXPECT_FALSE(parse_rules_doc("{\"a\":\"x\ny\"}", &d, &err));
  EXPECT_FALSE(parse_rules_doc(R"({} x)", &d, &err));
  EXPECT_EQ(err, "invalid JSON at byte 3: trailing data after the object");
  EXPECT_FALSE(parse_rules_doc(std::string(100, '[') + std::string(100, ']'), &d, &err));
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(parse_rules_doc(deep, &d, &err));
  EXPECT_NE(err.find("nested too deeply"), std::string::npos);
}

TEST(RulesJson, WritesAndReadsBack) {
  std::vector<std::string> pats = P({"\"q\"\\", "tab\there", "\x01"});
  std::string out;
  append_host_json(out, "a.com", pats);
  EXPECT_EQ(out, R"({"host":"a.com","patterns":["\"q\"\\","tab\there","\u0001"]})");
  RulesDoc d;
  std::string err;
  ASSERT_TRUE(parse_rules_doc(out, &d, &err)) << err;
  EXPECT_EQ(*d.patterns, pats);
}

// ---- shard ----

TEST(RulesShard, FindAndDuplicates) {
  std::string blob;
  append_record(blob, "a.com", P({"x", "yy"}));
  append_record(blob, "b.com", P({}));
  append_record(blob, "a.com", P({"z"}));  // later record wins
  Shard s(7, std::move(blob));
  EXPECT_EQ(s.version(), 7u);
  EXPECT_EQ(s.size(), 2u);
  auto a = s.find("a.com", hash_host("a.com"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->patterns(), P({"z"}));
  auto b = s.find("b.com", hash_host("b.com"));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->count(), 0);
  EXPECT_FALSE(s.find("c.com", hash_host("c.com")));
  std::vector<std::string> hosts;
  s.for_each([&](const HostRules& r) { hosts.emplace_back(r.host); });
  EXPECT_EQ(hosts, P({"b.com", "a.com"}));
}

// ---- matching semantics ----

TEST(RulesMatch, DefaultAndPatterns) {
  RuleStore store(conf_with(true), "");
  RulesCore core(store);
  EXPECT_TRUE(core.decide("nohost.example", "/a.html"));  // no rules: default cache
  ASSERT_TRUE(store.put("img.example", P({R"(.+\.(jpg|png|gif)$)", "^/static/"})).ok);
  EXPECT_TRUE(core.decide("img.example", "/a/b.jpg"));
  EXPECT_TRUE(core.decide("img.example", "/x.png"));
  EXPECT_TRUE(core.decide("img.example", "/static/app.js"));
  EXPECT_FALSE(core.decide("img.example", "/a.html"));
  EXPECT_FALSE(core.decide("img.example", "/a.jpg.html"));
  EXPECT_FALSE(core.decide("img.example", "/x/static/app.js"));  // ^ anchors where written
  EXPECT_FALSE(core.decide("img.example", "/A.JPG"));            // case-sensitive unless (?i)
  // The Host as received: case, port and trailing dot do not matter.
  EXPECT_TRUE(core.decide("IMG.Example.:8080", "/a.gif"));
  EXPECT_EQ(core.cache_rule("img.example", "/a.html"), "1");
  EXPECT_EQ(core.cache_rule("img.example", "/a.gif"), "");
  // Unanchored as written: "jpg" anywhere.
  ASSERT_TRUE(store.put("any.example", P({"jpg", "(?i)\\.HTML$"})).ok);
  EXPECT_TRUE(core.decide("any.example", "/jpgs/index"));
  EXPECT_TRUE(core.decide("any.example", "/Index.html"));
  EXPECT_FALSE(core.decide("any.example", "/index.htm"));
  // An empty list: the host caches nothing.
  ASSERT_TRUE(store.put("none.example", P({})).ok);
  EXPECT_FALSE(core.decide("none.example", "/a.jpg"));
  // Erase: back to the default.
  EXPECT_TRUE(store.erase("none.example").ok);
  EXPECT_TRUE(core.decide("none.example", "/a.jpg"));
  EXPECT_FALSE(store.erase("none.example").ok);
  EXPECT_EQ(store.set().size(), 2u);
}

TEST(RulesMatch, DefaultNocache) {
  RuleStore store(conf_with(false), "");
  RulesCore core(store);
  EXPECT_FALSE(core.decide("nohost.example", "/a.jpg"));
  EXPECT_EQ(core.cache_rule("nohost.example", "/a.jpg"), "1");
  EXPECT_FALSE(core.decide("", "/a.jpg"));
  ASSERT_TRUE(store.put("a.example", P({"\\.jpg$"})).ok);
  EXPECT_TRUE(core.decide("a.example", "/a.jpg"));
}

TEST(RulesMatch, InvalidPatternKeepsOldRules) {
  RuleStore store(conf_with(), "");
  RulesCore core(store);
  ASSERT_TRUE(store.put("a.example", P({"\\.jpg$"})).ok);
  uint64_t gen = store.set().generation();
  RuleSet::Outcome o = store.put("a.example", P({"\\.png$", "(unclosed"}));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "invalid pattern \"(unclosed\": missing ): (unclosed");
  EXPECT_EQ(store.set().generation(), gen);  // nothing published
  EXPECT_EQ(*store.set().get("a.example"), P({"\\.jpg$"}));
  EXPECT_TRUE(core.decide("a.example", "/x.jpg"));
  EXPECT_FALSE(core.decide("a.example", "/x.png"));
  o = store.put("a.example", P({"a{2,1}"}));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "invalid pattern \"a{2,1}\": invalid repetition size: {2,1}");
  o = store.put("a.example", P({"\xff"}));
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("invalid UTF-8"), std::string::npos) << o.error;
  o = store.put("bad host", P({"x"}));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "invalid host \"bad host\"");
  o = store.put("a.example", std::vector<std::string>(kMaxPatterns + 1, "x"));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "too many patterns (1025, at most 1024)");
  // A batch is all-or-nothing.
  std::vector<RuleSet::Change> batch(2);
  batch[0].host = "b.example";
  batch[0].patterns = P({"ok"});
  batch[1].host = "c.example";
  batch[1].patterns = P({"("});
  EXPECT_FALSE(store.set().apply(batch).ok);
  EXPECT_FALSE(store.set().get("b.example"));
}

// ---- memo ----

TEST(RulesMemo, LruAndVersions) {
  Memo m(3);
  EXPECT_EQ(m.find("h", "/a", 1), Memo::Hit::kMiss);
  m.insert("h", "/a", 1, true);
  m.insert("h", "/b", 1, false);
  m.insert("h2", "/a", 1, false);
  EXPECT_EQ(m.find("h", "/a", 1), Memo::Hit::kCache);  // now most recent
  EXPECT_EQ(m.find("h", "/b", 1), Memo::Hit::kNoCache);
  EXPECT_EQ(m.find("h", "/a", 2), Memo::Hit::kMiss);   // computed from an older shard
  EXPECT_EQ(m.find("hh", "/b", 1), Memo::Hit::kMiss);  // (host, uri) split matters
  m.insert("h", "/c", 1, true);                        // evicts the LRU: ("h2", "/a")
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.evictions(), 1u);
  EXPECT_EQ(m.find("h2", "/a", 1), Memo::Hit::kMiss);
  EXPECT_EQ(m.find("h", "/c", 1), Memo::Hit::kCache);
  m.insert("h", "/a", 2, false);  // update in place
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.find("h", "/a", 2), Memo::Hit::kNoCache);
  Memo off(0);
  off.insert("h", "/a", 1, true);
  EXPECT_EQ(off.find("h", "/a", 1), Memo::Hit::kMiss);
}

TEST(RulesMemo, RuleChangeInvalidatesOnlyThatShard) {
  RuleStore store(conf_with(true, 1000), "");
  RulesCore core(store);
  // Two hosts in different shards.
  std::string other;
  for (int i = 0; other.empty(); ++i) {
    std::string h = "h" + std::to_string(i) + ".example";
    if ((hash_host(h) >> (64 - RuleSet::kShardBits)) != (hash_host("a.example") >> (64 - RuleSet::kShardBits))) {
      other = h;
    }
  }
  ASSERT_TRUE(store.put("a.example", P({"\\.jpg$"})).ok);
  ASSERT_TRUE(store.put(other, P({"\\.css$"})).ok);
  EXPECT_TRUE(core.decide("a.example", "/x.jpg"));
  EXPECT_TRUE(core.decide(other, "/x.css"));
  EXPECT_EQ(core.counters().memo_misses, 2u);
  EXPECT_TRUE(core.decide("a.example", "/x.jpg"));
  EXPECT_TRUE(core.decide(other, "/x.css"));
  EXPECT_EQ(core.counters().memo_hits, 2u);
  // The change flips the decision at once (no stale memo entry), and only a.example's shard is recomputed.
  ASSERT_TRUE(store.put("a.example", P({"\\.png$"})).ok);
  EXPECT_FALSE(core.decide("a.example", "/x.jpg"));
  EXPECT_TRUE(core.decide(other, "/x.css"));
  EXPECT_EQ(core.counters().memo_misses, 3u);
  EXPECT_EQ(core.counters().memo_hits, 3u);
  EXPECT_EQ(core.counters().compiles, 3u);  // a.example twice, other once
  EXPECT_TRUE(core.decide("a.example", "/x.png"));
  EXPECT_FALSE(core.decide("a.example", "/x.jpg"));
  EXPECT_EQ(core.counters().memo_hits, 4u);
}

TEST(RulesCompiled, RecompilesOnlyWhenThePatternsChange) {
  RuleStore store(conf_with(true, 0, 2), "");
  RulesCore core(store);
  // Same shard, different hosts: changing one does not recompile the other.
  std::string a = "a.example";
  std::string b;
  for (int i = 0; b.empty(); ++i) {
    std::string h = "s" + std::to_string(i) + ".example";
    if ((hash_host(h) >> (64 - RuleSet::kShardBits)) == (hash_host(a) >> (64 - RuleSet::kShardBits))) b = h;
  }
  ASSERT_TRUE(store.put(a, P({"x"})).ok);
  ASSERT_TRUE(store.put(b, P({"y"})).ok);
  EXPECT_TRUE(core.decide(a, "/x"));
  EXPECT_TRUE(core.decide(b, "/y"));
  EXPECT_EQ(core.counters().compiles, 2u);
  ASSERT_TRUE(store.put(b, P({"z"})).ok);  // new shard version for both hosts
  EXPECT_TRUE(core.decide(a, "/x"));
  EXPECT_EQ(core.counters().compiles, 2u);  // a's bytes are unchanged: no recompile
  EXPECT_TRUE(core.decide(b, "/z"));
  EXPECT_EQ(core.counters().compiles, 3u);
  // Bound: 2 sets; a third host evicts the least recently used.
  ASSERT_TRUE(store.put("c.example", P({"c"})).ok);
  EXPECT_TRUE(core.decide("c.example", "/c"));
  EXPECT_EQ(core.compiled().size(), 2u);
  EXPECT_EQ(core.compiled().evictions(), 1u);
  // Idle sets are freed after inactive= (10 min by default).
  core.set_now(1000);
  EXPECT_TRUE(core.decide("c.example", "/c"));
  core.set_now(1000 + 600001);
  EXPECT_EQ(core.expire_idle(), 2u);
  EXPECT_EQ(core.compiled().size(), 0u);
  EXPECT_TRUE(core.decide("c.example", "/c"));  // compiled again on use
}

// ---- QSBR with two real threads ----

TEST(RulesQsbr, RetiredShardLivesUntilTheReaderPassesAQuiescentPoint) {
  RuleStore store(conf_with(), "");
  ASSERT_TRUE(store.put("a.example", P({"old"})).ok);
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;
  auto wait_step = [&](int s) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return step >= s; });
  };
  auto set_step = [&](int s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      step = s;
    }
    cv.notify_all();
  };
  std::weak_ptr<const Shard> old_weak;
  std::string seen_by_reader;
  std::thread reader([&] {
    RulesCore core(store);  // enrolled (online) in this thread
    core.poll();
    size_t h = hash_host("a.example");
    const Shard* s = store.set().shard(h);  // hold a pointer, as in the middle of a request
    set_step(1);
    wait_step(2);
    // The writer replaced the shard meanwhile; the old one must still be readable.
    auto r = s->find("a.example", h);
    seen_by_reader = r ? r->patterns()[0] : "";
    core.poll();  // quiescent point: drops the pointer
    set_step(3);
    wait_step(4);
  });
  std::thread writer([&] {
    wait_step(1);
    RuleSet::Snapshot before = store.set().snapshot();
    for (auto& s : before.shards) {
      if (s && s->size() > 0) old_weak = s;
    }
    before.shards.clear();
    ASSERT_TRUE(store.put("a.example", P({"new"})).ok);
    EXPECT_EQ(store.set().retired(), 1u);
    EXPECT_EQ(store.set().reclaim(), 1u);  // the reader has not passed a quiescent point
    EXPECT_FALSE(old_weak.expired());
    set_step(2);
    wait_step(3);
    EXPECT_EQ(store.set().reclaim(), 0u);
    EXPECT_TRUE(old_weak.expired());  // freed
    set_step(4);
  });
  writer.join();
  reader.join();
  EXPECT_EQ(seen_by_reader, "old");
}

TEST(RulesQsbr, ConcurrentReaderAndWriter) {
  RuleStore store(conf_with(true, 64, 8), "");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> decisions{0};
  std::atomic<int> bad{0};
  // Host k always caches exactly the paths "/k/..." whatever version of its rules is published.
  auto pattern_for = [](int host, int version) {
    return "^/" + std::to_string(host) + "/(v" + std::to_string(version) + "|.*)";
  };
  for (int k = 0; k < 16; ++k) ASSERT_TRUE(store.put("h" + std::to_string(k) + ".example", std::vector<std::string>{pattern_for(k, 0)}).ok);
  std::thread reader([&] {
    RulesCore core(store);
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      int k = static_cast<int>(n % 16);
      std::string host = "h" + std::to_string(k) + ".example";
      if (!core.decide(host, "/" + std::to_string(k) + "/x")) bad.fetch_add(1);
      if (core.decide(host, "/" + std::to_string(k + 1) + "/x")) bad.fetch_add(1);
      if (++n % 8 == 0) core.poll();
    }
    decisions.store(n);
  });
  for (int v = 1; v <= 3000; ++v) {
    int k = v % 16;
    ASSERT_TRUE(store.put("h" + std::to_string(k) + ".example", std::vector<std::string>{pattern_for(k, v)}).ok);
    if (v % 100 == 0) std::this_thread::yield();
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(decisions.load(), 0u);
  EXPECT_EQ(store.set().reclaim(), 0u);  // the reader left: everything retired is freed
}

// ---- listing ----

TEST(RulesSet, ListPagesCoverEveryHostOnce) {
  RuleSet set;
  std::vector<RuleSet::Change> changes;
  for (int i = 0; i < 250; ++i) changes.push_back({"host" + std::to_string(i) + ".example", P({"x"}), false});
  ASSERT_TRUE(set.apply(changes).ok);
  EXPECT_EQ(set.size(), 250u);
  std::set<std::string> seen;
  for (size_t off = 0; off < 300; off += 40) {
    size_t n = 0;
    EXPECT_EQ(set.list(off, 40, [&](const HostRules& r) {
      EXPECT_TRUE(seen.insert(std::string(r.host)).second);
      ++n;
    }), 250u);
    EXPECT_EQ(n, off >= 250 ? 0 : std::min<size_t>(40, 250 - off));
  }
  EXPECT_EQ(seen.size(), 250u);
}

// ---- persistence ----

TEST(RulesPersist, FileRoundTripAndErrors) {
  TempDir d;
  std::string path = d.file("rules.jsonl");
  {
    RuleStore store(conf_with(), path);
    std::string err;
    ASSERT_TRUE(store.load(&err)) << err;  // missing file: empty set
    ASSERT_NE(store.persister(), nullptr);
    ASSERT_TRUE(store.put("a.example", P({"\\.jpg$", "quote\"d"})).ok);
    ASSERT_TRUE(store.put("b.example", P({})).ok);
    ASSERT_TRUE(store.put("c.example", P({"x"})).ok);
    ASSERT_TRUE(store.erase("c.example").ok);
    ASSERT_TRUE(store.persister()->flush());
    EXPECT_EQ(store.persister()->durable(), store.set().generation());
    std::string text = read_file(path);
    EXPECT_NE(text.find(R"({"host":"a.example","patterns":["\\.jpg$","quote\"d"]})"), std::string::npos) << text;
    EXPECT_EQ(text.find("c.example"), std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    ASSERT_TRUE(store.put("d.example", P({"d"})).ok);
  }  // the destructor writes what is pending
  RuleStore again(conf_with(), path);
  std::string err;
  ASSERT_TRUE(again.load(&err)) << err;
  EXPECT_TRUE(again.loaded_trusted());  // our own file: checksum trailer matches, RE2 validation skipped
  EXPECT_EQ(again.set().size(), 3u);
  EXPECT_EQ(*again.set().get("a.example"), P({"\\.jpg$", "quote\"d"}));
  EXPECT_EQ(*again.set().get("b.example"), P({}));
  EXPECT_EQ(*again.set().get("d.example"), P({"d"}));

  // The trailer: "# checksum fnv1a64=<16 hex> hosts=3" after the records.
  std::string text = read_file(path);
  size_t trailer = text.rfind("# checksum fnv1a64=");
  ASSERT_NE(trailer, std::string::npos);
  EXPECT_EQ(text.substr(trailer + 19 + 16), " hosts=3\n");
  // A hand edit that keeps kosoku's trailer no longer matches it: refused at the trailer's line.
  std::string edited = text;
  size_t at = edited.find("[\"d\"]");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 5, "[\"(\"]");
  std::ofstream(d.file("edited")) << edited;
  RuleStore edited_store(conf_with(), d.file("edited"));
  EXPECT_FALSE(edited_store.load(&err));
  EXPECT_EQ(err, d.file("edited") + ":5: the checksum of the host lines does not match the trailer: the file was "
                 "changed after kosoku wrote it (a file edited by hand ends with \"# checksum none hosts=N\")");
  // The same edit declared as a hand edit is validated: the bad pattern is refused.
  edited.replace(edited.rfind("# checksum"), std::string::npos, "# checksum none hosts=3\n");
  std::ofstream(d.file("edited")) << edited;
  RuleStore hand_edited(conf_with(), d.file("edited"));
  EXPECT_FALSE(hand_edited.load(&err));
  EXPECT_EQ(err, d.file("edited") + ": invalid pattern \"(\": missing ): (");
  // Written by hand (`# checksum none hosts=N`) a valid file loads, validated.
  std::ofstream(d.file("hand")) << "{\"host\":\"a.example\",\"patterns\":[\"x\"]}\n# checksum none hosts=1\n";
  RuleStore hand(conf_with(), d.file("hand"));
  ASSERT_TRUE(hand.load(&err)) << err;
  EXPECT_FALSE(hand.loaded_trusted());
  EXPECT_EQ(hand.set().size(), 1u);

  std::ofstream(d.file("bad1")) << "# comment\n\n{\"host\":\"a.example\",\"patterns\":[\"x\"]}\n{\"host\":\"b\"}\n";
  RuleStore bad1(conf_with(), d.file("bad1"));
  EXPECT_FALSE(bad1.load(&err));
  EXPECT_EQ(err, d.file("bad1") + ":4: a line needs \"host\" and \"patterns\"");
  std::ofstream(d.file("bad2")) << "{\"host\":\"a.example\",\"patterns\":[\"(\"]}\n# checksum none hosts=1\n";
  RuleStore bad2(conf_with(), d.file("bad2"));
  EXPECT_FALSE(bad2.load(&err));
  EXPECT_EQ(err, d.file("bad2") + ": invalid pattern \"(\": missing ): (");
  std::ofstream(d.file("bad3")) << "{\"host\":\"a.example\",\"patterns\":[\"x\"]\n";
  RuleStore bad3(conf_with(), d.file("bad3"));
  EXPECT_FALSE(bad3.load(&err));
  EXPECT_EQ(err, d.file("bad3") + ":1: invalid JSON at byte 36: expected '}'");
}

// A file kosoku wrote with five hosts, its lines (header, five hosts, trailer).
std::vector<std::string> five_host_lines(const TempDir& d, std::string* text) {
  const std::string path = d.file("five");
  {
    RuleStore store(conf_with(), path);
    std::string err;
    EXPECT_TRUE(store.load(&err)) << err;
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.put(absl::StrCat("h", i, ".example"), P({"x"})).ok);
    EXPECT_TRUE(store.persister()->flush());
  }
  *text = read_file(path);
  std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  lines.pop_back();  // after the last newline
  return lines;
}

// What loading `text` (as file `name`) reports; "" when it loads.
std::string load_error(const TempDir& d, const std::string& name, const std::string& text, size_t* hosts = nullptr) {
  std::ofstream(d.file(name), std::ios::binary | std::ios::trunc) << text;
  std::vector<RuleSet::Change> changes;
  bool trusted = false;
  std::string err;
  const bool ok = load_rules_file(d.file(name), &changes, &trusted, &err);
  EXPECT_EQ(ok, err.empty());
  if (!ok) EXPECT_TRUE(changes.empty()) << "a refused file must load nothing";
  if (hosts) *hosts = changes.size();
  return err;
}

TEST(RulesPersist, FileThatDoesNotMatchItsTrailerIsRefused) {
  TempDir d;
  std::string text;
  std::vector<std::string> l = five_host_lines(d, &text);
  ASSERT_EQ(l.size(), 7u) << text;
  ASSERT_TRUE(absl::StartsWith(l[6], "# checksum fnv1a64=")) << text;
  auto join = [](std::initializer_list<std::string> lines) {
    std::string out;
    for (const std::string& x : lines) absl::StrAppend(&out, x, "\n");
    return out;
  };
  const std::string f = d.file("f");
  size_t hosts = 99;
  EXPECT_EQ(load_error(d, "f", text, &hosts), "");
  EXPECT_EQ(hosts, 5u);
  EXPECT_EQ(load_error(d, "f", ""), f + ":1: the file is empty: a rules file ends with a \"# checksum ... hosts=N\" "
                                          "line (truncated?)");
  // Cut at a line boundary: this loaded two of the five hosts before.
  EXPECT_EQ(load_error(d, "f", join({l[0], l[1], l[2]})),
            f + ":3: no \"# checksum fnv1a64=HEX hosts=N\" trailer after 2 host line(s): the file is truncated or "
                "was not written by kosoku (a file written by hand ends with \"# checksum none hosts=N\")");
  EXPECT_EQ(load_error(d, "f", join({l[0]})),
            f + ":1: no \"# checksum fnv1a64=HEX hosts=N\" trailer after 0 host line(s): the file is truncated or "
                "was not written by kosoku (a file written by hand ends with \"# checksum none hosts=N\")");
  EXPECT_EQ(load_error(d, "f", join({l[0], l[1], l[3], l[4], l[5], l[6]})),
            f + ":6: the trailer says hosts=5 but the file has 4 host line(s): the file is truncated or was edited");
  EXPECT_EQ(load_error(d, "f", join({l[0], l[1], l[2], l[3], l[4], l[5], l[5], l[6]})),
            f + ":8: the trailer says hosts=5 but the file has 6 host line(s): the file is truncated or was edited");
  // Cut inside a line, the trailer's included.
  EXPECT_EQ(load_error(d, "f", text.substr(0, text.size() - 1)),
            f + ":7: the last line has no newline: the file is truncated");
  EXPECT_EQ(load_error(d, "f", text.substr(0, text.size() - l[6].size() - 10)),
            f + ":6: the last line has no newline: the file is truncated");
  // A line changed in place (same count): the checksum.
  std::string changed = text;
  changed.replace(changed.find("h3.example"), 10, "h9.example");
  EXPECT_EQ(load_error(d, "f", changed),
            f + ":7: the checksum of the host lines does not match the trailer: the file was changed after kosoku "
                "wrote it (a file edited by hand ends with \"# checksum none hosts=N\")");
  // Two files concatenated; hosts after the trailer; a malformed trailer.
  EXPECT_EQ(load_error(d, "f", text + text), f + ":9: a host line after the \"# checksum\" trailer of line 7");
  EXPECT_EQ(load_error(d, "f", text + l[6] + "\n"), f + ":8: a second \"# checksum\" line (the first is line 7)");
  EXPECT_EQ(load_error(d, "f", join({l[1], "# checksum fnv1a64=12 hosts=1"})),
            f + ":2: invalid trailer \"# checksum fnv1a64=12 hosts=1\": expected \"# checksum fnv1a64=HEX hosts=N\" "
                "or \"# checksum none hosts=N\"");
  EXPECT_EQ(load_error(d, "f", join({l[1], "# checksum none hosts=1x"})),
            f + ":2: invalid trailer \"# checksum none hosts=1x\": expected \"# checksum fnv1a64=HEX hosts=N\" "
                "or \"# checksum none hosts=N\"");
  EXPECT_EQ(load_error(d, "f", join({l[1], "# checksum none"})),
            f + ":2: invalid trailer \"# checksum none\": expected \"# checksum fnv1a64=HEX hosts=N\" "
                "or \"# checksum none hosts=N\"");
  // A hand-written file: the count is checked, the checksum is not.
  EXPECT_EQ(load_error(d, "f", join({l[1], l[2], "# checksum none hosts=2"}), &hosts), "");
  EXPECT_EQ(hosts, 2u);
  EXPECT_EQ(load_error(d, "f", join({"# checksum none hosts=0"}), &hosts), "");
  EXPECT_EQ(hosts, 0u);
  EXPECT_EQ(load_error(d, "f", join({l[1], "# checksum none hosts=2"})),
            f + ":2: the trailer says hosts=2 but the file has 1 host line(s): the file is truncated or was edited");
  // The previous good copy is named when there is one.
  std::ofstream(f + ".prev") << text;
  EXPECT_EQ(load_error(d, "f", ""), f + ":1: the file is empty: a rules file ends with a \"# checksum ... hosts=N\" "
                                          "line (truncated?) (the previous file kosoku wrote is " + f + ".prev)");
  // The store refuses it as a whole: nothing is loaded, nothing persisted.
  RuleStore store(conf_with(), f);
  std::string err;
  EXPECT_FALSE(store.load(&err));
  EXPECT_EQ(store.set().size(), 0u);
  EXPECT_EQ(store.persister(), nullptr);
  // `kosoku -t`: the same message as the start-up's (process_store's "cache_rules_file: ..."), nothing started.
  RulesConf c = conf_with();
  c.file = "f";
  std::string check_err;
  EXPECT_FALSE(check_rules_file(c, d.path() + "/", &check_err));
  EXPECT_EQ(check_err, "cache_rules_file: " + err);
  std::ofstream(f, std::ios::trunc) << text;
  EXPECT_TRUE(check_rules_file(c, d.path() + "/", &check_err));
  c.file = "";
  EXPECT_TRUE(check_rules_file(c, d.path() + "/", &check_err));
}

TEST(RulesPersist, WriterAlwaysEndsWithTrailerAndKeepsThePreviousFile) {
  TempDir d;
  const std::string path = d.file("rules");
  RuleStore store(conf_with(), path);
  std::string err;
  ASSERT_TRUE(store.load(&err)) << err;
  ASSERT_TRUE(store.put("a.example", P({"x"})).ok);
  ASSERT_TRUE(store.persister()->flush());
  EXPECT_FALSE(std::filesystem::exists(path + ".prev"));  // nothing to keep before the first write
  const std::string first = read_file(path);
  ASSERT_TRUE(store.erase("a.example").ok);
  ASSERT_TRUE(store.persister()->flush());
  // The empty set still has its trailer, and loads as empty (not refused as an empty file).
  const std::string second = read_file(path);
  EXPECT_TRUE(absl::EndsWith(second, " hosts=0\n")) << second;
  EXPECT_EQ(read_file(path + ".prev"), first);
  std::vector<RuleSet::Change> changes;
  bool trusted = false;
  ASSERT_TRUE(load_rules_file(path, &changes, &trusted, &err)) << err;
  EXPECT_TRUE(trusted);
  EXPECT_TRUE(changes.empty());
  ASSERT_TRUE(store.put("b.example", P({"y"})).ok);
  ASSERT_TRUE(store.persister()->flush());
  EXPECT_EQ(read_file(path + ".prev"), second);
  EXPECT_FALSE(std::filesystem::exists(path + ".prev.tmp"));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// A crash mid-write (the temp file half written, never renamed) leaves the last complete file in place, and a
// half-written file that somehow took the name is refused, not loaded in part.
TEST(RulesPersist, CrashMidWriteNeverLoadsPartially) {
  TempDir d;
  std::string text;
  five_host_lines(d, &text);
  const std::string path = d.file("five");
  std::ofstream(path + ".tmp", std::ios::binary) << text.substr(0, text.size() / 2);
  std::vector<RuleSet::Change> changes;
  bool trusted = false;
  std::string err;
  ASSERT_TRUE(load_rules_file(path, &changes, &trusted, &err)) << err;
  EXPECT_EQ(changes.size(), 5u);
  for (size_t cut = 0; cut < text.size(); ++cut) {
    size_t hosts = 0;
    const std::string e = load_error(d, "cut", text.substr(0, cut), &hosts);
    EXPECT_FALSE(e.empty()) << "a file cut at byte " << cut << " of " << text.size() << " loaded " << hosts
                            << " host(s)";
  }
}

TEST(RulesPersist, WriteFailureIsReported) {
  TempDir d;
  std::string path = d.file("sub/rules");  // the directory does not exist: open() of the temp file fails
  RuleStore store(conf_with(), path);
  std::string err;
  ASSERT_TRUE(store.load(&err)) << err;
  ASSERT_TRUE(store.put("a.example", P({"x"})).ok);
  EXPECT_FALSE(store.persister()->flush());
  EXPECT_EQ(store.persister()->failed(), store.set().generation());
  EXPECT_NE(store.persister()->last_error().find("open() \"" + path + ".tmp\" failed (2: "), std::string::npos)
      << store.persister()->last_error();
}

// ---- console ----

TEST(RulesConsole, Commands) {
  RuleStore store(conf_with(), "");
  EXPECT_EQ(console_command(store, "rules get a.example"), "no rules for host \"a.example\"\n");
  EXPECT_EQ(console_command(store, R"(rules set a.example \.jpg$ "^/a b/" "q\"x")"), "ok: a.example: 3 pattern(s)\n");
  EXPECT_EQ(*store.set().get("a.example"), P({"\\.jpg$", "^/a b/", "q\"x"}));
  EXPECT_EQ(console_command(store, "rules get A.example"), "A.example: 3 pattern(s)\n  \\.jpg$\n  ^/a b/\n  q\"x\n");
  EXPECT_EQ(console_command(store, "rules set a.example ("),
            "error: invalid pattern \"(\": missing ): ( (the old rules are kept)\n");
  EXPECT_EQ(console_command(store, "rules set a.example x"), "ok: a.example: 1 pattern(s) (replaced)\n");
  EXPECT_EQ(console_command(store, "rules count"), "1 host(s) with rules\n");
  EXPECT_EQ(console_command(store, "rules del a.example"), "ok: a.example: rules deleted\n");
  EXPECT_EQ(console_command(store, "rules del a.example"), "error: no rules for host \"a.example\"\n");
  EXPECT_EQ(console_command(store, "rules set \"a"), "error: unterminated quote\n");
  EXPECT_EQ(console_command(store, "rules frob"),
            "usage: rules get HOST | rules set HOST PATTERN... | rules del HOST | rules count\n");
}

// ---- admin paths ----

TEST(RulesAdmin, SplitPath) {
  bool list = false;
  std::string_view host;
  EXPECT_TRUE(split_admin_path("/admin/rules", "/admin/", &list, &host));
  EXPECT_TRUE(list);
  EXPECT_TRUE(split_admin_path("/admin/rules/", "/admin/", &list, &host));
  EXPECT_TRUE(list);
  EXPECT_TRUE(split_admin_path("/admin/rules/a.example", "/admin/", &list, &host));
  EXPECT_FALSE(list);
  EXPECT_EQ(host, "a.example");
  EXPECT_TRUE(split_admin_path("/admin/rules/rules", "/admin", &list, &host));
  EXPECT_EQ(host, "rules");
  EXPECT_FALSE(split_admin_path("/admin/rules/a/b", "/admin/", &list, &host));
  EXPECT_FALSE(split_admin_path("/admin/other", "/admin/", &list, &host));
  EXPECT_FALSE(split_admin_path("/admin/rulesx", "/admin/", &list, &host));
  // Regex/exact locations: from the first "/rules" segment.
  EXPECT_TRUE(split_admin_path("/x/y/rules/b.example", "", &list, &host));
  EXPECT_EQ(host, "b.example");
  EXPECT_TRUE(split_admin_path("/rulesx/rules", "", &list, &host));
  EXPECT_TRUE(list);
}

// ---- configuration ----

TEST(RulesConfig, Directives) {
  using config::load_from_string;
  config::LoadResult r = load_from_string("http { server { } }", "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const RulesConf defaults;
  EXPECT_EQ(r.conf->http.module<RulesConf>().file, "");
  EXPECT_TRUE(defaults.default_cache);
  EXPECT_EQ(defaults.memo_max, 100000u);
  EXPECT_EQ(defaults.compiled_max, 1024u);
  EXPECT_EQ(defaults.compiled_inactive_ms, 600000u);
  EXPECT_EQ(r.conf->http.module<RulesConf>().memo_max, defaults.memo_max);
  r = load_from_string(R"(http {
    cache_rules_file data/rules.jsonl;
    cache_rules_default nocache;
    cache_rules_memo 0;
    cache_rules_compiled 10 inactive=30s;
    server { location /admin/ { cache_rules_admin; location /admin/x { } } location / { } }
  })", "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const RulesConf& c = r.conf->http.module<RulesConf>();
  EXPECT_EQ(c.file, "data/rules.jsonl");
  EXPECT_FALSE(c.default_cache);
  EXPECT_EQ(c.memo_max, 0u);
  EXPECT_EQ(c.compiled_max, 10u);
  EXPECT_EQ(c.compiled_inactive_ms, 30000u);
  const config::ServerConf& s = *r.conf->http.servers[0];
  EXPECT_TRUE(s.locations[0].module<RulesLocConf>().admin);
  EXPECT_FALSE(s.locations[0].locations[0].module<RulesLocConf>().admin);  // not inherited
  EXPECT_FALSE(s.locations[1].module<RulesLocConf>().admin);
  EXPECT_EQ(s.locations[0].content, &module());  // the admin API serves it
  auto err = [](const std::string& text) { return load_from_string(text, "t.conf").error.message; };
  EXPECT_EQ(err("http { cache_rules_default maybe; }"),
            "t.conf:1:28: invalid value \"maybe\" in \"cache_rules_default\" directive, it must be \"cache\" or "
            "\"nocache\"");
  EXPECT_EQ(err("http { cache_rules_compiled 0; }"), "t.conf:1:29: invalid value \"0\" in \"cache_rules_compiled\" directive");
  EXPECT_EQ(err("http { cache_rules_compiled 5 idle=1s; }"), "t.conf:1:31: invalid parameter \"idle=1s\"");
  EXPECT_EQ(err("http { server { cache_rules_file x; } }"), "t.conf:1:17: \"cache_rules_file\" directive is not allowed here");
  EXPECT_EQ(err("http { server { cache_rules_admin; } }"), "t.conf:1:17: \"cache_rules_admin\" directive is not allowed here");
  // $cache_rule is a known variable.
  EXPECT_TRUE(load_from_string("http { server { add_header X-Cache-Rule $cache_rule always; } }", "t.conf").ok());
}

// ---- memory footprint of one million hosts ----

// ASan's redzones and quarantine make resident memory meaningless for the bound below.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(RulesFootprint, OneMillionHosts) {
  // Hosts like "customer123456.example.net" (26 bytes) with two patterns of 14 and 10 bytes: the record is
  // 1 + 26 + 2 + (2 + 14) + (2 + 10) = 57 bytes. Bounds asserted: <= 80 bytes per host in the set's own
  // accounting (record + index slot at absl's load factor + shard overhead; measured 64.5), and <= 96 bytes
  // per host of resident memory growth once the loader's transient copies are freed (malloc overhead
  // included; measured 67.5; not checked under ASan).
  constexpr int kHosts = 1000000;
  size_t rss_before = rss_bytes();
  RuleSet set;
  {
    std::vector<RuleSet::Change> changes;
    changes.reserve(kHosts);
    for (int i = 0; i < kHosts; ++i) {
      changes.push_back({"customer" + std::to_string(100000 + i) + ".example.net", P({R"(\.(jpg|png)$)", "^/static/"}),
                         false});
    }
    // The patterns are the same valid two for every host: validate once, load the batch unvalidated.
    std::string err;
    ASSERT_TRUE(validate_patterns(changes[0].patterns, &err)) << err;
    ASSERT_TRUE(set.apply(std::move(changes), false).ok);
  }
  EXPECT_EQ(set.size(), static_cast<size_t>(kHosts));
  malloc_trim(0);  // hand the builder's freed transient copies back, so RSS shows what the set keeps
  size_t bytes = set.memory_bytes();
  double per_host = static_cast<double>(bytes) / kHosts;
  size_t rss_after = rss_bytes();
  double rss_per_host = static_cast<double>(rss_after > rss_before ? rss_after - rss_before : 0) / kHosts;
  std::printf("[ footprint ] 1M hosts: %.1f bytes/host (set accounting, %.1f MiB), RSS growth %.1f bytes/host\n",
              per_host, bytes / 1048576.0, rss_per_host);
  EXPECT_LE(per_host, 80.0);
  if (!kAsan) EXPECT_LE(rss_per_host, 96.0);
  // O(1) lookups at this size.
  size_t h = hash_host("customer500000.example.net");
  ASSERT_NE(set.shard(h), nullptr);
  auto rec = set.shard(h)->find("customer500000.example.net", h);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->patterns(), P({R"(\.(jpg|png)$)", "^/static/"}));
  EXPECT_FALSE(set.shard(hash_host("nobody.example.net")) &&
               set.shard(hash_host("nobody.example.net"))->find("nobody.example.net", hash_host("nobody.example.net")));
}

}  // namespace
}  // namespace kosoku::rules
