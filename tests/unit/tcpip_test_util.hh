// Test helpers for kernel-bypass/tcpip: a PacketIO that records every frame sent.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "kernel-bypass/tcpip/packet_io.hh"

namespace kosoku::tcpip::testing {

class CaptureIO final : public PacketIO {
 public:
  explicit CaptureIO(MacAddr mac, uint16_t mtu = 1500) : mac_(mac), mtu_(mtu) {}
  std::span<uint8_t> frame_begin(size_t max_len) override {
    if (no_buffers) return {};
    buf_.assign(max_len, 0);
    return buf_;
  }
  void frame_send(size_t len) override {
    buf_.resize(len);
    sent.push_back(buf_);
  }
  MacAddr mac() const override { return mac_; }
  uint16_t mtu() const override { return mtu_; }

  std::vector<std::vector<uint8_t>> sent;
  bool no_buffers = false;

 private:
  MacAddr mac_;
  uint16_t mtu_;
  std::vector<uint8_t> buf_;
};

}  // namespace kosoku::tcpip::testing
