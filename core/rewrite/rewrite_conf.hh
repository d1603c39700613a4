// Configuration of the rewrite module (nginx's ngx_http_rewrite_module), stored by module
// (config/module_conf.hh): `loc.module<rewrite::RewriteLocConf>()`.
//
// A block's rewrite directives — `return`, `rewrite`, `set`, `if`, `break` — are one program, run in the order
// they were written: a server's in the SERVER_REWRITE phase, before any location is chosen; a location's in
// the REWRITE phase, before access checks. The program is not inherited: it acts only in the block that has it
// (nginx). An `if` block holds a program of its own, run when its condition holds, after which the enclosing
// program goes on with the directive after the `if`. A location's `if` may also hold other location directives
// (Op::location); a server's holds only the rewrite module's (nginx).
//
// Variables: every `set $name VALUE` of the file declares $name before any directive is applied
// (Module::predeclare, config::declare_variable), so a template may name it anywhere in the file (a log_format
// in http for a variable a server sets), as in nginx. A declared variable no `set` of the request gave a value
// to is empty (nginx's uninitialised value), with a `warn` line unless uninitialized_variable_warn is off.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"
#include "core/config/variables.hh"
#include "core/http/phase.hh"

namespace re2 {
class RE2;
}

namespace kosoku::rewrite {

/// The codes whose `return` is a redirect to its URL.
inline bool is_redirect(int code) { return code == 301 || code == 302 || code == 303 || code == 307 || code == 308; }

/// `return CODE [TEXT|URL];` / `return URL;`.
struct ReturnConf {
  int code = 0;          // 301/302/303/307/308: a redirect to `text`; else `text` is the body
  std::string text;      // body text or redirect URL; may contain variables
  std::shared_ptr<const config::Template> text_tpl;  // `text` compiled
};

/// `rewrite REGEX REPLACEMENT [last|break|redirect|permanent];`
struct RewriteConf {
  enum class Flag { kNone, kLast, kBreak, kRedirect, kPermanent };
  std::string pattern;                          // REGEX as written (for rewrite_log)
  std::shared_ptr<const re2::RE2> re;           // matched against $uri
  Flag flag = Flag::kNone;
  /// 301 (permanent) or 302 (redirect, or a REPLACEMENT starting with http://, https:// or $scheme): the client
  /// is sent to REPLACEMENT; 0: the request's URI becomes it.
  int status = 0;
  /// REPLACEMENT up to its first `?` (the new $uri), and after it (the new $args; null: REPLACEMENT has no `?`).
  /// A redirect's Location is the two joined by `?`.
  std::shared_ptr<const config::Template> uri;
  std::shared_ptr<const config::Template> args;
  /// Which segments of `args` are captures of `re` ($1..$9, its named groups): escaped as an argument's bytes
  /// when the request's path was percent-encoded or held a '+' (nginx: "/s/a%26b" → `q=$1` is "q=a%26b").
  std::vector<bool> args_captures;
  bool add_args = true;  // false when REPLACEMENT ends with `?`: the request's own arguments are dropped
};

/// `set $name VALUE;`
struct SetConf {
  std::string name;  // lower-case, without '$'
  std::shared_ptr<const config::Template> value;
};

/// The condition of `if (...)`.
struct Condition {
  enum class Kind { kTrue, kEqual, kNotEqual, kMatch, kNotMatch };
  Kind kind = Kind::kTrue;  // kTrue: `($var)`, true unless the value is "" or "0"
  std::shared_ptr<const config::Template> subject;  // the `$var` operand
  std::shared_ptr<const config::Template> operand;  // `= STRING` / `!= STRING` (may contain variables)
  std::shared_ptr<const re2::RE2> re;               // `~`, `~*`, `!~`, `!~*`
  std::string pattern;                              // the regex as written (for rewrite_log)
};

/// One directive of a program.
struct Op {
  enum class Kind { kReturn, kRewrite, kSet, kIf, kBreak };
  Kind kind = Kind::kBreak;
  ReturnConf ret;         // kReturn
  RewriteConf rewrite;    // kRewrite
  SetConf set;            // kSet
  Condition cond;         // kIf
  std::vector<Op> body;   // kIf: the block's own program
  /// kIf in a location, with directives other than the rewrite module's (add_header, root, proxy_pass ...):
  /// the block is a location of its own, merged from the enclosing one and kept out of the location search
  /// (the enclosing location's `locations`, Match::kNone, `loc` = where the `if` is written). When the
  /// condition holds it becomes the request's location (Exchange::use_location), as in nginx, for the rest of
  /// the request. Set when the configuration is final (the rewrite module's finalize).
  bool has_location = false;
  config::SourceLoc at;                              // the `if` directive
  const config::LocationConf* location = nullptr;
};

struct RewriteLocConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  std::vector<Op> ops;  // the block's program (not inherited)
  bool log = false;     // rewrite_log: each rewrite's and `if` regex's match or mismatch at `notice` (inherited)
  bool uninitialized_variable_warn = true;  // a `set` variable read before any value: a `warn` line (inherited)
};

config::Module& module();

/// The programs' runs (rewrite_run.cc): a server's in SERVER_REWRITE, a location's in REWRITE.
std::span<const http::PhaseHandler> phase_handlers();

/// The getter of every `set` variable (declared with config::declare_variable): the value the request's last
/// `set` gave it, else empty.
bool set_variable(const config::VariableSource& src, std::string_view name, std::string& out);

}  // namespace kosoku::rewrite
