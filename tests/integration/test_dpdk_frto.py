"""F-RTO (RFC 5682, kernel-bypass/tcpip/tcb_frto.cc) against the Linux kernel over DPDK net_tap: kosoku sends a
download to curl in a client namespace whose kernel runs with net.ipv4.tcp_timestamps=0 (a per-namespace
sysctl), so the connection has SACK but no timestamps and kosoku judges its retransmission timeouts with
SACK-enhanced F-RTO (§3) rather than RFC 3522's Eifel detection.

Topology, skip rules and the pcap of the tap: test_dpdk_tap.py (TapRig), with this module's own names (prefix
hfr). This kernel may lack sch_netem (and sch_plug), so the impairments are made with what it has:
- a delay spike on the ACK path (client → kosoku), with an HTB qdisc on the client's egress whose one class
  runs at 10 Gbit/s: hold_acks() drops its rate to 1000 bit/s, so the first ACK that queues must wait for
  ~0.4 s of tokens (HTB schedules that wakeup when the ACK queues), and puts 10 Gbit/s back before then: at
  that wakeup every held ACK leaves at once, in order — a link that stalls for ~0.4 s and recovers (the
  classic spurious timeout). The stall is measured in the pcap (the tap is captured after the qdisc);
- a real loss (kosoku → client): an nf_tables netdev ingress rule in the client namespace drops kosoku's
  segments for LOSS_S — wire loss for kosoku, whose timer then fires for data that never arrived.
kosoku's minimum RTO is 200 ms (TcpConfig::rto_min_ms; the tap's RTT is well under 1 ms, so RTO = 200 ms):
the stall makes the timer fire once (the backed-off second expiry would come 600 ms in), and a 100 ms loss
window is over before it fires, so the timeout's retransmission gets through and F-RTO runs its steps.
On failure the pcap of the tap and kosoku's logs are kept under $DPDK_TAP_ARTIFACTS (TapRig.stop).
"""
from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from test_dpdk_tap import _REASON, PORT, TapRig, _data, _run, tcp_counters

pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

MSS = 1460           # kosoku's MSS towards the tap (MTU 1500, no timestamp option)
STALL_RATE = "1000bit"  # one 54-70 byte ACK needs 0.38-0.49 s of tokens at this rate: the stall
RESTORE_S = 0.3         # the fast rate is back before that wakeup (after it HTB would pace at 1000 bit/s)
LOSS_S = 0.10        # kosoku → client dropped: over before the 200 ms RTO fires
BIG = "frto-64m.bin"  # big enough that the download is still running when the impairment comes
# Bytes curl has written before the impairment starts: slow start has grown the flight to 0.5-3 MB, below
# kosoku's cap on bytes in flight (TcpConfig::send_window_bytes, 4 MiB), which leaves F-RTO's step 2b room for
# its two new segments (at the cap it has none and takes the conventional go-back, RFC 5682 §2 step 2b).
START_AFTER = 512 << 10


class FrtoRig(TapRig):
    """TapRig with this session's name prefix (hfr), the client kernel without TCP timestamps, an HTB qdisc on
    the client's egress (one class at 10 Gbit/s until hold_acks) and one large file."""

    def __init__(self, base: Path, k: int):
        super().__init__(base, k, server_extra="        location = /status { status; }")
        self.iface, self.ns = f"hfrtap{k}", f"hfr-dt{k}"

    def start(self) -> None:
        super().start()
        self.ns_run("sysctl", "-q", "-w", "net.ipv4.tcp_timestamps=0")
        self.ns_run("tc", "qdisc", "add", "dev", self.iface, "root", "handle", "1:", "htb", "default", "1")
        self.ack_rate("10gbit", "add")
        data = _data(64 << 20, 7)
        (self.www / BIG).write_bytes(data)
        self.digests[BIG] = hashlib.sha256(data).hexdigest()

    def ack_rate(self, rate: str, verb: str = "change") -> None:
        """Sets the rate of the HTB class every packet the client sends goes through."""
        self.ns_run("tc", "class", verb, "dev", self.iface, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
                    "ceil", rate, "burst", "1", "cburst", "1")

    def hold_acks(self) -> None:
        """Holds everything the client sends (its ACKs) for ~0.4 s, then lets it go at once, in order (see the
        module's docstring)."""
        self.ack_rate(STALL_RATE)
        time.sleep(RESTORE_S)
        self.ack_rate("10gbit")

    def drop_from_kosoku(self, seconds: float) -> None:
        """Drops kosoku's HTTP segments at the client interface's ingress (wire loss) for `seconds`."""
        rules = (f'table netdev hfrloss {{\n  chain drop_kosoku {{ type filter hook ingress device "{self.iface}" '
                 f'priority 0; ip saddr {self.addr} tcp sport {PORT} drop; }}\n}}\n')
        _run("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=rules)
        time.sleep(seconds)
        self.ns_run("nft", "delete", "table", "netdev", "hfrloss")


@pytest.fixture(scope="module")
def rig(tmp_path_factory, request):
    r = FrtoRig(tmp_path_factory.mktemp("dpdk-frto"), 100 + os.getpid() % 50)
    try:
        r.start()
        yield r
    finally:
        took = r.stop(request.session.testsfailed > 0)
    assert took is not None, "kosoku did not exit within 20 s of SIGTERM"


def short(d: dict) -> dict:
    """The non-zero counters of `d`, without their dpdk_tcp_ prefix and _total suffix."""
    return {k.removeprefix("dpdk_tcp_").removesuffix("_total"): v for k, v in d.items() if v}


def download_with(rig: FrtoRig, impair, attempts: int = 3) -> tuple[str, int, dict]:
    """Downloads BIG with curl; once START_AFTER bytes have arrived, calls impair(). Returns (sha256 of what
    curl got, curl's local port, the dpdk_tcp_* counter deltas). A download in which kosoku's timer did not fire
    at all is repeated (up to `attempts` in all): on a loaded host kosoku's RTT samples, hence its RTO, can grow
    past the ACK stall (the stall is fixed; the RTO is 200 ms only when the host keeps up)."""
    for attempt in range(1, attempts + 1):
        before = tcp_counters(rig.status())
        out = rig.base / "got-frto.bin"
        url = f"http://{rig.addr}:{PORT}/{BIG}"
        curl = subprocess.Popen(
            ["ip", "netns", "exec", rig.ns, "curl", "-sS", "--fail", "-m", "20", "-o", str(out), "-w",
             "%{local_port}", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while (not out.exists() or out.stat().st_size < START_AFTER) and curl.poll() is None:
            assert time.monotonic() < deadline, "the download did not reach START_AFTER bytes"
            time.sleep(0.002)
        assert curl.poll() is None, "the download ended before the impairment: make BIG larger"
        impair()
        stdout, stderr = curl.communicate(timeout=25)
        assert curl.returncode == 0, stderr
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        out.unlink()
        after = tcp_counters(rig.status())
        delta = {k: after[k] - before.get(k, 0) for k in after}
        if delta["dpdk_tcp_rto_expired_total"] > 0 or attempt == attempts:
            return digest, int(stdout), delta
        print(f"attempt {attempt}: no retransmission timeout fired (kosoku {short(delta)}); again")
    raise AssertionError("unreachable")


def segments(pcap: Path, port: int) -> list[tuple[float, bool, int, int, int]]:
    """The connection from client port `port` in the tap's pcap: (time in s, from kosoku, seq, ack, payload
    octets) per segment, sequence and acknowledgment numbers relative to kosoku's first one (a 64 MiB download
    does not wrap them)."""
    raw = pcap.read_bytes()
    endian = "<" if struct.unpack("<I", raw[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    out, base, off = [], None, 24
    while off + 16 <= len(raw):
        sec, usec, incl = struct.unpack(endian + "III", raw[off:off + 12])
        frame, off = raw[off + 16:off + 16 + incl], off + 16 + incl
        if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 15) * 4
        total = struct.unpack("!H", frame[16:18])[0]
        tcp = frame[14 + ihl:]
        sport, dport, seq, ack = struct.unpack("!HHII", tcp[:12])
        if port not in (sport, dport):
            continue
        kosoku = sport == PORT
        if base is None:
            if not kosoku:
                continue  # the client's SYN: kosoku's numbers start at its SYN-ACK
            base = seq
        payload = total - ihl - (tcp[12] >> 4) * 4
        out.append((sec + usec / 1e6, kosoku, (seq - base) % (1 << 32), (ack - base) % (1 << 32), payload))
    return out


def timeout_view(rig: FrtoRig, port: int) -> dict:
    """From the pcap: the timeout's retransmission — kosoku's first retransmitted segment after at least 150 ms
    of its silence (the RTO is 200 ms; a tail loss probe comes 2·SRTT after the last segment) —, the octets
    outstanding then (from it, SND.UNA, to the highest octet sent: what a go-back would resend), the kinds of
    the next four data segments kosoku sent ("new": above that highest octet, as F-RTO's step 2b sends; "old":
    retransmitted), every retransmitted segment, and the longest silence of the client (ms)."""
    time.sleep(0.3)  # tcpdump -U writes each packet; give it a moment
    high, last_sent, rto_seen, flight, after, rtx = 0, None, False, 0, [], 0
    last_ack, ack_gap = None, 0.0
    for t, kosoku, seq, _, n in segments(rig.base / "tap.pcap", port):
        if not kosoku:
            ack_gap = max(ack_gap, t - last_ack) if last_ack is not None else 0.0
            last_ack = t
            continue
        if n == 0:
            continue
        old = seq + n <= high
        rtx += old
        if rto_seen and len(after) < 4:
            after.append("old" if old else "new")
        elif old and not rto_seen and last_sent is not None and t - last_sent >= 0.15:
            rto_seen, flight = True, high - seq
        last_sent, high = t, max(high, seq + n)
    return {"flight": flight, "after_rto": after, "retransmitted": rtx, "ack_gap_ms": round(ack_gap * 1000)}


def test_ack_delay_spike_is_a_spurious_timeout(rig):
    """The ACK path stalls for ~0.4 s mid-download: the timer fires although every segment arrived. F-RTO sends
    two new segments on the first held ACK (step 2b) and the next one acknowledges originals: spurious,
    undone (RFC 4015), and the go-back never runs — kosoku resends a small fraction of the flight it had out
    when the timer fired, which is what a go-back would resend."""
    digest, port, d = download_with(rig, rig.hold_acks)
    view = timeout_view(rig, port)
    print(f"spike: kosoku {short(d)}; pcap {view}")
    assert digest == rig.digests[BIG]
    assert 200 < view["ack_gap_ms"] < 600, view  # the stall: longer than the RTO, shorter than RTO + 2·RTO
    assert d["dpdk_tcp_rto_expired_total"] >= 1, d
    assert d["dpdk_tcp_frto_spurious_rtos_total"] >= 1, d
    assert d["dpdk_tcp_spurious_rtos_total"] == d["dpdk_tcp_frto_spurious_rtos_total"], d  # no timestamps: F-RTO
    assert view["after_rto"][:2] == ["new", "new"], view  # step 2b, then no go-back after the undo
    go_back = view["flight"] // MSS
    assert go_back >= 20, view  # enough in flight for a go-back to show
    assert d["dpdk_tcp_retransmits_total"] * 10 <= go_back, (d, view)  # under a tenth of it


def test_loss_at_the_timeout_is_no_spurious_timeout(rig):
    """kosoku's segments are dropped for LOSS_S mid-download: the flight is lost, the timer fires, its
    retransmission arrives and is acknowledged alone; F-RTO sends two new segments (step 2b), the client's
    duplicate ACK SACKs them with the hole below still open: a real timeout (step 3a), not undone, and the
    go-back delivers the rest byte-exact."""
    digest, port, d = download_with(rig, lambda: rig.drop_from_kosoku(LOSS_S))
    view = timeout_view(rig, port)
    print(f"loss: kosoku {short(d)}; pcap {view}")
    assert digest == rig.digests[BIG]
    assert d["dpdk_tcp_rto_expired_total"] >= 1, d
    assert d["dpdk_tcp_frto_spurious_rtos_total"] == 0, d
    assert d["dpdk_tcp_spurious_rtos_total"] == 0, d
    assert view["after_rto"][0] == "new", view  # F-RTO ran: step 2b
    assert "old" in view["after_rto"], view     # ...and found the timeout real: the go-back resumed (step 3a)
