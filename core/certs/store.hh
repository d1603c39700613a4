// The process's certificate store: the directory of PEM files (`ssl_certificate_store PATH`), its index
// (index.hh) and the thread that writes it.
//
// Layout: one file per host, PATH/XX/YY/HOST.pem, where XX and YY are the first two bytes (hex, lower case)
// of FNV-1a 64 of the host name: 65536 directories, ~15 files each at a million hosts. A wildcard keeps its
// '*' in the file name (`PATH/3f/a0/*.example.com.pem`). The file holds the leaf, the chain and the private
// key (PKCS#8), as re-encoded by the admin API after validation; mode 0600.
//
// Durability: a PUT writes PATH/XX/YY/.HOST.pem.tmp, fsyncs it, renames it over HOST.pem and fsyncs the
// directory (directories it had to create are fsynced into their parents); a DELETE unlinks and fsyncs the
// directory. Only then is the index changed (a new version, or the host removed), and only then does the
// admin API answer: an answered 201/200 survives a crash (SIGKILL, power loss on a disk that honours
// fsync), and a failed write changes neither the file nor the index. A crash before the rename leaves at
// worst a stale `.HOST.pem.tmp`, which the next start-up scan removes.
//
// The writes run on one dedicated thread, in submission order (never on a loop): a job is queued with
// submit() from any thread, and its completion handed to the job's Inbox (the submitting core's), which the
// core drains on its own loop.
//
// Start-up: the directory is scanned once (readdir only, no stat or open per file) and the index built
// from the file names; the count and the time are logged. A file whose name is not a valid host, or that
// sits in the wrong XX/YY directory, is skipped with a warning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/certs/certs_conf.hh"
#include "core/certs/index.hh"

namespace kosoku::certs {

class CertStore;

/// One change for the writer thread. Owned by whoever submitted it until its Inbox receives it back.
struct StoreJob {
  enum class Kind { kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string host;  // normalised (host_name.hh)
  std::string pem;   // kPut: the file's contents (pem.hh: encode_bundle)
  // Set by the writer thread before the job is delivered.
  bool ok = false;
  bool existed = false;   // the host had a certificate before (kDelete: false → 404)
  uint64_t version = 0;   // kPut: the host's new index version
  std::string error;      // !ok: why ("rename() \"...\" failed (28: No space left on device)")
  // The submitter's context (never touched by the writer).
  void* owner = nullptr;
};

/// Where finished jobs go: deliver() runs on the writer thread and must not block for long.
class JobInbox {
 public:
  virtual void deliver(std::unique_ptr<StoreJob> job) = 0;

 protected:
  ~JobInbox() = default;
};

class CertStore {
 public:
  /// `dir`: the resolved ssl_certificate_store directory (no trailing '/').
  explicit CertStore(std::string dir);
  /// Finishes the queued jobs, then stops the writer thread.
  ~CertStore();
  CertStore(const CertStore&) = delete;
  CertStore& operator=(const CertStore&) = delete;

  /// Start-up (blocking I/O): creates `dir` if missing (one level), checks that it is a writable directory,
  /// scans it into the index and starts the writer thread. False with *error (a sentence naming the path).
  bool open(std::string* error);

  const std::string& dir() const { return dir_; }
  CertIndex& index() { return index_; }
  const CertIndex& index() const { return index_; }
  /// PATH/XX/YY/HOST.pem for a normalised host.
  std::string path_of(std::string_view host) const;
  /// "XX/YY" for a host (FNV-1a 64, stable across processes and builds).
  static std::string shard_dir(std::string_view host);

  /// Queues `job` for the writer thread; its completion goes to `inbox`. Any thread; never blocks on I/O.
  void submit(std::unique_ptr<StoreJob> job, JobInbox* inbox);
  /// Blocks until every job submitted so far has been delivered (tests, shutdown).
  void flush();
  /// `inbox` goes away: jobs it submitted still run but are not delivered (their StoreJob is freed on the
  /// writer thread). Returns once no deliver() to `inbox` runs or can start. Any thread.
  void detach(JobInbox* inbox);

  /// The writer's steps, synchronous (the writer thread; tests): write the file durably then publish in
  /// the index / unlink durably then remove from the index. They fill job.ok/existed/version/error.
  void run_job(StoreJob& job);

  /// Reads a host's file (blocking: the console thread, tests). False with *error.
  bool read_file(std::string_view host, std::string* out, std::string* error) const;

  /// Scan results of open() (for the log and tests).
  size_t scanned() const { return scanned_; }
  size_t skipped() const { return skipped_; }

 private:
  bool scan(std::string* error);
  void run();

  std::string dir_;
  CertIndex index_;
  size_t scanned_ = 0;
  size_t skipped_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::pair<std::unique_ptr<StoreJob>, JobInbox*>> queue_;
  bool busy_ = false;
  std::mutex deliver_mu_;              // held while a job is delivered; taken after mu_ by detach()
  JobInbox* current_inbox_ = nullptr;  // the running job's inbox (deliver_mu_)
  bool stop_ = false;
  std::thread thread_;
};

/// The process's store, created and opened on the first call (the first worker, before its loop runs);
/// later calls return the same store. Relative `conf.store` resolves against `prefix` (with trailing '/').
/// Throws std::system_error(EINVAL, "ssl_certificate_store: MESSAGE") if the directory is unusable.
CertStore& process_store(const CertsConf& conf, const std::string& prefix);
/// The process's store if it exists (the console), else null.
CertStore* process_store_if_created();
/// `kosoku -t`: the checks open() makes on the directory (exists or can be created, is a writable
/// directory), without scanning it. True when there is no store directive.
bool check_store(const CertsConf& conf, const std::string& prefix, std::string* error);

}  // namespace kosoku::certs
