// The process's cache rules: the rule set, its defaults, and its file. One per process, shared by every core
// (each core reads it through its RulesCore, rules_core.hh).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/rules/persist.hh"
#include "core/rules/rule_set.hh"
#include "core/rules/rules_conf.hh"

namespace kosoku::rules {

class RuleStore {
 public:
  /// `file`: the resolved cache_rules_file path (empty: the rules live in memory only).
  RuleStore(const RulesConf& conf, std::string file);
  RuleStore(const RuleStore&) = delete;
  RuleStore& operator=(const RuleStore&) = delete;

  /// Loads the file (start-up, blocking I/O) and starts the persister. Patterns are validated unless the
  /// file's checksum trailer shows kosoku wrote it (persist.hh). False with *error ("PATH:LINE: message", or
  /// the first invalid host/pattern) on a malformed file; the set is then empty and nothing is persisted.
  bool load(std::string* error) { return load(error, true); }
  /// The last load() skipped validation (the file carried kosoku's checksum).
  bool loaded_trusted() const { return trusted_; }

  RuleSet& set() { return set_; }
  const RuleSet& set() const { return set_; }
  const RulesConf& conf() const { return conf_; }
  const std::string& file() const { return file_; }
  /// Null when there is no file (or before load()).
  Persister* persister() { return persister_.get(); }

  /// Changes that are also persisted (the admin API and the console use these).
  RuleSet::Outcome put(std::string_view host, std::span<const std::string> patterns);
  RuleSet::Outcome erase(std::string_view host);

 private:
  friend bool check_rules_file(const RulesConf& conf, const std::string& prefix, std::string* error);
  bool load(std::string* error, bool persist);

  RulesConf conf_;
  std::string file_;
  RuleSet set_;
  std::unique_ptr<Persister> persister_;  // declared after set_: stops (flushing) before the set goes
  bool trusted_ = false;
};

/// The process's store, created and loaded on the first call (from the first worker, before its loop runs);
/// later calls return the same store. Relative `conf.file` resolves against `prefix` (with trailing '/').
/// Throws std::system_error(EINVAL, "cache_rules_file: MESSAGE") if the file cannot be loaded (start-up
/// only: the worker fails to start and kosoku exits with the message).
RuleStore& process_store(const RulesConf& conf, const std::string& prefix);
/// `kosoku -t`: reads and validates the file `conf.file` names (resolved as process_store does) the way the
/// start-up does, without starting anything. False with *error = the message the start-up would fail with
/// ("cache_rules_file: PATH:LINE: message"). True when there is no file directive.
bool check_rules_file(const RulesConf& conf, const std::string& prefix, std::string* error);
/// The process's store if it exists (the console), else null.
RuleStore* process_store_if_created();

}  // namespace kosoku::rules
