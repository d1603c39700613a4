// A started DPDK net_ring port for unit tests (rte_eth_from_rings): its TX queue is an rte_ring only the
// test drains, its RX queue one the test fills; one mempool for both. EAL in-process (dpdk_test_eal.hh).
#pragma once

#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernel-bypass/dpdk/queue.hh"
#include "tests/unit/dpdk_test_eal.hh"

namespace kosoku::dpdk::testing {

inline constexpr unsigned kPoolMbufs = 4095;

/// A started net_ring port: its TX queue is `tx` (capacity tx_slots, nobody drains it but the test), its RX
/// queue `rx` (the test enqueues the peer's frames there). Mempool `pool` for both directions.
struct NetRingPort {
  explicit NetRingPort(unsigned tx_slots) {
    std::string err;
    if (!testing::test_eal(&err)) {
      error = "EAL: " + err;
      return;
    }
    static int seq = 0;
    std::string n = absl::StrCat("txbl", seq++);
    tx = rte_ring_create((n + "t").c_str(), tx_slots, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
    rx = rte_ring_create((n + "r").c_str(), 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    pool = rte_pktmbuf_pool_create((n + "p").c_str(), kPoolMbufs, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    if (tx == nullptr || rx == nullptr || pool == nullptr) {
      error = "rings or mempool";
      return;
    }
    int id = rte_eth_from_rings((n + "e").c_str(), &rx, 1, &tx, 1, 0);
    if (id < 0) {
      error = absl::StrCat("rte_eth_from_rings: ", id);
      return;
    }
    port = static_cast<uint16_t>(id);
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(port, 1, 1, &conf) != 0 || rte_eth_rx_queue_setup(port, 0, 1024, 0, nullptr, pool) != 0 ||
        rte_eth_tx_queue_setup(port, 0, tx_slots, 0, nullptr) != 0 || rte_eth_dev_start(port) != 0) {
      error = "net_ring port setup";
      return;
    }
    started = true;
  }
  ~NetRingPort() {
    if (started) {
      rte_eth_dev_stop(port);
      rte_eth_dev_close(port);
    }
    for (rte_ring* r : {tx, rx}) {
      if (r == nullptr) continue;
      void* m;
      while (rte_ring_sc_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(r);
    }
    if (pool != nullptr) rte_mempool_free(pool);
  }
  NetRingPort(const NetRingPort&) = delete;
  NetRingPort& operator=(const NetRingPort&) = delete;

  QueueConfig queue_config(uint32_t backlog) const {
    QueueConfig qc;
    qc.port = port;
    qc.rx_queue = 0;
    qc.tx_queue = 0;
    qc.pool = pool;
    qc.mac = tcpip::MacAddr{{2, 0, 0, 0, 0, 1}};
    qc.tx_backlog = backlog;
    return qc;
  }
  unsigned free_mbufs() const { return rte_mempool_avail_count(pool); }

  std::string error;
  rte_ring* tx = nullptr;
  rte_ring* rx = nullptr;
  rte_mempool* pool = nullptr;
  uint16_t port = 0;
  bool started = false;
};

}  // namespace kosoku::dpdk::testing
