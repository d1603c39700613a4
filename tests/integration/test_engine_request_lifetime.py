"""A request's lifetime on a connection (core/http/http_request.hh, connection_impl.hh): each request is an object
of its own with its content state, freed once its response is complete and the stream has sent the bytes the
state lent it by reference. The proxy's relay ring and the cache's read buffers are such bytes: a slow client
that pipelines proxied, cached and static requests behind each other gets every body byte-exact while the
connection goes on to the next request long before the previous response has left. Under a sanitizer (make
test runs this file's tests on the ASan build) a request freed too early is a use-after-free report.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time

import pytest

import sut
from test_engine import Kosoku

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's request objects")

BIG = (1 << 20) + 4321  # past the proxy's buffers and the cache's read chunk: bytes go out by reference


def body_of(name: str, size: int) -> bytes:
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


class SizedOrigin(sut.ScriptedOrigin):
    """GET /ANY/NAME?SIZE: SIZE bytes derived from NAME, cacheable for a minute; keep-alive."""

    def serve(self, c: socket.socket) -> None:
        buf = b""
        while (got := sut.next_request_head(c, buf)) is not None:
            head, buf = got
            target = head.split(b" ", 2)[1].decode()
            path, _, size = target.partition("?")
            body = body_of(path.rsplit("/", 1)[1], int(size or 100))
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Cache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


@pytest.fixture
def tmp(tmp_path):
    os.chmod(tmp_path, 0o755)
    return tmp_path


def read_slowly(s: socket.socket, methods: list[str], timeout: float) -> list[sut.Response]:
    """Reads the final responses to `methods`, 16 KiB at a time with a pause: the server's output stays queued
    for a while behind each response."""
    out: list[sut.Response] = []
    buf = b""
    deadline = time.monotonic() + timeout
    while len(out) < len(methods) and time.monotonic() < deadline:
        d = s.recv(16384)
        if not d:
            break
        buf += d
        while len(out) < len(methods) and (r := sut.parse_response(buf, methods[len(out)])) is not None:
            resp, n = r
            buf = buf[n:]
            if not resp.interim:
                out.append(resp)
        time.sleep(0.002)
    return out


def test_engine_pipelined_proxy_cache_and_static_bodies_outlive_their_requests(tmp):
    origin = SizedOrigin()
    k = Kosoku(tmp, workers=1, http=f"""
    access_log off;
    proxy_cache_path {tmp}/cache levels=1:2 keys_zone=z:1m;
    upstream o {{ server 127.0.0.1:{origin.port}; keepalive 4; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffer_size 16k;
    proxy_buffers 4 16k;
""", server="""
        location /p/ { proxy_pass http://o; }
        location /c/ {
            proxy_pass http://o; proxy_cache z; proxy_cache_valid 200 1m;
            add_header X-Cache-Status $upstream_cache_status;
        }
""")
    (k.www / "static.bin").write_bytes(body_of("static.bin", BIG))
    k.start()
    try:
        # The cache entry first (its MISS is a passed-through response), so that the pipeline below reads it
        # from disk.
        with sut.Conn(k.port, timeout=10, record_io=False) as c:
            c.send(f"GET /c/cached?{BIG} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
            r = c.read_response(timeout=20)
        assert r is not None and r.status == 200 and r.body == body_of("cached", BIG)
        # The fill commits through the disk queue and may land just after the client has the whole answer (on a
        # loaded host, measurably): wait for the entry, which is what the pipeline below needs.
        deadline = time.monotonic() + 10 * sut.SLOWDOWN
        while sut.request(k.port, "HEAD", f"/c/cached?{BIG}", host="t").header("X-Cache-Status") != "HIT":
            assert time.monotonic() < deadline, "the cache entry was never committed"
            time.sleep(0.05)
        want = [
            ("GET", f"/p/one?{BIG}", body_of("one", BIG)),
            ("GET", "/static.bin", body_of("static.bin", BIG)),
            ("GET", f"/c/cached?{BIG}", body_of("cached", BIG)),
            ("HEAD", f"/p/two?{BIG}", b""),
            ("GET", f"/p/three?{BIG}", body_of("three", BIG)),
            ("GET", f"/c/cached?{BIG}", body_of("cached", BIG)),
            ("GET", "/index.html", b"<h1>home</h1>\n"),
            ("GET", f"/p/four?{BIG}", body_of("four", BIG)),
        ]
        for _ in range(2):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            s.settimeout(30)
            s.connect(("127.0.0.1", k.port))
            s.sendall("".join(f"{m} {t} HTTP/1.1\r\nHost: t\r\n\r\n" for m, t, _ in want).encode())
            rs = read_slowly(s, [m for m, _, _ in want], 60 * sut.SLOWDOWN)
            s.close()
            assert [r.status for r in rs] == [200] * len(want), [r.status for r in rs]
            for (m, t, body), r in zip(want, rs):
                assert r.body == body, (m, t, len(r.body), len(body))
            # The cached ones came from the entry on disk (its reads are the bytes lent by reference).
            assert [r.header("X-Cache-Status") for r in rs] == [
                "HIT" if t.startswith("/c/") else None for _, t, _ in want]
        deadline = time.monotonic() + 10 * sut.SLOWDOWN
        client = lambda c: (c["reading"], c["writing"], c["waiting"])  # noqa: E731 (upstream ones are not here)
        while client(conns := k.status()["connections"]) != (0, 1, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client(conns) == (0, 1, 0), conns  # the status request's own: the pipelining clients are gone
    finally:
        rc = k.stop()
        err = k.proc.stderr.read().decode(errors="replace")
        origin.close()
    assert "Sanitizer" not in err and "runtime error:" not in err, err[-6000:]
    assert rc == 0, f"kosoku exited {rc}\n{err[-6000:]}"
