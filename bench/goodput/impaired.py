#!/usr/bin/python3
"""Goodput under link impairments, side by side (issue 4: "goodput over the TAP link vs Linux<->Linux over an
equivalent veth link with the same netem settings: within 20 %").

    bench/goodput/impaired.py KOSOKU [--profiles loss5,delay10] [--runs 3] [--tag goodput-impaired]

Two setups are up at once, each behind its own copy of tests/integration/impair.py's ImpairedLink (loss and
duplication by nf_tables netdev rules in a middle namespace, delay/jitter/reordering by its AF_PACKET relay;
tc netem instead where the kernel has sch_netem), with the same profile applied to both:

  tap:  KOSOKU on `network dpdk` (net_tap, its own TCP stack; 1 worker, EAL -l 0) ─ <name>tap0 ─[chain]─ curl
        in netns <name>-tc
  veth: the same KOSOKU on `network kernel` (Linux TCP; 1 worker on CPU 0) in netns <name>-vs ─ <name>v0 ═
        <name>v1 ─[chain]─ curl in netns <name>-vc. <name>v0 sends with TX checksum, TSO and GSO off, so the
        chain sees MTU-sized frames as from the tap (a GSO skb would be dropped, duplicated or held whole).
        Linux's congestion control there is CUBIC (--linux-cc, set as the route's congctl), kosoku's default too:
        hosts may default to BBR (this one does), which ignores random loss and is no like-for-like peer.

Per profile: after calibration fetches (which also warm up; the file size per side is picked so a run takes
about --target-seconds), --runs rounds of one tap and one veth download each, the order flipping every round.
Every calibration fetch is checked byte for byte (sha256 of the body streamed from curl), the timed runs by size
and HTTP status (--verify sha256 hashes them too, which costs the client CPU ~0.2-0.5 s per GB here).
Goodput = body bytes / (curl time_total - time_connect), MB = 10^6 B: a SYN lost to the impairment (1 s) is not
counted. Per run: kosoku's dpdk_tcp_* counters (status location, tap) or the server namespace's Linux TCP
counters (veth: TcpRetransSegs, TcpExtTCPTimeouts, TcpExtTCPLossProbes, ...), the client namespace's TCP counters,
the relay's CPU share, the kosoku worker thread's on-CPU and run-queue wait (schedstat), /proc/loadavg.
Profile `relay0` passes a clean link through the relay with no delay: its goodput is the relay's ceiling.
Both servers run at nice -10 and both relays at --relay-nice (default -15): the relay (Python, every frame of
the delay/reorder profiles) stands for the wire, and kosoku's DPDK worker busy-polls its CPU while traffic
flows; with the relay at nice 0 it waited for CPU behind kosoku and the tap path's RTT tripled (reorder:
p50 0.34 vs 0.11 ms at the same capture point, 10 vs 20 MB/s; at -15: 29 vs 23 MB/s).
--rps-cpus MASK turns on RPS on both sides' first-hop receiving interface: a tap runs the receive side's whole
kernel path (forwarding, the client's TCP) synchronously inside kosoku's write() on kosoku's CPU, which no NIC
does; with RPS it runs in softirq on the CPUs of MASK, as the Linux sender's own transmissions mostly do.

Writes bench/results/<date>-<tag>.md and .json (--no-save: print only). `--render X.json` rewrites X.md. Both
keep a hand-written tail of an existing .md that starts with the line "## Notes (by hand)".
Root, /dev/net/tun, network namespaces and nft are needed. Everything runs under `timeout --budget`; namespaces
and interfaces are named <name>-* / <name>tap0 / <name>v0,1 (--name, default gpi) and are deleted at the end
(`--cleanup` deletes leftovers of an interrupted run).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/integration"))
import impair  # noqa: E402  (tests/integration/impair.py: the impairment chain, shared with the tap tests)

P = impair.Profile
PROFILES = {p.name: p for p in (
    P("relay0", relay=True),
    P("clean"),
    P("loss1", loss=1),
    P("loss5", loss=5),
    P("delay10", delay_ms=10),
    P("delay10loss1", loss=1, delay_ms=10),
    P("reorder", delay_ms=3, reorder=90),  # netem's meaning: 90 % go at once, 10 % are held 3 ms and overtaken
    # The same with a 6 ms hold: longer than one jiffy of a HZ=250 kernel, the granularity of Linux's RACK
    # reordering timer (4 ms), which a 3 ms hold slips under (not run by default: --profiles reorder6).
    P("reorder6", delay_ms=6, reorder=90),
    P("dup5", duplicate=5),
)}
PORT = 8080
CALIBRATION_MIB = 4
# Counters shown in the tables (all non-zero deltas go to the JSON).
KOSOKU_COLS = ("retransmits", "fast_retransmits", "sack_recoveries", "rto_expired", "tlp_probes",
               "queue_tx_refused")
LINUX_COLS = ("TcpRetransSegs", "TcpExtTCPFastRetrans", "TcpExtTCPSackRecovery", "TcpExtTCPTimeouts",
              "TcpExtTCPLossProbes", "")  # no TX refusals on this side: veth has no queue to refuse
CLIENT_COLS = ("TcpOutSegs", "TcpExtTCPDSACKOldSent", "TcpExtTCPOFOQueue")


def sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True)


def in_ns(ns: str, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *args, check=check, timeout=timeout)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def ns_tcp_counters(ns: str) -> dict[str, int]:
    """The namespace's /proc/net/snmp and /proc/net/netstat as nstat names them (TcpRetransSegs, TcpExt...)."""
    out: dict[str, int] = {}
    text = in_ns(ns, "cat", "/proc/net/snmp", "/proc/net/netstat").stdout.splitlines()
    for names, values in zip(text[0::2], text[1::2]):
        group, names = names.split(":", 1)
        if group in ("Tcp", "TcpExt"):
            out.update({group + n: int(v) for n, v in zip(names.split(), values.split(":", 1)[1].split())})
    return out


def deltas(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def descendants(pid: int) -> list[int]:
    """pid and all its descendants (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def thread_schedstats(pid: int) -> dict[str, tuple[int, int]]:
    """{"pid/tid": (on-CPU ns, run-queue wait ns)} for every thread of pid's process tree."""
    out = {}
    for p in descendants(pid):
        for t in Path(f"/proc/{p}/task").glob("*"):
            try:
                run, wait = Path(t, "schedstat").read_text().split()[:2]
            except OSError:
                continue
            out[f"{p}/{t.name}"] = (int(run), int(wait))
    return out


def busiest_thread(before: dict, after: dict) -> tuple[float, float]:
    """(on-CPU ms, run-queue wait ms) of the thread that ran most between the two snapshots."""
    best = (0.0, 0.0)
    for k, (run, wait) in after.items():
        r0, w0 = before.get(k, (0, 0))
        if (run - r0) / 1e6 > best[0]:
            best = ((run - r0) / 1e6, (wait - w0) / 1e6)
    return round(best[0], 1), round(best[1], 1)


def softnet_drops() -> int:
    """Frames dropped by the kernel's per-CPU input backlogs (netdev_max_backlog; /proc/net/softnet_stat column 2,
    all namespaces): veth and the nft `fwd` hops queue every frame there."""
    return sum(int(line.split()[1], 16) for line in Path("/proc/net/softnet_stat").read_text().splitlines())


def cpu_idle() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of all CPUs (/proc/stat)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return v[3] + v[4], sum(v[:8])


def cpu_ticks(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime, clock ticks
    except OSError:
        return 0


class Files:
    """Random files <n>m.bin in www/, made on first use; their sha256 cached in digests.json."""

    def __init__(self, work: Path):
        self.www = work / "www"
        self.www.mkdir(parents=True, exist_ok=True)
        self.cache_path = work / "digests.json"
        self.cache = json.loads(self.cache_path.read_text()) if self.cache_path.exists() else {}

    def get(self, mib: int) -> tuple[str, int, str]:
        name, size = f"{mib}m.bin", mib << 20
        path = self.www / name
        key = f"{name} {size}"
        if not path.exists() or path.stat().st_size != size or key not in self.cache:
            sh("sh", "-c", f"head -c {size} /dev/urandom > {path}", timeout=300)
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            self.cache[key] = h.hexdigest()
            self.cache_path.write_text(json.dumps(self.cache))
        return name, size, self.cache[key]


class Side:
    """One setup: kosoku, the client namespace, and the impairment chain in front of it."""
    label = ""

    def __init__(self, args, work: Path, k: int):
        self.args, self.work, self.k = args, work / self.label, k
        self.work.mkdir(parents=True, exist_ok=True)
        self.name = args.name
        self.proc: subprocess.Popen | None = None
        self.link: impair.ImpairedLink | None = None
        self.client_ns = self.server = ""

    def conf(self, listen: str, head: str) -> Path:
        path = self.work / "kosoku.conf"
        path.write_text(f"""{head}worker_processes 1;
worker_cpu_affinity 1;
error_log {self.work}/error.log notice;
http {{
    access_log off;
    sendfile on;
    server {{ listen {listen}; root {self.args.work}/www; location = /status {{ status; }} }}
}}
""")
        return path

    def launch(self, cmd_prefix: list[str], conf: Path) -> None:
        (self.work / "error.log").unlink(missing_ok=True)
        cmd = cmd_prefix + ["timeout", "-k", "5", str(self.args.budget), "nice", "-n", "-10", str(self.args.bin),
                            "-c", str(conf), "-p", f"{self.work}/"]
        self.proc = subprocess.Popen(cmd, stdout=open(self.work / "stdout.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        log = self.work / "error.log"
        while not (log.exists() and " started: " in log.read_text()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: kosoku did not start: " + (self.work / "stdout.log").read_text())
            time.sleep(0.05)

    def kosoku_pid(self) -> int:
        """kosoku itself: the child of `timeout` (ip netns exec and nice exec)."""
        kids = [p for p in descendants(self.proc.pid) if p != self.proc.pid]
        return kids[0] if kids else self.proc.pid

    def wait_answering(self) -> None:
        deadline = time.monotonic() + 20
        while in_ns(self.client_ns, "curl", "-s", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}",
                    f"{self.server}/status", check=False).stdout != "200":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: kosoku never answered on {self.server}")
            time.sleep(0.2)

    def attach(self, tap: str, peer_cidr: str) -> None:
        self.link = impair.ImpairedLink(tap, self.client_ns, peer_cidr, self.k, self.work, self.args.backend,
                                        prefix=self.name, relay_nice=self.args.relay_nice)
        self.link.attach()
        if self.args.rps_cpus:
            # RPS on the first hop's receiving end (the tap, or the server veth's peer): the kernel's forwarding and
            # the client's receive path run in softirq on those CPUs, as a NIC's interrupt would put them,
            # instead of inside the sender's write() (tun runs them synchronously there).
            qdir = f"/sys/class/net/{self.link.tap}/queues"
            for q in in_ns(self.link.mid_ns, "ls", qdir).stdout.split():
                if q.startswith("rx-"):
                    in_ns(self.link.mid_ns, "sh", "-c", f"echo {self.args.rps_cpus} > {qdir}/{q}/rps_cpus")
        if self.args.autogroup_nice is not None:
            Path(f"/proc/{self.kosoku_pid()}/autogroup").write_text(str(self.args.autogroup_nice))
        self.wait_answering()

    def server_counters(self) -> dict[str, int]:
        raise NotImplementedError

    def stop(self) -> None:
        if self.link is not None:
            self.link.detach()
            self.link = None
        if self.proc is not None:
            impair.stop_process(self.proc, signal.SIGTERM, 20)  # timeout passes SIGTERM on to kosoku
            self.proc = None


class TapSide(Side):
    label = "tap"

    def start(self) -> None:
        n = self.name
        self.tap, self.client_ns = f"{n}tap0", f"{n}-tc"
        addr, peer = f"10.95.{self.k}.2", f"10.95.{self.k}.1"
        self.server = f"http://{addr}:{PORT}"
        conf = self.conf(str(PORT), f"""network dpdk;
dpdk {{
    eal -l 0 --no-huge --no-shconf --no-pci --no-telemetry --log-level=notice --file-prefix {n}
        --vdev=net_tap0,iface={self.tap};
    address {addr}/24;
}}
""")
        sh("ip", "netns", "del", self.client_ns, check=False)
        self.launch([], conf)
        sh("ip", "netns", "add", self.client_ns)
        sh("ip", "link", "set", self.tap, "netns", self.client_ns)
        for cmd in (["link", "set", "lo", "up"], ["addr", "add", f"{peer}/24", "dev", self.tap],
                    ["link", "set", self.tap, "up"]):
            sh("ip", "-n", self.client_ns, *cmd)
        self.attach(self.tap, f"{peer}/24")

    def server_counters(self) -> dict[str, int]:
        """kosoku's dpdk_tcp_*_total counters (summed over cores; names without the prefix and suffix) and its TX
        queue's refused / no-mbuf frames (queue_tx_refused, queue_tx_no_mbuf)."""
        r = in_ns(self.client_ns, "curl", "-sS", "--fail", "-m", "20", "--retry", "3",
                  f"{self.server}/status?format=json", timeout=90)
        out: dict[str, int] = {}
        for m in json.loads(r.stdout)["extra"]["dpdk_port"]:
            name = m["name"]
            if name.startswith("dpdk_tcp_") and name.endswith("_total") and "name" not in m["labels"]:
                short = name[len("dpdk_tcp_"):-len("_total")]
            elif name in ("dpdk_queue_tx_refused_total", "dpdk_queue_tx_no_mbuf_total"):
                short = name[len("dpdk_"):-len("_total")]  # frames lost inside kosoku's port (TCP resends them)
            else:
                continue
            out[short] = out.get(short, 0) + int(m["value"])
        return out

    def stop(self) -> None:
        super().stop()
        sh("ip", "netns", "del", self.client_ns, check=False)


class VethSide(Side):
    label = "veth"

    def start(self) -> None:
        n = self.name
        self.server_ns, self.client_ns = f"{n}-vs", f"{n}-vc"
        self.server_if, self.client_if = f"{n}v0", f"{n}v1"
        addr, peer = f"10.95.{self.k}.2", f"10.95.{self.k}.1"
        self.server = f"http://{addr}:{PORT}"
        for ns in (self.server_ns, self.client_ns):
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.server_ns, "link", "add", self.server_if, "type", "veth", "peer", "name", self.client_if,
           "netns", self.client_ns)
        sh("ip", "-n", self.server_ns, "addr", "add", f"{addr}/24", "dev", self.server_if)
        sh("ip", "-n", self.client_ns, "addr", "add", f"{peer}/24", "dev", self.client_if)
        sh("ip", "-n", self.server_ns, "link", "set", self.server_if, "up")
        if self.args.linux_cc != "host":
            # Per route: a namespace may not default to an algorithm outside tcp_allowed_congestion_control, a
            # route may (and accepted connections take the route's algorithm).
            sh("ip", "-n", self.server_ns, "route", "replace", f"10.95.{self.k}.0/24", "dev", self.server_if,
               "congctl", self.args.linux_cc)
        sh("ip", "-n", self.client_ns, "link", "set", self.client_if, "up")
        in_ns(self.server_ns, sys.executable, impair.__file__, "offloads-off", self.server_if)
        self.launch(["ip", "netns", "exec", self.server_ns], self.conf(f"{addr}:{PORT}", ""))
        self.attach(self.client_if, f"{peer}/24")

    def server_counters(self) -> dict[str, int]:
        return ns_tcp_counters(self.server_ns)

    def stop(self) -> None:
        super().stop()
        for ns in (self.server_ns, self.client_ns):
            sh("ip", "netns", "del", ns, check=False)


def fetch(side: Side, name: str, size: int, digest: str, verify: str, max_s: float) -> dict:
    """One download; returns curl's figures, the check's verdict and the counters' deltas."""
    relay_pid = side.link.relay_proc.pid if side.link.relay_proc else None
    srv0, cli0 = side.server_counters(), ns_tcp_counters(side.client_ns)
    sched0, relay0, load0, drops0 = thread_schedstats(side.proc.pid), cpu_ticks(relay_pid), loadavg(), softnet_drops()
    idle0 = cpu_idle()
    t0 = time.monotonic()
    curl = subprocess.Popen(["ip", "netns", "exec", side.client_ns, "curl", "-sS", "--fail", "-m", str(int(max_s)),
                             "-o", "-" if verify == "sha256" else "/dev/null", "-w", "%{stderr}%{json}",
                             f"{side.server}/{name}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    h = hashlib.sha256()
    while chunk := curl.stdout.read(1 << 20):
        h.update(chunk)
    err = curl.stderr.read().decode(errors="replace")
    rc = curl.wait()
    wall = time.monotonic() - t0
    sched1, relay1, drops1, idle1 = thread_schedstats(side.proc.pid), cpu_ticks(relay_pid), softnet_drops(), cpu_idle()
    srv, cli = deltas(srv0, side.server_counters()), deltas(cli0, ns_tcp_counters(side.client_ns))
    w = json.loads(err[err.rindex("{"):]) if "{" in err else {}
    got = int(w.get("size_download", 0))
    body_s = float(w.get("time_total", 0)) - float(w.get("time_connect", 0))
    ok = rc == 0 and got == size and (verify != "sha256" or h.hexdigest() == digest)
    oncpu, waitq = busiest_thread(sched0, sched1)
    return {
        "file": name, "bytes": got, "ok": ok, "curl_rc": rc, "error": "" if ok else err[:300],
        "mb_s": round(got / body_s / 1e6, 3) if ok and body_s > 0 else None,
        "curl_speed_mb_s": round(float(w.get("speed_download", 0)) / 1e6, 3),
        "time_total_s": round(float(w.get("time_total", 0)), 3), "time_connect_s": round(float(w.get("time_connect", 0)), 4),
        "wall_s": round(wall, 3), "load": load0,
        "worker_oncpu_ms": oncpu, "worker_wait_ms": waitq, "softnet_drops": drops1 - drops0,
        "machine_busy": round(1 - (idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]), 3),
        "relay_cpu_share": round((relay1 - relay0) / os.sysconf("SC_CLK_TCK") / wall, 3) if relay_pid else None,
        "server": srv, "client": cli,
    }


def start_capture(side: Side, out_dir: str, stem: str) -> subprocess.Popen:
    """tcpdump (headers only, 96 bytes a frame) on the first hop's server-side end (the tap kosoku writes, or the
    Linux server veth's peer) in the link's middle namespace: what the sender put on the wire and the ACKs it got,
    with the kernel's timestamps. Writes <out_dir>/<stem>.pcap; stopped with SIGINT after the download."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["ip", "netns", "exec", side.link.mid_ns, "tcpdump", "-q", "-i", side.link.tap, "-s", "96",
                             "-U", "-w", f"{out_dir}/{stem}.pcap", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # tcpdump has opened its socket
    return proc


def pick_mib(rate_mb_s: float, target_s: float, max_mib: int) -> int:
    """The power of two MiB nearest to rate x target_s, within 1 .. max_mib."""
    want = rate_mb_s * 1e6 * target_s / (1 << 20)
    return int(min(max_mib, max(1, 2 ** round(math.log2(max(want, 1))))))


def calibrate(side: Side, files: Files, args) -> tuple[int, list[dict]]:
    """Warm-up fetches (each checked by sha256) that size the file: from CALIBRATION_MIB, each next size picked
    from the last rate (at most 16 times the last), until a fetch's size is the one its rate picks (at most 4 fetches)."""
    mib, runs = min(CALIBRATION_MIB, args.max_mib), []
    for _ in range(4):
        r = fetch(side, *files.get(mib), "sha256", args.max_seconds)
        runs.append(r)
        if not r["ok"]:
            break
        nxt = min(pick_mib(r["mb_s"], args.target_seconds, args.max_mib), mib * 16)  # a lucky small fetch
        if nxt == mib:
            break
        mib = nxt
    return mib, runs


def run_profile(profile: impair.Profile, sides: list[Side], files: Files, args) -> dict:
    res: dict = {"profile": profile.__dict__, "load_before": loadavg(), "sides": {}}
    for s in sides:
        s.link.apply(profile)
    try:
        for s in sides:
            if args.size_mib:
                mib, cal = args.size_mib, [fetch(s, *files.get(args.size_mib), "sha256", args.max_seconds)]
            else:
                mib, cal = calibrate(s, files, args)
            res["sides"][s.label] = {"mib": mib, "calibration": cal, "runs": []}
            print(f"  {s.label}: calibration " + ", ".join(f"{c['file']} {c['mb_s']} MB/s" for c in cal)
                  + f" -> {mib} MiB", flush=True)
        for rnd in range(args.runs):
            for s in (sides if rnd % 2 == 0 else sides[::-1]):
                mib = res["sides"][s.label]["mib"]
                cap = start_capture(s, args.capture, f"{profile.name}-{s.label}-r{rnd}") if args.capture else None
                r = fetch(s, *files.get(mib), args.verify, args.max_seconds)
                if cap is not None:
                    impair.stop_process(cap, signal.SIGINT, 10)
                r["round"] = rnd
                res["sides"][s.label]["runs"].append(r)
                print(f"  round {rnd} {s.label}: {r['mb_s']} MB/s {r['time_total_s']} s ok={r['ok']} "
                      f"load {r['load']} server {pick(r['server'], KOSOKU_COLS + LINUX_COLS)}", flush=True)
    finally:
        for s in sides:
            nft = s.link.nft_counters()
            relay = s.link.clear()
            res["sides"].setdefault(s.label, {}).update({"nft": nft, "relay": relay})
    res["load_after"] = loadavg()
    return res


def pick(d: dict, keys) -> dict:
    return {k: d[k] for k in keys if k in d}


# ---- report ---------------------------------------------------------------------------------------------------

def med_range(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    digits = 0 if max(xs) >= 100 or all(float(x).is_integer() for x in xs) else 1 if max(xs) >= 10 else 2

    def fmt(v: float) -> str:
        return f"{v:.{digits}f}"
    if len(set(xs)) == 1:
        return fmt(xs[0])
    return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"


def ratios(p: dict) -> list[float]:
    """tap/veth per round (both runs of a round back to back)."""
    t = {r["round"]: r["mb_s"] for r in p["sides"].get("tap", {}).get("runs", []) if r["mb_s"]}
    v = {r["round"]: r["mb_s"] for r in p["sides"].get("veth", {}).get("runs", []) if r["mb_s"]}
    return [t[k] / v[k] for k in sorted(t) if k in v]


def ratio(x: float) -> str:
    return f"{x:.3f}" if x < 0.1 else f"{x:.2f}"


def counter_cell(runs: list[dict], key: str) -> str:
    xs = [r["server"].get(key, 0) for r in runs if r["ok"]]
    return med_range(xs) if xs else "–"


def render(data: dict) -> str:
    a = data["args"]
    lines = [f"# Goodput under impairments: kosoku on DPDK net_tap vs Linux on veth — {data['date']}", "",
             "Generated by `bench/goodput/impaired.py` (bench/README.md, section goodput). Command:", "",
             f"```\n{data['command']}\n```", "",
             f"Binary: `{a['bin']}` (sha256 {data['bin_sha256'][:16]}…, {data['bin_size']} B). Machine: "
             f"{data['machine']}. Impairment backend: **{data['backend']}**. Linux congestion control (veth server): "
             f"**{data.get('linux_cc', 'the host default (not recorded)')}**; kosoku's: its default (cubic). RPS on the first hop: "
             f"**{('CPU mask ' + a['rps_cpus']) if a.get('rps_cpus') else 'off'}**. Relays at nice "
             f"**{a.get('relay_nice', 0)}** (servers -10). Load (1/5/15 min) before "
             f"{data['load_before']}, after {data['load_after']}; wall time {data['wall_s']:.0f} s.", "",
             "Goodput = body bytes / (curl time_total − time_connect), MB = 10^6 B; median (min–max) over the runs; "
             "tap/veth = median of the per-round ratios (range). Calibration fetches checked by sha256, the timed runs "
             f"by {'sha256' if a['verify'] == 'sha256' else 'size and status'}. File size per side picked by calibration fetches for ~{a['target_seconds']} s a run.",
             "", "## Goodput", "",
             "| profile | tap MB/s | tap file | veth MB/s | veth file | tap/veth | runs ok tap/veth | load per run |",
             "|---|---|---|---|---|---|---|---|"]
    for p in data["profiles"]:
        t, v = p["sides"].get("tap", {}), p["sides"].get("veth", {})
        tr, vr = t.get("runs", []), v.get("runs", [])
        rs = ratios(p)
        loads = [float(r["load"].split()[0]) for r in tr + vr]
        lines.append(
            f"| {p['profile']['name']} | {med_range([r['mb_s'] for r in tr])} | {t.get('mib', '?')} MiB | "
            f"{med_range([r['mb_s'] for r in vr])} | {v.get('mib', '?')} MiB | "
            f"{(f'{ratio(statistics.median(rs))} ({ratio(min(rs))}–{ratio(max(rs))})') if rs else '–'} | "
            f"{sum(r['ok'] for r in tr)}/{len(tr)} · {sum(r['ok'] for r in vr)}/{len(vr)} | "
            f"{(f'{min(loads):.1f}–{max(loads):.1f}') if loads else '–'} |")
    lines += ["", "## Loss recovery per run (median (min–max) of the counter deltas over one download)", "",
              "kosoku (tap): dpdk_tcp_{retransmits, fast_retransmits, sack_recoveries, rto_expired, tlp_probes}"
              "_total from its status location, and dpdk_queue_tx_refused_total (frames the net_tap PMD refused: lost "
              "inside kosoku's port, before the wire). Linux (veth, the server namespace, nstat names): TcpRetransSegs, "
              "TcpExtTCPFastRetrans, TcpExtTCPSackRecovery, TcpExtTCPTimeouts (RTOs), TcpExtTCPLossProbes (TLP). "
              "Client: the curl namespace's TcpOutSegs (ACKs), TCPDSACKOldSent (duplicates seen), TCPOFOQueue.", "",
              "| profile | side | file | retransmitted segs | fast rtx | SACK recoveries | RTOs | TLP probes | "
              "port TX refused | client ACKs | client D-SACKs | client OFO |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in data["profiles"]:
        for label, cols in (("tap", KOSOKU_COLS), ("veth", LINUX_COLS)):
            s = p["sides"].get(label)
            if not s or not s.get("runs"):
                continue
            runs = s["runs"]
            cells = [counter_cell(runs, c) if c else "–" for c in cols]
            cli = [med_range([r["client"].get(c, 0) for r in runs if r["ok"]]) for c in CLIENT_COLS]
            lines.append(f"| {p['profile']['name']} | {label} | {s['mib']} MiB | " + " | ".join(cells + cli) + " |")
    lines += ["", "## CPU: kosoku's worker thread and the relay", "",
              "Worker = the kosoku thread with the most CPU during the run (schedstat): on-CPU and run-queue wait in "
              "ms per run. Machine busy = share of both CPUs not idle during the run (/proc/stat; "
              "includes other sessions' work). Relay = the AF_PACKET relay process's CPU time / wall time of the run "
              "(1.0 = one full CPU). Relay frames: per direction over the whole profile (calibration included), "
              "send errors and receive-queue drops (frames lost in the relay), most frames held at once. Backlog drops: frames the kernel's "
              "input backlogs dropped during the run (softnet_stat, whole machine; netdev_max_backlog "
              f"{Path('/proc/sys/net/core/netdev_max_backlog').read_text().strip()}): link loss that no rule made.", "",
              "| profile | side | worker on-CPU ms | worker wait ms | wall s | machine busy | relay CPU share | "
              "relay frames k→c / c→k | relay send errors / rx drops | max held | nft drop k→c / c→k | nft dup k→c / c→k | backlog drops |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in data["profiles"]:
        for label in ("tap", "veth"):
            s = p["sides"].get(label)
            if not s or not s.get("runs"):
                continue
            runs = s["runs"]
            relay, nft = s.get("relay") or {}, s.get("nft") or {}
            dirs = [d for d in relay if ">" in d]
            frames = " / ".join(str(relay[d]["frames"]) for d in dirs) or "–"
            errors = (f'{sum(relay[d]["send_errors"] for d in dirs)} / '
                      f'{sum(relay[d].get("rx_drops", 0) for d in dirs)}') if dirs else "–"
            share = med_range([r["relay_cpu_share"] for r in runs]) if dirs else "–"
            lines.append(
                f"| {p['profile']['name']} | {label} | {med_range([r['worker_oncpu_ms'] for r in runs])} | "
                f"{med_range([r['worker_wait_ms'] for r in runs])} | {med_range([r['wall_s'] for r in runs])} | "
                f"{med_range([r.get('machine_busy') for r in runs])} | "
                f"{share} | {frames} | {errors} | {relay.get('max_held', '–')} | "
                f"{nft.get('from_kosoku_drop', 0)} / {nft.get('to_kosoku_drop', 0)} | "
                f"{nft.get('from_kosoku_dup', 0)} / {nft.get('to_kosoku_dup', 0)} | "
                f"{med_range([r.get('softnet_drops') for r in runs])} |")
    bound = relay_bound(data)
    if bound:
        lines += ["", "## Relay-bound?", "",
                  "A run through the relay is counted relay-bound when the relay used ≥ 0.9 of a CPU during it, or "
                  "its goodput is ≥ 0.8 × the same side's relay0 median (the relay's ceiling on a clean link).", "",
                  "| profile | side | goodput / relay0 | relay CPU share | verdict |", "|---|---|---|---|---|"]
        lines += bound
    failed = [(p["profile"]["name"], label, r) for p in data["profiles"] for label, s in p["sides"].items()
              for r in s.get("calibration", []) + s.get("runs", []) if not r["ok"]]
    if failed:
        lines += ["", "## Failed downloads", ""]
        lines += [f"- {n} {label} {r['file']}: curl rc {r['curl_rc']}, {r['bytes']} B, {r['error'].strip()}"
                  for n, label, r in failed]
    return "\n".join(lines) + "\n"


NOTES = "\n## Notes (by hand)\n"


def write_md(path: Path, md: str) -> None:
    """Writes md to path, keeping an existing file's hand-written tail (from NOTES on)."""
    old = path.read_text() if path.exists() else ""
    path.write_text(md + (old[old.index(NOTES):] if NOTES in old else ""))


def relay_bound(data: dict) -> list[str]:
    ceiling = {}
    for p in data["profiles"]:
        if p["profile"]["name"] == "relay0":
            for label, s in p["sides"].items():
                xs = [r["mb_s"] for r in s.get("runs", []) if r["mb_s"]]
                if xs:
                    ceiling[label] = statistics.median(xs)
    out = []
    for p in data["profiles"]:
        for label, s in p["sides"].items():
            runs = [r for r in s.get("runs", []) if r["mb_s"] and r["relay_cpu_share"] is not None]
            if not runs:
                continue
            mb, share = statistics.median(r["mb_s"] for r in runs), statistics.median(r["relay_cpu_share"] for r in runs)
            frac = mb / ceiling[label] if label in ceiling else None
            verdict = "relay-bound" if share >= 0.9 or (frac is not None and frac >= 0.8 and
                                                         p["profile"]["name"] != "relay0") else "not relay-bound"
            if p["profile"]["name"] == "relay0":
                verdict = "the ceiling" + (" (relay saturated)" if share >= 0.9 else " (relay not saturated)")
            out.append(f"| {p['profile']['name']} | {label} | {ratio(frac) if frac is not None else '–'} | "
                       f"{share:.2f} | {verdict} |")
    return out


# ---- main -----------------------------------------------------------------------------------------------------

def cleanup(name: str) -> None:
    """Deletes the namespaces of this script's --name (only those)."""
    for line in sh("ip", "netns", "list").stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if ns.startswith(f"{name}-"):
            sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", f"{name}tap0", check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin", nargs="?", help="the kosoku binary (copied to the work dir first)")
    ap.add_argument("--profiles", default=",".join(p for p in PROFILES if p != "reorder6"), help=f"comma list of {', '.join(PROFILES)}")
    ap.add_argument("--runs", type=int, default=3, help="rounds (one tap and one veth download each)")
    ap.add_argument("--sides", default="tap,veth")
    ap.add_argument("--target-seconds", type=float, default=4, help="file sized for about this long a run")
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--size-mib", type=int, default=0, help="fixed file size for both sides (no calibration)")
    ap.add_argument("--max-seconds", type=float, default=60, help="curl -m per download")
    ap.add_argument("--verify", choices=("sha256", "size"), default="size",
                    help="check of the timed runs (calibration fetches are always checked by sha256)")
    ap.add_argument("--linux-cc", default="cubic",
                    help="the veth side's Linux congestion control (route congctl; Linux's and kosoku's default is "
                         "cubic), or 'host' for the host's default (net.ipv4.tcp_congestion_control)")
    ap.add_argument("--relay-nice", type=int, default=-15,
                    help="nice value of both sides' relays (default -15, above the servers' -10: the relay is the "
                         "wire, and kosoku's worker busy-polls; at 0 the relay waits for CPU behind it)")
    ap.add_argument("--rps-cpus", default="",
                    help="hex CPU mask written to rps_cpus of both sides' first-hop receiving interface (the tap; "
                         "the server veth's peer), e.g. 2: the receive side's kernel work on CPU 1 (default: off)")
    ap.add_argument("--backend", default="", help="impair.py backend: netem or nft+relay (default: netem if any)")
    ap.add_argument("--autogroup-nice", type=int, default=None, help="written to both kosokus' /proc/PID/autogroup")
    ap.add_argument("--budget", type=int, default=3600, help="seconds: kosoku runs under timeout this long")
    ap.add_argument("--name", default="gpi", help="prefix of the namespaces/interfaces (≤ 5 characters)")
    ap.add_argument("--work", default="/tmp/gpi-goodput-impaired")
    ap.add_argument("--tag", default="goodput-impaired")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--capture", default="", help="directory: pcap (headers) of each timed download's first hop, "
                    "<profile>-<side>-r<round>.pcap (perturbs the timing a little: analysis, not results)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--render", help="rewrite the .md of this results .json and exit")
    ap.add_argument("--cleanup", action="store_true", help="delete leftover namespaces of --name and exit")
    args = ap.parse_args()
    if args.render:
        j = Path(args.render)
        write_md(j.with_suffix(".md"), render(json.loads(j.read_text())))
        return 0
    if args.cleanup:
        cleanup(args.name)
        return 0
    if not args.bin:
        ap.error("the kosoku binary is required")
    unknown = [p for p in args.profiles.split(",") if p not in PROFILES]
    if unknown:
        ap.error(f"unknown profiles {unknown}; known: {', '.join(PROFILES)}")
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        sys.exit("needs root and /dev/net/tun")
    args.backend = args.backend or ("netem" if impair.netem_available() else "nft+relay")
    if args.backend == "nft+relay" and (reason := impair.nft_missing_reason()):
        sys.exit(reason)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    src = Path(args.bin).resolve()
    args.work, args.bin = work, work / "kosoku"
    shutil.copy2(src, args.bin)
    bin_sha = hashlib.sha256(args.bin.read_bytes()).hexdigest()
    files = Files(work)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    cleanup(args.name)
    sides: list[Side] = [{"tap": TapSide, "veth": VethSide}[s](args, work, 61 + i)
                         for i, s in enumerate(args.sides.split(","))]
    t0, load_before = time.monotonic(), loadavg()
    results = []
    try:
        for s in sides:
            s.start()
        for name in args.profiles.split(","):
            print(f"{name} (load {loadavg()})", flush=True)
            results.append(run_profile(PROFILES[name], sides, files, args))
    finally:
        for s in sides:
            try:
                s.stop()
            except Exception as e:  # keep cleaning up the other side
                print(f"stopping {s.label}: {e}", file=sys.stderr)
        cleanup(args.name)
    cpu = sh("sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").stdout.strip()
    data = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()} | {"bin": str(src)},
        "bin_sha256": bin_sha, "bin_size": args.bin.stat().st_size, "backend": args.backend,
        "linux_cc": args.linux_cc if args.linux_cc != "host" else
        Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip() + " (host default)",
        "machine": f"{os.cpu_count()} vCPUs {cpu}, kernel {platform.release()}",
        "load_before": load_before, "load_after": loadavg(), "wall_s": time.monotonic() - t0, "profiles": results,
    }
    md = render(data)
    print(md)
    if not args.no_save:
        out = Path(args.out) / f"{time.strftime('%Y-%m-%d', time.gmtime())}-{args.tag}"
        out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
        write_md(out.with_suffix(".md"), md)
        print(f"wrote {out}.md and .json")
    return 0 if all(r["ok"] for p in results for s in p["sides"].values() for r in s.get("runs", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
