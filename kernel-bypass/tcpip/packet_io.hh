// What the TCP/IP stack needs from the link below it: a place to build an outgoing Ethernet frame and a way
// to send it. Implemented by the DPDK TX queue (kernel-bypass/dpdk/, the buffer is an mbuf's data room) and
// by the in-memory pipe of the unit tests. Incoming frames are pushed up with Interface::receive_frame().
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "core/net/shared_buffer.hh"
#include "kernel-bypass/tcpip/ipv4_addr.hh"

namespace kosoku::tcpip {

class PacketIO {
 public:
  /// A writable buffer for one frame of up to `max_len` bytes, valid until frame_send() or the next
  /// frame_begin(). An empty span means no buffer is available (the caller counts a TX drop).
  virtual std::span<uint8_t> frame_begin(size_t max_len) = 0;
  /// Sends the first `len` bytes of the buffer returned by the last frame_begin().
  virtual void frame_send(size_t len) = 0;
  /// The link's own address and MTU (bytes of IP packet per frame, 1500 on Ethernet).
  virtual MacAddr mac() const = 0;
  virtual uint16_t mtu() const = 0;
  /// True if the link completes IPv4 header and TCP checksums of the frames it sends (DPDK TX checksum
  /// offload): the stack then leaves the IPv4 checksum 0 and writes only the TCP pseudo-header sum.
  virtual bool tx_checksum_offload() const { return false; }
  /// Frames (one per frame_begin/frame_send pair) the link can still accept right now without refusing one,
  /// counting the frames it already buffers; SIZE_MAX: unknown or unbounded (the default). May be a lower
  /// bound when large (dpdk::Queue says which). TcpStack reads it before each new data segment (TX
  /// backpressure, TcpStack::set_tx_backpressure), so it must be cheap: O(1), no system call.
  virtual size_t tx_room() const { return std::numeric_limits<size_t>::max(); }
  /// True if frame_send_payload() can send payload bytes by reference (zero-copy TX: dpdk::Queue chains an
  /// external-buffer mbuf to the header frame). The default: no, payloads are copied into the frame.
  virtual bool tx_payload_by_reference() const { return false; }
  /// Sends the first `len` bytes of the last frame_begin() buffer (the headers) followed by `payload_len`
  /// bytes at `payload` inside `buf`, without copying them: the link takes one reference to `buf` and drops it
  /// when it is done with the frame (sent or dropped). Only called when tx_payload_by_reference().
  virtual void frame_send_payload(size_t len, net::SharedBuffer& buf, const uint8_t* payload, size_t payload_len) {
    (void)len, (void)buf, (void)payload, (void)payload_len;
  }

 protected:
  ~PacketIO() = default;
};

}  // namespace kosoku::tcpip
