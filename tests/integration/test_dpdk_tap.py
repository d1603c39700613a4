"""kosoku on `network dpdk` (DPDK net_tap PMD + kosoku's own TCP/IP stack) against the Linux kernel as a real
peer: curl, wget and ab run in a network namespace the test creates.

Topology (one per test module): kosoku starts EAL with `--vdev=net_tap0,iface=dtapK --no-huge --no-shconf
--no-pci --no-telemetry`, which creates the kernel tap interface dtapK in the root namespace. The test then MOVES
dtapK into a fresh namespace `kosoku-dtK` and gives it 10.99.K.1/24 there (the PMD keeps its file descriptor, so
moving the interface does not disturb DPDK); kosoku's stack is 10.99.K.2/24. Every client runs inside the
namespace, so no route or address of the host is touched, and deleting the namespace removes the interface.
Loss/delay/reordering is injected with `tc qdisc ... netem` on dtapK inside the namespace (kernel → kosoku).

Skips with a clear reason when /dev/net/tun, `ip netns` (root, CAP_NET_ADMIN) or the binary are missing.
On failure a pcap of dtapK (tcpdump in the namespace) is kept under $DPDK_TAP_ARTIFACTS (default
/tmp/kosoku-dpdk-tap-artifacts) together with kosoku's error log.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("KOSOKU_BIN", ROOT / "build/release/kosoku"))
ARTIFACTS = Path(os.environ.get("DPDK_TAP_ARTIFACTS", "/tmp/kosoku-dpdk-tap-artifacts"))
PORT = 8080
# The interface is moved only after kosoku logs "started" (see TapRig.start).
# `ethtool -K IFACE tx off` without ethtool: SIOCETHTOOL with ETHTOOL_STXCSUM (0x17), data 0.
ETHTOOL_TX_OFF = """
import array, fcntl, socket, struct, sys
value = array.array("I", [0x17, 0])
ifreq = struct.pack("16sP", sys.argv[1].encode(), value.buffer_info()[0])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(sock.fileno(), 0x8946, ifreq)
"""


def _run(*args: str, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True, **kw)


def _skip_reason() -> str | None:
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing (no TUN/TAP support here): DPDK net_tap cannot run"
    if not BIN.exists():
        return f"kosoku binary {BIN} not built (set KOSOKU_BIN)"
    if shutil.which("ip") is None:
        return "iproute2 `ip` is missing"
    probe = f"kosoku-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"network namespaces unavailable (`ip netns add` failed: {r.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _data(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


class TapRig:
    """kosoku on net_tap with `workers` worker_processes; `server_extra` is added to the server block (e.g.
    locations), `http_extra` to the http block (e.g. upstreams)."""

    def __init__(self, base: Path, k: int, workers: int = 1, server_extra: str = "", http_extra: str = "",
                 link: str = "tap"):
        self.base, self.k = base, k
        self.workers, self.server_extra, self.http_extra = workers, server_extra, http_extra
        self.link = link
        self.iface, self.ns = f"dtap{k}", f"kosoku-dt{k}"
        # link "af_packet": a veth pair between two namespaces; kosoku runs in `kns` with net_af_packet (one
        # queue pair) on its end `kif`, the kernel peer has `iface` in `ns`. Nothing touches the host's namespace.
        self.kns, self.kif = f"kosoku-dk{k}", f"dveth{k}"
        self.peer, self.addr = f"10.99.{k}.1", f"10.99.{k}.2"
        self.www = base / "www"
        self.proc: subprocess.Popen | None = None
        self.pcap: subprocess.Popen | None = None
        self.digests: dict[str, str] = {}

    def start(self) -> None:
        self.www.mkdir(parents=True)
        for name, size, seed in (("1k.bin", 1024, 1), ("1m.bin", 1 << 20, 2), ("8m.bin", 8 << 20, 3),
                                 ("32m.bin", 32 << 20, 4)):
            data = _data(size, seed)
            (self.www / name).write_bytes(data)
            self.digests[name] = hashlib.sha256(data).hexdigest()
        conf = self.base / "kosoku.conf"
        conf.write_text(f"""
worker_processes {self.workers};
error_log {self.base}/error.log info;
network dpdk;
dpdk {{
    eal -l 0 --no-huge -m {64 + 64 * self.workers} --no-shconf --no-pci --no-telemetry --log-level=notice
        --vdev={self.vdev()};
    address {self.addr}/24;
}}
http {{
    access_log off;
    keepalive_requests 100000;
{self.http_extra}
    server {{ listen {PORT}; root {self.www};
{self.server_extra}
    }}
}}
""")
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        cmd = [str(BIN), "-c", str(conf), "-p", str(self.base) + "/"]
        if self.link == "af_packet":
            self.make_veth()
            cmd = ["ip", "netns", "exec", self.kns] + cmd
        self.proc = subprocess.Popen(cmd, stdout=open(self.base / "stdout.log", "w"), stderr=subprocess.STDOUT)
        # Wait for the workers to run: net_tap opens its queue fds by interface name while the port starts, so
        # the interface may move to the namespace only after that ("started" is logged after the workers).
        deadline = time.monotonic() + 15
        log = self.base / "error.log"
        while not (log.exists() and " started: " in log.read_text()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kosoku did not start:\n" + (self.base / "stdout.log").read_text())
            time.sleep(0.05)
        if self.link == "tap":
            _run("ip", "netns", "add", self.ns)
            _run("ip", "link", "set", self.iface, "netns", self.ns)
            self.ns_run("ip", "link", "set", "lo", "up")
            self.ns_run("ip", "addr", "add", f"{self.peer}/24", "dev", self.iface)
            self.ns_run("ip", "link", "set", self.iface, "up")
        self.pcap = subprocess.Popen(["ip", "netns", "exec", self.ns, "tcpdump", "-i", self.iface, "-s", "128",
                                      "-w", str(self.base / "tap.pcap"), "-U"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:  # first request also resolves ARP both ways
            r = self.ns_run("curl", "-s", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}",
                            f"http://{self.addr}:{PORT}/1k.bin", check=False)
            if r.stdout == "200":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"kosoku on {self.addr} never answered: {r.stdout} {r.stderr}")
            time.sleep(0.2)

    def vdev(self) -> str:
        if self.link == "af_packet":
            return f"net_af_packet0,iface={self.kif},qpairs=1"
        return f"net_tap0,iface={self.iface}"

    def make_veth(self) -> None:
        subprocess.run(["ip", "netns", "del", self.kns], capture_output=True)
        _run("ip", "netns", "add", self.kns)
        _run("ip", "netns", "add", self.ns)
        _run("ip", "-n", self.kns, "link", "add", self.kif, "type", "veth", "peer", "name", self.iface, "netns",
             self.ns)
        _run("ip", "-n", self.kns, "link", "set", self.kif, "up")
        self.ns_run("ip", "link", "set", "lo", "up")
        self.ns_run("ip", "addr", "add", f"{self.peer}/24", "dev", self.iface)
        self.ns_run("ip", "link", "set", self.iface, "up")
        # The kernel would leave TCP checksums to "hardware" on veth (CHECKSUM_PARTIAL), and af_packet hands
        # them to kosoku unfinished: turn TX checksum offload off on the peer (ethtool -K tx off, by ioctl).
        self.ns_run("python3", "-c", ETHTOOL_TX_OFF, self.iface)

    def kernel_sockets_settled(self, within: float = 3) -> list[str]:
        """The kernel's sockets to kosoku (`ss` lines) once all are in TIME-WAIT or gone, or after `within` s.
        Nothing may stay open: every socket reaches TIME-WAIT (the kernel closed first after keep-alive) or
        disappears (kosoku answers the client's FIN with its own)."""
        deadline = time.monotonic() + within
        while True:
            ss = [l for l in self.ns_run("ss", "-tanH", "dst", self.addr).stdout.split("\n") if l.strip()]
            if all("TIME-WAIT" in line for line in ss) or time.monotonic() > deadline:
                return ss
            time.sleep(0.1)

    def status(self) -> dict:
        """The status location's JSON (needs `location = /status { status; }` in server_extra)."""
        r = self.ns_run("curl", "-sS", "--fail", "-m", "5", f"http://{self.addr}:{PORT}/status?format=json")
        return json.loads(r.stdout)

    def ns_run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", self.ns, *args, check=check, timeout=timeout)

    def fetch_sha256(self, name: str, tool: str = "curl", timeout: float = 60) -> str:
        out = self.base / f"got-{tool}-{name}"
        url = f"http://{self.addr}:{PORT}/{name}"
        if tool == "curl":
            self.ns_run("curl", "-sS", "--fail", "-m", str(int(timeout)), "-o", str(out), url, timeout=timeout + 5)
        else:
            self.ns_run("wget", "-q", "-T", str(int(timeout)), "-t", "1", "-O", str(out), url, timeout=timeout + 5)
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        out.unlink()
        return digest

    def stop(self, failed: bool) -> float | None:
        """Stops kosoku with SIGTERM; returns the seconds it took to exit (None if it had to be killed)."""
        took = None
        if self.pcap is not None:
            self.pcap.send_signal(signal.SIGINT)
            try:
                self.pcap.wait(5)
            except subprocess.TimeoutExpired:
                self.pcap.kill()
        if self.proc is not None and self.proc.poll() is None:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
                took = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        if self.link == "af_packet":
            subprocess.run(["ip", "netns", "del", self.kns], capture_output=True)
        if failed:
            dest = ARTIFACTS / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.iface}"
            dest.mkdir(parents=True, exist_ok=True)
            for f in ("tap.pcap", "error.log", "stdout.log", "kosoku.conf"):
                if (self.base / f).exists():
                    shutil.copy(self.base / f, dest / f)
            print(f"dpdk tap artifacts kept in {dest}")
        return took


@pytest.fixture(scope="module")
def rig(tmp_path_factory, request):
    r = TapRig(tmp_path_factory.mktemp("dpdk-tap"), 40 + os.getpid() % 50)
    r.start()
    request.node.rig_failed = False
    yield r
    failed = request.session.testsfailed > 0
    took = r.stop(failed)
    assert took is not None, "kosoku did not exit within 20 s of SIGTERM"


def test_byte_exact_1k_1m_32m_curl(rig):
    for name in ("1k.bin", "1m.bin", "32m.bin"):
        assert rig.fetch_sha256(name, "curl") == rig.digests[name], name


def test_byte_exact_wget(rig):
    for name in ("1k.bin", "1m.bin"):
        assert rig.fetch_sha256(name, "wget") == rig.digests[name], name


def test_50_concurrent_connections_ab(rig):
    r = rig.ns_run("ab", "-q", "-n", "2000", "-c", "50", f"http://{rig.addr}:{PORT}/1k.bin", timeout=120)
    assert "Complete requests:      2000" in r.stdout, r.stdout
    assert "Failed requests:        0" in r.stdout, r.stdout
    assert "Non-2xx" not in r.stdout, r.stdout
    r = rig.ns_run("ab", "-q", "-k", "-n", "5000", "-c", "50", f"http://{rig.addr}:{PORT}/1k.bin", timeout=120)
    assert "Complete requests:      5000" in r.stdout and "Failed requests:        0" in r.stdout, r.stdout


def test_clean_close_and_404(rig):
    # Connection: close → the server's FIN ends the transfer; curl sees a complete body and exits 0.
    r = rig.ns_run("curl", "-sS", "-H", "Connection: close", "-m", "5", "-o", "/dev/null",
                   "-w", "%{http_code} %{size_download}", f"http://{rig.addr}:{PORT}/1m.bin")
    assert r.stdout == f"200 {1 << 20}"
    r = rig.ns_run("curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                   f"http://{rig.addr}:{PORT}/missing")
    assert r.stdout == "404"
    ss = rig.kernel_sockets_settled()
    assert all("TIME-WAIT" in line for line in ss), ss


def test_refused_port_gets_rst(rig):
    r = rig.ns_run("curl", "-s", "-m", "5", f"http://{rig.addr}:9/", check=False)
    assert r.returncode == 7, (r.returncode, r.stderr)  # 7: connection refused (RST to the SYN)


def test_netem_loss_delay_reorder_8m(rig):
    r = rig.ns_run("tc", "qdisc", "add", "dev", rig.iface, "root", "netem", "loss", "2%", "delay", "5ms",
                   "reorder", "5%", check=False)
    if r.returncode != 0:
        pytest.skip(f"tc netem unavailable on this kernel (sch_netem): {r.stderr.strip()}")
    try:
        t0 = time.monotonic()
        assert rig.fetch_sha256("8m.bin", "curl", timeout=90) == rig.digests["8m.bin"]
        assert time.monotonic() - t0 < 90
    finally:
        rig.ns_run("tc", "qdisc", "del", "dev", rig.iface, "root", check=False)
