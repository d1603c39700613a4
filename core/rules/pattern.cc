#include "core/rules/pattern.hh"

#include "absl/strings/str_cat.h"
#include "core/rules/shard.hh"

namespace kosoku::rules {

namespace {

RE2::Options set_options() {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(kSetMaxMem);
  return o;
}

}  // namespace

bool validate_patterns(std::span<const std::string> patterns, std::string* error) {
  if (patterns.size() > kMaxPatterns) {
    *error = absl::StrCat("too many patterns (", patterns.size(), ", at most ", kMaxPatterns, ")");
    return false;
  }
  RE2::Set set(set_options(), RE2::UNANCHORED);
  for (const std::string& p : patterns) {
    if (p.size() > kMaxPatternBytes) {
      *error = absl::StrCat("pattern too long (", p.size(), " bytes, at most ", kMaxPatternBytes, ")");
      return false;
    }
    std::string err;
    if (set.Add(p, &err) < 0) {
      *error = absl::StrCat("invalid pattern \"", p, "\": ", err);
      return false;
    }
  }
  if (!patterns.empty() && !set.Compile()) {
    *error = "the patterns do not compile as one set within RE2's memory budget";
    return false;
  }
  return true;
}

std::unique_ptr<RE2::Set> compile_set(const HostRules& rules, std::string* error) {
  error->clear();
  if (rules.count() == 0) return nullptr;
  auto set = std::make_unique<RE2::Set>(set_options(), RE2::UNANCHORED);
  bool ok = true;
  rules.for_each([&](std::string_view p) {
    if (!ok) return;
    std::string err;
    if (set->Add(p, &err) < 0) {
      *error = absl::StrCat("invalid pattern \"", p, "\": ", err);
      ok = false;
    }
  });
  if (!ok) return nullptr;
  if (!set->Compile()) {
    *error = "the patterns do not compile as one set within RE2's memory budget";
    return nullptr;
  }
  return set;
}

bool set_matches(const RE2::Set& set, std::string_view uri, bool* oom) {
  RE2::Set::ErrorInfo info{};
  bool m = set.Match(re2::StringPiece(uri.data(), uri.size()), nullptr, &info);
  *oom = !m && info.kind == RE2::Set::kOutOfMemory;
  return m;
}

}  // namespace kosoku::rules
