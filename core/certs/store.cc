#include "core/certs/store.hh"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/certs/host_name.hh"

namespace kosoku::certs {

namespace {

std::string errno_text(std::string_view call, std::string_view path, int err) {
  return absl::StrCat(call, "() \"", path, "\" failed (", err, ": ", std::strerror(err), ")");
}

uint64_t fnv1a(std::string_view data) {
  uint64_t h = 14695981039346656037ull;
  for (char c : data) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

bool is_hex2(const char* name) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return hex(name[0]) && hex(name[1]) && name[2] == '\0';
}

bool fsync_path(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *error = errno_text("open", path, errno);
    return false;
  }
  const bool ok = ::fsync(fd) == 0;
  if (!ok) *error = errno_text("fsync", path, errno);
  ::close(fd);
  return ok;
}

// mkdir `path` unless it exists; a directory it creates is fsynced into `parent`.
bool ensure_dir(const std::string& path, const std::string& parent, std::string* error) {
  if (::mkdir(path.c_str(), 0700) == 0) return fsync_path(parent, error);
  if (errno == EEXIST) return true;
  *error = errno_text("mkdir", path, errno);
  return false;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool check_dir(const std::string& dir, bool create, std::string* error) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || !create) {
      *error = absl::StrCat("\"", dir, "\" is unusable: ", errno_text("stat", dir, errno));
      return false;
    }
    if (::mkdir(dir.c_str(), 0700) != 0) {
      *error = absl::StrCat("\"", dir, "\" does not exist and cannot be created: ", errno_text("mkdir", dir, errno));
      return false;
    }
    if (::stat(dir.c_str(), &st) != 0) {
      *error = errno_text("stat", dir, errno);
      return false;
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = absl::StrCat("\"", dir, "\" is not a directory");
    return false;
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    *error = absl::StrCat("\"", dir, "\" is not a writable directory: ", errno_text("access", dir, errno));
    return false;
  }
  return true;
}

std::string resolve(const CertsConf& conf, const std::string& prefix) {
  std::string dir = conf.store;
  if (!dir.empty() && dir[0] != '/') dir = prefix + dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

CertStore::CertStore(std::string dir) : dir_(std::move(dir)) {}

CertStore::~CertStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string CertStore::shard_dir(std::string_view host) {
  const uint64_t h = fnv1a(host);
  static constexpr char kHex[] = "0123456789abcdef";
  const unsigned a = static_cast<unsigned>(h >> 56), b = static_cast<unsigned>((h >> 48) & 0xff);
  return std::string{kHex[a >> 4], kHex[a & 15], '/', kHex[b >> 4], kHex[b & 15]};
}

std::string CertStore::path_of(std::string_view host) const {
  return absl::StrCat(dir_, "/", shard_dir(host), "/", host, ".pem");
}

bool CertStore::open(std::string* error) {
  if (!check_dir(dir_, true, error)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  if (!scan(error)) return false;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  KOSOKU_LOG(kNotice, "ssl_certificate_store \"%s\": %d certificate(s) indexed in %d ms%s", dir_, scanned_, ms,
             skipped_ > 0 ? absl::StrCat(" (", skipped_, " file(s) skipped)") : std::string());
  thread_ = std::thread([this] { run(); });
  return true;
}

bool CertStore::scan(std::string* error) {
  std::vector<std::string> hosts;
  DIR* top = ::opendir(dir_.c_str());
  if (top == nullptr) {
    *error = errno_text("opendir", dir_, errno);
    return false;
  }
  std::string host;
  while (dirent* a = ::readdir(top)) {
    if (a->d_name[0] == '.' || !is_hex2(a->d_name)) continue;
    const std::string l1 = absl::StrCat(dir_, "/", a->d_name);
    DIR* d1 = ::opendir(l1.c_str());
    if (d1 == nullptr) continue;
    while (dirent* b = ::readdir(d1)) {
      if (b->d_name[0] == '.' || !is_hex2(b->d_name)) continue;
      const std::string l2 = absl::StrCat(l1, "/", b->d_name);
      DIR* d2 = ::opendir(l2.c_str());
      if (d2 == nullptr) continue;
      while (dirent* f = ::readdir(d2)) {
        std::string_view name = f->d_name;
        if (name == "." || name == "..") continue;
        if (name.front() == '.' && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
          ::unlinkat(::dirfd(d2), f->d_name, 0);  // a write cut by a crash: never read
          continue;
        }
        if (f->d_type != DT_REG && f->d_type != DT_UNKNOWN) continue;
        if (name.size() <= 4 || name.substr(name.size() - 4) != ".pem") continue;
        std::string_view stem = name.substr(0, name.size() - 4);
        if (!normalize_cert_host(stem, &host) || host != stem ||
            shard_dir(host) != absl::StrCat(a->d_name, "/", b->d_name)) {
          ++skipped_;
          KOSOKU_LOG(kWarn, "ssl_certificate_store: \"%s/%s\" skipped: not a host name or not in its directory %s",
                     l2, name, shard_dir(stem));
          continue;
        }
        hosts.push_back(host);
      }
      ::closedir(d2);
    }
    ::closedir(d1);
  }
  ::closedir(top);
  scanned_ = hosts.size();
  index_.set_many(hosts);
  return true;
}

void CertStore::submit(std::unique_ptr<StoreJob> job, JobInbox* inbox) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(job), inbox);
  }
  cv_.notify_one();
}

void CertStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || !thread_.joinable(); });
}

void CertStore::detach(JobInbox* inbox) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& q : queue_) {
    if (q.second == inbox) q.second = nullptr;
  }
  std::lock_guard<std::mutex> d(deliver_mu_);
  if (current_inbox_ == inbox) current_inbox_ = nullptr;
}

void CertStore::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
    if (queue_.empty()) break;  // stop_ and nothing left
    auto [job, inbox] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    {
      std::lock_guard<std::mutex> d(deliver_mu_);
      current_inbox_ = inbox;
    }
    lock.unlock();
    run_job(*job);
    {
      std::lock_guard<std::mutex> d(deliver_mu_);
      if (current_inbox_ != nullptr) current_inbox_->deliver(std::move(job));
      current_inbox_ = nullptr;
    }
    job.reset();
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void CertStore::run_job(StoreJob& job) {
  job.ok = false;
  job.error.clear();
  const std::string sub = shard_dir(job.host);
  const std::string l1 = absl::StrCat(dir_, "/", sub.substr(0, 2));
  const std::string l2 = absl::StrCat(dir_, "/", sub);
  const std::string path = path_of(job.host);
  if (job.kind == StoreJob::Kind::kDelete) {
    job.existed = index_.get(job.host) != 0;
    if (!job.existed) {
      job.error = absl::StrCat("no certificate for host \"", job.host, "\"");
      return;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      job.error = errno_text("unlink", path, errno);
      return;
    }
    if (!fsync_path(l2, &job.error)) return;
    index_.erase(job.host);
    job.ok = true;
    return;
  }
  if (!ensure_dir(l1, dir_, &job.error) || !ensure_dir(l2, l1, &job.error)) return;
  const std::string tmp = absl::StrCat(l2, "/.", job.host, ".pem.tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    job.error = errno_text("open", tmp, errno);
    return;
  }
  bool ok = write_all(fd, job.pem);
  if (!ok) {
    job.error = errno_text("write", tmp, errno);
  } else if (::fsync(fd) != 0) {
    job.error = errno_text("fsync", tmp, errno);
    ok = false;
  }
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    job.error = errno_text("rename", tmp, errno);
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return;
  }
  // The rename is done: the new file is what a reader sees. If the directory's fsync fails the old entry
  // may come back after a crash; the change is reported as failed but the index follows the file as it is.
  const bool dir_ok = fsync_path(l2, &job.error);
  CertIndex::Outcome o = index_.set(job.host);
  job.existed = o.existed;
  job.version = o.version;
  job.ok = dir_ok;
}

bool CertStore::read_file(std::string_view host, std::string* out, std::string* error) const {
  const std::string path = path_of(host);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = errno_text("open", path, errno);
    return false;
  }
  out->clear();
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = errno_text("read", path, errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

namespace {

std::mutex g_mu;
std::string g_error;

// Function-local: created after the error log and destroyed before it; its destructor finishes the
// queued writes.
std::unique_ptr<CertStore>& store_slot() {
  static std::unique_ptr<CertStore> store;
  return store;
}

}  // namespace

CertStore& process_store(const CertsConf& conf, const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::unique_ptr<CertStore>& slot = store_slot();
  if (slot == nullptr && g_error.empty()) {
    auto store = std::make_unique<CertStore>(resolve(conf, prefix));
    std::string err;
    if (!store->open(&err)) {
      g_error = absl::StrCat("ssl_certificate_store: ", err);
    } else {
      slot = std::move(store);
    }
  }
  if (slot == nullptr) throw std::system_error(std::make_error_code(std::errc::invalid_argument), g_error);
  return *slot;
}

CertStore* process_store_if_created() {
  std::lock_guard<std::mutex> lock(g_mu);
  return store_slot().get();
}

bool check_store(const CertsConf& conf, const std::string& prefix, std::string* error) {
  if (conf.store.empty()) return true;
  const std::string dir = resolve(conf, prefix);
  struct stat st {};
  std::string err;
  if (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    // open() would create it: the parent must be a writable directory.
    std::string parent = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
    if (parent.empty()) parent = "/";
    if (check_dir(parent, false, &err)) return true;
  } else if (check_dir(dir, false, &err)) {
    return true;
  }
  *error = absl::StrCat("ssl_certificate_store: ", err);
  return false;
}

}  // namespace kosoku::certs
