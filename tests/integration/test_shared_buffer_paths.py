"""Static files through net::SharedBuffer (core/static/static_handler.cc reads each chunk with io_uring into a
refcounted buffer; the stream keeps a reference until the bytes are sent (kernel sockets) or acknowledged
(kosoku's TCP, split at the sndbuf= limit)). Real clients against the real binary, on both backends:

- pipelined keep-alive requests mixing GET, HEAD, single ranges and multipart/byteranges, over locations with
  sendfile_max_chunk 4k / 20k / default (256k) and aio io_uring / threads / off: every body byte-exact;
- a static response still being sent while the next pipelined request replaces the connection's content state
  (a proxied request): the stream's references keep the static state's buffers alive;
- many clients aborting mid-download (RST and FIN, with reads in flight), then a byte-exact check again;
- an idle keep-alive connection keeps no file read buffer (RSS per idle connection);
- SIGTERM mid-transfer: the drain finishes the bodies byte-exact;
- the worker ends cleanly: exit code 0 after SIGTERM (a sanitized build reports leaks there: the per-core buffer
  cache of each worker thread must go with the thread), no sanitizer report;
- on `network dpdk` (net_tap rig of test_dpdk_tap.py; skipped like it): the same mix on listeners with
  sndbuf=16k and 100k, and dpdk_tcp_memory_bytes back at its baseline once the connections are gone.

Run as a script (`test_shared_buffer_paths.py client HOST PORT DOCROOT SEED CONNS`) it is the client of the dpdk
test inside the rig's network namespace.
"""
from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sut
from test_engine import Kosoku
from test_proxy_socket_keepalive import _origin

FILES = {"big.bin": (9 << 20) + 7, "mid.bin": (1 << 20) + 12345, "odd.bin": 300001, "small.bin": 5000}
PREFIXES = ["/", "/c4k/", "/c20k/", "/thr/", "/off/"]


def write_files(www: Path) -> dict[str, bytes]:
    out = {}
    for i, (name, size) in enumerate(sorted(FILES.items())):
        data = random.Random(100 + i).randbytes(size)
        (www / name).write_bytes(data)
        out[name] = data
    return out


def locations(www: Path) -> str:
    return (f"location /c4k/ {{ alias {www}/; sendfile_max_chunk 4k; }}\n"
            f"location /c20k/ {{ alias {www}/; sendfile_max_chunk 20k; }}\n"
            f"location /thr/ {{ alias {www}/; aio threads; }}\n"
            f"location /off/ {{ alias {www}/; aio off; sendfile_max_chunk 20k; }}\n")


# ---- client -----------------------------------------------------------------------------------------------------

def one_request(rnd: random.Random, files: dict[str, bytes]):
    """(request bytes, method, expected check) for a random GET / HEAD / range / multipart request."""
    name = rnd.choice(sorted(files))
    data = files[name]
    target = rnd.choice(PREFIXES) + name
    kind = rnd.choice(["get", "head", "range", "multi", "multi"])
    if name == "big.bin" and kind == "get" and rnd.random() < 0.6:
        kind = "range"
    extra = ""
    want: object = None
    if kind == "range":
        a = rnd.randrange(len(data))
        b = min(len(data) - 1, a + rnd.randrange(1, 700000))
        extra, want = f"Range: bytes={a}-{b}\r\n", (a, b)
    elif kind == "multi":
        rs = []
        for _ in range(rnd.randint(2, 12)):
            a = rnd.randrange(len(data))
            rs.append((a, min(len(data) - 1, a + rnd.randrange(1, 300000))))
        extra, want = "Range: bytes=" + ",".join(f"{a}-{b}" for a, b in rs) + "\r\n", rs
    method = "HEAD" if kind == "head" else "GET"
    return f"{method} {target} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode(), method, kind, name, want


def check(resp: sut.Response, method: str, kind: str, data: bytes) -> str | None:
    """None if the response carries exactly the right bytes; else what is wrong."""
    if kind in ("get", "head"):
        if resp.status != 200 or int(resp.header("content-length")) != len(data):
            return f"status {resp.status} length {resp.header('content-length')}"
        if method == "GET" and hashlib.sha256(resp.body).digest() != hashlib.sha256(data).digest():
            return "body differs"
        return None
    if resp.status == 200:
        return None if resp.body == data else "200 body differs"
    if resp.status != 206:
        return f"status {resp.status}"
    if "multipart/byteranges" in (resp.header("content-type") or ""):
        for p in sut.parse_byteranges(resp):
            if p.data != data[p.first:p.last + 1]:
                return f"part {p.first}-{p.last} differs"
        return None
    first, last, _ = sut.parse_content_range(resp.header("content-range"))
    return None if resp.body == data[first:last + 1] else f"range {first}-{last} differs"


def read_responses(s: socket.socket, methods: list[str], slow: bool = False) -> list[sut.Response]:
    buf = b""
    while True:
        got, _ = sut.parse_responses(buf, methods, eof=False)
        if len([r for r in got if not r.interim]) >= len(methods):
            return [r for r in got if not r.interim]
        d = s.recv(4096 if slow else 1 << 20)
        if not d:
            got, _ = sut.parse_responses(buf, methods, eof=True)
            return [r for r in got if not r.interim]
        buf += d
        if slow:
            time.sleep(0.0005)


def pipelined_round(host: str, port: int, files: dict[str, bytes], seed: int, conns: int) -> list[str]:
    """`conns` keep-alive connections, each with 1-8 pipelined requests sent at once; returns the failures."""
    rnd = random.Random(seed)
    failures = []
    for c in range(conns):
        reqs = [one_request(rnd, files) for _ in range(rnd.randint(1, 8))]
        slow = rnd.random() < 0.2
        s = socket.socket()
        if slow:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.settimeout(60)
        s.connect((host, port))
        s.sendall(b"".join(r[0] for r in reqs))
        resps = read_responses(s, [r[1] for r in reqs], slow)
        s.close()
        if len(resps) != len(reqs):
            failures.append(f"conn {c}: {len(resps)} responses to {len(reqs)} requests")
            continue
        for (raw, method, kind, name, _), resp in zip(reqs, resps):
            why = check(resp, method, kind, files[name])
            if why is not None:
                failures.append(f"conn {c}: {raw[:120]!r}: {why}")
    return failures


def abort_round(host: str, port: int, seed: int, conns: int, threads: int = 6) -> None:
    """Clients that request large bodies (pipelined, ranges, slow windows), read a little and go away: RST
    (SO_LINGER 0) or FIN with unread data, while the server has reads in flight and references in its stream."""
    def worker(i: int) -> None:
        rnd = random.Random(seed * 100 + i)
        for _ in range(conns // threads):
            try:
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rnd.choice([4096, 65536, 1 << 20]))
                s.settimeout(2)
                s.connect((host, port))
                reqs = []
                for _ in range(rnd.randint(1, 4)):
                    rng = rnd.choice(["", "Range: bytes=0-100,5000-900000,1000000-3000000\r\n",
                                      f"Range: bytes={rnd.randrange(1 << 18)}-\r\n"])
                    name = rnd.choice(["big.bin", "big.bin", "mid.bin", "odd.bin"])
                    reqs.append(f"GET {rnd.choice(PREFIXES)}{name} HTTP/1.1\r\nHost: t\r\n{rng}\r\n".encode())
                s.sendall(b"".join(reqs))
                want, got = rnd.choice([0, 1, 1000, 70000, 300000, 2000000]), 0
                while got < want:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += len(d)
                if rnd.random() < 0.6:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def client_main(argv: list[str]) -> int:
    host, port, root, seed, conns = argv[0], int(argv[1]), Path(argv[2]), int(argv[3]), int(argv[4])
    files = {n: (root / n).read_bytes() for n in FILES}
    failures = pipelined_round(host, port, files, seed, conns)
    abort_round(host, port, seed, conns)
    failures += pipelined_round(host, port, files, seed + 1, conns // 2)
    for f in failures[:20]:
        print(f)
    print(f"failures {len(failures)}")
    return 1 if failures else 0


# ---- kernel sockets ---------------------------------------------------------------------------------------------

def sanitizer_report(text: str) -> bool:
    return "Sanitizer" in text or "runtime error:" in text


@pytest.fixture
def tmp(tmp_path):
    os.chmod(tmp_path, 0o755)
    return tmp_path


@pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's static streaming")
def test_kernel_pipelined_mix_aborts_and_clean_exit(tmp):
    www = tmp / "www"
    www.mkdir()
    k = Kosoku(tmp, server=locations(www), workers=2)
    files = write_files(k.www)
    k.start()
    try:
        failures = pipelined_round("127.0.0.1", k.port, files, 1, 40)
        assert not failures, failures[:10]
        abort_round("127.0.0.1", k.port, 2, 120)
        failures = pipelined_round("127.0.0.1", k.port, files, 3, 20)
        assert not failures, failures[:10]
        deadline = time.monotonic() + 10 * sut.SLOWDOWN
        while (c := k.status()["connections"])["active"] > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c["active"] == 1, c  # only the status request: every aborted connection is gone
    finally:
        rc = k.stop()
        err = k.proc.stderr.read().decode(errors="replace")
    assert not sanitizer_report(err), err[-6000:]
    assert rc == 0, f"kosoku exited {rc}\n{err[-6000:]}"


@pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's shutdown drain")
def test_kernel_sigterm_mid_transfer_drains_byte_exact(tmp):
    """SIGTERM while large bodies are streaming (reads in flight, chunks referenced by the streams): the drain
    finishes them byte-exact, then the workers end (their buffer caches with them) and kosoku exits 0."""
    www = tmp / "www"
    www.mkdir()
    k = Kosoku(tmp, server=locations(www), workers=2)
    files = write_files(k.www)
    k.start()
    digests: dict[str, bytes] = {}

    def download(prefix: str) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.settimeout(30)
        s.connect(("127.0.0.1", k.port))
        s.sendall(f"GET {prefix}big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        parts = []
        while d := s.recv(64 * 1024):
            parts.append(d)
            time.sleep(0.01)  # ~2 s per body: the signal comes in the middle
        s.close()
        digests[prefix] = hashlib.sha256(b"".join(parts).split(b"\r\n\r\n", 1)[1]).digest()

    try:
        ts = [threading.Thread(target=download, args=(p,)) for p in PREFIXES]
        for t in ts:
            t.start()
        time.sleep(0.3)
        assert not digests, "a body was complete before the signal"
        k.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(60)
        rc = k.proc.wait(timeout=30 * sut.SLOWDOWN)
    finally:
        if k.proc.poll() is None:
            k.proc.kill()
        err = k.proc.stderr.read().decode(errors="replace")
    want = hashlib.sha256(files["big.bin"]).digest()
    assert digests == {p: want for p in PREFIXES}, sorted(digests)
    assert not sanitizer_report(err), err[-6000:]
    assert rc == 0, f"kosoku exited {rc}\n{err[-6000:]}"


@pytest.mark.skipif(sut.SUT != "kosoku" or bool(os.environ.get("KOSOKU_SANITIZED")),
                    reason="kosoku's RSS (a sanitizer's quarantine keeps freed memory resident)")
def test_kernel_idle_keepalive_connections_hold_no_file_buffer(tmp):
    """After a response the connection keeps neither its static state nor its read buffer: a 512 KiB - 1
    file ends with a 256 KiB - 1 read into a 256 KiB buffer, which each idle connection used to keep (~276 KiB
    of RSS per idle connection measured; ~17 KiB with the buffer given back)."""
    k = Kosoku(tmp, workers=1)
    body = random.Random(7).randbytes(2 * 262144 - 1)
    (k.www / "tail.bin").write_bytes(body)
    k.start()

    def rss_kib() -> int:
        return int(next(l for l in open(f"/proc/{k.proc.pid}/status") if l.startswith("VmRSS")).split()[1])

    def get(s: socket.socket) -> None:
        s.sendall(b"GET /tail.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        (r,) = read_responses(s, ["GET"])
        assert r.status == 200 and r.body == body

    try:
        warm = socket.create_connection(("127.0.0.1", k.port), timeout=30)
        get(warm)
        warm.close()
        time.sleep(0.5)
        before = rss_kib()
        idle = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", k.port), timeout=30)
            get(s)
            idle.append(s)
        time.sleep(1)
        per_conn = (rss_kib() - before) / len(idle)
        assert k.status()["connections"]["waiting"] == len(idle)
        assert per_conn < 96, f"{per_conn:.0f} KiB of RSS per idle keep-alive connection"
        for s in idle:
            s.close()
    finally:
        rc = k.stop()
    assert rc == 0


@pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's static streaming")
def test_static_buffers_outlive_a_replaced_content_state(tmp):
    """A slow reader's static response is still in the stream (by reference) when the next pipelined request, to
    a proxied location, replaces the connection's content state (and frees the static state): the bytes sent
    afterwards must still be the file's."""
    up = _origin()
    www = tmp / "www"
    www.mkdir()
    k = Kosoku(tmp, server=locations(www) + f"location /px/ {{ proxy_pass http://127.0.0.1:{up.server_port}/; }}\n",
               workers=1)
    files = write_files(k.www)
    k.start()
    try:
        for prefix in PREFIXES:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            s.settimeout(60)
            s.connect(("127.0.0.1", k.port))
            s.sendall(f"GET {prefix}mid.bin HTTP/1.1\r\nHost: t\r\n\r\n"
                      "GET /px/a HTTP/1.1\r\nHost: t\r\n\r\n"
                      f"GET {prefix}odd.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=10-20,40000-\r\n\r\n"
                      "GET /px/b HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            time.sleep(0.3)  # the windows fill with the first body; the rest waits in the stream
            r = read_responses(s, ["GET"] * 4, slow=True)
            s.close()
            assert [x.status for x in r] == [200, 200, 206, 200], (prefix, [x.status for x in r])
            assert hashlib.sha256(r[0].body).digest() == hashlib.sha256(files["mid.bin"]).digest(), prefix
            assert r[1].body == r[3].body == b"origin\n"
            assert check(r[2], "GET", "multi", files["odd.bin"]) is None, prefix
    finally:
        rc = k.stop()
        err = k.proc.stderr.read().decode(errors="replace")
        up.shutdown()
    assert not sanitizer_report(err), err[-6000:]
    assert rc == 0, f"kosoku exited {rc}\n{err[-6000:]}"


# ---- kosoku's TCP (network dpdk, net_tap) ----------------------------------------------------------------------

def test_dpdk_sndbuf_limits_byte_exact_and_memory_returns(tmp_path_factory):
    import test_dpdk_tap as tap
    if tap._REASON is not None:
        pytest.skip(tap._REASON)
    base = tmp_path_factory.mktemp("dpdk-shared")
    www = base / "www"
    extra = ("        location = /status { status; }\n        listen 8083 sndbuf=16k;\n"
             "        listen 8084 sndbuf=100k;\n" + locations(www))
    rig = tap.TapRig(base, 150 + os.getpid() % 50, server_extra=extra)
    failed = True
    try:
        rig.start()
        write_files(www)

        def tcp_memory() -> float:
            return sum(m["value"] for sec in rig.status()["extra"].values() for m in sec
                       if m["name"] == "dpdk_tcp_memory_bytes")

        before = tcp_memory()
        for port, seed in ((8083, 11), (8084, 12), (tap.PORT, 13)):
            r = rig.ns_run("/usr/bin/python3", __file__, "client", rig.addr, str(port), str(www), str(seed), "30",
                           check=False, timeout=600)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        # Every client connection is gone (the clients closed first, no TIME-WAIT here): their buffers, shared
        # file chunks included, are freed.
        deadline = time.monotonic() + 15
        while (after := tcp_memory()) > before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert after <= before, (before, after)
        log = (base / "stdout.log").read_text(errors="replace")
        assert not sanitizer_report(log), log[-6000:]
        failed = False
    finally:
        took = rig.stop(failed)
    assert took is not None, "kosoku did not exit within 20 s of SIGTERM"


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "client":
    sys.exit(client_main(sys.argv[2:]))
