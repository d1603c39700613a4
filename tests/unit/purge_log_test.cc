// The purge log (core/cache/purge_log.hh): records survive a round trip and say which files they cover; a
// start merges the previous run's logs into purge.replay and carries soft records over.
#include "core/cache/purge_log.hh"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/unit/disk_test_util.hh"

namespace kosoku::cache {
namespace {

using disk::testing::TempDir;

constexpr int64_t kNow = 1700000000;

EntryMeta meta(std::string key, int64_t received, std::string tags = "") {
  EntryMeta m;
  m.key = std::move(key);
  m.freshness.request_time = received;
  m.freshness.response_time = received;
  m.tags = std::move(tags);
  return m;
}

PurgeRecord record(PurgeTarget::Kind kind, std::string key, int64_t at, bool soft = false) {
  PurgeRecord r;
  r.at = at;
  r.soft = soft;
  r.target.kind = kind;
  r.target.key = std::move(key);
  return r;
}

TEST(PurgeLogTest, RecordsRoundTripWithAnyKeyBytes) {
  PurgeRecord r = record(PurgeTarget::Kind::kTags, std::string("http:a.example\n \x00\xff", 19), kNow, true);
  r.target.host_end = 14;
  r.target.tags = {"t1", "news-42"};
  const std::string line = encode_purge_record(r);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line whatever the key holds
  std::optional<PurgeRecord> d = decode_purge_record(std::string_view(line).substr(0, line.size() - 1));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->at, kNow);
  EXPECT_TRUE(d->soft);
  EXPECT_EQ(d->target.kind, PurgeTarget::Kind::kTags);
  EXPECT_EQ(d->target.key, r.target.key);
  EXPECT_EQ(d->target.host_end, 14u);
  EXPECT_EQ(d->target.tags, r.target.tags);
  PurgeRecord all = record(PurgeTarget::Kind::kAll, "", kNow);
  d = decode_purge_record(encode_purge_record(all));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->target.key, "");
  EXPECT_EQ(d->target.host_end, std::string::npos);
  // Torn or foreign lines do not parse.
  EXPECT_FALSE(decode_purge_record("P1 17000"));
  EXPECT_FALSE(decode_purge_record("P1 1 x 0 -1 -"));
  EXPECT_FALSE(decode_purge_record("P1 1 e 0 -1 abc"));  // odd hex
  EXPECT_FALSE(decode_purge_record("P1 1 t 0 -1 -"));    // a tag purge without tags
}

TEST(PurgeLogTest, ARecordCoversWhatItSelectedAndWasReceivedByThen) {
  const PurgeRecord exact = record(PurgeTarget::Kind::kExact, "http:a/x", kNow);
  EXPECT_TRUE(purge_record_covers(exact, meta("http:a/x", kNow - 5)));
  EXPECT_TRUE(purge_record_covers(exact, meta("http:a/x", kNow)));        // the same second: covered
  EXPECT_FALSE(purge_record_covers(exact, meta("http:a/x", kNow + 1)));   // stored after the purge
  EXPECT_FALSE(purge_record_covers(exact, meta("http:a/y", kNow - 5)));
  PurgeRecord prefix = record(PurgeTarget::Kind::kPrefix, "http:a.example", kNow);
  prefix.target.host_end = 14;
  EXPECT_TRUE(purge_record_covers(prefix, meta("http:a.example/p", kNow)));
  EXPECT_FALSE(purge_record_covers(prefix, meta("http:a.examplex/p", kNow)));
  PurgeRecord tags = record(PurgeTarget::Kind::kTags, "http:a.example", kNow);
  tags.target.host_end = 14;
  tags.target.tags = {"b"};
  EXPECT_TRUE(purge_record_covers(tags, meta("http:a.example/p", kNow, "a b c")));
  EXPECT_FALSE(purge_record_covers(tags, meta("http:a.example/p", kNow, "a bb c")));
  EXPECT_FALSE(purge_record_covers(tags, meta("http:b.example/p", kNow, "b")));
  EXPECT_TRUE(purge_record_covers(record(PurgeTarget::Kind::kAll, "", kNow), meta("anything", kNow)));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PurgeLogTest, AStartMergesThePreviousRunsLogsAndCarriesSoftRecords) {
  TempDir dir;
  const std::string hard = encode_purge_record(record(PurgeTarget::Kind::kExact, "http:a/x", kNow));
  const std::string soft = encode_purge_record(record(PurgeTarget::Kind::kExact, "http:a/s", kNow, true));
  dir.write("purge.0.log", hard + "P1 torn");
  dir.write("purge.1.log", soft);
  {
    PurgeLog log;
    log.open(dir.path(), 2);
    ASSERT_EQ(log.replay().size(), 2u);  // the torn line skipped
    EXPECT_EQ(log.replay_path(), dir.file("purge.replay"));
    EXPECT_EQ(slurp(dir.file("purge.replay")), hard + soft);
    EXPECT_EQ(slurp(dir.file("purge.0.log")), soft);  // this run's core 0 log starts with the soft record
    EXPECT_FALSE(std::filesystem::exists(dir.file("purge.1.log")));  // merged; this run's starts with its first purge
    const PurgeRecord* r = log.replayed_cover(meta("http:a/x", kNow - 1));
    ASSERT_NE(r, nullptr);
    EXPECT_FALSE(r->soft);
    EXPECT_EQ(log.replayed_cover(meta("http:a/x", kNow + 1)), nullptr);
    ASSERT_NE(log.replayed_cover(meta("http:a/s", kNow)), nullptr);
    EXPECT_EQ(log.file(1), dir.file("purge.1.log"));
  }
  // The replay file is merged again with the next run's logs (a start that never finished loading).
  std::filesystem::remove(dir.file("purge.1.log"));
  PurgeLog again;
  again.open(dir.path(), 1);
  EXPECT_EQ(again.replay().size(), 2u);  // purge.replay, and the soft record carried in purge.0.log only once
  EXPECT_TRUE(PurgeLog::is_log_file("purge.replay"));
  EXPECT_TRUE(PurgeLog::is_log_file("purge.3.log"));
  EXPECT_FALSE(PurgeLog::is_log_file("0123abcd"));
}

}  // namespace
}  // namespace kosoku::cache
