// The cache's request to the origin (nginx's upstream request in proxy_cache mode): a proxy::UpstreamFetch and
// the request it sends, which is the client's with the cache's changes (nginx's ngx_http_proxy_cache_headers):
// If-Modified-Since, If-Unmodified-Since, If-None-Match, If-Match, Range and If-Range removed (the cache fetches
// whole representations and answers the client's conditionals and ranges itself), HEAD sent as GET with
// proxy_cache_convert_head, and the revalidation fields added (If-None-Match / If-Modified-Since from the stored
// validators, RFC 9111 §4.3.1). The head is built from the client's exchange (proxy_request.hh), so variables in
// proxy_set_header and the target mean what they do on the proxy's own path.
//
// A fetch may outlive the client's request: a background update (proxy_cache_background_update) is started
// detached, and a fill whose client went away is handed over (hand_over) to a BackgroundFill. The request (the
// parsed head the response is stored for: Authorization, no-store, the Vary secondary key) is then a copy, and
// nothing refers to the client any more.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/proxy/proxy_handler.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/upstream_fetch.hh"

namespace kosoku::cache {

class CacheFetch final : public proxy::UpstreamRequest {
 public:
  struct Options {
    bool head_to_get = false;   // proxy_cache_convert_head for a HEAD request
    std::string extra_fields;   // "Name: value\r\n" lines added (revalidation)
  };

  /// For `client`'s request. `detached`: sent without a body, and the request is copied at once (a background
  /// update: the fetch outlives the client's request).
  CacheFetch(http::Exchange& client, const Options& opts, bool detached);

  /// Sends the request with `proxy`'s upstream group of the location; the response goes to `sink`, the tries to
  /// `record`. Every sink call may come from inside this one.
  void start(proxy::ProxyModule& proxy, proxy::UpstreamSink& sink, proxy::UpstreamState& record);
  /// The client went away (its exchange is still valid during this call): its request is copied, and `sink` and
  /// `record` get the rest of the fetch. The request body must be complete.
  void hand_over(proxy::UpstreamSink& sink, proxy::UpstreamState& record);
  /// Nobody follows the fetch any more (proxy::UpstreamFetch::detach); it forgets the client.
  void detach();

  proxy::UpstreamFetch& upstream() { return fetch_; }
  /// Nothing of the fetch is in flight (it may be destroyed).
  bool done() const { return fetch_.done(); }
  /// Abandons the fetch (proxy::UpstreamFetch::cancel).
  bool cancel() { return fetch_.cancel(); }
  /// The method sent is HEAD (proxy_cache_convert_head off): the response has no body to store.
  bool sends_head() const { return sends_head_; }
  /// The request the response answers: the client's, or its copy once the fetch outlives it.
  const http::Request& request() const { return client_ != nullptr ? client_->request() : copy_; }
  const config::LocationConf& location() const { return *loc_; }

  // proxy::UpstreamRequest
  void build_head(proxy::BodyFraming framing, uint64_t content_length, std::string& out) override;
  std::string log_context(std::string_view upstream) const override;
  void read_body(http::BodySink* sink) override;
  void pause_body(bool paused) override;

 private:
  bool copy_request(const http::Request& r);

  http::Exchange* client_;            // null once the fetch outlives the client's request
  bool detached_;                     // sent without a body
  const config::LocationConf* loc_;
  Options opts_;
  proxy::RequestEdits edits_;
  bool sends_head_ = false;
  std::string context_before_;        // the error-log context, copied: the fetch may outlive the client
  std::string context_after_;
  std::string copy_text_;             // the copied request head, and its parse
  http::Request copy_;
  proxy::UpstreamFetch fetch_;
};

}  // namespace kosoku::cache
