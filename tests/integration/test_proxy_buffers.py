"""proxy_buffer_size, proxy_buffers and proxy_busy_buffers_size (nginx's ngx_http_proxy_module) end to end: the
real server binary in front of a scripted python origin.

- the upstream's response head must fit in proxy_buffer_size: a bigger one is 502 with "upstream sent too big
  header" in the error log (default 4k, one page);
- large bodies (Content-Length, chunked, close-delimited) still pass byte-exact through tiny buffers, with and
  without proxy_buffering;
- the memory a proxied response uses is bounded by the buffers: clients that do not read leave the server's
  resident memory nearly unchanged while the origin has far more to send;
- the load-time checks (nginx's texts; kosoku adds file:line:col of the directive at fault).

The same tests run against nginx (SUT=nginx).
"""
from __future__ import annotations

import hashlib
import random
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut

BODY = random.Random(7).randbytes(8 << 20)
BODY_SHA = hashlib.sha256(BODY).hexdigest()
HUGE = 64 << 20  # the memory test's body (generated on the fly, never held)


class Origin(sut.ScriptedOrigin):
    """Answers GET /head?n=N with a response head of about N bytes (one long X-Pad field), /body?mode=length|
    chunked|close with BODY, and /huge with HUGE bytes of a repeating pattern (Content-Length)."""

    def serve(self, c: socket.socket) -> None:
        try:
            buf = sut.recv_request_head(c)
            if buf is None:
                return
            target = buf.split(b" ", 2)[1].decode()
            u = urllib.parse.urlsplit(target)
            q = dict(urllib.parse.parse_qsl(u.query))
            route = u.path.rstrip("/").rsplit("/", 1)[-1]
            if route == "head":
                n = int(q["n"])
                base = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\nX-Pad: \r\n\r\n"
                pad = "p" * max(0, n - len(base))
                c.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\nX-Pad: {pad}\r\n\r\nok"
                          .encode())
            elif route == "body":
                mode = q.get("mode", "length")
                if mode == "length":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY))
                    c.sendall(BODY)
                elif mode == "chunked":
                    c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
                    rnd, i = random.Random(3), 0
                    while i < len(BODY):
                        n = rnd.choice([1, 7, 100, 4095, 4096, 4097, 65536, 300_000])
                        piece = BODY[i:i + n]
                        c.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                        i += n
                    c.sendall(b"0\r\n\r\n")
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    c.sendall(BODY)
            elif route == "huge":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % HUGE)
                block, sent = bytes(range(256)) * 256, 0
                while sent < HUGE:
                    sent += c.send(block[: min(len(block), HUGE - sent)])
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):
                pass
        except OSError:
            pass


def config(port: int, origin: int) -> str:
    o = f"http://127.0.0.1:{origin}"
    return f"""
    server {{
        listen 127.0.0.1:{port} default_server;
        location / {{ proxy_pass {o}; }}
        location /small/ {{ proxy_pass {o}; proxy_buffer_size 1k; }}
        location /tiny/ {{
            proxy_pass {o}; proxy_buffer_size 1k; proxy_buffers 2 1k; proxy_busy_buffers_size 1k;
        }}
        location /tinynobuf/ {{ proxy_pass {o}; proxy_buffering off; proxy_buffer_size 1k; }}
        location /bounded/ {{ proxy_pass {o}; proxy_buffers 4 16k; proxy_busy_buffers_size 16k; }}
    }}
"""


@dataclass
class Env:
    port: int
    origin: Origin
    server: sut.ServerProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    origin = Origin()
    port = sut.free_port()
    work = tmp_path_factory.mktemp("proxybuf")
    srv = sut.ServerProcess(sut.SUT, Path(work), config(port, origin.port), [port])
    srv.start()
    yield Env(port, origin, srv)
    rc = srv.stop()
    origin.close()
    assert rc == 0, f"{sut.SUT} exited with {rc}\n" + srv.diagnostics()


def fetch(port: int, target: str, timeout: float = 60.0) -> tuple[int, bytes]:
    """GET target (HTTP/1.1, close); returns (status, body), the body de-chunked if needed, asserting that the
    response is complete."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while d := s.recv(1 << 20):
            chunks.append(d)
    finally:
        s.close()
    raw = b"".join(chunks)
    resp = sut.parse_response(raw, "GET", eof=True)
    assert resp is not None, f"incomplete response ({len(raw)} bytes): {raw[:200]!r}"
    return resp[0].status, resp[0].body


def wait_for_log(srv: sut.ServerProcess, text: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in (log := srv.error_log()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return log


def test_response_head_must_fit_in_proxy_buffer_size(env):
    port, srv = env.port, env.server
    # Default 4k (one page).
    status, body = fetch(port, "/x/head?n=3000")
    assert (status, body) == (200, b"ok")
    status, _ = fetch(port, "/x/head?n=6000")
    assert status == 502
    # proxy_buffer_size 1k.
    status, body = fetch(port, "/small/head?n=800")
    assert (status, body) == (200, b"ok")
    status, _ = fetch(port, "/small/head?n=1500")
    assert status == 502
    log = wait_for_log(srv, "upstream sent too big header while reading response header from upstream")
    lines = [ln for ln in log.splitlines() if "upstream sent too big header" in ln]
    assert len(lines) == 2, lines
    assert all("[error]" in ln and 'request: "GET /' in ln for ln in lines), lines
    assert any("/small/head?n=1500" in ln for ln in lines), lines


@pytest.mark.parametrize("where", ["/tiny/", "/tinynobuf/", "/"])
@pytest.mark.parametrize("mode", ["length", "chunked", "close"])
def test_large_bodies_are_byte_exact_through_small_buffers(env, where, mode):
    port = env.port
    status, body = fetch(port, f"{where}body?mode={mode}")
    assert status == 200
    assert len(body) == len(BODY) and hashlib.sha256(body).hexdigest() == BODY_SHA


def rss_bytes(srv: sut.ServerProcess) -> int:
    """Resident memory of the server and its child processes (nginx's workers)."""
    pid = srv.proc.pid
    pids = [pid]
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = st.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            pids.append(int(st.parent.name))
    total = 0
    for p in pids:
        try:
            for ln in Path(f"/proc/{p}/status").read_text().splitlines():
                if ln.startswith("VmRSS:"):
                    total += int(ln.split()[1]) * 1024
        except OSError:
            pass
    return total


def test_memory_stays_bounded_while_clients_do_not_read(env):
    """8 clients ask for 64 MiB each and read nothing for a while: the server holds at most its buffers (4 × 16k
    each) plus socket buffers, never the bodies; afterwards every byte arrives. (nginx also passes: what does
    not fit in its buffers goes to a temp file on disk; kosoku has none and stops reading the origin.)"""
    port, srv = env.port, env.server
    clients = 8
    before = rss_bytes(srv)
    socks = []
    for _ in range(clients):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        s.sendall(b"GET /bounded/huge HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        socks.append(s)
    time.sleep(1.5)
    peak = rss_bytes(srv)
    for _ in range(5):
        time.sleep(0.2)
        peak = max(peak, rss_bytes(srv))
    growth = peak - before
    # Unbounded buffering would hold up to 8 × 64 MiB; the rings are 8 × 64 KiB.
    assert growth < 24 << 20, f"resident memory grew by {growth} bytes (before {before})"
    # Then the clients read everything: complete and byte-exact (the pattern repeats every 256 bytes).
    pattern = bytes(range(256))

    def drain(s: socket.socket, out: list) -> None:
        buf = bytearray()
        while d := s.recv(1 << 20):
            buf += d
        s.close()
        out.append(bytes(buf))

    results: list[bytes] = []
    threads = [threading.Thread(target=drain, args=(s, results)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == clients
    for raw in results:
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:100]
        assert len(body) == HUGE
        assert body[:256] == pattern and body[-256:] == pattern
        assert hashlib.sha256(body).digest() == hashlib.sha256(pattern * (HUGE // 256)).digest()


CHECKS = [
    ("proxy_buffers 1 4k;", 'there must be at least 2 "proxy_buffers"', "1 4k"),
    ("proxy_buffers 0 4k;", 'invalid value', "0 4k"),
    ("proxy_buffers 8 4k; proxy_buffer_size 8k; proxy_busy_buffers_size 4k;",
     '"proxy_busy_buffers_size" must be equal to or greater than the maximum of the value of "proxy_buffer_size" '
     'and one of the "proxy_buffers"', "proxy_busy_buffers_size"),
    ("proxy_buffer_size 16k;",
     '"proxy_busy_buffers_size" must be less than the size of all "proxy_buffers" minus one buffer',
     "proxy_buffer_size"),
    ("proxy_buffers 4 4k; proxy_busy_buffers_size 16k;",
     '"proxy_busy_buffers_size" must be less than the size of all "proxy_buffers" minus one buffer',
     "proxy_busy_buffers_size"),
]


@pytest.mark.parametrize("directives,message,culprit", CHECKS)
def test_buffer_sizes_are_checked_at_load(tmp_path, directives, message, culprit):
    body = ("server {\n    listen 127.0.0.1:1;\n    location / {\n        proxy_pass http://127.0.0.1:2;\n"
            f"        {directives}\n    }}\n}}")
    p = sut.ServerProcess(sut.SUT, tmp_path, body, [])
    r = p.check_config()
    err = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode != 0, err
    assert message in err, err
    if sut.SUT == "kosoku":
        lines = p.conf_text.splitlines()
        line = next(i for i, ln in enumerate(lines) if directives in ln) + 1
        col = lines[line - 1].index(culprit) + 1
        assert re.search(rf"{re.escape(str(p.conf_path))}:{line}:{col}: ", err), err


def test_buffer_sizes_accepted_at_the_limits(tmp_path):
    body = ("server {\n    listen 127.0.0.1:1;\n    proxy_buffers 4 4k;\n    location / {\n"
            "        proxy_pass http://127.0.0.1:2; proxy_busy_buffers_size 12k;\n    }\n"
            "    location /b/ { proxy_pass http://127.0.0.1:2; proxy_buffering off; proxy_buffer_size 6k; }\n}")
    r = sut.ServerProcess(sut.SUT, tmp_path, body, []).check_config()
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")
