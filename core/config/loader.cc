#include "core/config/loader.hh"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/lexer.hh"
#include "core/config/module.hh"
#include "core/config/parser.hh"
#include "core/config/variables.hh"
#include "re2/re2.h"

namespace kosoku::config {

std::vector<std::span<const DirectiveSpec>> directive_tables() {
  std::vector<std::span<const DirectiveSpec>> tables;
  for (const Module* m : modules()) {
    if (!m->directives.empty()) tables.push_back(m->directives);
  }
  return tables;
}

namespace {

using RowsByName = absl::flat_hash_map<std::string, std::vector<const DirectiveSpec*>>;

const RowsByName& rows_by_name() {
  static const RowsByName kByName = [] {
    RowsByName m;
    for (std::span<const DirectiveSpec> table : directive_tables()) {
      for (const DirectiveSpec& row : table) m[std::string(row.name)].push_back(&row);
    }
    return m;
  }();
  return kByName;
}

}  // namespace

bool is_block_only_directive(std::string_view name) {
  auto it = rows_by_name().find(absl::string_view(name.data(), name.size()));
  if (it == rows_by_name().end()) return false;
  for (const DirectiveSpec* row : it->second) {
    if (!(row->flags & kBlock)) return false;
  }
  return true;
}

bool is_data_block_directive(std::string_view name) {
  auto it = rows_by_name().find(absl::string_view(name.data(), name.size()));
  if (it == rows_by_name().end()) return false;
  for (const DirectiveSpec* row : it->second) {
    if (row->flags & kDataBlock) return true;
  }
  return false;
}

const DirectiveSpec* find_directive(std::string_view name, uint32_t ctx) {
  const RowsByName& by_name = rows_by_name();
  auto it = by_name.find(absl::string_view(name.data(), name.size()));
  if (it == by_name.end()) return nullptr;
  for (const DirectiveSpec* row : it->second) {
    if (row->contexts & ctx) return row;
  }
  return it->second.front();
}

bool Builder::fail(const SourceLoc& loc, std::string_view message) {
  if (error.empty()) error = format_diag(loc, message);
  return false;
}

void Builder::warn(const SourceLoc& loc, std::string_view message) { warnings.push_back(format_diag(loc, message)); }

void Builder::notice(const SourceLoc& loc, std::string_view message) { notices.push_back(format_diag(loc, message)); }

bool Builder::walk(Scope& scope, const std::vector<Directive>& body) {
  for (const Directive& d : body) {
    const DirectiveSpec* row = find_directive(d.name, scope.ctx);
    if (row == nullptr) return fail(d.loc, absl::StrCat("unknown directive ", quoted(d.name)));
    if ((row->contexts & scope.ctx) == 0) {
      return fail(d.loc, absl::StrCat(quoted(d.name), " directive is not allowed here"));
    }
    if ((row->flags & kBlock) && !d.block) {
      return fail(d.loc, absl::StrCat("directive ", quoted(d.name), " has no opening \"{\""));
    }
    if (!(row->flags & kBlock) && d.block) {
      return fail(d.loc, absl::StrCat("directive ", quoted(d.name), " is not terminated by \";\""));
    }
    if (d.args.size() < row->args.min || (row->args.max != kAnyArgs && d.args.size() > row->args.max)) {
      return fail(d.loc, absl::StrCat("invalid number of arguments in ", quoted(d.name), " directive"));
    }
    std::string_view slot = slot_of(*row);
    if (!(row->flags & kMulti) && scope.seen->has(slot)) {
      std::string_view who = scope.seen->who(slot);
      if (who == d.name) return fail(d.loc, absl::StrCat(quoted(d.name), " directive is duplicate"));
      return fail(d.loc, absl::StrCat(quoted(d.name), " directive is duplicate, ", quoted(who),
                                      " directive is specified before"));
    }
    if (!row->set(*this, scope, d)) return false;
    scope.seen->mark(slot, d.name);
  }
  return true;
}

bool fail_invalid_value(Builder& b, const Directive& d, size_t arg, std::string_view extra) {
  return b.fail(d.args[arg].loc, absl::StrCat("invalid value ", quoted(d.args[arg].value), " in ", quoted(d.name),
                                              " directive", std::string(extra)));
}

std::shared_ptr<const Template> compile_arg(Builder& b, const Arg& a, LogEscape escape) {
  std::string err;
  Template t = compile(a.value, a.loc, &err);
  if (!err.empty()) {
    if (b.error.empty()) b.error = err;
    return nullptr;
  }
  t.escape = escape;
  return std::make_shared<const Template>(std::move(t));
}

std::shared_ptr<re2::RE2> compile_regex(Builder& b, std::string_view pattern, bool caseless, const SourceLoc& loc) {
  re2::RE2::Options o;
  o.set_log_errors(false);
  o.set_case_sensitive(!caseless);
  const std::string spelled = re2_spelling(pattern);
  auto re = std::make_shared<re2::RE2>(re2::StringPiece(spelled.data(), spelled.size()), o);
  if (!re->ok()) {
    b.fail(loc, absl::StrCat("invalid regular expression ", quoted(pattern), ": ", re->error()));
    return nullptr;
  }
  return re;
}

bool parse_flag_arg(Builder& b, const Directive& d, size_t arg, bool* out) {
  const std::string& v = d.args[arg].value;
  if (v == "on") {
    *out = true;
    return true;
  }
  if (v == "off") {
    *out = false;
    return true;
  }
  return fail_invalid_value(b, d, arg, ", it must be \"on\" or \"off\"");
}

bool set_ignored_flag(Builder& b, Scope&, const Directive& d) {
  bool unused;
  return parse_flag_arg(b, d, 0, &unused);
}

namespace {

LoadResult load_text(std::string_view text, const std::string& file, const LoadOptions& opts) {
  LoadResult r;
  ParseOptions popts;
  popts.allow_include = opts.allow_include;
  popts.prefix = opts.prefix.empty() ? dir_of(file) : opts.prefix;
  if (!popts.prefix.empty() && popts.prefix.back() != '/') popts.prefix.push_back('/');
  std::vector<Directive> tree;
  std::string err;
  if (!parse_config(text, file, popts, &tree, &err)) {
    r.error.message = std::move(err);
    return r;
  }
  Builder b;
  b.resolve_names = opts.resolve_names;
  b.prefix = popts.prefix;
  b.main->file = file;
  b.main->text = std::string(text);
  for (const Module* m : modules()) {
    if (m->predeclare != nullptr) m->predeclare(tree);
  }
  Scope top;
  top.ctx = kCtxMain;
  top.main = b.main.get();
  top.seen = &b.main_seen;
  bool ok = b.walk(top, tree) && finalize(b);
  r.warnings = std::move(b.warnings);
  r.notices = std::move(b.notices);
  if (!ok) {
    r.error.message = std::move(b.error);
    return r;
  }
  r.conf = std::move(b.main);
  return r;
}

}  // namespace

LoadResult load(const std::string& path, const LoadOptions& opts) {
  std::string text;
  std::string err;
  if (!read_config_file(path, &text, &err)) {
    LoadResult r;
    r.error.message = std::move(err);
    return r;
  }
  return load_text(text, path, opts);
}

LoadResult load_from_string(std::string_view text, const std::string& virtual_file_name, const LoadOptions& opts) {
  return load_text(text, virtual_file_name, opts);
}

}  // namespace kosoku::config
