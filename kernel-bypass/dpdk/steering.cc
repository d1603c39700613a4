#include "kernel-bypass/dpdk/steering.hh"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "absl/strings/str_cat.h"
#include "kernel-bypass/tcpip/byte_order.hh"

namespace kosoku::dpdk {

namespace {

rte_ring* make_ring(const std::string& name, unsigned esize, unsigned count, std::string* err) {
  rte_ring* r = rte_ring_create_elem(name.c_str(), esize, count, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
  if (r == nullptr && err != nullptr) *err = absl::StrCat("rte_ring_create(", name, "): ", rte_strerror(rte_errno));
  return r;
}

void free_mbufs(rte_ring* r) {
  if (r == nullptr) return;
  void* m;
  while (rte_ring_sc_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
}

}  // namespace

std::unique_ptr<CoreMesh> CoreMesh::create(uint16_t cores, uint16_t tx_queues, std::string* err) {
  std::unique_ptr<CoreMesh> mesh(new CoreMesh(cores));
  size_t pairs = size_t{cores} * cores;
  mesh->packets_.assign(pairs, nullptr);
  mesh->arp_.assign(pairs, nullptr);
  mesh->tx_.assign(cores, nullptr);
  for (uint16_t from = 0; from < cores; ++from) {
    for (uint16_t to = 0; to < cores; ++to) {
      if (from == to) continue;
      size_t i = size_t{from} * cores + to;
      mesh->packets_[i] = make_ring(absl::StrCat("ksk_pk", from, "_", to), sizeof(void*), kPacketRing, err);
      mesh->arp_[i] = make_ring(absl::StrCat("ksk_arp", from, "_", to), sizeof(ArpUpdate), kArpRing, err);
      if (mesh->packets_[i] == nullptr || mesh->arp_[i] == nullptr) return nullptr;
    }
    if (from >= tx_queues) {
      mesh->tx_[from] = make_ring(absl::StrCat("ksk_tx", from), sizeof(void*), kTxRing, err);
      if (mesh->tx_[from] == nullptr) return nullptr;
    }
  }
  return mesh;
}

CoreMesh::~CoreMesh() {
  for (rte_ring* r : packets_) {
    free_mbufs(r);
    rte_ring_free(r);
  }
  for (rte_ring* r : arp_) rte_ring_free(r);
  for (rte_ring* r : tx_) {
    free_mbufs(r);
    rte_ring_free(r);
  }
}

CoreSteering::CoreSteering(const CoreMesh& mesh, const FlowSteering& flows, uint16_t core)
    : mesh_(mesh), flows_(flows), core_(core), out_(mesh.cores()) {
  // Cores without a TX queue are served by core (c mod tx_queues); the first core without one is the
  // number of TX queues.
  uint16_t tx_queues = mesh.cores();
  for (uint16_t c = 0; c < mesh.cores(); ++c) {
    if (mesh.tx(c) != nullptr) {
      tx_queues = c;
      break;
    }
  }
  if (mesh.tx(core) == nullptr) {
    for (uint16_t c = tx_queues; c < mesh.cores(); ++c) {
      if (c % tx_queues == core) tx_for_.push_back(c);
    }
  }
}

CoreSteering::~CoreSteering() {
  for (Batch& b : out_) {
    for (unsigned i = 0; i < b.n; ++i) rte_pktmbuf_free(b.m[i]);
  }
}

int CoreSteering::owner_of_frame(const FlowSteering& flows, const uint8_t* f, size_t len) {
  constexpr size_t kEth = 14;
  if (len < kEth + 20 || tcpip::load_be16(f + 12) != 0x0800) return -1;
  const uint8_t* ip = f + kEth;
  size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != tcpip::kProtoTcp) return -1;
  if ((tcpip::load_be16(ip + 6) & 0x3fff) != 0) return -1;  // MF or an offset: a fragment (dropped locally)
  if (len < kEth + ihl + 4) return -1;
  tcpip::Ipv4Addr src{tcpip::load_be32(ip + 12)}, dst{tcpip::load_be32(ip + 16)};
  uint16_t sport = tcpip::load_be16(ip + ihl), dport = tcpip::load_be16(ip + ihl + 2);
  return flows.owner_of_hash(flows.toeplitz().ipv4_tcp(src, dst, sport, dport));
}

bool CoreSteering::dispatch(rte_mbuf* m) {
  if (flows_.cores() == 1) return false;
  int owner = owner_of_frame(flows_, rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
  if (owner < 0 || owner == core_) return false;
  Batch& b = out_[owner];
  b.m[b.n++] = m;
  if (b.n == Queue::kBurst) flush_to(static_cast<uint16_t>(owner));
  return true;
}

void CoreSteering::flush_to(uint16_t to) {
  Batch& b = out_[to];
  if (b.n == 0) return;
  unsigned done = rte_ring_sp_enqueue_burst(mesh_.packets(core_, to), reinterpret_cast<void* const*>(b.m), b.n,
                                            nullptr);
  stats_.forwarded_out += done;
  for (unsigned i = done; i < b.n; ++i) rte_pktmbuf_free(b.m[i]);
  stats_.ring_full_drops += b.n - done;
  b.n = 0;
}

void CoreSteering::flush() {
  for (uint16_t to = 0; to < out_.size(); ++to) flush_to(to);
}

unsigned CoreSteering::drain(Queue& q, tcpip::Interface& ifc, uint64_t now_ms) {
  unsigned handled = 0;
  rte_mbuf* ms[Queue::kBurst];
  for (uint16_t from = 0; from < mesh_.cores(); ++from) {
    if (from == core_) continue;
    ArpUpdate u[16];
    unsigned na = rte_ring_sc_dequeue_burst_elem(mesh_.arp(from, core_), u, sizeof(ArpUpdate), 16, nullptr);
    for (unsigned i = 0; i < na; ++i) {
      tcpip::MacAddr mac;
      for (int k = 0; k < 6; ++k) mac.bytes[k] = u[i].mac[k];
      ifc.learn(tcpip::Ipv4Addr{u[i].ip}, mac, now_ms);
    }
    stats_.arp_replicated_in += na;
    unsigned n = rte_ring_sc_dequeue_burst(mesh_.packets(from, core_), reinterpret_cast<void**>(ms), Queue::kBurst,
                                           nullptr);
    stats_.forwarded_in += n;
    for (unsigned i = 0; i < n; ++i) q.deliver(ifc, ms[i], now_ms);
    handled += na + n;
  }
  for (uint16_t c : tx_for_) {
    // While the port refuses (frames wait in this core's TX backlog), the relayed cores' frames stay in their
    // rings: those fill, and the cores' TCP holds new data on the ring's room instead of this backlog
    // overflowing into drops.
    if (q.tx_backlog() > 0) break;
    unsigned n = rte_ring_sc_dequeue_burst(mesh_.tx(c), reinterpret_cast<void**>(ms), Queue::kBurst, nullptr);
    for (unsigned i = 0; i < n; ++i) q.send_mbuf(ms[i]);
    stats_.tx_relayed += n;
    handled += n;
  }
  return handled;
}

void CoreSteering::arp_learned(tcpip::Ipv4Addr ip, const tcpip::MacAddr& mac) {
  ArpUpdate u;
  u.ip = ip.value;
  for (int k = 0; k < 6; ++k) u.mac[k] = mac.bytes[k];
  for (uint16_t to = 0; to < mesh_.cores(); ++to) {
    if (to == core_) continue;
    if (rte_ring_sp_enqueue_elem(mesh_.arp(core_, to), &u, sizeof(u)) == 0) {
      ++stats_.arp_replicated_out;
    } else {
      ++stats_.arp_ring_full;
    }
  }
}

}  // namespace kosoku::dpdk
