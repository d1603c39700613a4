// nginx's `listen ... so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]` parsed into the listening socket
// (config::ListenConf), which both network backends read: the kernel one as SO_KEEPALIVE / TCP_KEEPIDLE /
// TCP_KEEPINTVL / TCP_KEEPCNT on the listening socket (inherited by accepted sockets), kosoku's own TCP as
// the per-connection keep-alive timer (tcp_idle_test.cc).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/net/kernel_stack.hh"

namespace kosoku::config {
namespace {

const ListenConf* find(const MainConf& m, const std::string& text) {
  for (const ListenSocket& ls : m.http.listen_sockets) {
    if (ls.conf.text == text) return &ls.conf;
  }
  return nullptr;
}

TEST(TcpSoKeepalive, ListenParsesNginxForms) {
  LoadResult r = load_from_string(
      "http {\n"
      " server { listen 127.0.0.1:8080 so_keepalive=30m::10; }\n"
      " server { listen 127.0.0.1:8081 so_keepalive=on; }\n"
      " server { listen 127.0.0.1:8082 so_keepalive=off; }\n"
      " server { listen 127.0.0.1:8083; }\n"
      " server { listen 127.0.0.1:8084 so_keepalive=1h:5s; }\n"
      " server { listen 127.0.0.1:8085 so_keepalive=:75:; }\n"
      " server { listen 127.0.0.1:8086 so_keepalive=7; }\n"
      "}\n",
      "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const MainConf& m = *r.conf;
  struct Want {
    const char* text;
    int on;
    uint32_t idle, intvl, cnt;
  } wants[] = {
      {"127.0.0.1:8080", 1, 1800, 0, 10}, {"127.0.0.1:8081", 1, 0, 0, 0},   {"127.0.0.1:8082", 0, 0, 0, 0},
      {"127.0.0.1:8083", -1, 0, 0, 0},    {"127.0.0.1:8084", 1, 3600, 5, 0}, {"127.0.0.1:8085", 1, 0, 75, 0},
      {"127.0.0.1:8086", 1, 7, 0, 0},
  };
  for (const Want& w : wants) {
    const ListenConf* l = find(m, w.text);
    ASSERT_NE(l, nullptr) << w.text;
    EXPECT_EQ(l->so_keepalive, w.on) << w.text;
    EXPECT_EQ(l->keepidle_s, w.idle) << w.text;
    EXPECT_EQ(l->keepintvl_s, w.intvl) << w.text;
    EXPECT_EQ(l->keepcnt, w.cnt) << w.text;
  }
}

std::string err(const std::string& text) {
  LoadResult r = load_from_string(text, "t.conf");
  return r.ok() ? "" : r.error.message;
}

TEST(TcpSoKeepalive, InvalidValuesAndDuplicateOptions) {
  EXPECT_EQ(err("http { server { listen 80 so_keepalive=::; } }"), "t.conf:1:27: invalid so_keepalive value: \"::\"");
  EXPECT_EQ(err("http { server { listen 80 so_keepalive=x:1:1; } }"),
            "t.conf:1:27: invalid so_keepalive value: \"x:1:1\"");
  EXPECT_EQ(err("http { server { listen 80 so_keepalive=1:1:1:1; } }"),
            "t.conf:1:27: invalid so_keepalive value: \"1:1:1:1\"");
  EXPECT_EQ(err("http { server { listen 80 so_keepalive=; } }"), "t.conf:1:27: invalid so_keepalive value: \"\"");
  // so_keepalive is a socket option: like backlog, only one server may set options for an address.
  EXPECT_EQ(err("http {\n server { listen 80 so_keepalive=on; }\n server { listen 80 backlog=5; }\n}"),
            "t.conf:3:11: duplicate listen options for 0.0.0.0:80");
}

// The listening socket of the first `listen` in `conf`, bound to an ephemeral port on 127.0.0.1.
int open_first(const char* conf) {
  LoadResult r = load_from_string(conf, "t.conf");
  EXPECT_TRUE(r.ok()) << r.error.message;
  if (!r.ok()) return -1;
  ListenConf l = r.conf->http.listen_sockets.at(0).conf;
  reinterpret_cast<sockaddr_in*>(&l.addr)->sin_port = 0;
  std::string e;
  int fd = net::open_listen_socket(l, &e);
  EXPECT_GE(fd, 0) << e;
  return fd;
}

TEST(TcpSoKeepalive, KernelListeningSocketCarriesTheOptions) {
  int fd = open_first("http { server { listen 127.0.0.1:8080 so_keepalive=30m:7s:4; } }");
  ASSERT_GE(fd, 0);
  int v = 0;
  socklen_t len = sizeof(v);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
  EXPECT_EQ(v, 1800);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, &len), 0);
  EXPECT_EQ(v, 7);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v, &len), 0);
  EXPECT_EQ(v, 4);
  // An accepted connection inherits them (Linux), as nginx relies on.
  sockaddr_in a{};
  socklen_t alen = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), alen), 0);
  int s = -1;
  for (int i = 0; i < 100 && s < 0; ++i) {
    s = accept(fd, nullptr, nullptr);
    if (s < 0) usleep(10'000);
  }
  ASSERT_GE(s, 0);
  ASSERT_EQ(getsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(getsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
  EXPECT_EQ(v, 1800);
  close(s);
  close(c);
  close(fd);
  // so_keepalive=off clears it; no so_keepalive leaves the system default (off).
  for (const char* conf : {"http { server { listen 127.0.0.1:8080 so_keepalive=off; } }",
                           "http { server { listen 127.0.0.1:8080; } }"}) {
    int fd2 = open_first(conf);
    ASSERT_GE(fd2, 0);
    ASSERT_EQ(getsockopt(fd2, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
    EXPECT_EQ(v, 0) << conf;
    close(fd2);
  }
}

// `listen ... deferred` (nginx): TCP_DEFER_ACCEPT on the listening socket; a bare `listen` leaves it off. Only one
// server may give options for an address (deferred counts as one, like backlog=).
TEST(ListenDeferred, SetsTcpDeferAcceptOnTheKernelListeningSocket) {
  int fd = open_first("http { server { listen 127.0.0.1:8080 deferred; } }");
  ASSERT_GE(fd, 0);
  int v = 0;
  socklen_t len = sizeof(v);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &len), 0);
  EXPECT_GE(v, 1);  // Linux reports the retransmission-rounded timeout in seconds
  close(fd);
  fd = open_first("http { server { listen 127.0.0.1:8080; } }");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &len), 0);
  EXPECT_EQ(v, 0);
  close(fd);
  EXPECT_EQ(err("http {\n server { listen 80 deferred; }\n server { listen 80 deferred; }\n}"),
            "t.conf:3:11: duplicate listen options for 0.0.0.0:80");
}

}  // namespace
}  // namespace kosoku::config
