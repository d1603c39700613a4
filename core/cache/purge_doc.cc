#include "core/cache/purge_doc.hh"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/json_reader.hh"
#include "core/cache/tags.hh"

namespace kosoku::cache {

namespace {

bool valid_host(std::string_view h) {
  if (h.empty() || h.size() > 255) return false;
  for (char c : h) {
    if (!host_byte(c) || static_cast<unsigned char>(c) >= 0x80 || c == '%') return false;
  }
  return true;
}

// Whether `prefix` stays within `scope` (build_tag_scope's key and host end): it starts with the scope and does
// not continue its host.
bool within_scope(std::string_view prefix, const PurgeTarget& scope) {
  if (prefix.size() < scope.key.size() || prefix.substr(0, scope.key.size()) != scope.key) return false;
  return prefix.size() == scope.host_end || !host_byte(prefix[scope.host_end]);
}

}  // namespace

bool parse_purge_doc(std::string_view body, PurgeDoc* out, std::string* error) {
  base::JsonReader r(body);
  *out = PurgeDoc{};
  const bool ok = r.object([&](const std::string& key) {
    if (key == "tags" || key == "hosts" || key == "prefixes") {
      std::vector<std::string>& list = key == "tags" ? out->tags : key == "hosts" ? out->hosts : out->prefixes;
      return r.string_array(key, &list);
    }
    if (key == "soft") return r.boolean(&out->soft);
    return r.skip(0);
  });
  if (!ok) {
    *error = r.error_;
    return false;
  }
  const size_t items = out->tags.size() + out->hosts.size() + out->prefixes.size();
  if (items == 0) {
    *error = "no tags, hosts or prefixes";
    return false;
  }
  if (items > kMaxPurgeItems) {
    *error = absl::StrCat("more than ", kMaxPurgeItems, " tags, hosts and prefixes");
    return false;
  }
  for (const std::string& t : out->tags) {
    if (!valid_tag(t)) {
      *error = absl::StrCat("invalid tag of ", t.size(), " bytes");
      return false;
    }
  }
  for (std::string& h : out->hosts) {
    absl::AsciiStrToLower(&h);
    if (!valid_host(h)) {
      *error = "invalid host";
      return false;
    }
  }
  for (const std::string& p : out->prefixes) {
    if (p.empty()) {
      *error = "empty prefix";
      return false;
    }
  }
  return true;
}

DocTargets doc_targets(const PurgeDoc& doc, const config::Template& t, const config::VariableSource& vars,
                       const PurgeKeyRules& rules, std::string_view request_host) {
  DocTargets out;
  auto refuse = [&](int status, std::string why) {
    out.targets.clear();
    out.status = status;
    out.refusal = std::move(why);
    return out;
  };
  const PurgeKey scope = build_tag_scope(t, vars, rules);
  if (!doc.tags.empty()) {
    if (!scope.refusal.empty()) return refuse(403, scope.refusal);
    PurgeTarget tags = scope.target;
    tags.tags = doc.tags;
    out.targets.push_back(std::move(tags));
  }
  for (const std::string& h : doc.hosts) {
    if (!rules.any_host && h != request_host) {
      return refuse(403, absl::StrCat("the host \"", h, "\" is not the request's (add \"any_host\" for that)"));
    }
    std::string why;
    for (std::string& p : host_prefixes(t, vars, h, &why)) {
      PurgeTarget target;
      target.kind = PurgeTarget::Kind::kPrefix;
      target.host_end = p.size();
      target.key = std::move(p);
      out.targets.push_back(std::move(target));
    }
    if (!why.empty()) return refuse(403, why);
  }
  for (const std::string& p : doc.prefixes) {
    const bool bounded = !scope.target.key.empty();
    if (!scope.refusal.empty() || (bounded && !within_scope(p, scope.target))) {
      return refuse(403, "a prefix outside the request's host (add \"any_host\" for that)");
    }
    PurgeTarget target;
    target.kind = PurgeTarget::Kind::kPrefix;
    target.key = p;
    if (bounded) target.host_end = scope.target.host_end;
    out.targets.push_back(std::move(target));
  }
  return out;
}

}  // namespace kosoku::cache
