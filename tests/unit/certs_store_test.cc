// The TLS certificate store (core/certs/): host names, PEM validation and description, the shared index
// (versions, paging, reclamation), the store's durable writes and start-up scan, the console, the defaults.
#include <openssl/err.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/certs/admin_handler.hh"
#include "core/certs/certs_conf.hh"
#include "core/certs/console.hh"
#include "core/certs/host_name.hh"
#include "core/certs/index.hh"
#include "core/certs/pem.hh"
#include "core/certs/store.hh"
#include "gtest/gtest.h"
#include "tests/unit/certs_test_util.hh"
#include "tests/unit/disk_test_util.hh"

namespace kosoku::certs {
namespace {

using testing::KeyKind;
using testing::make_cert;
using disk::testing::TempDir;

TEST(CertsHostName, NormalizesAndValidates) {
  std::string h;
  EXPECT_TRUE(normalize_cert_host("Example.COM.", &h));
  EXPECT_EQ(h, "example.com");
  EXPECT_TRUE(normalize_cert_host("*.Example.com", &h));
  EXPECT_EQ(h, "*.example.com");
  EXPECT_TRUE(normalize_cert_host("localhost", &h));
  for (const char* bad : {"", ".", "*.", "*", "a..b", ".a", "a/b", "a b", "a:443", "*.*.a", "a.*.b", "[::1]",
                          "..", "a\\b", "%2a.a"}) {
    EXPECT_FALSE(normalize_cert_host(bad, &h)) << bad;
  }
  EXPECT_FALSE(normalize_cert_host(std::string(64, 'a') + ".com", &h));
  EXPECT_TRUE(normalize_cert_host(std::string(63, 'a') + ".com", &h));
  std::string s;
  EXPECT_EQ(wildcard_of("a.b.c", s), "*.b.c");
  EXPECT_EQ(wildcard_of("b.c", s), "*.c");
  EXPECT_EQ(wildcard_of("c", s), "");
  EXPECT_EQ(wildcard_of("*.b.c", s), "");
}

TEST(CertsPem, ParsesAndDescribesEveryKeyType) {
  struct Case {
    KeyKind kind;
    const char* type;
  } cases[] = {{KeyKind::kP256, "ECDSA-P-256"}, {KeyKind::kRsa2048, "RSA-2048"}, {KeyKind::kEd25519, "Ed25519"}};
  for (const Case& c : cases) {
    auto t = make_cert("a.example", c.kind);
    CertBundle b;
    std::string err;
    ASSERT_TRUE(parse_bundle(t.bundle(), &b, &err)) << err;
    EXPECT_TRUE(check_validity(b.leaf, time(nullptr), &err)) << err;
    CertInfo i = describe(b.leaf, b.chain, b.key);
    EXPECT_EQ(i.key_type, c.type);
    EXPECT_EQ(i.subject, "CN=a.example");
    EXPECT_EQ(i.issuer, "CN=a.example");
    EXPECT_EQ(i.sha256.size(), 32u * 3 - 1);
    EXPECT_EQ(i.chain_certs, 1u);
    EXPECT_EQ(i.not_after.size(), 20u);  // 2026-01-01T00:00:00Z
    // The stored form parses back to the same certificate, and never leaks the key into the description.
    std::string stored;
    ASSERT_TRUE(encode_bundle(b, &stored, &err));
    CertBundle again;
    ASSERT_TRUE(parse_bundle(stored, &again, &err)) << err;
    EXPECT_EQ(describe(again.leaf, again.chain, again.key).sha256, i.sha256);
    std::string json;
    append_info_json(json, "a.example", i);
    EXPECT_EQ(json.find("PRIVATE"), std::string::npos);
    EXPECT_NE(json.find("\"key_type\":\"" + std::string(c.type) + "\""), std::string::npos);
    EXPECT_EQ(ERR_peek_error(), 0u);
  }
}

TEST(CertsPem, KeyFirstAndChainOrder) {
  auto leaf = make_cert("leaf.example");
  auto other = make_cert("intermediate.example");
  CertBundle b;
  std::string err;
  ASSERT_TRUE(parse_bundle(leaf.key_pem + "junk between blocks\n" + leaf.cert_pem + other.cert_pem, &b, &err)) << err;
  EXPECT_EQ(sk_X509_num(b.chain), 1);
  EXPECT_EQ(describe(b.leaf, b.chain, b.key).chain_certs, 2u);
}

TEST(CertsPem, RefusesBadInputWithClearMessages) {
  auto a = make_cert("a.example");
  auto b = make_cert("b.example");
  struct Case {
    std::string pem;
    const char* want;
  } cases[] = {
      {"", "no certificate"},
      {"hello world", "no certificate"},
      {a.key_pem, "no certificate"},
      {a.cert_pem, "no private key"},
      {a.cert_pem + b.key_pem, "does not match"},
      {b.cert_pem + a.cert_pem + a.key_pem, "does not match"},  // the leaf must come first
      {"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" + a.key_pem, "does not parse"},
      {a.cert_pem + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "private key does not parse"},
      {a.cert_pem + a.key_pem + b.key_pem, "more than one private key"},
  };
  for (const Case& c : cases) {
    CertBundle out;
    std::string err;
    EXPECT_FALSE(parse_bundle(c.pem, &out, &err));
    EXPECT_NE(err.find(c.want), std::string::npos) << "got: " << err << " want: " << c.want;
    EXPECT_EQ(out.leaf, nullptr);
    EXPECT_EQ(ERR_peek_error(), 0u) << err;
  }
}

TEST(CertsPem, ValidityWindow) {
  std::string err;
  CertBundle b;
  auto expired = make_cert("old.example", KeyKind::kP256, -7200, -3600);
  ASSERT_TRUE(parse_bundle(expired.bundle(), &b, &err));
  EXPECT_FALSE(check_validity(b.leaf, time(nullptr), &err));
  EXPECT_NE(err.find("expired"), std::string::npos) << err;
  auto future = make_cert("new.example", KeyKind::kP256, 3600, 7200);
  ASSERT_TRUE(parse_bundle(future.bundle(), &b, &err));
  EXPECT_FALSE(check_validity(b.leaf, time(nullptr), &err));
  EXPECT_NE(err.find("not yet valid"), std::string::npos) << err;
  EXPECT_TRUE(check_validity(b.leaf, time(nullptr) + 5000, &err));
}

TEST(CertsIndex, VersionsListAndReclaim) {
  CertIndex idx;
  Qsbr::Reader* r = idx.qsbr().enroll();
  EXPECT_EQ(idx.version("a.example"), 0u);
  CertIndex::Outcome o1 = idx.set("a.example");
  EXPECT_FALSE(o1.existed);
  EXPECT_EQ(idx.version("a.example"), o1.version);
  CertIndex::Outcome o2 = idx.set("a.example");
  EXPECT_TRUE(o2.existed);
  EXPECT_GT(o2.version, o1.version);
  EXPECT_EQ(idx.version("a.example"), o2.version);
  EXPECT_EQ(idx.size(), 1u);
  // The replaced shard waits for the reader's quiescent point.
  EXPECT_GE(idx.retired(), 1u);
  idx.qsbr().quiescent(r);
  EXPECT_EQ(idx.reclaim(), 0u);

  std::vector<std::string> hosts;
  for (int i = 0; i < 500; ++i) hosts.push_back("h" + std::to_string(i) + ".example");
  hosts.push_back("h1.example");  // a duplicate is kept once
  idx.set_many(hosts);
  EXPECT_EQ(idx.size(), 501u);
  std::vector<std::string> all;
  std::vector<uint64_t> versions;
  size_t total = idx.list(0, 1000, [&](std::string_view h, uint64_t v) {
    all.emplace_back(h);
    versions.push_back(v);
  });
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(idx.version(all[i]), versions[i]);
  EXPECT_EQ(total, 501u);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 501u);
  std::vector<std::string> paged;
  for (size_t off = 0; off < 501; off += 37) {
    idx.list(off, 37, [&](std::string_view h, uint64_t) { paged.emplace_back(h); });
  }
  EXPECT_EQ(paged, all);  // stable order: pages concatenate to the full list
  EXPECT_TRUE(idx.erase("h7.example").existed);
  EXPECT_FALSE(idx.erase("h7.example").existed);
  EXPECT_EQ(idx.version("h7.example"), 0u);
  EXPECT_EQ(idx.size(), 500u);
  idx.qsbr().quiescent(r);
  idx.reclaim();
  idx.qsbr().leave(r);
  EXPECT_GT(idx.memory_bytes(), 0u);
}

TEST(CertsStore, DurableWriteScanAndDelete) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/store";
  auto a = make_cert("a.example");
  std::string pem;
  {
    CertBundle b;
    std::string err;
    ASSERT_TRUE(parse_bundle(a.bundle(), &b, &err));
    ASSERT_TRUE(encode_bundle(b, &pem, &err));
  }
  uint64_t v1 = 0;
  {
    CertStore s(dir);
    std::string err;
    ASSERT_TRUE(s.open(&err)) << err;  // created
    EXPECT_EQ(s.scanned(), 0u);
    StoreJob j;
    j.host = "a.example";
    j.pem = pem;
    s.run_job(j);
    ASSERT_TRUE(j.ok) << j.error;
    EXPECT_FALSE(j.existed);
    v1 = j.version;
    EXPECT_EQ(s.index().get("a.example"), v1);
    const std::string path = s.path_of("a.example");
    EXPECT_EQ(path, dir + "/" + CertStore::shard_dir("a.example") + "/a.example.pem");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::string back;
    ASSERT_TRUE(s.read_file("a.example", &back, &err));
    EXPECT_EQ(back, pem);
    j.host = "*.wild.example";
    s.run_job(j);
    ASSERT_TRUE(j.ok) << j.error;
    j.host = "a.example";
    s.run_job(j);
    EXPECT_TRUE(j.existed);
    EXPECT_GT(j.version, v1);
    // The same name shards the same way in every process (FNV-1a), and sits two levels down.
    EXPECT_EQ(CertStore::shard_dir("a.example").size(), 5u);
    EXPECT_EQ(CertStore::shard_dir("a.example"), CertStore::shard_dir("a.example"));
  }
  // Leftovers a restart must cope with: a write cut by a crash, a file in the wrong directory, junk.
  const std::string sub = dir + "/" + CertStore::shard_dir("a.example");
  tmp.write("store/" + CertStore::shard_dir("a.example") + "/.cut.example.pem.tmp", "partial");
  std::string wrong = CertStore::shard_dir("a.example") == "00/00" ? "00/01" : "00/00";
  std::filesystem::create_directories(dir + "/" + wrong);
  tmp.write("store/" + wrong + "/a.example.pem", pem);
  tmp.write("store/" + CertStore::shard_dir("a.example") + "/not a host.pem", pem);
  {
    CertStore s(dir);
    std::string err;
    ASSERT_TRUE(s.open(&err)) << err;
    EXPECT_EQ(s.scanned(), 2u);
    EXPECT_EQ(s.skipped(), 2u);
    EXPECT_NE(s.index().get("a.example"), 0u);
    EXPECT_NE(s.index().get("*.wild.example"), 0u);
    EXPECT_FALSE(std::filesystem::exists(sub + "/.cut.example.pem.tmp"));
    StoreJob d;
    d.kind = StoreJob::Kind::kDelete;
    d.host = "a.example";
    s.run_job(d);
    EXPECT_TRUE(d.ok) << d.error;
    EXPECT_EQ(s.index().get("a.example"), 0u);
    EXPECT_FALSE(std::filesystem::exists(s.path_of("a.example")));
    s.run_job(d);
    EXPECT_FALSE(d.ok);
    EXPECT_FALSE(d.existed);
    EXPECT_NE(d.error.find("no certificate"), std::string::npos);
  }
}

TEST(CertsStore, FailedWriteChangesNothing) {
  TempDir tmp;
  CertStore s(tmp.path());
  std::string err;
  ASSERT_TRUE(s.open(&err)) << err;
  // The host's first-level directory is a regular file: mkdir/open fail.
  const std::string l1 = CertStore::shard_dir("b.example").substr(0, 2);
  tmp.write(l1, "not a directory");
  StoreJob j;
  j.host = "b.example";
  j.pem = "x";
  s.run_job(j);
  EXPECT_FALSE(j.ok);
  EXPECT_FALSE(j.error.empty());
  EXPECT_EQ(s.index().get("b.example"), 0u);
}

TEST(CertsStore, RefusesUnusableDirectory) {
  TempDir tmp;
  tmp.write("file", "x");
  std::string err;
  CertStore s(tmp.path() + "/file");
  EXPECT_FALSE(s.open(&err));
  EXPECT_NE(err.find("is not a directory"), std::string::npos) << err;
  CertStore s2(tmp.path() + "/missing/deeper");
  EXPECT_FALSE(s2.open(&err));
  EXPECT_NE(err.find("cannot be created"), std::string::npos) << err;
  CertsConf conf;
  conf.store = "file";
  EXPECT_FALSE(check_store(conf, tmp.path() + "/", &err));
  conf.store = "new-dir";
  EXPECT_TRUE(check_store(conf, tmp.path() + "/", &err)) << err;
  conf.store.clear();
  EXPECT_TRUE(check_store(conf, tmp.path() + "/", &err));
}

class Collect final : public JobInbox {
 public:
  void deliver(std::unique_ptr<StoreJob> job) override {
    std::lock_guard<std::mutex> lock(mu);
    jobs.push_back(std::move(job));
  }
  std::mutex mu;
  std::vector<std::unique_ptr<StoreJob>> jobs;
};

TEST(CertsStore, WriterThreadKeepsOrder) {
  TempDir tmp;
  CertStore s(tmp.path());
  std::string err;
  ASSERT_TRUE(s.open(&err)) << err;
  Collect inbox;
  for (int i = 0; i < 5; ++i) {
    auto j = std::make_unique<StoreJob>();
    j->host = "c.example";
    j->pem = "v" + std::to_string(i);
    s.submit(std::move(j), &inbox);
  }
  auto d = std::make_unique<StoreJob>();
  d->kind = StoreJob::Kind::kDelete;
  d->host = "c.example";
  s.submit(std::move(d), &inbox);
  s.flush();
  ASSERT_EQ(inbox.jobs.size(), 6u);
  EXPECT_FALSE(inbox.jobs[0]->existed);
  for (int i = 1; i < 5; ++i) EXPECT_TRUE(inbox.jobs[i]->existed);
  EXPECT_GT(inbox.jobs[4]->version, inbox.jobs[3]->version);
  EXPECT_TRUE(inbox.jobs[5]->ok);
  EXPECT_EQ(s.index().get("c.example"), 0u);
}

TEST(CertsStore, DetachedInboxGetsNothing) {
  TempDir tmp;
  CertStore s(tmp.path());
  std::string err;
  ASSERT_TRUE(s.open(&err)) << err;
  Collect kept, gone;
  for (int i = 0; i < 20; ++i) {
    auto j = std::make_unique<StoreJob>();
    j->host = "d" + std::to_string(i) + ".example";
    j->pem = "x";
    s.submit(std::move(j), i % 2 == 0 ? &kept : &gone);
  }
  s.detach(&gone);
  s.flush();
  EXPECT_EQ(kept.jobs.size(), 10u);
  EXPECT_LE(gone.jobs.size(), 1u);  // at most the one delivered before detach() returned
  EXPECT_EQ(s.index().size(), 20u);  // the writes themselves all happened
}

TEST(CertsAdmin, SplitsPaths) {
  bool list = false;
  std::string_view host;
  EXPECT_TRUE(split_admin_path("/admin/certs", "/admin/", &list, &host));
  EXPECT_TRUE(list);
  EXPECT_TRUE(split_admin_path("/admin/certs/", "/admin/", &list, &host));
  EXPECT_TRUE(list);
  EXPECT_TRUE(split_admin_path("/admin/certs/*.a.example", "/admin/", &list, &host));
  EXPECT_FALSE(list);
  EXPECT_EQ(host, "*.a.example");
  EXPECT_TRUE(split_admin_path("/x/certs/a.example/", "", &list, &host));
  EXPECT_EQ(host, "a.example");
  EXPECT_FALSE(split_admin_path("/admin/certs/a/b", "/admin/", &list, &host));
  EXPECT_FALSE(split_admin_path("/admin/certsx", "/admin/", &list, &host));
  EXPECT_FALSE(split_admin_path("/admin/other", "/admin/", &list, &host));
}

TEST(CertsConsole, ListShowCount) {
  TempDir tmp;
  CertStore s(tmp.path());
  std::string err;
  ASSERT_TRUE(s.open(&err)) << err;
  auto a = make_cert("a.example", KeyKind::kRsa2048);
  for (const char* h : {"a.example", "b.example", "*.c.example"}) {
    StoreJob j;
    j.host = h;
    j.pem = a.bundle();
    s.run_job(j);
    ASSERT_TRUE(j.ok);
  }
  EXPECT_EQ(console_command(s, "certs count"), "3 certificate(s) in the store\n");
  std::string all = console_command(s, "certs list");
  EXPECT_NE(all.find("3 certificate(s); 3 from offset 0"), std::string::npos) << all;
  EXPECT_NE(all.find("  *.c.example\n"), std::string::npos);
  EXPECT_NE(console_command(s, "certs list 1 1").find("; 1 from offset 1"), std::string::npos);
  std::string show = console_command(s, "certs show A.example");
  EXPECT_NE(show.find("subject     CN=a.example"), std::string::npos) << show;
  EXPECT_NE(show.find("RSA-2048"), std::string::npos);
  EXPECT_EQ(show.find("PRIVATE"), std::string::npos);
  EXPECT_NE(console_command(s, "certs show nope.example").find("no certificate"), std::string::npos);
  EXPECT_NE(console_command(s, "certs show a..b").find("invalid host"), std::string::npos);
  EXPECT_NE(console_command(s, "certs frob").find("usage"), std::string::npos);
}

TEST(CertsConf, Defaults) {
  CertsConf c;
  EXPECT_EQ(c.cache_max, 1000u);
  EXPECT_EQ(c.cache_inactive_ms, 600000u);
  EXPECT_TRUE(c.store.empty());
}

}  // namespace
}  // namespace kosoku::certs
