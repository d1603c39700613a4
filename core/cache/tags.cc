#include "core/cache/tags.hh"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kosoku::cache {

namespace {

bool tag_byte(char c) { return c >= 0x21 && c <= 0x7e && c != ','; }

bool separator(char c, bool commas) { return c == ' ' || c == '\t' || (commas && c == ','); }

// Calls f(piece) for every non-empty piece of `value` between separators.
template <typename F>
void split_tags(std::string_view value, bool commas, F&& f) {
  size_t i = 0;
  while (i < value.size()) {
    while (i < value.size() && separator(value[i], commas)) ++i;
    size_t j = i;
    while (j < value.size() && !separator(value[j], commas)) ++j;
    if (j > i) f(value.substr(i, j - i));
    i = j;
  }
}

}  // namespace

std::string_view tag_header_name(uint32_t form) {
  switch (form) {
    case kTagSurrogateKey: return "surrogate-key";
    case kTagCacheTag: return "cache-tag";
    case kTagXkey: return "xkey";
    default: return {};
  }
}

uint32_t tag_header_form(std::string_view name) {
  for (uint32_t f : {kTagSurrogateKey, kTagCacheTag, kTagXkey}) {
    if (absl::EqualsIgnoreCase(name, tag_header_name(f))) return f;
  }
  return 0;
}

bool valid_tag(std::string_view tag) {
  if (tag.empty() || tag.size() > kMaxTagLength) return false;
  for (char c : tag) {
    if (!tag_byte(c)) return false;
  }
  return true;
}

std::string collect_tags(std::span<const http::HeaderField> fields, uint32_t forms, TagReport* report) {
  std::string out;
  if (forms == 0) return out;
  absl::flat_hash_set<std::string_view> seen;
  for (const http::HeaderField& f : fields) {
    const uint32_t form = tag_header_form(f.name);
    if ((form & forms) == 0) continue;
    split_tags(f.value, form == kTagCacheTag, [&](std::string_view t) {
      if (!valid_tag(t)) {
        ++report->invalid;
        return;
      }
      if (seen.contains(t)) return;
      if (seen.size() == kMaxEntryTags || out.size() + (out.empty() ? 0 : 1) + t.size() > kMaxEntryTagBytes) {
        ++report->over;
        return;
      }
      seen.insert(t);
      if (!out.empty()) out.push_back(' ');
      out.append(t);
    });
  }
  return out;
}

bool parse_purge_tags(std::string_view value, std::vector<std::string>& out, std::string& error) {
  out.clear();
  bool ok = true;
  split_tags(value, false, [&](std::string_view t) {
    if (!ok) return;
    if (!valid_tag(t)) {
      error = absl::StrCat("invalid tag of ", t.size(), " bytes (1..", kMaxTagLength,
                           " visible ASCII bytes other than \",\")");
      ok = false;
    } else if (out.size() == kMaxPurgeTags) {
      error = absl::StrCat("more than ", kMaxPurgeTags, " tags");
      ok = false;
    } else {
      out.emplace_back(t);
    }
  });
  if (ok && out.empty()) {
    error = "no tag";
    ok = false;
  }
  return ok;
}

}  // namespace kosoku::cache
