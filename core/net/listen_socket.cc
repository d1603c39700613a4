// The kernel backend's listening sockets (declared in kernel_stack.hh): opening one per (address, core) with the
// listen directive's options, and the start-up probe that no other process holds the address.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/net/kernel_stack.hh"

namespace kosoku::net {

int open_listen_socket(const config::ListenConf& conf, std::string* err) {
  int family = conf.addr.ss_family;
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    if (err) *err = absl::StrCat("socket() for ", conf.text, " failed: ", std::strerror(e));
    return -e;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // inherited by accepted sockets (Linux)
  if (conf.so_keepalive >= 0) {  // listen so_keepalive= (nginx); also inherited by accepted sockets
    int on = conf.so_keepalive;
    int idle = static_cast<int>(conf.keepidle_s), intvl = static_cast<int>(conf.keepintvl_s);
    int cnt = static_cast<int>(conf.keepcnt);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    if (idle > 0) setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    if (intvl > 0) setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    if (cnt > 0) setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  }
  // listen rcvbuf= / sndbuf= (nginx): before listen(), so the window scale of the SYN-ACKs follows the receive
  // buffer; accepted sockets inherit both (and the lock that keeps Linux from auto-tuning them).
  if (conf.rcvbuf >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &conf.rcvbuf, sizeof(conf.rcvbuf)) < 0) {
    KOSOKU_LOG(kAlert, "setsockopt(SO_RCVBUF, %d) %s failed, ignored (%d: %s)", conf.rcvbuf, conf.text, errno,
               std::strerror(errno));
  }
  if (conf.sndbuf >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &conf.sndbuf, sizeof(conf.sndbuf)) < 0) {
    KOSOKU_LOG(kAlert, "setsockopt(SO_SNDBUF, %d) %s failed, ignored (%d: %s)", conf.sndbuf, conf.text, errno,
               std::strerror(errno));
  }
  if (conf.deferred) {  // listen deferred (nginx): accept once the request's first bytes are in (1 s, as nginx)
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof(one));
  }
  if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&conf.addr), conf.addr_len) < 0 ||
      ::listen(fd, conf.backlog) < 0) {
    int e = errno;
    if (err) *err = absl::StrCat("bind() to ", conf.text, " failed (", e, ": ", std::strerror(e), ")");
    ::close(fd);
    return -e;
  }
  return fd;
}

int probe_listen_address(const config::ListenConf& conf, std::string* err) {
  int fd = ::socket(conf.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (conf.addr.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  // A kosoku that just exited may still hold its listener for a moment: io_uring tears a ring down
  // asynchronously after the process is gone, and a pending accept keeps the socket alive until then. Retry
  // EADDRINUSE for up to 3 s (start-up only, never on a loop).
  int rc = 0;
  for (int attempt = 0; attempt < 60; ++attempt) {
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&conf.addr), conf.addr_len) < 0 ? -errno : 0;
    if (rc != -EADDRINUSE) break;
    usleep(50 * 1000);
  }
  if (rc < 0 && err) *err = absl::StrCat("bind() to ", conf.text, " failed (", -rc, ": ", std::strerror(-rc), ")");
  ::close(fd);
  return rc;
}

}  // namespace kosoku::net
