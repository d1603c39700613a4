// The rewrite programs at run time (rewrite_conf.hh), nginx's ngx_http_rewrite_handler and its script codes:
// a server's program in SERVER_REWRITE, a location's in REWRITE, directive by directive in file order.
//
//   return            answers (a redirect for 301/302/303/307/308, else TEXT as the body); nothing after runs.
//   rewrite           on a match of $uri: $1..$9 and the named groups become the regex's; then a redirect
//                     (permanent/redirect or a URL) answers, or $uri (and $args) become REPLACEMENT's.
//                     `last` stops the program, `break` stops it and keeps the location, no flag goes on.
//   set               gives the variable its value for the rest of the request.
//   if                runs its block when the condition holds (a regex condition's captures become $1..$9),
//                     then the program goes on after the block unless the block stopped it; a block with
//                     location directives becomes the request's location first (nginx's `if` location).
//   break             stops the program (and, like a rewrite's `break`, keeps the location).
//
// In a location, a URI that a rewrite changed and no `break` kept is searched for again (PhaseResult::
// kFindConfig; the engine bounds it to 10 changes). In a server, the location is searched for the final URI
// anyway.
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "core/base/log.hh"
#include "core/config/regex.hh"
#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"
#include "core/http/variables.hh"
#include "core/reactor/reactor.hh"
#include "core/rewrite/rewrite_conf.hh"
#include "re2/re2.h"

namespace kosoku::rewrite {

namespace {

// The values `set` gave the request's variables (they survive an internal redirect, as nginx's do).
struct RewriteCtx final : http::RequestCtx {
  std::vector<std::pair<std::string, std::string>> vars;

  const std::string* find(std::string_view name) const {
    for (const auto& [n, v] : vars) {
      if (n == name) return &v;
    }
    return nullptr;
  }
  void assign(std::string_view name, std::string value) {
    for (auto& [n, v] : vars) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }
};

// nginx's ngx_http_set_content_type: the MIME type of $uri's extension in the location's `types`, else
// default_type.
std::string_view content_type_for_uri(const http::Exchange& ex) {
  const config::LocationConf& loc = ex.location();
  std::string_view name = ex.uri();
  size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size() && loc.types != nullptr) {
    std::string ext(name.substr(dot + 1));
    absl::AsciiStrToLower(&ext);
    auto it = loc.types->find(ext);
    if (it != loc.types->end()) return it->second;
  }
  return loc.default_type;
}

// An answer never reads the request body: what has arrived of it is dropped first, so a malformed body is
// answered 400 instead. False when that answer was given.
bool discard_body(http::Exchange& ex) {
  if (int status = ex.discard_request_body(); status != 0) {
    ex.respond(status);
    return false;
  }
  return true;
}

enum class Step {
  kNext,  // go on with the next directive
  kStop,  // the program ends here (break, last)
  kDone,  // the request was answered
};

class Run {
 public:
  Run(http::Exchange& ex, const RewriteLocConf& conf) : ex_(ex), conf_(conf) {}

  Step run(const std::vector<Op>& ops) {
    for (const Op& op : ops) {
      Step step = Step::kNext;
      switch (op.kind) {
        case Op::Kind::kReturn:
          answer(op.ret);
          return Step::kDone;
        case Op::Kind::kRewrite:
          step = rewrite(op.rewrite);
          break;
        case Op::Kind::kSet:
          http::module_ctx<RewriteCtx>(ex_, module()).assign(op.set.name, expand(*op.set.value));
          break;
        case Op::Kind::kIf:
          if (holds(op.cond)) {
            if (op.location != nullptr) ex_.use_location(*op.location);
            step = run(op.body);
          }
          break;
        case Op::Kind::kBreak:
          uri_changed_ = false;
          return Step::kStop;
      }
      if (step != Step::kNext) return step;
    }
    return Step::kNext;
  }

  // A URI change the location must be searched again for.
  bool uri_changed() const { return uri_changed_; }

 private:
  std::string expand(const config::Template& t) const {
    std::string out;
    http::RequestVariables vars(ex_, ex_.core().reactor);
    config::expand(t, vars, out);
    return out;
  }

  // REPLACEMENT's arguments: its captures escaped as an argument's bytes (nginx's NGX_ESCAPE_ARGS: SP, '#', '%',
  // '&', '+', ';', '?', controls and bytes >= 0x7f) when the request's path was percent-encoded or held a '+',
  // so a decoded "%26" does not split an argument.
  std::string expand_args(const RewriteConf& r) const {
    const std::string_view path = ex_.request().path;
    if (path.find_first_of("%+") == std::string_view::npos) return expand(*r.args);
    std::string out;
    std::string capture;
    http::RequestVariables vars(ex_, ex_.core().reactor);
    for (size_t i = 0; i < r.args->segments.size(); ++i) {
      if (!r.args_captures[i]) {
        config::expand_segment(*r.args, i, vars, out);
        continue;
      }
      capture.clear();  // the value as it is: the escaping below covers the template's own (kUri)
      const config::TemplateSegment& seg = r.args->segments[i];
      vars.get(*seg.var, seg.text, capture);
      for (char ch : capture) {
        const auto c = static_cast<unsigned char>(ch);
        if (c <= 0x20 || c >= 0x7f || c == '#' || c == '%' || c == '&' || c == '+' || c == ';' || c == '?') {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out.push_back('%');
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(ch);
        }
      }
    }
    return out;
  }

  // Matches `re` on `subject`; on a match its groups become the request's captures (a regex without groups
  // leaves none, as nginx: `if ($arg_p ~ ^(\w+)$) { rewrite ^ /x/$1; }` has an empty $1).
  // With rewrite_log, the result is a `notice` line (nginx's `"REGEX" matches "SUBJECT"`).
  bool match(const re2::RE2& shared, std::string_view pattern, std::string_view subject) {
    const re2::RE2& re = config::per_core_regex(shared);
    const int n = re.NumberOfCapturingGroups() + 1;
    absl::InlinedVector<re2::StringPiece, 10> groups(static_cast<size_t>(n));
    const re2::StringPiece text(subject.data(), subject.size());
    const bool matched = re.Match(text, 0, text.size(), re2::RE2::UNANCHORED, groups.data(), n);
    if (conf_.log) {
      KOSOKU_LOG(kNotice, "\"%s\" %s \"%s\"", base::log_escaped(pattern), matched ? "matches" : "does not match",
                 base::log_escaped(subject));
    }
    if (!matched) return false;
    absl::InlinedVector<std::string_view, 10> views(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) views[i] = std::string_view(groups[i].data(), groups[i].size());
    ex_.set_captures(re, subject, views);
    return true;
  }

  void answer(const ReturnConf& ret) {
    if (!discard_body(ex_)) return;
    std::string text = ret.text;
    if (ret.text_tpl != nullptr && ret.text_tpl->has_variables()) {
      text.clear();
      http::RequestVariables vars(ex_, http::RequestVariables::Response{}, ex_.core().reactor);
      config::expand(*ret.text_tpl, vars, text);
    }
    if (is_redirect(ret.code)) {
      ex_.redirect(ret.code, text);
    } else {
      ex_.respond(ret.code, text, text.empty() ? std::string_view() : content_type_for_uri(ex_));
    }
  }

  Step rewrite(const RewriteConf& r) {
    const std::string uri(ex_.uri());  // a copy: the match's captures view it until set_captures copied them
    if (!match(*r.re, r.pattern, uri)) return Step::kNext;
    std::string target = expand(*r.uri);
    const std::string_view own_args = ex_.args();
    if (r.status != 0) {
      // nginx's order: REPLACEMENT's own arguments, then the request's after `&` (or `?`).
      if (r.args != nullptr) {
        target.push_back('?');
        target += expand_args(r);
      }
      if (r.add_args && !own_args.empty()) {
        target.push_back(r.args != nullptr ? '&' : '?');
        target.append(own_args);
      }
      if (conf_.log) KOSOKU_LOG(kNotice, "rewritten redirect: \"%s\"", base::log_escaped(target));
      if (discard_body(ex_)) ex_.redirect(r.status, target);
      return Step::kDone;
    }
    std::string args;
    const std::string* new_args = nullptr;
    if (r.args != nullptr) {
      args = expand_args(r);
      if (r.add_args && !own_args.empty()) {
        args.push_back('&');
        args.append(own_args);
      }
      new_args = &args;
    } else if (!r.add_args) {
      new_args = &args;  // empty: the request's arguments are dropped
    }
    if (conf_.log) KOSOKU_LOG(kNotice, "rewritten data: \"%s\", args: \"%s\"", base::log_escaped(target),
                              base::log_escaped(new_args != nullptr ? std::string_view(*new_args) : own_args));
    if (!ex_.set_uri(std::move(target), new_args)) {
      if (discard_body(ex_)) ex_.respond(400);
      return Step::kDone;
    }
    if (r.flag == RewriteConf::Flag::kBreak) {
      uri_changed_ = false;
      return Step::kStop;
    }
    uri_changed_ = true;
    return r.flag == RewriteConf::Flag::kLast ? Step::kStop : Step::kNext;
  }

  bool holds(const Condition& c) {
    const std::string value = expand(*c.subject);
    switch (c.kind) {
      case Condition::Kind::kTrue:
        return !value.empty() && value != "0";
      case Condition::Kind::kEqual:
        return value == expand(*c.operand);
      case Condition::Kind::kNotEqual:
        return value != expand(*c.operand);
      case Condition::Kind::kMatch:
        return match(*c.re, c.pattern, value);
      case Condition::Kind::kNotMatch:
        return !match(*c.re, c.pattern, value);
    }
    return false;
  }

  http::Exchange& ex_;
  const RewriteLocConf& conf_;
  bool uri_changed_ = false;
};

http::PhaseResult server_rewrite(http::Exchange& ex) {
  const RewriteLocConf& conf = ex.server().base.module<RewriteLocConf>();
  if (conf.ops.empty()) return http::PhaseResult::kNext;
  Run run(ex, conf);
  return run.run(conf.ops) == Step::kDone ? http::PhaseResult::kDone : http::PhaseResult::kNext;
}

http::PhaseResult location_rewrite(http::Exchange& ex) {
  const config::LocationConf& loc = ex.location();
  if (&loc == &ex.server().base) return http::PhaseResult::kNext;  // the server's, already run
  const RewriteLocConf& conf = loc.module<RewriteLocConf>();
  if (conf.ops.empty()) return http::PhaseResult::kNext;
  Run run(ex, conf);
  if (run.run(conf.ops) == Step::kDone) return http::PhaseResult::kDone;
  return run.uri_changed() ? http::PhaseResult::kFindConfig : http::PhaseResult::kNext;
}

constexpr http::PhaseHandler kRewritePhases[] = {
    {.phase = http::Phase::kServerRewrite, .run = &server_rewrite},
    {.phase = http::Phase::kRewrite, .run = &location_rewrite},
};

}  // namespace

std::span<const http::PhaseHandler> phase_handlers() { return kRewritePhases; }

bool set_variable(const config::VariableSource& src, std::string_view name, std::string& out) {
  const RewriteCtx* ctx = http::module_ctx<RewriteCtx>(src.exchange(), module());
  const std::string* value = ctx != nullptr ? ctx->find(name) : nullptr;
  if (value != nullptr) {
    out.append(*value);
  } else if (src.exchange().location().module<RewriteLocConf>().uninitialized_variable_warn) {
    KOSOKU_LOG(kWarn, "using uninitialized \"%s\" variable", base::log_escaped(name));
  }
  return true;  // an uninitialised variable is empty, not "not found" (nginx's null value)
}

}  // namespace kosoku::rewrite
