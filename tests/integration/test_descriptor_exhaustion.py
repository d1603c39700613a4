"""Running out of file descriptors on the kernel backend (core/net/kernel_stack.hh, core/main.cc), as nginx
handles it: a warning at start when worker_connections cannot fit in RLIMIT_NOFILE, the soft limit raised towards
the hard one, and when accept() fails with EMFILE a rate-limited `accept4() failed (24: Too many open files)` line,
a counter in `status`, and accepting paused (500 ms, or until a connection closes) instead of retried at once: the
loop idles while the clients wait in the backlog, and serves again as soon as descriptors are free.
Each test starts its own kosoku (test_engine.Kosoku) under a small RLIMIT_NOFILE; about 10 s in all.
"""
from __future__ import annotations

import os
import re
import resource
import socket
import time

import pytest

import sut
from test_engine import Kosoku, tmp  # noqa: F401 (tmp: the fixture)

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's descriptor limit handling")

CLK_TCK = os.sysconf("SC_CLK_TCK")


def nofile(soft: int, hard: int):
    """A preexec_fn: kosoku starts with RLIMIT_NOFILE soft:hard (as `prlimit --nofile=soft:hard`)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), /proc/PID/stat fields 14 and 15."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(l for l in f if l.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def get_status(port: int, path: str = "/", timeout: float = 5) -> int:
    r = sut.exchange(port, f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode(),
                     timeout=timeout, expect=1, grace=0).one()
    return r.status


@pytest.mark.skipif(bool(os.environ.get("KOSOKU_SANITIZED")),
                    reason="out of descriptors, UBSan's vptr check fails on its own (it probes memory through a pipe)")
def test_accept_without_descriptors_backs_off_logs_and_recovers(tmp):
    own = resource.getrlimit(resource.RLIMIT_NOFILE)
    if own[0] < 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, own[1]), own[1]))
    # 2 workers x worker_connections 1024 (test_engine's config) = 2048 > 256 descriptors.
    k = Kosoku(tmp, workers=2, server="client_header_timeout 60s;")
    k.start(preexec_fn=nofile(256, 256))
    idle: list[socket.socket] = []
    try:
        assert limits(k.proc.pid) == (256, 256)  # no worker_rlimit_nofile: the hard limit stays
        log = k.log()
        assert "2048 worker_connections exceed open file resource limit: 256" in log, log

        # 300 idle clients: the first ~240 are accepted, then accept() fails with EMFILE and the rest wait in
        # the listen backlog (the handshake is the kernel's).
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", k.port), timeout=5))
        t_full = time.monotonic()
        time.sleep(1.0)  # past the first failures
        cpu0, t0 = cpu_seconds(k.proc.pid), time.monotonic()
        time.sleep(2.0)
        cpu1, t1 = cpu_seconds(k.proc.pid), time.monotonic()
        share = (cpu1 - cpu0) / (t1 - t0)
        failures = re.findall(r"\[crit\] \d+#\d+: accept4\(\) failed \(24: Too many open files\)", k.log())
        elapsed = time.monotonic() - t_full
        print(f"out of descriptors: kosoku used {share:.1%} of a core over {t1 - t0:.1f} s; "
              f"{len(failures)} accept4() lines in {elapsed:.1f} s")
        assert share < 0.20, f"kosoku busy at {share:.0%} of a core while out of descriptors"
        assert failures, k.log()[-3000:]
        # At most one line per second per worker (plus the first of each).
        assert len(failures) <= 2 * (int(elapsed) + 2), failures

        # Descriptors come back: the idle clients leave; a new client is served within the retry delay.
        for s in idle:
            s.close()
        idle.clear()
        t2 = time.monotonic()
        assert get_status(k.port, timeout=5) == 200
        took = time.monotonic() - t2
        print(f"after the idle clients closed: a new client got its 200 in {took * 1000:.0f} ms")
        assert took < 2.0, took
        conns = k.status()["connections"]
        assert conns["accept_failed"] > 0, conns
        assert k.stop() == 0
    finally:
        for s in idle:
            s.close()
        if k.proc.poll() is None:
            k.proc.kill()


def test_soft_descriptor_limit_is_raised_to_the_hard_limit(tmp):
    """Without worker_rlimit_nofile a soft limit below worker_processes x worker_connections is raised to the hard
    limit (what any process may do), and then no warning is due."""
    k = Kosoku(tmp, workers=2)
    k.start(preexec_fn=nofile(256, 4096))
    try:
        assert limits(k.proc.pid) == (4096, 4096)
        log = k.log()
        assert "RLIMIT_NOFILE soft limit raised from 256 to 4096" in log, log
        assert "exceed open file resource limit" not in log, log
        assert k.stop() == 0
    finally:
        if k.proc.poll() is None:
            k.proc.kill()


def can_raise_hard_limits() -> bool:
    """CAP_SYS_RESOURCE (bit 24) in the effective set: a hard limit may be raised (containers often drop it)."""
    with open("/proc/self/status") as f:
        eff = int(next(l for l in f if l.startswith("CapEff:")).split()[1], 16)
    return bool(eff & (1 << 24))


@pytest.mark.parametrize("directive,start,expect,warned", [
    (3000, (256, 4096), (3000, 3000), False),  # both limits set, lowering the hard one
    (1000, (256, 4096), (1000, 1000), True),   # too few for 2 x 1024: nginx's warning
    (8000, (256, 4096), None, False),          # above the hard limit: needs CAP_SYS_RESOURCE
])
def test_worker_rlimit_nofile_sets_the_limit(tmp, directive, start, expect, warned):
    """worker_rlimit_nofile N sets both limits to N (nginx's setrlimit). Without the privilege to raise the hard
    limit the alert is logged and the soft limit goes as far as the hard one."""
    k = Kosoku(tmp, workers=2, main=f"worker_rlimit_nofile {directive};")
    k.start(preexec_fn=nofile(*start))
    try:
        log = k.log()
        if expect is None:
            if can_raise_hard_limits():
                expect = (directive, directive)
            else:
                expect = (start[1], start[1])
                assert f"setrlimit(RLIMIT_NOFILE, {directive}) failed (1: Operation not permitted)" in log, log
                assert f"RLIMIT_NOFILE soft limit raised from {start[0]} to {start[1]}" in log, log
        assert limits(k.proc.pid) == expect
        warning = f"2048 worker_connections exceed open file resource limit: {expect[0]}"
        assert (warning in log) == warned, log
        assert k.stop() == 0
    finally:
        if k.proc.poll() is None:
            k.proc.kill()
