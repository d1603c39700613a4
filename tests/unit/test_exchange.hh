// TestExchange: an Exchange for unit tests of code that takes one (the proxy's request head, the client relay).
// Every call is accepted and does nothing; the request, the location and the rest are the public members a test
// sets. A fake derives from it and overrides what its test observes (writes, pending output...).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/config/conf.hh"
#include "core/http/exchange.hh"
#include "core/http/parser.hh"

namespace kosoku::testing {

class TestExchange : public http::Exchange {
 public:
  const http::Request& request() const override { return req; }
  std::string_view uri() const override { return uri_text; }
  std::string_view args() const override { return req.query; }
  const config::ServerConf& server() const override { return *server_conf; }
  const config::LocationConf& location() const override { return *loc; }
  const http::CoreContext& core() const override { return core_ctx; }
  std::string_view remote_addr() const override { return client_addr; }
  uint16_t server_port() const override { return port; }
  uint64_t connection_id() const override { return 1; }
  uint64_t connection_requests() const override { return 1; }
  std::string_view host() const override { return host_lower; }
  uint64_t request_length() const override { return head_length; }
  http::ResponseHead& head() override { return response; }
  const http::ResponseHead& head() const override { return response; }
  void send_head() override {}
  void respond(int, std::string_view, std::string_view) override {}
  void redirect(int, std::string_view) override {}
  void write(std::string_view) override {}
  void write_ref(const char*, size_t) override {}
  size_t pending_output() const override { return 0; }
  void set_low_water(size_t) override {}
  void finish() override {}
  void abort_response() override {}
  void release() override {}
  void read_body(http::BodySink*) override {}
  void pause_body(bool) override {}
  int discard_request_body() override { return 0; }
  std::unique_ptr<http::ContentState>& state() override { return content; }
  std::unique_ptr<http::RequestCtx>& ctx(const config::Module& m) override { return ctxs[&m]; }
  const http::RequestCtx* ctx(const config::Module& m) const override {
    auto it = ctxs.find(&m);
    return it == ctxs.end() ? nullptr : it->second.get();
  }

  http::Request req;
  std::string uri_text = "/";
  std::string host_lower;
  std::string client_addr = "192.0.2.1";
  uint16_t port = 80;
  uint64_t head_length = 0;
  const config::ServerConf* server_conf = nullptr;
  const config::LocationConf* loc = nullptr;
  http::CoreContext core_ctx;
  http::ResponseHead response;
  std::unique_ptr<http::ContentState> content;
  std::map<const config::Module*, std::unique_ptr<http::RequestCtx>> ctxs;
};

}  // namespace kosoku::testing
