#include "core/rules/json.hh"

#include "absl/strings/str_cat.h"
#include "core/base/json_reader.hh"
#include "core/rules/shard.hh"

namespace kosoku::rules {

bool parse_rules_doc(std::string_view text, RulesDoc* out, std::string* error) {
  base::JsonReader r(text);
  *out = RulesDoc{};
  const bool ok = r.object([&](const std::string& key) {
    if (key == "host") {
      std::string v;
      if (r.peek() != '"') return r.fail("\"host\" must be a string");
      if (!r.string(&v)) return false;
      out->host = std::move(v);
      return true;
    }
    if (key == "patterns") {
      std::vector<std::string> v;
      if (!r.string_array("patterns", &v)) return false;
      out->patterns = std::move(v);
      return true;
    }
    return r.skip(0);
  });
  if (!ok) *error = r.error_;
  return ok;
}

void append_host_json(std::string& out, const HostRules& r) {
  out.append("{\"host\":");
  append_json_string(out, r.host);
  out.append(",\"patterns\":[");
  bool first = true;
  r.for_each([&](std::string_view p) {
    if (!first) out.push_back(',');
    first = false;
    append_json_string(out, p);
  });
  out.append("]}");
}

void append_host_json(std::string& out, std::string_view host, std::span<const std::string> patterns) {
  out.append("{\"host\":");
  append_json_string(out, host);
  out.append(",\"patterns\":[");
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_json_string(out, patterns[i]);
  }
  out.append("]}");
}

}  // namespace kosoku::rules
