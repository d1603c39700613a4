// A case-insensitive set of field names; see field_names.hh.
#include "core/http/field_names.hh"

#include "absl/strings/match.h"
#include "core/http/chars.hh"

namespace kosoku::http {

bool FieldNameSet::Name::operator==(const Name& o) const { return absl::EqualsIgnoreCase(s, o.s); }

void FieldNameSet::add(std::string_view name) {
  if (name.empty()) return;
  if (many_.empty() && few_.size() < kFew) {
    few_.push_back(name);
    return;
  }
  if (!few_.empty()) {
    for (std::string_view n : few_) many_.insert(Name{n});
    few_.clear();
  }
  many_.insert(Name{name});
}

void FieldNameSet::add_list(std::string_view list) {
  while (!list.empty()) add(chars::next_list_element(list));
}

void FieldNameSet::add_connection_options(std::span<const HeaderField> fields) {
  for (const HeaderField& f : fields) {
    if (f.token == HeaderToken::kConnection) add_list(f.value);
  }
}

bool FieldNameSet::contains(std::string_view name) const {
  if (!many_.empty()) return many_.contains(Name{name});
  for (std::string_view n : few_) {
    if (absl::EqualsIgnoreCase(n, name)) return true;
  }
  return false;
}

}  // namespace kosoku::http
