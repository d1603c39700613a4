// `proxy_socket_keepalive on|off` (nginx, default off): parsed and inherited like nginx's flag, and applied by
// net::Stream::set_keepalive — here on kosoku's own TCP (the DPDK backend's upstream connections), whose
// keep-alive timer then probes an idle connection (the kernel backend's SO_KEEPALIVE is checked end to end in
// tests/integration/test_proxy_socket_keepalive.py).
#include <gtest/gtest.h>

#include <string>

#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/proxy/proxy_conf.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku {
namespace {

const config::LocationConf* location(const config::MainConf& m, const std::string& prefix) {
  for (const auto& srv : m.http.servers) {
    for (const config::LocationConf& loc : srv->locations) {
      if (loc.pattern == prefix) return &loc;
    }
  }
  return nullptr;
}

TEST(ProxySocketKeepalive, ParsedAndInheritedLikeNginx) {
  config::LoadResult r = config::load_from_string(
      "http {\n"
      "  upstream u { server 127.0.0.1:9; }\n"
      "  proxy_socket_keepalive on;\n"
      "  server { listen 8080;\n"
      "    location /inherits/ { proxy_pass http://u; }\n"
      "    location /off/ { proxy_pass http://u; proxy_socket_keepalive off; }\n"
      "  }\n"
      "  server { listen 8081; proxy_socket_keepalive off;\n"
      "    location /server-off/ { proxy_pass http://u; }\n"
      "  }\n"
      "}\n",
      "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_NE(location(*r.conf, "/inherits/"), nullptr);
  EXPECT_TRUE(location(*r.conf, "/inherits/")->module<proxy::ProxyLocationConf>().socket_keepalive);
  EXPECT_FALSE(location(*r.conf, "/off/")->module<proxy::ProxyLocationConf>().socket_keepalive);
  EXPECT_FALSE(location(*r.conf, "/server-off/")->module<proxy::ProxyLocationConf>().socket_keepalive);
  r = config::load_from_string("http { upstream u { server 127.0.0.1:9; }\n server { listen 80;\n"
                               " location / { proxy_pass http://u; } } }\n",
                               "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_FALSE(location(*r.conf, "/")->module<proxy::ProxyLocationConf>().socket_keepalive);  // nginx's default: off
  r = config::load_from_string("http { proxy_socket_keepalive 1; }", "t.conf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.message,
            "t.conf:1:31: invalid value \"1\" in \"proxy_socket_keepalive\" directive, it must be \"on\" or \"off\"");
}

TEST(ProxySocketKeepalive, KosokuTcpArmsItsKeepaliveTimer) {
  using namespace tcpip::testing;
  tcpip::TcpConfig conf;
  conf.keepalive_idle_ms = 2000;
  conf.keepalive_interval_ms = 500;
  conf.keepalive_probes = 3;
  Link link(conf);
  Sink sink;
  Source client;  // side 0 plays the proxy: an outgoing (active open) connection
  client.keep_open = true;
  ASSERT_EQ(link.tcp(1).listen_port(8080, 16, sink), 0);
  std::string err;
  net::Stream* up = link.tcp(0).connect_from(0, link.addr(1), 8080, client, &err);
  ASSERT_NE(up, nullptr) << err;
  up->set_keepalive(true);  // what the proxy does right after connect(), before the handshake completes
  auto& tcb = *static_cast<tcpip::Tcb*>(up);
  EXPECT_TRUE(tcb.keepalive());
  ASSERT_TRUE(link.run_until([&] { return client.connected && sink.accepted == 1; }, 1000));
  // Idle past keepalive_idle_ms: the client probes, the server answers, the connection stays up.
  link.run_for(2600);
  EXPECT_GE(link.tcp(0).stats().keepalive_probes, 1u);
  EXPECT_EQ(link.tcp(0).stats().keepalive_timeouts, 0u);
  EXPECT_FALSE(client.closed);
  // Off again: no more probes.
  up->set_keepalive(false);
  EXPECT_FALSE(tcb.keepalive());
  uint64_t probes = link.tcp(0).stats().keepalive_probes;
  link.run_for(5000);
  EXPECT_EQ(link.tcp(0).stats().keepalive_probes, probes);
  // Without set_keepalive an outgoing connection never probes (nginx's default).
  Source plain;
  plain.keep_open = true;
  net::Stream* other = link.tcp(0).connect_from(0, link.addr(1), 8080, plain, &err);
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(static_cast<tcpip::Tcb*>(other)->keepalive());
}

}  // namespace
}  // namespace kosoku
