// The rewrite module's directives (nginx's ngx_http_rewrite_module, rewrite_conf.hh): `return`, `rewrite`,
// `set`, `if`, `break`, `rewrite_log`, `uninitialized_variable_warn`, each compiled into the block's program
// in file order, and the module descriptor. Wording of the errors is nginx's: `invalid return code "X"`,
// `invalid parameter "X"` (a rewrite flag), `invalid variable name "X"`, `the duplicate "X" variable`,
// `invalid condition "X"`, `unexpected "X" in condition`; a regex RE2 cannot compile is `invalid regular
// expression "X": ...`, as a location's.
//
// Inside a server's `if`: `rewrite`, `return`, `set` and `break` (context kCtxIf), as in nginx. A location's
// `if` may hold the other location directives too (add_header, root, proxy_pass ...): the block is then a
// location of its own (rewrite_conf.hh: Op::location). The file tests (`-f`, `-d`, `-e`, `-x`), which would
// need the disk queue, are refused at load.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/parser.hh"
#include "core/config/variables.hh"
#include "core/rewrite/rewrite_conf.hh"
#include "re2/re2.h"

namespace kosoku::rewrite {

namespace {

using namespace config;  // the directive-table vocabulary

constexpr uint32_t kCtxRewrite = kCtxServer | kCtxLocation | kCtxIf;

bool is_url(std::string_view v) {
  return v.rfind("http://", 0) == 0 || v.rfind("https://", 0) == 0 || v.rfind("$scheme", 0) == 0;
}

// The program the scope's rewrite directives add to (a server's, a location's, or an `if` block's).
std::vector<Op>& program(Scope& s) { return s.loc->module<RewriteLocConf>().ops; }

// Every named group of `re` is a variable (its value: that group of the last match).
void declare_groups(const re2::RE2& re) {
  for (const auto& group : re.NamedCapturingGroups()) declare_capture_variable(group.first);
}

// `return CODE [TEXT|URL];` / `return URL;`. URL form: http://, https:// or $scheme start → 302. CODE 0..999
// (nginx allows its own 444 and the like).
bool set_return(Builder& b, Scope& s, const Directive& d) {
  Op op{.kind = Op::Kind::kReturn};
  ReturnConf& r = op.ret;
  const Arg& first = d.args[0];
  const Arg* text = d.args.size() == 2 ? &d.args[1] : nullptr;
  if (d.args.size() == 1 && is_url(first.value)) {
    r.code = 302;
    text = &first;
  } else {
    auto code = parse_number(first.value, 999);
    if (!code) return b.fail(first.loc, absl::StrCat("invalid return code ", quoted(first.value)));
    r.code = static_cast<int>(*code);
  }
  if (text) {
    r.text = text->value;
    // A redirect's URL becomes the Location field: its variables are percent-encoded (variables.hh, kUri).
    r.text_tpl = compile_arg(b, *text, is_redirect(r.code) ? LogEscape::kUri : LogEscape::kNone);
    if (!r.text_tpl) return false;
  } else {
    r.text_tpl = std::make_shared<const Template>();
  }
  program(s).push_back(std::move(op));
  return true;
}

// `rewrite REGEX REPLACEMENT [FLAG];`
bool set_rewrite(Builder& b, Scope& s, const Directive& d) {
  Op op{.kind = Op::Kind::kRewrite};
  RewriteConf& r = op.rewrite;
  r.pattern = d.args[0].value;
  std::shared_ptr<re2::RE2> re = compile_regex(b, r.pattern, /*caseless=*/false, d.args[0].loc);
  if (!re) return false;
  declare_groups(*re);
  r.re = std::move(re);
  std::string replacement = d.args[1].value;
  if (is_url(replacement)) {
    r.status = 302;
    r.flag = RewriteConf::Flag::kRedirect;
  }
  if (d.args.size() == 3) {
    const std::string& f = d.args[2].value;
    if (f == "last") {
      if (r.status == 0) r.flag = RewriteConf::Flag::kLast;
    } else if (f == "break") {
      if (r.status == 0) r.flag = RewriteConf::Flag::kBreak;
    } else if (f == "redirect") {
      r.flag = RewriteConf::Flag::kRedirect;
      r.status = 302;
    } else if (f == "permanent") {
      r.flag = RewriteConf::Flag::kPermanent;
      r.status = 301;
    } else {
      return b.fail(d.args[2].loc, absl::StrCat("invalid parameter ", quoted(f)));
    }
  }
  // A last `?` drops the request's arguments (and is not part of the URI).
  if (!replacement.empty() && replacement.back() == '?') {
    r.add_args = false;
    replacement.pop_back();
  }
  const LogEscape escape = r.status != 0 ? LogEscape::kUri : LogEscape::kNone;
  const size_t q = replacement.find('?');
  r.uri = compile_arg(b, Arg{replacement.substr(0, q), d.args[1].loc, d.args[1].quoted}, escape);
  if (!r.uri) return false;
  if (q != std::string::npos) {
    r.args = compile_arg(b, Arg{replacement.substr(q + 1), d.args[1].loc, d.args[1].quoted}, escape);
    if (!r.args) return false;
    for (const TemplateSegment& seg : r.args->segments) {
      bool capture = seg.is_variable && seg.var->name.size() == 1 && absl::ascii_isdigit(seg.var->name[0]);
      for (const auto& group : r.re->NamedCapturingGroups()) {
        capture = capture || (seg.is_variable && absl::EqualsIgnoreCase(group.first, seg.var->name));
      }
      r.args_captures.push_back(capture);
    }
  }
  program(s).push_back(std::move(op));
  return true;
}

// Declares `$name` as a `set` variable. A name an earlier `set` (or an earlier load of this process) declared
// is reused; any other known name is nginx's duplicate (kosoku's `set` cannot override $args or a map).
bool declare_set_variable(std::string_view name) {
  if (declare_variable(name, &set_variable)) return true;
  Template t = compile(absl::StrCat("$", name), SourceLoc{}, nullptr);
  return t.segments.size() == 1 && t.segments[0].is_variable && t.segments[0].var->get == &set_variable &&
         t.segments[0].text == name;
}

// Whether `var` is a `set` operand: `$` and a name of [A-Za-z0-9_]; *name gets it lower-cased.
bool set_operand(std::string_view var, std::string* name) {
  if (var.size() < 2 || var[0] != '$') return false;
  *name = absl::AsciiStrToLower(var.substr(1));
  for (char c : *name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Module::predeclare: every `set` variable of the file, wherever it is written, so a template before the `set`
// (a log_format in http for a variable a server sets) may name it. A name something else already has is left
// to set_set, which reports it.
void predeclare(const std::vector<Directive>& tree) {
  for (const Directive& d : tree) {
    std::string name;
    if (d.name == "set" && !d.block && d.args.size() == 2 && set_operand(d.args[0].value, &name)) {
      declare_set_variable(name);
    }
    if (d.block && !is_data_block_directive(d.name)) predeclare(d.children);
  }
}

// `set $variable VALUE;`
bool set_set(Builder& b, Scope& s, const Directive& d) {
  const std::string& var = d.args[0].value;
  Op op{.kind = Op::Kind::kSet};
  if (!set_operand(var, &op.set.name)) return b.fail(d.args[0].loc, absl::StrCat("invalid variable name ", quoted(var)));
  // Declared before VALUE is compiled: `set $a "$a/x"` appends to the variable's earlier value.
  if (!declare_set_variable(op.set.name)) {
    return b.fail(d.args[0].loc, absl::StrCat("the duplicate ", quoted(op.set.name), " variable"));
  }
  op.set.value = compile_arg(b, d.args[1]);
  if (!op.set.value) return false;
  program(s).push_back(std::move(op));
  return true;
}

bool set_break(Builder&, Scope& s, const Directive&) {
  program(s).push_back(Op{.kind = Op::Kind::kBreak});
  return true;
}

bool invalid_condition(Builder& b, const Arg& a) {
  return b.fail(a.loc, absl::StrCat("invalid condition ", quoted(a.value)));
}

// The words of `if (...)` (nginx's ngx_http_rewrite_if_condition): the parentheses may stand alone or be
// glued to the first and last words.
bool parse_condition(Builder& b, const Directive& d, Condition& c) {
  std::vector<Arg> a = d.args;
  if (a.front().value.empty() || a.front().value.front() != '(') return invalid_condition(b, a.front());
  size_t cur = 0;
  if (a.front().value.size() == 1) {
    cur = 1;
  } else {
    a.front().value.erase(0, 1);
  }
  size_t last = a.size() - 1;
  if (last < cur || a[last].value.empty() || a[last].value.back() != ')') return invalid_condition(b, a.back());
  if (a[last].value.size() == 1) {
    if (last == cur) return invalid_condition(b, a[last]);
    --last;
  } else {
    a[last].value.pop_back();
  }
  const Arg& first = a[cur];
  const std::string& p = first.value;
  if (p.size() > 1 && p[0] == '$') {
    if (cur != last && cur + 2 != last) return invalid_condition(b, first);
    c.subject = compile_arg(b, first);
    if (!c.subject) return false;
    if (cur == last) {
      c.kind = Condition::Kind::kTrue;
      return true;
    }
    const Arg& op = a[cur + 1];
    const Arg& operand = a[last];
    if (op.value == "=" || op.value == "!=") {
      c.kind = op.value == "=" ? Condition::Kind::kEqual : Condition::Kind::kNotEqual;
      c.operand = compile_arg(b, operand);
      return c.operand != nullptr;
    }
    if (op.value == "~" || op.value == "~*" || op.value == "!~" || op.value == "!~*") {
      c.kind = op.value[0] == '!' ? Condition::Kind::kNotMatch : Condition::Kind::kMatch;
      std::shared_ptr<re2::RE2> re = compile_regex(b, operand.value, op.value.back() == '*', operand.loc);
      if (!re) return false;
      declare_groups(*re);
      c.re = std::move(re);
      c.pattern = operand.value;
      return true;
    }
    return b.fail(op.loc, absl::StrCat("unexpected ", quoted(op.value), " in condition"));
  }
  if ((p.size() == 2 && p[0] == '-') || (p.size() == 3 && p[0] == '!' && p[1] == '-')) {
    if (cur + 1 != last) return invalid_condition(b, first);
    const char test = p.back();
    if (test == 'f' || test == 'd' || test == 'e' || test == 'x') {
      return b.fail(first.loc, absl::StrCat("the file test ", quoted(p),
                                            " in \"if\" is not supported by kosoku yet (it would need the disk "
                                            "queue); try_files does the same check"));
    }
  }
  return invalid_condition(b, first);
}

// Whether the block holds a directive that is not the rewrite module's: then it is a location of its own.
bool has_location_directives(const std::vector<Directive>& body) {
  for (const Directive& c : body) {
    const DirectiveSpec* row = find_directive(c.name, kCtxIf);
    if (row == nullptr || (row->contexts & kCtxIf) == 0) return true;
  }
  return false;
}

// The loading state: the `if` blocks being read as locations (an `if` or a `location` inside one is refused).
struct IfScratch {
  static constexpr ConfLevel kLevel = ConfLevel::kMain;
  std::vector<const LocationConf*> blocks;
};

bool inside_if_block(Builder& b, const Scope& s) {
  const std::vector<const LocationConf*>& blocks = b.scratch.get<IfScratch>().blocks;
  return std::find(blocks.begin(), blocks.end(), s.loc) != blocks.end();
}

// `if (CONDITION) { ... }`: the block's directives form a program of their own (an `if` inside an `if` is
// refused, as nginx does). In a location, a block with other directives is also a location (Op::location),
// read in location context; a server's `if` holds only the rewrite module's directives (nginx).
bool set_if(Builder& b, Scope& s, const Directive& d) {
  if (s.ctx == kCtxLocation && inside_if_block(b, s)) return b.fail(d.loc, "\"if\" directive is not allowed here");
  Op op{.kind = Op::Kind::kIf, .at = d.loc};
  if (!parse_condition(b, d, op.cond)) return false;
  if (s.ctx == kCtxLocation && has_location_directives(d.children)) {
    for (const Directive& c : d.children) {
      if (c.name == "location") return b.fail(c.loc, "\"location\" directive is not allowed here");
    }
    auto node = std::make_unique<LocNode>();
    node->conf.match = LocationConf::Match::kNone;  // never found by a search
    node->conf.pattern = s.loc->pattern;
    node->conf.loc = d.loc;
    b.scratch.get<IfScratch>().blocks.push_back(&node->conf);
    Scope inner = s;
    inner.loc = &node->conf;
    inner.loc_node = node.get();
    inner.seen = &node->seen;
    if (!b.walk(inner, d.children)) return false;
    op.body = std::move(program(inner));
    program(inner).clear();
    op.has_location = true;
    s.loc_node->children.push_back(std::move(node));
    program(s).push_back(std::move(op));
    return true;
  }
  LocationConf block;
  Seen seen;
  Scope inner = s;
  inner.ctx = kCtxIf;
  inner.loc = &block;
  inner.seen = &seen;
  if (!b.walk(inner, d.children)) return false;
  op.body = std::move(program(inner));
  program(s).push_back(std::move(op));
  return true;
}

// The module that serves `loc` (config/module.hh: the first whose content predicate accepts it).
const Module* content_of(const LocationConf& loc) {
  for (const Module* m : modules()) {
    if (m->content != nullptr && m->content(loc)) return m;
  }
  return nullptr;
}

// Whether every way through `body` ends in an answer or a new location: no `break`, no rewrite's `break`,
// and a last `return`.
bool always_leaves(const std::vector<Op>& body) {
  for (const Op& op : body) {
    if (op.kind == Op::Kind::kBreak) return false;
    if (op.kind == Op::Kind::kRewrite && op.rewrite.flag == RewriteConf::Flag::kBreak) return false;
  }
  return !body.empty() && body.back().kind == Op::Kind::kReturn;
}

// Links each location `if` to its block's location. A block whose content would differ from its location's
// must have a content directive of its own (proxy_pass ...) or always answer: nginx serves such a block with
// the enclosing location's handler over the block's configuration, which kosoku's content handlers (each
// reading its own module's part of the location) cannot do.
bool link_if_blocks(Builder& b, std::vector<LocationConf>& locations) {
  static const LocationConf kBare;
  for (LocationConf& loc : locations) {
    for (Op& op : loc.module<RewriteLocConf>().ops) {
      if (op.kind != Op::Kind::kIf || !op.has_location) continue;
      for (const LocationConf& child : loc.locations) {
        if (child.match == LocationConf::Match::kNone && child.loc.file == op.at.file && child.loc.line == op.at.line &&
            child.loc.col == op.at.col) {
          op.location = &child;
        }
      }
      if (op.location == nullptr) return b.fail(op.at, "internal error: the \"if\" block's location is missing");
      const Module* block = content_of(*op.location);
      const Module* outer = content_of(loc);
      if (block != outer && block == content_of(kBare) && !always_leaves(op.body)) {
        return b.fail(op.at, absl::StrCat("an \"if\" block with location directives in a location served by ",
                                          quoted(outer != nullptr ? outer->name : "?"),
                                          " needs a content directive of its own or a final \"return\" in kosoku "
                                          "(it would be served by ",
                                          quoted(block != nullptr ? block->name : "?"), ")"));
      }
    }
    if (!link_if_blocks(b, loc.locations)) return false;
  }
  return true;
}

bool finalize(Builder& b) {
  for (auto& srv : b.main->http.servers) {
    if (!link_if_blocks(b, srv->locations)) return false;
  }
  return true;
}

constexpr DirectiveSpec kRewriteDirectives[] = {
    {.name = "return", .contexts = kCtxRewrite, .args = kTake12, .flags = kMulti, .set = set_return},
    {.name = "rewrite", .contexts = kCtxRewrite, .args = kTake23, .flags = kMulti, .set = set_rewrite},
    {.name = "set", .contexts = kCtxRewrite, .args = kTake2, .flags = kMulti, .set = set_set},
    {.name = "break", .contexts = kCtxRewrite, .args = kNoArgs, .flags = kMulti, .set = set_break},
    {.name = "if", .contexts = kCtxServer | kCtxLocation, .args = k1More, .flags = kBlock | kMulti, .set = set_if},
    {.name = "rewrite_log", .contexts = kCtxHttpAny, .args = kTake1, .set = set_flag<&RewriteLocConf::log>,
     .merge_loc = inherit<&RewriteLocConf::log>, .default_value = "off"},
    {.name = "uninitialized_variable_warn", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&RewriteLocConf::uninitialized_variable_warn>,
     .merge_loc = inherit<&RewriteLocConf::uninitialized_variable_warn>, .default_value = "on"},
};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "rewrite", .directives = kRewriteDirectives, .predeclare = predeclare,
                          .finalize = finalize, .phases = phase_handlers()};
  return m;
}

}  // namespace kosoku::rewrite
