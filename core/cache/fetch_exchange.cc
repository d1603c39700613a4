#include "core/cache/fetch_exchange.hh"

#include "absl/strings/str_cat.h"
#include "core/cache/fetch_observer.hh"

namespace kosoku::cache {

namespace {

// nginx's ngx_http_proxy_cache_headers: fields the cache never forwards (it answers them itself).
bool cache_removes(http::HeaderToken t) {
  switch (t) {
    case http::HeaderToken::kIfModifiedSince:
    case http::HeaderToken::kIfUnmodifiedSince:
    case http::HeaderToken::kIfNoneMatch:
    case http::HeaderToken::kIfMatch:
    case http::HeaderToken::kRange:
    case http::HeaderToken::kIfRange:
      return true;
    default:
      return false;
  }
}

}  // namespace

FetchExchange::FetchExchange(http::Exchange& client, const Options& opts, FetchSink* sink, bool detached)
    : client_(detached ? nullptr : &client), sink_(sink) {
  req_.fields = std::span<http::HeaderField>(fields_, std::size(fields_));
  uri_.assign(client.uri());
  host_.assign(client.host());
  remote_addr_.assign(client.remote_addr());
  server_ = &client.server();
  location_ = &client.location();
  core_ = &client.core();
  server_port_ = client.server_port();
  connection_id_ = client.connection_id();
  connection_requests_ = client.connection_requests();
  request_length_ = client.request_length();
  valid_ = rebuild(client.request(), opts);
}

FetchExchange::~FetchExchange() { state_.reset(); }

bool FetchExchange::rebuild(const http::Request& c, const Options& opts) {
  const bool to_get = opts.head_to_get && c.method == http::Method::kHead;
  head_text_.clear();
  absl::StrAppend(&head_text_, to_get ? std::string_view("GET") : c.method_text, " ", c.target, " HTTP/1.",
                  c.version_minor, "\r\n");
  for (const http::HeaderField& f : c.headers()) {
    if (cache_removes(f.token)) continue;
    absl::StrAppend(&head_text_, f.name, ": ", f.value, "\r\n");
  }
  head_text_.append(opts.extra_fields);
  head_text_.append("\r\n");
  http::ParserLimits lim;
  lim.max_request_line = head_text_.size();
  lim.max_field_line = head_text_.size();
  lim.max_header_section = head_text_.size() + 1;
  lim.max_fields = http::kMaxFieldLines;  // the client's head passed its server's max_headers already
  http::ParseResult r = http::parse_request(head_text_, req_, lim);
  return r.status == http::ParseStatus::kComplete;
}

void FetchExchange::send_head() {
  if (head_sent_) return;
  head_sent_ = true;
  if (sink_ != nullptr) sink_->on_fetch_head(head_);
}

void FetchExchange::respond(int status, std::string_view, std::string_view) {
  done_ = true;
  if (sink_ != nullptr) sink_->on_fetch_error(status);
}

void FetchExchange::write(std::string_view data) {
  if (sink_ != nullptr && !data.empty()) sink_->on_fetch_data(data.data(), data.size(), false);
}

void FetchExchange::write_ref(const char* data, size_t len) {
  if (sink_ != nullptr && len > 0) sink_->on_fetch_data(data, len, true);
}

size_t FetchExchange::pending_output() const { return passthrough_ ? client_->pending_output() : 0; }

void FetchExchange::set_low_water(size_t bytes) {
  if (passthrough_) client_->set_low_water(bytes);
}

void FetchExchange::finish() {
  done_ = true;
  if (sink_ != nullptr) sink_->on_fetch_finish();
}

void FetchExchange::abort_response() {
  done_ = true;
  if (sink_ != nullptr) sink_->on_fetch_abort();
}

void FetchExchange::release() {
  done_ = true;
  if (sink_ != nullptr) sink_->on_fetch_released();
}

void FetchExchange::read_body(http::BodySink* sink) {
  if (client_ != nullptr) {
    client_->read_body(sink);
  } else {
    sink->on_body_end();  // a background update carries no body
  }
}

void FetchExchange::pause_body(bool paused) {
  if (client_ != nullptr) client_->pause_body(paused);
}

std::unique_ptr<FetchObserver> FetchExchange::make_observer() { return std::make_unique<FetchObserver>(this); }

}  // namespace kosoku::cache
