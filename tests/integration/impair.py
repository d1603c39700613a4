"""Kernel-side link impairment (loss, duplication, delay, jitter, reordering) for the DPDK net_tap tests, on
kernels with or without sch_netem. Test infrastructure, not the thing under test.

Topology (`ImpairedLink.attach`), built around a running kosoku whose net_tap interface `tap` sits in the
client namespace `client_ns` with the peer address (TapRig in test_dpdk_tap.py):

    kosoku ─ tap ─[kimp-m<k>: nft netdev: drop/dup, fwd]─ kimp-a<k> ═ kimp-b<k> ─[kimp-r<k>: relay]─
            kimp-c<k> ═ kimp-d<k> ─[client_ns: peer address, curl/wget/ab/wrk, tcpdump]

- `tap` moves into a middle namespace kimp-m<k>; the PMD keeps its fd, so kosoku does not notice. The client's
  new interface kimp-d<k> takes over the tap's MAC and the peer address, so kosoku's ARP entry stays right.
- Loss and duplication (no netem): nf_tables netdev `ingress` chains in kimp-m<k> on `tap` (kosoku → kernel)
  and on kimp-a<k> (kernel → kosoku): `numgen random mod 100 < N drop`, `numgen random mod 100 < N dup to`,
  then `fwd to` the other side. Dropping at the ingress of a hop in the middle is wire loss: the sender's
  qdisc reported success (a drop in the sender's own egress hook would return NET_XMIT_DROP and the Linux
  sender would just send again, which is not loss).
- Delay, jitter and reordering (no netem): nf_tables cannot hold packets, so a userspace relay (`relay()`,
  this file run as a script) bridges kimp-b<k> and kimp-c<k> with AF_PACKET sockets in kimp-r<k> and holds
  each frame `delay ± jitter` ms; like netem's `reorder P%`, P % of the frames skip the delay and overtake
  the held ones. Without delay/reordering an nft `fwd` pair bridges kimp-r<k> instead of the relay.
- With sch_netem (`netem_available()`), the profile is one `tc qdisc ... netem` on the egress of kimp-a<k>
  (kosoku → kernel) and one on kimp-d<k> (kernel → kosoku) instead; kimp-r<k> is then bridged by nft.
Every impairment applies to both directions with the same one-way figures. kimp-d<k> sends with TX checksum,
TSO and GSO off so the relay sees complete, MTU-sized frames.
"""
from __future__ import annotations

import array
import fcntl
import heapq
import json
import math
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve()
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
SIOCETHTOOL = 0x8946
# struct ethtool_value commands (linux/ethtool.h): set TX checksumming, TCP segmentation, generic segmentation.
ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO = 0x17, 0x1F, 0x24


@dataclass(frozen=True)
class Profile:
    """One impairment, applied to each direction. loss/duplicate/reorder in percent of frames, delay and jitter
    in ms (one way). reorder has netem's meaning: that share of the frames is sent without the delay."""
    name: str
    loss: int = 0
    duplicate: int = 0
    delay_ms: float = 0
    jitter_ms: float = 0
    reorder: int = 0
    relay: bool = False  # forward through the relay even without delay (to measure the relay itself)

    def needs_relay(self) -> bool:
        return self.relay or self.delay_ms > 0 or self.jitter_ms > 0

    def netem_args(self) -> list[str]:
        args = ["loss", f"{self.loss}%", "duplicate", f"{self.duplicate}%"]
        if self.needs_relay():
            args += ["delay", f"{self.delay_ms}ms", f"{self.jitter_ms}ms"]
        if self.reorder:
            args += ["reorder", f"{self.reorder}%"]
        return args


def _run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True)


def _ns(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("ip", "netns", "exec", ns, *args, check=check)


def netem_available() -> bool:
    """Whether sch_netem can be attached here (probed on the loopback of a scratch namespace)."""
    probe = f"kimp-probe-{os.getpid()}"
    if _run("ip", "netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        return _ns(probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                   check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", probe, check=False)


def nft_missing_reason() -> str | None:
    """Why the nft-based impairment cannot run here, or None."""
    if not Path("/usr/sbin/nft").exists() and _run("sh", "-c", "command -v nft", check=False).returncode:
        return "nft (package nftables) is missing: .ci/deps.sh installs it"
    probe = f"kimp-probe-{os.getpid()}"
    if _run("ip", "netns", "add", probe, check=False).returncode != 0:
        return "network namespaces unavailable"
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "nft", "-f", "-"], capture_output=True, text=True,
                           input='table netdev t {\n chain c { type filter hook ingress device "lo" priority 0; '
                                 'numgen random mod 100 < 1 dup to "lo"; fwd to "lo"; }\n}\n')
        if r.returncode != 0:
            return f"nf_tables netdev numgen/dup/fwd unsupported by this kernel: {r.stderr.strip()}"
        return None
    finally:
        _run("ip", "netns", "del", probe, check=False)


def stop_process(proc: subprocess.Popen, sig: int, within: float = 10) -> None:
    """Sends `sig`, waits up to `within` s, then SIGKILL."""
    proc.send_signal(sig)
    try:
        proc.wait(within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def offloads_off(iface: str) -> None:
    """`ethtool -K iface tx off tso off gso off` by SIOCETHTOOL (run inside the interface's namespace)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for cmd in (ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO):
            value = array.array("I", [cmd, 0])
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, struct.pack("16sP", iface.encode(), value.buffer_info()[0]))
    finally:
        sock.close()


class ImpairedLink:
    """The chain above for kosoku's `tap` (now in `client_ns` with `peer_cidr`, e.g. "10.99.7.1/24").
    attach() builds it, apply(profile) / clear() switch impairments, detach() puts the tap back as it was.
    backend: "netem" or "nft+relay" (default: netem when the kernel has it). `prefix` replaces "kimp" in the
    namespace and interface names (keep prefix + k within 13 characters: interface names have 15 at most).
    relay_nice: the relay's nice value (None: inherited). The relay stands for the wire: a benchmark whose
    server busy-polls at a raised priority sets it above the server's, or the link slows with the server's load."""

    def __init__(self, tap: str, client_ns: str, peer_cidr: str, k: int, workdir: Path, backend: str = "",
                 prefix: str = "kimp", relay_nice: int | None = None):
        self.relay_nice = relay_nice
        self.tap, self.client_ns, self.peer_cidr, self.k = tap, client_ns, peer_cidr, k
        self.mid_ns, self.relay_ns = f"{prefix}-m{k}", f"{prefix}-r{k}"
        self.a, self.b, self.c, self.client_if = (f"{prefix}-{x}{k}" for x in "abcd")
        self.workdir = workdir
        self.relay_proc: subprocess.Popen | None = None
        self.backend = backend or ("netem" if netem_available() else "nft+relay")
        self.attached = False

    def attach(self) -> None:
        mac = _ns(self.client_ns, "cat", f"/sys/class/net/{self.tap}/address").stdout.strip()
        for ns in (self.mid_ns, self.relay_ns):
            _run("ip", "netns", "del", ns, check=False)
            _run("ip", "netns", "add", ns)
            _ns(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        _run("ip", "-n", self.client_ns, "link", "set", self.tap, "netns", self.mid_ns)
        self.attached = True
        _run("ip", "-n", self.mid_ns, "link", "add", self.a, "type", "veth", "peer", "name", self.b, "netns",
             self.relay_ns)
        _run("ip", "-n", self.relay_ns, "link", "add", self.c, "type", "veth", "peer", "name", self.client_if,
             "netns", self.client_ns)
        _ns(self.client_ns, "sysctl", "-qw", f"net.ipv6.conf.{self.client_if}.disable_ipv6=1")
        _run("ip", "-n", self.client_ns, "link", "set", self.client_if, "address", mac)
        _run("ip", "-n", self.client_ns, "addr", "add", self.peer_cidr, "dev", self.client_if)
        _ns(self.client_ns, sys.executable, str(HERE), "offloads-off", self.client_if)
        for ns, ifs in ((self.mid_ns, (self.tap, self.a)), (self.relay_ns, (self.b, self.c)),
                        (self.client_ns, (self.client_if,))):
            for i in ifs:
                _run("ip", "-n", ns, "link", "set", i, "up")
        self.apply(Profile("none"))

    def apply(self, p: Profile) -> None:
        """Replaces the current impairment with `p`."""
        self.clear()
        mid = [f'table netdev kimp {{',
               self._chain("from_kosoku", self.tap, self.a, 0 if self.backend == "netem" else p.loss,
                           0 if self.backend == "netem" else p.duplicate),
               self._chain("to_kosoku", self.a, self.tap, 0 if self.backend == "netem" else p.loss,
                           0 if self.backend == "netem" else p.duplicate), "}"]
        self._nft(self.mid_ns, "\n".join(mid))
        if self.backend == "netem":
            for ns, iface in ((self.mid_ns, self.a), (self.client_ns, self.client_if)):
                if p.name != "none":
                    _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", iface, "root", "netem",
                         *p.netem_args())
        if self.backend == "netem" or not p.needs_relay():
            self._nft(self.relay_ns, "\n".join(["table netdev kimp {", self._chain("bc", self.b, self.c, 0, 0),
                                                self._chain("cb", self.c, self.b, 0, 0), "}"]))
            return
        ready = self.workdir / "relay.ready"
        ready.unlink(missing_ok=True)
        nice = ["nice", "-n", str(self.relay_nice)] if self.relay_nice is not None else []
        self.relay_proc = subprocess.Popen(
            ["ip", "netns", "exec", self.relay_ns, *nice, sys.executable, str(HERE), "relay", self.b, self.c,
             str(p.delay_ms), str(p.jitter_ms), str(p.reorder), str(self.workdir / "relay.json"), str(ready)],
            stdout=subprocess.DEVNULL, stderr=open(self.workdir / "relay.log", "w"))
        deadline = time.monotonic() + 10
        while not ready.exists():
            if self.relay_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("impair relay did not start: " + (self.workdir / "relay.log").read_text())
            time.sleep(0.02)

    def clear(self) -> dict:
        """Removes the impairment (the link is down until the next apply()); returns the relay's counters (or
        {} when no relay ran)."""
        stats: dict = {}
        if self.relay_proc is not None:
            stop_process(self.relay_proc, signal.SIGTERM)
            self.relay_proc = None
            path = self.workdir / "relay.json"
            if path.exists():
                stats = json.loads(path.read_text())
                path.unlink()
        for ns in (self.mid_ns, self.relay_ns):
            _ns(ns, "nft", "delete", "table", "netdev", "kimp", check=False)
        if self.backend == "netem":
            for ns, iface in ((self.mid_ns, self.a), (self.client_ns, self.client_if)):
                _ns(ns, "tc", "qdisc", "del", "dev", iface, "root", check=False)
        return stats

    def blackout_after_small_window(self, below_bytes: int = 4096, seconds: float = 1, wscale: int = 10) -> None:
        """A deterministic lost-window-update scenario instead of a profile: once the kernel advertises a
        receive window under `below_bytes` (its window field shifted by `wscale`, 10 for Linux's default
        buffers), every further frame of that connection towards kosoku is dropped for `seconds`; the other
        direction passes. A sender that sent into that small window must retransmit (RFC 6298 §5.1) or probe
        (RFC 9293 §3.8.6.1) to learn that the window opened again."""
        self.apply(Profile("none"))
        self._nft(self.mid_ns, "delete table netdev kimp")
        units = max(1, below_bytes >> wscale)
        self._nft(self.mid_ns, "\n".join([
            "table netdev kimp {", "  set blackout { type inet_service; flags timeout; }",
            self._chain("from_kosoku", self.tap, self.a, 0, 0),
            f'  chain to_kosoku {{ type filter hook ingress device "{self.a}" priority 0; '
            f"tcp sport @blackout counter drop; "
            f"tcp window < {units} add @blackout {{ tcp sport timeout {int(seconds * 1000)}ms }}; "
            f'counter fwd to "{self.tap}"; }}', "}"]))

    def nft_counters(self) -> dict[str, int]:
        """Packets counted by the mid namespace's rules: {"from_kosoku_drop": n, "to_kosoku_dup": n, ...}."""
        r = _ns(self.mid_ns, "nft", "-j", "list", "table", "netdev", "kimp", check=False)
        out: dict[str, int] = {}
        if r.returncode != 0:
            return out
        for item in json.loads(r.stdout)["nftables"]:
            rule = item.get("rule")
            if not rule:
                continue
            packets = next((e["counter"]["packets"] for e in rule["expr"] if "counter" in e), 0)
            verdict = next((k for e in rule["expr"] for k in ("drop", "dup", "fwd") if k in e), "?")
            out[f"{rule['chain']}_{verdict}"] = packets
        return out

    def detach(self) -> None:
        """Stops the impairment and moves the tap back into the client namespace with the peer address."""
        self.clear()
        if self.attached:
            _run("ip", "-n", self.mid_ns, "link", "set", self.tap, "netns", self.client_ns, check=False)
            _run("ip", "-n", self.client_ns, "link", "del", self.client_if, check=False)
            _run("ip", "-n", self.client_ns, "addr", "add", self.peer_cidr, "dev", self.tap, check=False)
            _run("ip", "-n", self.client_ns, "link", "set", self.tap, "up", check=False)
            self.attached = False
        for ns in (self.mid_ns, self.relay_ns):
            _run("ip", "netns", "del", ns, check=False)

    @staticmethod
    def _chain(name: str, src: str, dst: str, loss: int, dup: int) -> str:
        rules = [f'type filter hook ingress device "{src}" priority 0;']
        if loss:
            rules.append(f"numgen random mod 100 < {loss} counter drop;")
        if dup:
            rules.append(f'numgen random mod 100 < {dup} counter dup to "{dst}";')
        rules.append(f'counter fwd to "{dst}";')
        return f"  chain {name} {{ " + " ".join(rules) + " }"

    @staticmethod
    def _nft(ns: str, ruleset: str) -> None:
        r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=ruleset, capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"nft in {ns} failed: {r.stderr}\n{ruleset}")


def relay(if_a: str, if_b: str, delay_ms: float, jitter_ms: float, reorder: float, stats_path: str,
          ready_path: str) -> None:
    """Bridges if_a and if_b (AF_PACKET, every frame both ways) until SIGTERM, holding each frame
    delay_ms ± jitter_ms (uniform) unless it is one of the `reorder` percent that go at once. Writes its
    counters as JSON to stats_path on exit: per direction frames, held, sent at once, send errors, frames the
    receiving socket dropped (rx_drops: its queue was full, PACKET_STATISTICS), and the largest number of frames
    held at one time."""
    rng = random.Random(os.getpid())
    socks = []
    for name in (if_a, if_b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        s.bind((name, 0))
        s.setblocking(False)
        socks.append(s)
    peer = {socks[0].fileno(): socks[1], socks[1].fileno(): socks[0]}
    label = {socks[0].fileno(): f"{if_a}>{if_b}", socks[1].fileno(): f"{if_b}>{if_a}"}
    stats = {d: {"frames": 0, "held": 0, "at_once": 0, "send_errors": 0, "oversize": 0} for d in label.values()}
    stats["max_held"] = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    poll = select.poll()
    for s in socks:
        poll.register(s, select.POLLIN)
    held: list[tuple[float, int, socket.socket, bytes, str]] = []
    seq = 0

    def send(out: socket.socket, frame: bytes, direction: str) -> None:
        if len(frame) > 1514:
            stats[direction]["oversize"] += 1
        try:
            out.send(frame)
        except OSError:
            stats[direction]["send_errors"] += 1

    Path(ready_path).write_text("ready\n")
    while not stop:
        timeout = 500 if not held else max(0, math.ceil((held[0][0] - time.monotonic()) * 1000))
        try:
            events = poll.poll(timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd, _ in events:
            src, out, direction = socks[0] if socks[0].fileno() == fd else socks[1], peer[fd], label[fd]
            st = stats[direction]
            for _ in range(256):
                try:
                    frame = src.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                st["frames"] += 1
                hold = delay_ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0)
                if hold <= 0 or (reorder and rng.random() * 100 < reorder):
                    st["at_once"] += 1
                    send(out, frame, direction)
                else:
                    st["held"] += 1
                    heapq.heappush(held, (now + hold / 1000, seq, out, frame, direction))
                    seq += 1
            stats["max_held"] = max(stats["max_held"], len(held))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, out, frame, direction = heapq.heappop(held)
            send(out, frame, direction)
    for s in socks:
        stats[label[s.fileno()]]["rx_drops"] = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
    Path(stats_path).write_text(json.dumps(stats))


if __name__ == "__main__":
    if sys.argv[1] == "offloads-off":
        offloads_off(sys.argv[2])
    elif sys.argv[1] == "relay":
        relay(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), sys.argv[7],
              sys.argv[8])
    else:
        sys.exit(f"usage: {sys.argv[0]} offloads-off IFACE | relay IF_A IF_B DELAY_MS JITTER_MS REORDER_PCT "
                 "STATS_JSON READY_FILE")
