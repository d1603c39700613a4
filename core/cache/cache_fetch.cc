#include "core/cache/cache_fetch.hh"

#include "absl/strings/str_cat.h"

namespace kosoku::cache {

CacheFetch::CacheFetch(http::Exchange& client, const Options& opts, bool detached)
    : client_(&client), detached_(detached), loc_(&client.location()), opts_(opts) {
  const http::Request& req = client.request();
  const bool to_get = opts_.head_to_get && req.method == http::Method::kHead;
  sends_head_ = req.method == http::Method::kHead && !to_get;
  if (to_get) edits_.method = "GET";
  edits_.drop_conditionals = true;
  edits_.extra_fields = opts_.extra_fields;
  context_before_ = proxy::log_context_before_upstream(client);
  context_after_ = proxy::log_context_after_upstream(client);
  if (detached_) copy_request(req);
}

void CacheFetch::start(proxy::ProxyModule& proxy, proxy::UpstreamSink& sink, proxy::UpstreamState& record) {
  http::Exchange& ex = *client_;  // the client's exchange is there while the fetch starts
  const proxy::ProxyLocationConf& pc = loc_->module<proxy::ProxyLocationConf>();
  proxy::UpstreamGroup& group = proxy.group(*pc.upstream);
  const std::string key = proxy::upstream_hash_key(ex, pc, group);
  const http::Request& req = ex.request();
  proxy::UpstreamFetch::Plan plan;
  plan.conf = &pc;
  plan.hash_key = key;
  plan.host = ex.host();
  plan.idempotent = proxy::idempotent(req);
  plan.head = sends_head_;
  if (!detached_) {
    plan.body = req.body;
    plan.content_length = req.content_length.value_or(0);
  }
  fetch_.start(group, plan, *this, sink, record);  // with no body to wait for, the head is built here
  if (detached_) client_ = nullptr;
}

void CacheFetch::hand_over(proxy::UpstreamSink& sink, proxy::UpstreamState& record) {
  if (client_ != nullptr) copy_request(client_->request());
  client_ = nullptr;
  fetch_.hand_over(*this, sink, record);
}

void CacheFetch::detach() {
  client_ = nullptr;
  fetch_.detach();
}

void CacheFetch::build_head(proxy::BodyFraming framing, uint64_t content_length, std::string& out) {
  // Called while the request body comes in, so with the client there (a fetch outlives it only once the body
  // is complete and the head sent).
  if (client_ == nullptr) return;
  proxy::build_request_head(*client_, loc_->module<proxy::ProxyLocationConf>(), framing, content_length, out, &edits_);
}

std::string CacheFetch::log_context(std::string_view upstream) const {
  return absl::StrCat(context_before_, ", upstream: \"", upstream, "\"", context_after_);
}

void CacheFetch::read_body(http::BodySink* sink) {
  if (client_ != nullptr && !detached_) {
    client_->read_body(sink);
  } else {
    sink->on_body_end();  // a background update carries no body
  }
}

void CacheFetch::pause_body(bool paused) {
  if (client_ != nullptr && !detached_) client_->pause_body(paused);
}

// The client's head rebuilt and parsed again, so that every view is ours.
bool CacheFetch::copy_request(const http::Request& c) {
  copy_text_.clear();
  absl::StrAppend(&copy_text_, c.method_text, " ", c.target, " HTTP/1.", c.version_minor, "\r\n");
  for (const http::HeaderField& f : c.headers()) absl::StrAppend(&copy_text_, f.name, ": ", f.value, "\r\n");
  copy_text_.append("\r\n");
  copy_.fields = {};  // every line goes to copy_.spilled_fields
  http::ParserLimits lim;
  lim.max_request_line = copy_text_.size();
  lim.max_field_line = copy_text_.size();
  lim.max_header_section = copy_text_.size() + 1;
  lim.max_fields = http::kMaxFieldLines;  // the client's head passed its server's max_headers already
  return http::parse_request(copy_text_, copy_, lim).status == http::ParseStatus::kComplete;
}

}  // namespace kosoku::cache
