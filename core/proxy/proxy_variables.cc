// The proxy module's variables (ngx_http_proxy_module's $proxy_host, $proxy_port, $proxy_add_x_forwarded_for;
// ngx_http_upstream_module's $upstream_*) and the request's record of its upstream tries (upstream_state.hh),
// which the $upstream_* variables print.
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/http/field_line.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/proxy/upstream_state.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::proxy {

namespace {

using Src = const config::VariableSource&;
using http::HeaderField;
using http::HeaderToken;

struct UpstreamCtx final : http::RequestCtx {
  UpstreamState tries;
};

// nginx's "%T.%03M": seconds with millisecond resolution.
void append_seconds(int64_t ms, std::string& out) {
  absl::StrAppend(&out, ms / 1000, ".", absl::Dec(ms % 1000, absl::kZeroPad3));
}

// Which figure of an upstream try a $upstream_* variable prints.
enum class TryField { kAddr, kStatus, kResponseTime, kConnectTime, kHeaderTime, kResponseLength };

// The $upstream_* variables (ngx_http_upstream_module), from what the proxy recorded with the request:
// one value per try, joined by ", " (nginx's separator between the servers of one upstream group); not set
// when the request went to no upstream. A try that is still running reports the time so far as its response
// time.
template <TryField F>
bool upstream_value(Src src, std::string_view, std::string& out) {
  const UpstreamState* rec = upstream_state(src.exchange());
  if (rec == nullptr || rec->count == 0) return false;
  const UpstreamState& st = *rec;
  for (size_t i = 0; i < st.count; ++i) {
    const UpstreamTry& t = st.tries[i];
    if (i > 0) out.append(", ");
    int64_t ms = -1;
    switch (F) {
      case TryField::kAddr:
        out.append(t.addr);
        continue;
      case TryField::kStatus:
        if (t.status != 0) {
          absl::StrAppend(&out, t.status);
        } else {
          out.push_back('-');
        }
        continue;
      case TryField::kResponseLength:
        absl::StrAppend(&out, t.length);
        continue;
      case TryField::kConnectTime:
        ms = t.connect_ms;
        break;
      case TryField::kHeaderTime:
        ms = t.header_ms;
        break;
      case TryField::kResponseTime:
        ms = t.response_ms;
        if (ms < 0 && src.reactor() != nullptr) ms = static_cast<int64_t>(src.reactor()->now_ms() - t.start_ms);
        break;
    }
    if (ms >= 0) {
      append_seconds(ms, out);
    } else {
      out.push_back('-');
    }
  }
  return true;
}

// ngx_http_proxy_module's variables ($proxy_*: meaningful in a proxy_pass location, empty elsewhere) and
// ngx_http_upstream_module's ($upstream_*: not set for a request that went to no upstream).
constexpr config::Variable kProxyVariables[] = {
    {"proxy_host",
     [](Src s, std::string_view, std::string& out) {
       out.append(s.exchange().location().module<ProxyLocationConf>().proxy_host);
       return true;
     }},
    {"proxy_port",
     [](Src s, std::string_view, std::string& out) {
       absl::StrAppend(&out, s.exchange().location().module<ProxyLocationConf>().proxy_port);
       return true;
     }},
    // nginx: every X-Forwarded-For line joined with ", ", then $remote_addr.
    {"proxy_add_x_forwarded_for",
     [](Src s, std::string_view, std::string& out) {
       bool any = false;
       for (const HeaderField& f : s.exchange().request().headers()) {
         if (f.token != HeaderToken::kXForwardedFor) continue;
         if (any) out.append(", ");
         out.append(f.value);
         any = true;
       }
       if (any) out.append(", ");
       out.append(s.exchange().remote_addr());
       return true;
     }},
    {"upstream_addr", &upstream_value<TryField::kAddr>},
    {"upstream_status", &upstream_value<TryField::kStatus>},
    {"upstream_response_time", &upstream_value<TryField::kResponseTime>},
    {"upstream_connect_time", &upstream_value<TryField::kConnectTime>},
    {"upstream_header_time", &upstream_value<TryField::kHeaderTime>},
    {"upstream_response_length", &upstream_value<TryField::kResponseLength>},
};

}  // namespace

UpstreamState& upstream_state(http::Exchange& ex) { return http::module_ctx<UpstreamCtx>(ex, module()).tries; }

const UpstreamState* upstream_state(const http::Exchange& ex) {
  const UpstreamCtx* c = http::module_ctx<UpstreamCtx>(ex, module());
  return c != nullptr ? &c->tries : nullptr;
}

std::span<const config::Variable> variables() { return kProxyVariables; }

}  // namespace kosoku::proxy
