#include "core/rules/store.hh"

#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"

namespace kosoku::rules {

RuleStore::RuleStore(const RulesConf& conf, std::string file) : conf_(conf), file_(std::move(file)) {}

bool RuleStore::load(std::string* error, bool persist) {
  if (file_.empty()) return true;
  std::vector<RuleSet::Change> changes;
  if (!load_rules_file(file_, &changes, &trusted_, error)) return false;
  if (!changes.empty()) {
    RuleSet::Outcome o = set_.apply(std::move(changes), !trusted_);
    if (!o.ok) {
      *error = absl::StrCat(file_, ": ", o.error);
      return false;
    }
  }
  if (persist) persister_ = std::make_unique<Persister>(set_, file_, set_.generation());
  return true;
}

RuleSet::Outcome RuleStore::put(std::string_view host, std::span<const std::string> patterns) {
  RuleSet::Outcome o = set_.set(host, patterns);
  if (o.ok && persister_) persister_->request();
  return o;
}

RuleSet::Outcome RuleStore::erase(std::string_view host) {
  RuleSet::Outcome o = set_.erase(host);
  if (o.ok && persister_) persister_->request();
  return o;
}

namespace {

std::string resolve_file(const RulesConf& conf, const std::string& prefix) {
  std::string file = conf.file;
  if (!file.empty() && file[0] != '/') file = prefix + file;
  return file;
}

std::mutex g_mu;
std::string g_error;

// Function-local, so it is created after the error log (main opens it before starting the workers) and
// destroyed before it at exit; its destructor lets the persister write what is pending.
std::unique_ptr<RuleStore>& store_slot() {
  static std::unique_ptr<RuleStore> store;
  return store;
}

}  // namespace

RuleStore& process_store(const RulesConf& conf, const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::unique_ptr<RuleStore>& g_store = store_slot();
  if (g_store == nullptr && g_error.empty()) {
    std::string file = resolve_file(conf, prefix);
    auto store = std::make_unique<RuleStore>(conf, file);
    std::string err;
    if (!store->load(&err)) {
      g_error = absl::StrCat("cache_rules_file: ", err);
    } else {
      if (!file.empty()) {
        KOSOKU_LOG(kNotice, "cache_rules_file \"%s\": %d host(s) loaded", file, store->set().size());
      }
      g_store = std::move(store);
    }
  }
  if (g_store == nullptr) throw std::system_error(std::make_error_code(std::errc::invalid_argument), g_error);
  return *g_store;
}

bool check_rules_file(const RulesConf& conf, const std::string& prefix, std::string* error) {
  RuleStore store(conf, resolve_file(conf, prefix));
  std::string err;
  if (store.load(&err, false)) return true;
  *error = absl::StrCat("cache_rules_file: ", err);
  return false;
}

RuleStore* process_store_if_created() {
  std::lock_guard<std::mutex> lock(g_mu);
  return store_slot().get();
}

}  // namespace kosoku::rules
