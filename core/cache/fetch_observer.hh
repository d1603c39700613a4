// The proxy's UpstreamObserver for a FetchExchange (fetch_exchange.hh): hands the origin response head and
// the end of its content to the exchange's FetchSink. Content bytes come through the exchange's write path,
// so on_data is not used here.
#pragma once

#include "core/cache/fetch_exchange.hh"
#include "core/proxy/proxy_handler.hh"

namespace kosoku::cache {

class FetchObserver final : public proxy::UpstreamObserver {
 public:
  explicit FetchObserver(FetchExchange* fx) : fx_(fx) {}
  void on_head(const http::ParsedResponse& resp) override {
    if (fx_->sink_ != nullptr) fx_->sink_->on_fetch_response(resp);
  }
  void on_data(std::string_view) override {}
  bool holding(const std::function<void()>& ready) override {
    return fx_->sink_ != nullptr && fx_->sink_->fetch_holding(ready);
  }
  void on_end(bool complete) override {
    if (fx_->sink_ != nullptr) fx_->sink_->on_fetch_end(complete);
  }

 private:
  FetchExchange* fx_;
};

}  // namespace kosoku::cache
