#include "core/rules/admin_handler.hh"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/http/admin_path.hh"
#include "core/rules/host_name.hh"
#include "core/rules/json.hh"
#include "core/rules/rules_core.hh"

namespace kosoku::rules {

namespace {

constexpr std::string_view kJson = "application/json";

}  // namespace

bool split_admin_path(std::string_view uri, std::string_view loc_prefix, bool* list, std::string_view* host) {
  return http::split_admin_path(uri, loc_prefix, "rules", list, host);
}

AdminState::~AdminState() {
  if (waiting_) core_.cancel_wait(this);
}

void AdminState::reply(int status, const std::string& body) {
  ex_->head().extra.append("Cache-Control: no-store\r\n");
  ex_->respond(status, body, kJson);
}

void AdminState::reply_error(int status, std::string_view message) { reply(status, http::admin_error_json(message)); }

void AdminState::reply_after_persist(int status, std::string body, uint64_t generation) {
  Persister* p = core_.store().persister();
  if (p == nullptr || p->durable() >= generation) {
    reply(status, body);
    return;
  }
  waiting_ = true;
  generation_ = generation;
  pending_status_ = status;
  pending_body_ = std::move(body);
  core_.wait_durable(this);
}

void AdminState::answer_durable() {
  waiting_ = false;
  std::string body = std::move(pending_body_);
  reply(pending_status_, body);
}

void AdminState::answer_failed(const std::string& error) {
  waiting_ = false;
  reply_error(500, absl::StrCat("the change is applied but was not saved to the rules file: ", error));
}

void AdminState::on_abort() {
  if (waiting_) {
    core_.cancel_wait(this);
    waiting_ = false;
  }
  ex_->release();
}

void AdminState::start() {
  host_.clear();
  body_.clear();
  too_large_ = false;
  waiting_ = false;
  generation_ = 0;
  const config::LocationConf& loc = ex_->location();
  std::string_view prefix;
  if (loc.match == config::LocationConf::Match::kPrefix || loc.match == config::LocationConf::Match::kPrefixNoRegex) {
    prefix = loc.pattern;
  }
  bool list = false;
  std::string_view raw_host;
  if (!split_admin_path(ex_->uri(), prefix, &list, &raw_host)) {
    reply_error(404, "not a rules admin path (PREFIX/rules or PREFIX/rules/HOST)");
    return;
  }
  const http::Method m = ex_->request().method;
  const bool get = m == http::Method::kGet || m == http::Method::kHead;
  RuleStore& store = core_.store();
  if (list) {
    if (!get) {
      ex_->head().extra.assign("Allow: GET, HEAD\r\n");
      reply_error(405, "PREFIX/rules only lists (GET)");
      return;
    }
    size_t offset = 0;
    size_t limit = http::kAdminDefaultLimit;
    http::parse_admin_paging(ex_->args(), &offset, &limit);
    std::string hosts;
    size_t n = 0;
    size_t total = store.set().list(offset, limit, [&](const HostRules& r) {
      if (n++ > 0) hosts.push_back(',');
      append_host_json(hosts, r);
    });
    reply(200, absl::StrCat("{\"count\":", total, ",\"offset\":", offset, ",\"limit\":", limit, ",\"hosts\":[", hosts,
                            "]}\n"));
    return;
  }
  std::string scratch;
  std::string_view h = normalize_host(raw_host, scratch);
  if (!valid_host(h)) {
    reply_error(400, absl::StrCat("invalid host \"", raw_host, "\""));
    return;
  }
  host_.assign(h);
  if (get) {
    std::optional<std::vector<std::string>> patterns = store.set().get(host_);
    if (!patterns) {
      reply_error(404, absl::StrCat("no rules for host \"", host_, "\""));
      return;
    }
    std::string body;
    append_host_json(body, host_, *patterns);
    body.push_back('\n');
    reply(200, body);
    return;
  }
  if (m == http::Method::kDelete) {
    RuleSet::Outcome o = store.erase(host_);
    if (!o.ok) {
      reply_error(404, o.error);
      return;
    }
    std::string body = "{\"host\":";
    append_json_string(body, host_);
    body.append(",\"deleted\":true}\n");
    reply_after_persist(200, std::move(body), o.generation);
    return;
  }
  if (m == http::Method::kPut) {
    ex_->read_body(this);  // on_body_data..., then on_body_end → handle_put
    return;
  }
  ex_->head().extra.assign("Allow: GET, HEAD, PUT, DELETE\r\n");
  reply_error(405, "method not allowed");
}

void AdminState::on_body_data(std::string_view data) {
  if (too_large_) return;
  if (body_.size() + data.size() > kMaxAdminBody) {
    too_large_ = true;
    body_.clear();
    return;
  }
  body_.append(data);
}

void AdminState::on_body_end() {
  if (too_large_) {
    reply_error(413, absl::StrCat("request body larger than ", kMaxAdminBody, " bytes"));
    return;
  }
  handle_put();
}

void AdminState::on_body_error(int status) {
  reply_error(status == 0 ? 400 : status, "the request body could not be read");
}

void AdminState::handle_put() {
  RulesDoc doc;
  std::string err;
  if (!parse_rules_doc(body_, &doc, &err)) {
    reply_error(400, err);
    return;
  }
  if (!doc.patterns) {
    reply_error(400, "the body needs \"patterns\": an array of strings");
    return;
  }
  if (doc.host) {
    std::string scratch;
    if (normalize_host(*doc.host, scratch) != host_) {
      reply_error(400, absl::StrCat("\"host\" in the body (\"", *doc.host, "\") is not the host of the path (\"",
                                    host_, "\")"));
      return;
    }
  }
  RuleSet::Outcome o = core_.store().put(host_, *doc.patterns);
  if (!o.ok) {
    reply_error(400, o.error);
    return;
  }
  std::string body;
  append_host_json(body, host_, *doc.patterns);
  body.push_back('\n');
  reply_after_persist(o.existed ? 200 : 201, std::move(body), o.generation);
}

void AdminHandler::handle(http::Exchange& ex) {
  auto st = std::make_unique<AdminState>(core_, ex);
  AdminState* s = st.get();
  ex.state() = std::move(st);
  s->start();
}

}  // namespace kosoku::rules
