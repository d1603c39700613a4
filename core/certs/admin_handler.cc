#include "core/certs/admin_handler.hh"

#include "absl/strings/str_cat.h"
#include "core/certs/host_name.hh"
#include "core/certs/pem.hh"
#include "core/http/admin_path.hh"

namespace kosoku::certs {

namespace {

constexpr std::string_view kJson = "application/json";

// "%2A" (a client that escapes '*') → '*'; nothing else is decoded (a host has no other escapes).
std::string unescape_star(std::string_view h) {
  std::string out;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h.substr(i, 3) == "%2A" || h.substr(i, 3) == "%2a") {
      out.push_back('*');
      i += 2;
    } else {
      out.push_back(h[i]);
    }
  }
  return out;
}

}  // namespace

bool split_admin_path(std::string_view uri, std::string_view loc_prefix, bool* list, std::string_view* host) {
  return http::split_admin_path(uri, loc_prefix, "certs", list, host);
}

AdminState::~AdminState() {
  if (cache_ == nullptr) return;
  cache_->cancel(this);
  if (job_ != nullptr) job_->owner = nullptr;
  cache_->remove_admin(this);
}

void AdminState::reply(int status, const std::string& body) {
  ex_->head().extra.append("Cache-Control: no-store\r\n");
  ex_->respond(status, body, kJson);
}

void AdminState::reply_error(int status, std::string_view message) { reply(status, http::admin_error_json(message)); }

void AdminState::on_abort() {
  if (cache_ != nullptr) {
    cache_->cancel(this);
    if (job_ != nullptr) {
      job_->owner = nullptr;  // the write goes on; nobody is answered
      job_ = nullptr;
    }
  }
  ex_->release();
}

void AdminState::start() {
  const config::LocationConf& loc = ex_->location();
  std::string_view prefix;
  if (loc.match == config::LocationConf::Match::kPrefix || loc.match == config::LocationConf::Match::kPrefixNoRegex) {
    prefix = loc.pattern;
  }
  bool list = false;
  std::string_view raw_host;
  if (!split_admin_path(ex_->uri(), prefix, &list, &raw_host)) {
    reply_error(404, "not a certificate admin path (PREFIX/certs or PREFIX/certs/HOST)");
    return;
  }
  const http::Method m = ex_->request().method;
  const bool get = m == http::Method::kGet || m == http::Method::kHead;
  CertIndex& index = cache_->store().index();
  if (list) {
    if (!get) {
      ex_->head().extra.assign("Allow: GET, HEAD\r\n");
      reply_error(405, "PREFIX/certs only lists (GET)");
      return;
    }
    size_t offset = 0;
    size_t limit = http::kAdminDefaultLimit;
    http::parse_admin_paging(ex_->args(), &offset, &limit);
    std::string hosts;
    size_t n = 0;
    size_t total = index.list(offset, limit, [&](std::string_view host, uint64_t) {
      if (n++ > 0) hosts.push_back(',');
      append_json_string(hosts, host);
    });
    reply(200, absl::StrCat("{\"count\":", total, ",\"offset\":", offset, ",\"limit\":", limit, ",\"hosts\":[", hosts,
                            "]}\n"));
    return;
  }
  const std::string raw = unescape_star(raw_host);
  if (!normalize_cert_host(raw, &host_)) {
    reply_error(400, absl::StrCat("invalid host \"", raw, "\" (a DNS name, or a wildcard \"*.example.com\")"));
    return;
  }
  if (get) {
    if (index.version(host_) == 0) {
      reply_error(404, absl::StrCat("no certificate for host \"", host_, "\""));
      return;
    }
    answer_get();
    return;
  }
  if (m == http::Method::kDelete) {
    if (index.version(host_) == 0) {
      reply_error(404, absl::StrCat("no certificate for host \"", host_, "\""));
      return;
    }
    auto job = std::make_unique<StoreJob>();
    job->kind = StoreJob::Kind::kDelete;
    job->host = host_;
    submit(std::move(job));
    return;
  }
  if (m == http::Method::kPut) {
    // No body at all: refused at once (an empty "Content-Length: 0" body ends at once through read_body).
    if (ex_->request().body == http::BodyFraming::kNone) {
      handle_put();
      return;
    }
    ex_->read_body(this);  // on_body_data..., then on_body_end → handle_put
    return;
  }
  ex_->head().extra.assign("Allow: GET, HEAD, PUT, DELETE\r\n");
  reply_error(405, "method not allowed");
}

void AdminState::answer_get() {
  const LoadedCert* c = nullptr;
  switch (cache_->find_exact(host_, this, &c)) {
    case CertCache::Result::kPending:
      return;  // on_cert_ready
    case CertCache::Result::kAbsent:
      if (cache_->store().index().version(host_) == 0) {
        reply_error(404, absl::StrCat("no certificate for host \"", host_, "\""));
      } else {
        reply_error(500, absl::StrCat("the certificate file of \"", host_, "\" could not be loaded (see the error log)"));
      }
      return;
    case CertCache::Result::kFound:
      break;
  }
  std::string body;
  append_info_json(body, host_, describe(c->leaf, c->chain, c->key));
  body.push_back('\n');
  reply(200, body);
}

void AdminState::on_cert_ready() { answer_get(); }

void AdminState::on_body_data(std::string_view data) {
  if (too_large_) return;
  if (body_.size() + data.size() > kMaxAdminBody) {
    too_large_ = true;
    body_.clear();
    body_.shrink_to_fit();
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
  CertBundle b;
  std::string err;
  if (!parse_bundle(body_, &b, &err) || !check_validity(b.leaf, cache_->wall_time(), &err)) {
    reply_error(400, absl::StrCat(err, " (the stored certificate, if any, is kept)"));
    return;
  }
  auto job = std::make_unique<StoreJob>();
  job->kind = StoreJob::Kind::kPut;
  job->host = host_;
  if (!encode_bundle(b, &job->pem, &err)) {
    reply_error(500, err);
    return;
  }
  info_.clear();
  append_info_json(info_, host_, describe(b.leaf, b.chain, b.key));
  info_.push_back('\n');
  body_.clear();
  body_.shrink_to_fit();
  submit(std::move(job));
}

void AdminState::submit(std::unique_ptr<StoreJob> job) {
  job->owner = this;
  job_ = job.get();
  cache_->store().submit(std::move(job), cache_);
}

void AdminState::job_done(std::unique_ptr<StoreJob> job) {
  auto* st = static_cast<AdminState*>(job->owner);
  if (st == nullptr) return;  // the request went away
  st->job_ = nullptr;
  st->finished(*job);
}

void AdminState::finished(const StoreJob& job) {
  if (job.kind == StoreJob::Kind::kDelete) {
    if (!job.ok && !job.existed) {
      reply_error(404, job.error);
    } else if (!job.ok) {
      reply_error(500, absl::StrCat("the certificate was not deleted: ", job.error));
    } else {
      std::string body = "{\"host\":";
      append_json_string(body, job.host);
      body.append(",\"deleted\":true}\n");
      reply(200, body);
    }
    return;
  }
  if (!job.ok) {
    reply_error(500, absl::StrCat("the certificate was not saved: ", job.error));
    return;
  }
  reply(job.existed ? 200 : 201, info_);
}

void AdminHandler::handle(http::Exchange& ex) {
  auto st = std::make_unique<AdminState>(cache_, ex);
  AdminState* s = st.get();
  ex.state() = std::move(st);
  s->start();
}

}  // namespace kosoku::certs
