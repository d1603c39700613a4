"""kosoku-specific engine behaviour, end to end against the real binary: disk offload modes and the disk
queue overflow contract, open_file_cache revalidation, worker_connections, graceful shutdown (drain),
SIGUSR1/SIGHUP, the status counters, and bounded memory for clients that stop reading.

Each test writes its own complete config (main-context directives differ per test) and starts its own
kosoku. Skipped when SUT=nginx (these are kosoku's own directives and contracts)."""
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku-only engine contracts")


class Kosoku:
    def __init__(self, tmp: Path, main: str = "", http: str = "", server: str = "", workers: int = 2,
                 worker_connections: int = 1024):
        self.dir = tmp
        self.port = sut.free_port()
        self.www = tmp / "www"
        self.www.mkdir(exist_ok=True)
        (self.www / "index.html").write_bytes(b"<h1>home</h1>\n")
        self.conf = tmp / "k.conf"
        self.conf.write_text(f"""
worker_processes {workers};
error_log {tmp}/error.log info;
{main}
events {{ worker_connections {worker_connections}; }}
http {{
    types {{ text/html html; text/plain txt; application/octet-stream bin; }}
    {http or "access_log off;"}
    server {{
        listen 127.0.0.1:{self.port};
        root {self.www};
        {server}
        location = /status {{ status; }}
    }}
}}
""")
        self.proc = None

    def start(self, preexec_fn=None):
        """preexec_fn: run in the child before kosoku (e.g. resource.setrlimit)."""
        self.proc = subprocess.Popen([sut.kosoku_bin(), "-c", str(self.conf)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, preexec_fn=preexec_fn)
        deadline = time.monotonic() + 10 * sut.SLOWDOWN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kosoku exited: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("kosoku did not start listening")

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=timeout * sut.SLOWDOWN)
        return self.proc.returncode if self.proc else 0

    def get(self, path, headers=None, timeout=5):
        hdrs = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        req = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{hdrs}\r\n".encode()
        ex = sut.exchange(self.port, req, timeout=timeout * sut.SLOWDOWN)
        return ex.one()

    def status(self):
        return json.loads(self.get("/status?format=json").body)

    def log(self):
        p = self.dir / "error.log"
        return p.read_text() if p.exists() else ""


@pytest.fixture
def tmp(tmp_path):
    os.chmod(tmp_path, 0o755)
    return tmp_path


@pytest.mark.parametrize("mode", ["io_uring", "threads", "off"])
def test_aio_modes_serve_byte_exact(tmp, mode):
    k = Kosoku(tmp, main="disk_queue q depth=4 max_queue=64;", http=f"aio {mode}=q;" if mode != "off" else "aio off;")
    blob = os.urandom(3 * 1024 * 1024 + 17)
    (k.www / "blob.bin").write_bytes(blob)
    k.start()
    try:
        for _ in range(3):
            r = k.get("/blob.bin")
            assert r.status == 200 and hashlib.sha256(r.body).digest() == hashlib.sha256(blob).digest()
        r = k.get("/blob.bin", {"Range": "bytes=1000000-1000009"})
        assert r.status == 206 and r.body == blob[1000000:1000010]
        q = [d for d in k.status()["disk_queues"] if d["name"] == "q"]
        if mode != "off":
            assert q and q[0]["submitted"] > 0
    finally:
        assert k.stop() == 0


def test_disk_queue_overflow_answers_503_and_logs(tmp):
    # depth=1, max_queue=0 in threads mode (no inline fast path): one open may be in flight per core and none
    # may wait, so requests that arrive in the same loop iteration as another one's open are refused with 503
    # and the overflow line; everything else is served and the loop stays healthy.
    k = Kosoku(tmp, main="disk_queue tiny depth=1 max_queue=0;", http="aio threads=tiny;", workers=1)
    for i in range(40):
        (k.www / f"f{i}.txt").write_bytes(b"x" * 100)
    k.start()
    try:
        statuses = []
        for attempt in range(5):
            socks = [socket.create_connection(("127.0.0.1", k.port)) for _ in range(40)]
            time.sleep(0.2)
            for i, s in enumerate(socks):
                s.sendall(f"GET /f{i}.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
            for s in socks:
                s.settimeout(5)
                data = b""
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    data += d
                statuses.append(int(data.split(b" ", 2)[1]))
                s.close()
            if 503 in statuses:
                break
        assert set(statuses) <= {200, 503}, statuses
        assert 503 in statuses, "40 simultaneous opens through a depth=1, max_queue=0 queue never overflowed"
        assert 'disk queue "tiny" overflow' in k.log()
        assert k.status()["disk_queues"][-1]["overflows"] >= 1 or any(
            d["overflows"] >= 1 for d in k.status()["disk_queues"])
        assert k.get("/index.html").status in (200, 503)
    finally:
        assert k.stop() == 0


def test_open_file_cache_notices_rename_within_valid(tmp):
    k = Kosoku(tmp, http="open_file_cache max=100 inactive=60s; open_file_cache_valid 1s;", workers=1)
    (k.www / "f.txt").write_bytes(b"version-1\n")
    k.start()
    try:
        assert k.get("/f.txt").body == b"version-1\n"
        new = k.www / "f.txt.new"
        new.write_bytes(b"version-two\n")
        os.rename(new, k.www / "f.txt")
        # Within `valid` the cached descriptor may still be served; after it, the new file must be.
        deadline = time.monotonic() + 3 * sut.SLOWDOWN
        body = None
        while time.monotonic() < deadline:
            body = k.get("/f.txt").body
            if body == b"version-two\n":
                break
            assert body == b"version-1\n"
            time.sleep(0.1)
        assert body == b"version-two\n"
        st = k.status()
        assert st["open_file_cache"]["hits"] >= 1
    finally:
        assert k.stop() == 0


def test_status_counts_requests_and_statuses(tmp):
    k = Kosoku(tmp, workers=2)
    k.start()
    try:
        for _ in range(20):
            assert k.get("/index.html").status == 200
        for _ in range(5):
            assert k.get("/missing").status == 404
        st = k.status()
        assert st["requests"] >= 25
        assert st["responses"]["2xx"] >= 20 and st["responses"]["4xx"] >= 5
        assert len(st["cores"]) == 2
        assert sum(c["requests"] for c in st["cores"]) == st["requests"]
        assert st["loop_iterations"] > 0
        prom = k.get("/status?format=prometheus").body.decode()
        assert "kosoku_http_requests_total" in prom
        text = k.get("/status").body.decode()
        assert text.startswith("Active connections:")
    finally:
        assert k.stop() == 0


def test_worker_connections_reclaims_idle_keepalive(tmp):
    # nginx semantics: when worker_connections are exhausted, idle keep-alive connections are closed to make
    # room, so a new client is served at once (not after keepalive_timeout).
    k = Kosoku(tmp, workers=1)
    k.conf.write_text(k.conf.read_text().replace("worker_connections 1024", "worker_connections 8"))
    k.start()
    time.sleep(0.3)  # let the start-up probe connection close
    try:
        idle = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", k.port))
            s.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            idle.append(s)
        for s in idle:
            s.settimeout(5)
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        assert k.get("/index.html", timeout=10).status == 200
        assert time.monotonic() - t0 < 2.0, "an idle keep-alive connection should have been reclaimed"
        assert k.proc.poll() is None
        for s in idle:
            s.close()
    finally:
        assert k.stop() == 0


def test_worker_connections_all_busy_logs_and_recovers(tmp):
    # All 4 connections busy (slow readers of a large file): a 5th is refused with a log line, and service
    # resumes once they finish.
    k = Kosoku(tmp, workers=1)
    k.conf.write_text(k.conf.read_text().replace("worker_connections 1024", "worker_connections 4"))
    (k.www / "big.bin").write_bytes(b"\0" * (16 * 1024 * 1024))
    k.start()
    time.sleep(0.3)
    try:
        busy = []
        for _ in range(4):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", k.port))
            s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            busy.append(s)
        time.sleep(0.3)
        try:
            extra = socket.create_connection(("127.0.0.1", k.port), timeout=2)
            extra.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            extra.settimeout(1)
            try:
                extra.recv(100)
            except OSError:
                pass
            extra.close()
        except OSError:
            pass
        time.sleep(0.3)
        assert "worker_connections are not enough" in k.log()
        for s in busy:
            s.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if k.get("/index.html", timeout=2).status == 200:
                    break
            except Exception:
                time.sleep(0.2)
        else:
            raise AssertionError("service did not resume after the busy connections closed")
    finally:
        assert k.stop() == 0


@pytest.mark.parametrize("mode", ["io_uring", "threads"])
def test_async_completion_then_pipelined_and_keepalive(tmp, mode):
    # Regression: with `aio threads` the third request on a keep-alive connection hung, and pipelined requests
    # after one that completed asynchronously were dropped.
    k = Kosoku(tmp, main="disk_queue q depth=4 max_queue=64;", http=f"aio {mode}=q;", workers=1)
    (k.www / "small.bin").write_bytes(os.urandom(10000))
    k.start()
    try:
        with sut.Conn(k.port, timeout=10) as c:
            for _ in range(20):
                c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                r = c.read_response(timeout=5)
                assert r is not None and r.status == 200 and r.body == b"<h1>home</h1>\n"
        paths = ["/index.html", "/small.bin", "/missing", "/index.html"] * 50
        data = b"".join(f"GET {p} HTTP/1.1\r\nHost: t\r\n\r\n".encode() for p in paths)
        with sut.Conn(k.port, timeout=15) as c:
            c.send(data)
            rs = c.read_responses(len(paths), timeout=15)
        assert [r.status for r in rs] == [404 if p == "/missing" else 200 for p in paths]
        small = (k.www / "small.bin").read_bytes()
        assert all(r.body == small for r, p in zip(rs, paths) if p == "/small.bin")
    finally:
        assert k.stop() == 0


def test_partially_cached_file_served_whole(tmp):
    # Regression: preadv2(RWF_NOWAIT) returns a short count when only part of a range is in the page cache;
    # that is not an error (the rest is read next), the body must be complete.
    k = Kosoku(tmp, workers=1)
    blob = os.urandom(512 * 1024)
    path = k.www / "p.bin"
    path.write_bytes(blob)
    k.start()
    try:
        for _ in range(3):
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for off in range(0, len(blob), 16384):
                os.pread(fd, 1, off)  # every other 8 KiB page back in the cache
            os.close(fd)
            r = k.get("/p.bin")
            assert r.status == 200 and r.body == blob
    finally:
        assert k.stop() == 0


def test_second_instance_on_a_used_port_refuses_to_start(tmp):
    k = Kosoku(tmp, workers=1)
    k.start()
    try:
        other = tmp / "other"
        other.mkdir()
        conf = other / "k.conf"
        conf.write_text(k.conf.read_text().replace(str(tmp / "error.log"), str(other / "error.log")))
        p = subprocess.run([sut.kosoku_bin(), "-c", str(conf)], capture_output=True, text=True, timeout=10)
        assert p.returncode == 1
        assert "Address already in use" in p.stderr
        assert k.get("/index.html").status == 200
    finally:
        assert k.stop() == 0


def test_bare_connect_close_and_resets_are_harmless(tmp):
    # Regression: a client that connects and closes without sending made the stream free itself inside its
    # own receive completion (use-after-free under ASan).
    k = Kosoku(tmp, workers=1)
    k.start()
    try:
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", k.port))
            if i % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        time.sleep(0.3)
        assert k.proc.poll() is None
        assert k.get("/index.html").status == 200
    finally:
        assert k.stop() == 0


def test_malformed_chunked_body_gets_400_and_close(tmp):
    k = Kosoku(tmp, workers=1)
    k.start()
    try:
        data = (b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
                b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        ex = sut.exchange(k.port, data)
        assert [r.status for r in ex.finals] == [400]
        assert ex.finals[0].header("connection") == "close"
        assert ex.closed
    finally:
        assert k.stop() == 0


def test_versions_methods_and_timeout_logging(tmp):
    k = Kosoku(tmp, workers=1, server="client_header_timeout 1s;")
    k.start()
    try:
        ex = sut.exchange(k.port, b"GET /index.html HTTP/1.2\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert ex.one().status == 200  # RFC 9110 §2.5: a higher HTTP/1 minor is processed as HTTP/1.1
        ex = sut.exchange(k.port, b"BREW /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert ex.one().status == 501  # RFC 9110 §9.1: unrecognised method
        with sut.Conn(k.port, timeout=5) as c:
            c.send(b"GET /index.html HTTP/1.1\r\nHo")
            assert c.wait_closed(4)
        time.sleep(0.2)
        assert "client timed out" in k.log() and "reading client request headers" in k.log()
    finally:
        assert k.stop() == 0


def test_sigterm_drains_in_flight_download(tmp):
    k = Kosoku(tmp, workers=1)
    blob = os.urandom(32 * 1024 * 1024)
    (k.www / "big.bin").write_bytes(blob)
    k.start()
    s = socket.create_connection(("127.0.0.1", k.port))
    s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    k.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # New connections are refused once it stops accepting...
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", k.port), timeout=1).sendall(b"x")
        raise OSError("accepted")  # pragma: no cover
    # ...but the in-flight response completes, byte for byte.
    data = first
    s.settimeout(10)
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        data += d
    body = data.split(b"\r\n\r\n", 1)[1]
    assert hashlib.sha256(body).digest() == hashlib.sha256(blob).digest()
    assert k.proc.wait(timeout=15) == 0


def test_sigusr1_reopens_access_log_and_sighup_is_a_noop(tmp):
    k = Kosoku(tmp, http=f"log_format t '$request $status'; access_log {tmp}/access.log t;", workers=1)
    k.start()
    try:
        assert k.get("/index.html").status == 200
        time.sleep(1.5)  # buffered access log: flushed at least once a second
        os.rename(tmp / "access.log", tmp / "access.log.1")
        k.proc.send_signal(signal.SIGUSR1)
        time.sleep(1.5)
        assert k.get("/missing").status == 404
        k.proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        assert k.proc.poll() is None and k.get("/index.html").status == 200
    finally:
        assert k.stop() == 0
    assert "GET /index.html HTTP/1.1 200" in (tmp / "access.log.1").read_text()
    assert "GET /missing HTTP/1.1 404" in (tmp / "access.log").read_text()
    assert "SIGHUP ignored" in k.log()


def test_slow_reader_memory_is_bounded(tmp):
    k = Kosoku(tmp, workers=1)
    (k.www / "huge.bin").write_bytes(b"\0" * (256 * 1024 * 1024))
    k.start()
    try:
        def rss_kb():
            for line in Path(f"/proc/{k.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
            return 0

        base = rss_kb()
        socks = []
        for _ in range(8):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", k.port))
            s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            socks.append(s)  # never read
        time.sleep(1.5)
        grown = rss_kb() - base
        # Two read buffers of min(sendfile_max_chunk, 256k) per connection, not the file (256 MiB each).
        assert grown < 8 * 1024 + 16 * 1024, f"RSS grew by {grown} KiB for 8 stalled downloads"
        for s in socks:
            s.close()
        assert k.get("/index.html").status == 200
    finally:
        assert k.stop() == 0


def test_version_and_static_binary():
    out = subprocess.run([sut.kosoku_bin(), "-V"], capture_output=True, text=True, check=True).stdout
    assert "kosoku/" in out and "build options" in out
    if "static" in out:
        ftype = subprocess.run(["file", "-L", sut.kosoku_bin()], capture_output=True, text=True).stdout
        assert "statically linked" in ftype


def test_arg_and_cookie_variables_in_return(tmp):
    k = Kosoku(tmp, workers=1, server='location /v { return 200 "a=$arg_a c=$cookie_sid\\n"; }')
    k.start()
    try:
        r = k.get("/v?b=2&A=hello", {"Cookie": "x=1; SID=abc"})
        assert r.status == 200 and r.body == b"a=hello c=abc\n"
        r = k.get("/v")
        assert r.body == b"a= c=\n"
    finally:
        assert k.stop() == 0


def _half_close_exchange(port, request: bytes, timeout: float):
    """Sends `request`, half-closes (FIN), reads to EOF; returns (bytes read, seconds to EOF)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    t0 = time.monotonic()
    s.sendall(request)
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    return data, time.monotonic() - t0


def test_half_closed_client_gets_eof_after_its_responses(tmp):
    # Regression (QA): a client that sent its request(s) and then shut down its writing side waited for
    # keepalive_timeout (75 s by default) after the response was complete; nginx closes at once.
    k = Kosoku(tmp, workers=1, server="keepalive_timeout 75s;")
    big = os.urandom(4 << 20)
    (k.www / "big.bin").write_bytes(big)
    k.start()
    try:
        one = b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n"
        data, took = _half_close_exchange(k.port, one, 10 * sut.SLOWDOWN)
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"<h1>home</h1>\n")
        assert took < 3 * sut.SLOWDOWN
        # Two pipelined requests then FIN: both answered, then EOF (the second says Connection: close).
        data, took = _half_close_exchange(k.port, one + b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n", 20 * sut.SLOWDOWN)
        assert data.count(b"HTTP/1.1 200") == 2
        assert data.endswith(big)
        assert took < 5 * sut.SLOWDOWN
        assert k.proc.poll() is None
    finally:
        assert k.stop() == 0


def test_listen_deferred_serves_immediate_and_late_requests(tmp):
    # `listen ... deferred` (TCP_DEFER_ACCEPT): the kernel hands over a connection once its request is in; a
    # client that writes its request a moment after connecting is still served.
    k = Kosoku(tmp, workers=1)
    k.conf.write_text(k.conf.read_text().replace(f"listen 127.0.0.1:{k.port};", f"listen 127.0.0.1:{k.port} deferred;"))
    k.start()
    try:
        assert k.get("/index.html").status == 200
        s = socket.create_connection(("127.0.0.1", k.port), timeout=10 * sut.SLOWDOWN)
        time.sleep(0.3)
        s.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"<h1>home</h1>\n")
        assert k.status()["requests"] >= 2
    finally:
        assert k.stop() == 0
