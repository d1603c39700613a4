"""`listen ... rcvbuf=SIZE sndbuf=SIZE` on `network dpdk` (issue 4): the receive buffer (advertised window, and
the window scale chosen in the SYN-ACK) and the send buffer of connections accepted through a listener come from
its listen line, as a kernel socket's SO_RCVBUF / SO_SNDBUF do. Checked from the Linux side of DPDK net_tap with
the rig of test_dpdk_tap.py (the kernel in a network namespace, curl there) and from the rig's pcap of the tap.

Ports: 8080 (TcpConfig defaults: 256 KiB receive buffer, 2 MiB send buffer), 8081 rcvbuf=32k, 8082 rcvbuf=1m,
8083 sndbuf=32k. Skips like test_dpdk_tap.py when /dev/net/tun, `ip netns` or the binary are missing.
"""
from __future__ import annotations

import hashlib
import os
import struct
import time
from pathlib import Path

import pytest

from test_dpdk_tap import _REASON, PORT, TapRig

pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

RCV_SMALL, RCV_LARGE, SND_SMALL = 8081, 8082, 8083


@pytest.fixture(scope="module")
def rig(tmp_path_factory, request):
    r = TapRig(tmp_path_factory.mktemp("dpdk-listen-buffers"), 200 + os.getpid() % 50,
               server_extra=f"        listen {RCV_SMALL} rcvbuf=32k;\n        listen {RCV_LARGE} rcvbuf=1m;\n"
                            f"        listen {SND_SMALL} sndbuf=32k;\n        location = /status {{ status; }}",
               dpdk_extra="    tx_zero_copy off;\n")  # the copying path, next to the tap tests' zero-copy
    r.start()
    yield r
    took = r.stop(request.session.testsfailed > 0)
    assert took is not None, "kosoku did not exit within 20 s of SIGTERM"


class Segment:
    __slots__ = ("order", "src", "sport", "dst", "dport", "seq", "ack", "flags", "window", "wscale", "payload")


def read_pcap(path: Path) -> list[Segment]:
    """The TCP/IPv4 segments of a classic pcap file (Ethernet link type), headers only (the rig captures 128
    bytes of each frame): addresses, ports, seq/ack, flags, window field, window-scale option, payload length."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    order = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    out, pos = [], 24
    while pos + 16 <= len(data):
        _, _, incl, orig = struct.unpack_from(order + "IIII", data, pos)
        frame = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 0x0F) * 4
        total = struct.unpack_from("!H", frame, 16)[0]
        t = 14 + ihl
        s = Segment()
        s.order = len(out)
        s.src, s.dst = ".".join(map(str, frame[26:30])), ".".join(map(str, frame[30:34]))
        s.sport, s.dport, s.seq, s.ack = struct.unpack_from("!HHII", frame, t)
        doff = (frame[t + 12] >> 4) * 4
        s.flags = frame[t + 13]
        s.window = struct.unpack_from("!H", frame, t + 14)[0]
        s.payload = total - ihl - doff
        s.wscale = None
        o = t + 20
        while o < t + doff and o < len(frame):
            kind = frame[o]
            if kind == 0:
                break
            if kind == 1:
                o += 1
                continue
            if o + 1 >= len(frame) or frame[o + 1] < 2:
                break
            if kind == 3:
                s.wscale = frame[o + 2]
            o += frame[o + 1]
        out.append(s)
    return out


SYN, ACK = 0x02, 0x10


def segments(rig: TapRig, settle: float = 0.5) -> list[Segment]:
    time.sleep(settle)  # tcpdump -U writes each packet as it comes; let the last ones land
    return read_pcap(rig.base / "tap.pcap")


def fetch(rig: TapRig, port: int, name: str, timeout: int = 60) -> tuple[str, int]:
    """Downloads `name` from `port` in the namespace; returns (sha256, client port)."""
    out = rig.base / f"got-{port}-{name}"
    r = rig.ns_run("curl", "-sS", "--fail", "-m", str(timeout), "-o", str(out), "-w", "%{local_port}",
                   f"http://{rig.addr}:{port}/{name}", timeout=timeout + 5)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    out.unlink()
    return digest, int(r.stdout)


def conn(segs: list[Segment], rig: TapRig, port: int, client_port: int) -> tuple[list[Segment], list[Segment]]:
    """The server's and the client's segments of one connection."""
    srv = [s for s in segs if s.src == rig.addr and s.sport == port and s.dport == client_port]
    cli = [s for s in segs if s.dst == rig.addr and s.dport == port and s.sport == client_port]
    return srv, cli


def test_syn_ack_window_and_scale_follow_rcvbuf(rig):
    ports = {}
    for port in (PORT, RCV_SMALL, RCV_LARGE):
        digest, ports[port] = fetch(rig, port, "1m.bin")
        assert digest == rig.digests["1m.bin"], port
    segs = segments(rig)
    deadline = time.monotonic() + 5  # on a loaded machine the capture may lag behind the transfers
    while time.monotonic() < deadline and not all(
            any(s.flags & SYN and s.flags & ACK for s in conn(segs, rig, p, ports[p])[0]) for p in ports):
        segs = segments(rig)
    want = {PORT: (65535, 3), RCV_SMALL: (32768, 0), RCV_LARGE: (65535, 5)}  # 256k >> 3, 32k, 1m >> 5
    for port, (window, wscale) in want.items():
        srv, _ = conn(segs, rig, port, ports[port])
        syn_acks = [s for s in srv if s.flags & SYN and s.flags & ACK]
        assert syn_acks, f"no SYN-ACK from port {port} in the capture"
        assert (syn_acks[0].window, syn_acks[0].wscale) == (window, wscale), port
        # Every later advertisement, scaled, stays within the receive buffer.
        adv = max((s.window << wscale) for s in srv if not s.flags & SYN)
        limit = {PORT: 256 * 1024, RCV_SMALL: 32 * 1024, RCV_LARGE: 1024 * 1024}[port]
        assert adv <= limit, (port, adv)
        print(f"port {port}: SYN-ACK window {window} wscale {wscale}, largest advertised window {adv}")


PIPELINE = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the client reads nothing: its window closes soon
s.settimeout(5)
s.connect((sys.argv[1], int(sys.argv[2])))
s.setblocking(False)
req = b"GET /1m.bin HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
sent, last = 0, time.monotonic()
while time.monotonic() - last < 1.5 and sent < 4 << 20:
    try:
        sent += s.send(req * 64)
        last = time.monotonic()
    except BlockingIOError:
        time.sleep(0.01)
print(s.getsockname()[1], sent, flush=True)
"""


def test_receive_window_closes_at_rcvbuf(rig):
    """A client pipelines requests for 1 MiB files and reads no response: kosoku stops taking requests while the
    first response cannot go out, so the requests pile up in the connection's receive buffer and the window it
    advertises closes after rcvbuf=32k bytes (the kernel client then holds the rest in its own send queue)."""
    r = rig.ns_run("python3", "-c", PIPELINE, rig.addr, str(RCV_SMALL), timeout=30)
    client_port, queued = map(int, r.stdout.split())
    srv, cli = conn(segments(rig), rig, RCV_SMALL, client_port)
    isn = next(s.seq for s in cli if s.flags & SYN)
    acks = [s for s in srv if s.flags & ACK and not s.flags & SYN]
    highest_right = max((s.ack + s.window - isn - 1) % (1 << 32) for s in acks)  # wscale 0: unscaled
    delivered = max((s.seq + s.payload - isn - 1) % (1 << 32) for s in cli if s.payload > 0)
    zero = [s for s in acks if s.window == 0]
    print(f"rcvbuf=32k: client queued {queued} bytes of requests, {delivered} went out, the right window edge "
          f"reached {highest_right}; {len(zero)} zero-window ACKs; largest window field "
          f"{max(s.window for s in acks)}")
    assert zero, "the window never closed"
    assert max(s.window for s in acks) <= 32 * 1024
    # At most rcvbuf beyond what the parser took (a few requests, whose responses filled the send buffer; the
    # edge moves only by useful amounts, RFC 9293 §3.8.6.2.2, so it may stay at exactly 32k).
    assert 32 * 1024 <= highest_right <= 32 * 1024 + 4096, highest_right
    assert delivered <= highest_right < queued


def in_flight_max(srv: list[Segment], cli: list[Segment]) -> int:
    """Largest amount of the server's data sent but not yet acknowledged, replaying both directions in capture
    order (the capture is on the kernel's side of the tap, so this is what the peer saw)."""
    acked, sent_end, worst = None, None, 0
    for s, from_server in sorted([(x, True) for x in srv] + [(x, False) for x in cli], key=lambda e: e[0].order):
        if from_server:
            if s.payload > 0:
                end = (s.seq + s.payload) % (1 << 32)
                if sent_end is None or (end - sent_end) % (1 << 32) < (1 << 31):
                    sent_end = end
        elif s.flags & ACK and (acked is None or (s.ack - acked) % (1 << 32) < (1 << 31)):
            acked = s.ack
        if acked is not None and sent_end is not None:
            d = (sent_end - acked) % (1 << 32)
            if d < (1 << 31):
                worst = max(worst, d)
    return worst


def test_small_sndbuf_large_download_is_byte_exact(rig):
    t0 = time.monotonic()
    digest, small_port = fetch(rig, SND_SMALL, "32m.bin")
    took_small = time.monotonic() - t0
    assert digest == rig.digests["32m.bin"]
    t0 = time.monotonic()
    digest, default_port = fetch(rig, PORT, "8m.bin")
    took_default = time.monotonic() - t0
    assert digest == rig.digests["8m.bin"]
    segs = segments(rig)
    small = in_flight_max(*conn(segs, rig, SND_SMALL, small_port))
    default = in_flight_max(*conn(segs, rig, PORT, default_port))
    print(f"sndbuf=32k: 32 MiB in {took_small:.2f} s, at most {small} bytes in flight; default (2 MiB send "
          f"buffer): 8 MiB in {took_default:.2f} s, at most {default} bytes in flight; load {os.getloadavg()[0]:.2f}")
    # The send buffer holds everything unacknowledged: nothing beyond it can be in flight (the response head,
    # committed before the body, may overshoot by its own size).
    assert small <= 32 * 1024 + 1024, small
    # ...and it was reached, so the bound above was tested, not just never approached. (The default path's flight
    # is printed only: it depends on how the client's kernel, running inside net_tap's writev, interleaves its
    # ACKs — 355–890 KB in most runs, but 14,480 bytes (the initial window) in one CI run where every segment
    # was ACKed within its own writev; the small path reached 32,768 in that run too.)
    assert small >= 24 * 1024, small


def test_tx_zero_copy_off_copies_every_payload(rig):
    """`tx_zero_copy off;` (dpdk block): no attach pools, every payload is copied into its mbuf — the error log
    says so at start, a 32 MiB download is byte-exact and no frame went by reference."""
    assert "TX payloads copied (tx_zero_copy off)" in (rig.base / "error.log").read_text()
    digest, _ = fetch(rig, PORT, "32m.bin")
    assert digest == rig.digests["32m.bin"]
    by_ref = [m["value"] for m in rig.status()["extra"]["dpdk_port"]
              if m["name"] in ("dpdk_queue_tx_payload_by_reference_total", "dpdk_queue_tx_payload_copied_total")]
    assert by_ref == [0, 0], by_ref
