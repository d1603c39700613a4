"""End-to-end tests of the reverse proxy (proxy_pass, upstream groups): the real server binary in front of
scripted python origins that count connections and requests, and can delay, answer chunked, cut a response
off mid-body, answer 502, close without answering, or send hop-by-hop fields.

The same config runs against nginx (SUT=nginx) except where kosoku knowingly differs (sut.nginx_deviation).
Shared-cases covered here: C01 B, C02 C, C19 2 (../shared/cases/http-conformance.md).
"""
from __future__ import annotations

import bisect
import collections
import hashlib
import json
import random
import socket
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

import sut

BIG = 32 << 20
_big_cache: dict[str, bytes] = {}


def big_bytes() -> bytes:
    if "b" not in _big_cache:
        _big_cache["b"] = random.Random(32).randbytes(BIG)
    return _big_cache["b"]


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# ------------------------------------------------------------------------------------------------------------
# The scripted origin.


class Reader:
    """Buffered reads of HTTP/1.1 messages from a socket, hashing bodies instead of keeping them."""

    def __init__(self, s: socket.socket):
        self.s, self.buf, self.pos = s, bytearray(), 0

    def _fill(self) -> None:
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError
        if self.pos > (1 << 20):
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += d

    def readline(self) -> bytes:
        while (i := self.buf.find(b"\r\n", self.pos)) < 0:
            self._fill()
        line, self.pos = bytes(self.buf[self.pos:i]), i + 2
        return line

    def read(self, n: int, digest) -> None:
        while n:
            if self.pos == len(self.buf):
                self._fill()
            take = min(n, len(self.buf) - self.pos)
            digest.update(self.buf[self.pos:self.pos + take])
            self.pos += take
            n -= take

    def head(self) -> tuple[str, list[tuple[str, str]]]:
        """The start line and the fields of the next message."""
        start, fields = self.readline().decode("latin-1"), []
        while (h := self.readline()) != b"":
            k, _, v = h.decode("latin-1").partition(":")
            fields.append((k.strip(), v.strip()))
        return start, fields

    def body(self, fields: list[tuple[str, str]], digest) -> tuple[int, bool]:
        """Reads a Content-Length or chunked body into digest; returns (length, chunked)."""
        te = [v for k, v in fields if k.lower() == "transfer-encoding"]
        cl = [v for k, v in fields if k.lower() == "content-length"]
        n = 0
        if te:
            while (size := int(self.readline().split(b";")[0], 16)) != 0:
                self.read(size, digest)
                n += size
                assert self.readline() == b""
            while self.readline() != b"":
                pass
        elif cl:
            n = int(cl[0])
            self.read(n, digest)
        return n, bool(te)


@dataclass
class OriginRequest:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body_len: int
    body_sha: str
    chunked: bool
    conn_id: int

    def header(self, name: str) -> Optional[str]:
        v = [b for a, b in self.headers if a.lower() == name.lower()]
        return ", ".join(v) if v else None

    def has(self, name: str) -> bool:
        return any(a.lower() == name.lower() for a, _ in self.headers)

    @property
    def route(self) -> str:
        """The behaviour: "echo" anywhere in the path, else the last path segment."""
        path = urllib.parse.urlsplit(self.target).path
        return "echo" if "echo" in path.split("/") else path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.target).query))


# Canned answers: route -> (raw bytes, keep the connection open afterwards).
RAW = {
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
                b"5\r\nhello\r\n1\r\n \r\n6;ext=1\r\nworld!\r\n0\r\nX-Trailer: t\r\n\r\n", True),
    "cut": (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 50000, False),
    "cutchunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ndata\r\n4\r\nmore\r\n", False),
    "closedelimited": (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end", False),
    "http10": (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nold style body", False),
    "noanswer": (b"", False),
    "garbage": (b"THIS IS NOT HTTP\r\n\r\n", False),
    "interim": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nafter interim", True),
    "head304": (b'HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n', True),
    "interimcc": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\nCache-Control: no-store\r\n"
                  b"\r\nHTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 13\r\n\r\nafter interim", True),
}
HOP_HEADERS = [
    ("Connection", "X-Secret, keep-alive"), ("X-Secret", "hop-only"), ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"), ("Trailer", "X-T"), ("Upgrade", "h2c"), ("Server", "origin-server/1.0"),
    ("Date", "Mon, 01 Jan 2001 00:00:00 GMT"), ("X-Pad", "avoid"), ("X-Accel-Buffering", "yes"),
    ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Kept", "yes"), ("ETag", '"e1"'),
    ("Last-Modified", "Tue, 02 Jan 2001 00:00:00 GMT"), ("Content-Type", "text/plain"), ("Cache-Control", "max-age=60")]


class Origin:
    """A threaded raw-socket HTTP/1.1 origin. Behaviour is chosen by the route (OriginRequest.route) and query
    parameters (delay=MS, code=N); everything it receives is recorded."""

    def __init__(self, name: str):
        self.name = name
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.requests: list[OriginRequest] = []
        self.connections = 0
        self.aborted: list[str] = []  # targets whose connection the proxy closed before the answer was out
        self.open_conns: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.connections = 0
            self.aborted.clear()

    def hits(self, route: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.route == route)

    def last(self, route: str) -> OriginRequest:
        with self.lock:
            rs = [r for r in self.requests if r.route == route]
        assert rs, f"origin {self.name} never received route {route!r}: {[r.target for r in self.requests]}"
        return rs[-1]

    def targets(self) -> list[str]:
        with self.lock:
            return [r.target for r in self.requests]

    def close_idle(self) -> None:
        """Closes every connection (as an origin whose keep-alive timer expired)."""
        with self.lock:
            conns = list(self.open_conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                cid = self.connections
                self.open_conns.add(c)
            threading.Thread(target=self._serve, args=(c, cid), daemon=True).start()

    def _serve(self, c: socket.socket, cid: int) -> None:
        r = Reader(c)
        try:
            while True:
                start, headers = r.head()
                method, target, version = start.split(" ")
                d = hashlib.sha256()
                if "/stall" in target:  # never reads the body: the proxy's send timeout must fire
                    time.sleep(5)
                    return
                n, chunked = r.body(headers, d)
                req = OriginRequest(method, target, version, headers, n, d.hexdigest(), chunked, cid)
                with self.lock:
                    self.requests.append(req)
                client_close = "close" in (req.header("connection") or "").lower() or version == "HTTP/1.0"
                if not self._answer(c, req) or client_close:
                    return
        except (OSError, EOFError, ValueError):
            return
        finally:
            with self.lock:
                self.open_conns.discard(c)
            c.close()

    def _aborted(self, req: OriginRequest) -> bool:
        with self.lock:
            self.aborted.append(req.target)
        return False

    def _wait(self, c: socket.socket, seconds: float, req: OriginRequest) -> bool:
        """Sleeps, noticing if the proxy closes the connection meanwhile. False if it did."""
        deadline = time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                c.settimeout(min(left, 0.05))
                try:
                    if c.recv(1, socket.MSG_PEEK) == b"":
                        return self._aborted(req)
                except socket.timeout:
                    pass
        except OSError:
            return self._aborted(req)
        finally:
            c.settimeout(None)
        return True

    def _answer(self, c: socket.socket, req: OriginRequest) -> bool:
        q, route = req.query, req.route
        if "delay" in q and not self._wait(c, int(q["delay"]) / 1000, req):
            return False
        if route in RAW:
            data, keep = RAW[route]
            c.sendall(data)
            return keep
        if route == "interimslow":  # interim responses in separate writes, then the final one
            for part in (b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n",
                         b"\r\n", b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 12\r\n\r\n",
                         b"final answer"):
                c.sendall(part)
                time.sleep(0.1)
            return True
        base = [("X-Origin", self.name), ("X-Conn", str(req.conn_id))]
        if route == "bigchunked":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            data, step = big_bytes(), 100_000
            for i in range(0, len(data), step):
                c.sendall(b"%x\r\n" % len(data[i:i + step]) + data[i:i + step] + b"\r\n")
            c.sendall(b"0\r\n\r\n")
            return True
        status, headers, body = "200 OK", [], f"route {route}".encode()
        if route == "echo":
            headers = [("Content-Type", "application/json")]
            body = json.dumps({"method": req.method, "target": req.target, "version": req.version,
                               "headers": req.headers, "body_len": req.body_len, "body_sha": req.body_sha,
                               "chunked": req.chunked, "origin": self.name}).encode()
        elif route == "big":
            body = big_bytes()
        elif route == "status":
            status, headers, body = f"{q.get('code', '502')} Scripted", [("Content-Type", "text/plain")], b"upstream broke"
        elif route == "flaky":  # "o2" answers 502, "o1" answers 200 (proxy_next_upstream http_502)
            status, body = ("502 Bad Gateway", b"o2 is broken") if self.name == "o2" else ("200 OK", b"o1 ok")
        elif route == "hop":
            headers, body = HOP_HEADERS, b"hop body"
        elif route == "redirect":
            status, body = "302 Found", b"moved"
            headers = [("Location", q["loc"]), ("Refresh", f"3; url={q['loc']}")]
        else:
            headers = [("Cache-Control", "max-age=60"), ("Content-Type", "text/plain")]
            if route in ("c01", "c02"):
                body = b"ok"
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in base + headers)
        head += f"Content-Length: {len(body)}\r\n\r\n"
        try:
            c.sendall(head.encode("latin-1") + (b"" if req.method == "HEAD" else body))
        except OSError:
            return self._aborted(req)
        return True


# ------------------------------------------------------------------------------------------------------------
# Fixture: two origins, a dead port, and the SUT.


@dataclass
class Env:
    port: int
    o1: Origin
    o2: Origin
    dead: int
    server: sut.ServerProcess

    def origins(self) -> list[Origin]:
        return [self.o1, self.o2]

    def reset(self) -> None:
        self.o1.reset()
        self.o2.reset()


UPSTREAM_LOG = ("'$request_uri|$upstream_addr|$upstream_status|$upstream_response_time|$upstream_connect_time|"
                "$upstream_header_time|$upstream_response_length'")


def proxy_config(port: int, o1: int, o2: int, dead: int, hole: int, work: Path) -> str:
    return f"""
    client_max_body_size 64m;
    log_format upstream {UPSTREAM_LOG};
    proxy_cache_path {work}/pc levels=1:2 keys_zone=pc:1m;
    upstream logpair {{ server 127.0.0.1:{dead} max_fails=0; server 127.0.0.1:{o1} max_fails=0; }}
    upstream named {{ server localhost:{o1}; keepalive 4; }}
    upstream ka {{ server 127.0.0.1:{o1}; keepalive 8; }}
    upstream rr {{ server 127.0.0.1:{o1}; server 127.0.0.1:{o2}; }}
    upstream failover {{ server 127.0.0.1:{dead} max_fails=1 fail_timeout=30s; server 127.0.0.1:{o1}; }}
    upstream flakypair {{ server 127.0.0.1:{o2} max_fails=0; server 127.0.0.1:{o1} max_fails=0; }}
    upstream flakypair2 {{ server 127.0.0.1:{o2} max_fails=0; server 127.0.0.1:{o1} max_fails=0; }}
    upstream retrypair {{ server 127.0.0.1:{o1} max_fails=0; server 127.0.0.1:{o2} max_fails=0; }}
    upstream weighted {{ server 127.0.0.1:{o1} weight=3; server 127.0.0.1:{o2}; }}
    upstream hashed {{ hash $request_uri consistent; server 127.0.0.1:{o1}; server 127.0.0.1:{o2}; }}
    upstream withbackup {{ server 127.0.0.1:{dead}; server 127.0.0.1:{o2} backup; }}
    upstream allfail {{
        server 127.0.0.1:{dead} max_fails=1 fail_timeout=30s; server 127.0.0.2:{dead} max_fails=1 fail_timeout=30s;
    }}
    upstream alldown {{ server 127.0.0.1:{o1} down; server 127.0.0.1:{o2} down; }}

    server {{
        listen 127.0.0.1:{port} default_server;
        server_name proxy.example.com;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        location / {{ proxy_pass http://127.0.0.1:{o1}; }}
        location /ka/ {{ proxy_pass http://ka; proxy_http_version 1.1; proxy_set_header Connection ""; }}
        location /v11/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_http_version 1.1; }}
        location /rr/ {{ proxy_pass http://rr; }}
        location /weighted/ {{ proxy_pass http://weighted; }}
        location /hashed/ {{ proxy_pass http://hashed; }}
        location /failover/ {{ proxy_pass http://failover; }}
        location /backup/ {{ proxy_pass http://withbackup; }}
        location /dead/ {{ proxy_pass http://127.0.0.1:{dead}; }}
        location /timeout/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_read_timeout 1s; proxy_send_timeout 1s; }}
        location /hole/ {{ proxy_pass http://127.0.0.1:{hole}; proxy_connect_timeout 1s; }}
        location /prefix/ {{ proxy_pass http://127.0.0.1:{o1}/echo/sub/; }}
        location = /exact {{ proxy_pass http://127.0.0.1:{o1}/echo; }}
        location /nobuf/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_buffering off; }}
        location /flaky/ {{ proxy_pass http://flakypair; proxy_next_upstream error timeout http_502; }}
        location /flakyoff/ {{ proxy_pass http://flakypair2; proxy_next_upstream off; }}
        location /retry/ {{ proxy_pass http://retrypair; }}
        location /hosted/ {{
            proxy_pass http://127.0.0.1:{o1}; proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr; proxy_set_header Accept-Encoding "";
        }}
        location /nobody/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_pass_request_body off; }}
        location /noheaders/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_pass_request_headers off; }}
        location /hide/ {{ proxy_pass http://127.0.0.1:{o1}; proxy_hide_header X-Kept; proxy_pass_header X-Pad; }}
        location /logged/ {{
            proxy_pass http://logpair;
            access_log {work}/upstream.log upstream;
            add_header X-Up "$upstream_addr|$upstream_status|$upstream_connect_time";
        }}
        location = /noupstream {{ return 200 "local"; access_log {work}/upstream.log upstream; }}
        location /named/ {{ proxy_pass http://named; proxy_http_version 1.1; proxy_set_header Connection ""; }}
        location /nolive/ {{ proxy_pass http://allfail; access_log {work}/upstream.log upstream; }}
        location /alldown/ {{ proxy_pass http://alldown; access_log {work}/upstream.log upstream; }}
        location /byname/ {{ proxy_pass http://localhost:{o1}; access_log {work}/upstream.log upstream; }}
        location /rd/ {{ proxy_pass http://127.0.0.1:{o1}/one/; }}
        location /rdplain/ {{ proxy_pass http://127.0.0.1:{o1}; }}
        location /rdtext/ {{
            proxy_pass http://127.0.0.1:{o1};
            proxy_redirect http://internal.example/ http://$host/ext/;
            proxy_redirect ~^https://cdn\\.internal/([a-z]+)/(.*)$ /cdn/$2?bucket=$1;
        }}
        location /rdoff/ {{ proxy_pass http://127.0.0.1:{o1}/one/; proxy_redirect off; }}
        location /cached/ {{
            proxy_pass http://127.0.0.1:{o1};
            proxy_cache pc;
            proxy_cache_lock on;
            add_header X-Cache $upstream_cache_status;
        }}
    }}
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    o1, o2 = Origin("o1"), Origin("o2")
    dead, port = sut.free_port(), sut.free_port()
    # A listener whose accept queue is full: SYNs to it go unanswered, so connects hang (connect timeout).
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    fillers = [socket.socket() for _ in range(3)]
    for f in fillers:
        f.setblocking(False)
        f.connect_ex(hole.getsockname())
    work = tmp_path_factory.mktemp("proxy")
    srv = sut.ServerProcess(sut.SUT, Path(work),
                            proxy_config(port, o1.port, o2.port, dead, hole.getsockname()[1], Path(work)), [port])
    srv.start()
    e = Env(port, o1, o2, dead, srv)
    yield e
    rc = srv.stop()
    for x in [o1, o2, hole] + fillers:
        x.close() if isinstance(x, socket.socket) else x.stop()
    assert rc == 0, f"{sut.SUT} exited with {rc}\n" + srv.diagnostics()


@pytest.fixture(autouse=True)
def _fresh(env):
    env.reset()
    assert env.server.alive(), env.server.diagnostics()
    yield
    assert env.server.alive(), "server died during the test\n" + env.server.diagnostics()


def get(env: Env, target: str, method: str = "GET", headers=(), body: bytes = b"",
        host: str = "proxy.example.com", timeout: float = 10.0) -> sut.Response:
    return sut.request(env.port, method, target, host=host, headers=headers, body=body, timeout=timeout)


def echo(resp: sut.Response) -> dict:
    assert resp.status == 200, resp
    return json.loads(resp.body)


def hdr(d: dict, name: str) -> list[str]:
    return [v for k, v in d["headers"] if k.lower() == name.lower()]


def stream_exchange(port: int, request, timeout: float = 60.0):
    """For the 32 MiB transfers (sut.Conn keeps everything in memory): sends request (bytes, or an iterable of
    bytes), reads one response hashing its body.
    Returns (status, fields lower-cased, body length, body sha256, chunked, complete)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        for piece in [request] if isinstance(request, bytes) else request:
            s.sendall(piece)
        r = Reader(s)
        start, fields = r.head()
        headers: dict[str, list[str]] = collections.defaultdict(list)
        for k, v in fields:
            headers[k.lower()].append(v)
        d = hashlib.sha256()
        try:
            n, chunked = r.body(fields, d)
            complete = True
        except (EOFError, ConnectionResetError):
            n, chunked, complete = -1, False, False
        return int(start.split(" ")[1]), headers, n, d.hexdigest(), chunked, complete
    finally:
        s.close()


# ------------------------------------------------------------------------------------------------------------
# Basic forwarding.


def test_get_forwards_request_line_and_default_headers(env):
    resp = get(env, "/echo?x=1&y=%20z", headers=[("User-Agent", "itest"), ("Accept", "*/*")])
    d = echo(resp)
    assert d["method"] == "GET"
    assert d["target"] == "/echo?x=1&y=%20z"  # as received, undecoded
    assert d["version"] == "HTTP/1.0"          # proxy_http_version default
    assert hdr(d, "Host") == [f"127.0.0.1:{env.o1.port}"]  # $proxy_host
    assert hdr(d, "Connection") == ["close"]
    assert hdr(d, "User-Agent") == ["itest"]
    assert resp.header("X-Origin") == "o1"
    assert resp.header("Content-Type") == "application/json"


def test_head_and_304_have_no_body_and_keep_the_connection(env):
    with sut.Conn(env.port) as c:
        c.send(b"HEAD /echo HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n"
               b"GET /head304 HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n"
               b"GET /plain HTTP/1.1\r\nHost: proxy.example.com\r\nConnection: close\r\n\r\n")
        rs = c.read_responses(3, ["HEAD", "GET", "GET"], timeout=10)
    assert [r.status for r in rs] == [200, 304, 200]
    assert rs[0].body == b"" and int(rs[0].header("Content-Length")) > 0
    assert rs[1].body == b"" and rs[1].header("ETag") == '"x"'
    assert rs[2].body == b"route plain"
    assert env.o1.last("echo").method == "HEAD"


def test_post_content_length_body(env):
    body = b"a=1&b=" + b"x" * 5000
    d = echo(get(env, "/echo", "POST", headers=[("Content-Type", "application/x-www-form-urlencoded")], body=body))
    assert d["body_len"] == len(body) and d["body_sha"] == sha(body)
    assert hdr(d, "Content-Length") == [str(len(body))]
    assert hdr(d, "Transfer-Encoding") == []
    assert hdr(d, "Content-Type") == ["application/x-www-form-urlencoded"]
    d = echo(get(env, "/echo", "POST", headers=[("Content-Length", "0")]))
    assert d["body_len"] == 0 and hdr(d, "Content-Length") == ["0"]


def test_small_chunked_request_body_is_forwarded_with_content_length(env):
    raw = (b"POST /echo HTTP/1.1\r\nHost: proxy.example.com\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n")
    ex = sut.exchange(env.port, raw, timeout=10)
    d = echo(ex.one())
    assert d["body_len"] == 11 and d["body_sha"] == sha(b"hello world")
    assert hdr(d, "Content-Length") == ["11"]
    assert hdr(d, "Transfer-Encoding") == []  # never both framings


def _chunked(body: bytes, step: int = 10_000) -> bytes:
    out = bytearray()
    for i in range(0, len(body), step):
        piece = body[i:i + step]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return bytes(out + b"0\r\n\r\n")


def test_large_chunked_request_body_is_rechunked_with_http11(env):
    sut.nginx_deviation("nginx buffers the whole body (proxy_request_buffering on) and sends Content-Length")
    body = random.Random(5).randbytes(1 << 20)
    raw = (b"POST /v11/echo HTTP/1.1\r\nHost: proxy.example.com\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: close\r\n\r\n" + _chunked(body))
    d = echo(sut.exchange(env.port, raw, timeout=20).one())
    assert d["body_len"] == len(body) and d["body_sha"] == sha(body)
    assert d["chunked"] is True
    assert hdr(d, "Content-Length") == []


def test_large_chunked_request_body_with_http10_upstream_is_411(env):
    sut.nginx_deviation("nginx buffers the body to a temp file and sends Content-Length")
    body = b"z" * (200 << 10)
    raw = (b"POST /echo HTTP/1.1\r\nHost: proxy.example.com\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: close\r\n\r\n" + _chunked(body))
    resp = sut.exchange(env.port, raw, timeout=10).finals[0]
    assert resp.status == 411
    assert env.o1.hits("echo") == 0


def test_expect_100_continue(env):
    with sut.Conn(env.port, timeout=10) as c:
        c.send(b"PUT /echo HTTP/1.1\r\nHost: proxy.example.com\r\nContent-Length: 4\r\n"
               b"Expect: 100-continue\r\n\r\n")
        rs = c.read_responses(1, timeout=5)
        assert rs and rs[0].status == 100, rs
        c.send(b"data")
        final = c.read_response(timeout=10)
    d = echo(final)
    assert d["method"] == "PUT" and d["body_sha"] == sha(b"data")
    assert hdr(d, "Expect") == []  # handled by the proxy, not forwarded


def test_request_uri_with_proxy_pass_uri_part(env):
    d = echo(get(env, "/prefix/a%20b/c%3F.txt?q=1&r=%2F"))
    # The location prefix /prefix/ is replaced by /echo/sub/; the decoded rest is escaped again.
    assert d["target"] == "/echo/sub/a%20b/c%3F.txt?q=1&r=%2F"
    d = echo(get(env, "/exact?k=v"))
    assert d["target"] == "/echo?k=v"


def test_x_forwarded_for_appends_client_address(env):
    d = echo(get(env, "/echo", headers=[("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-For", "10.1.1.1")]))
    assert hdr(d, "X-Forwarded-For") == ["203.0.113.7, 10.1.1.1, 127.0.0.1"]
    d = echo(get(env, "/echo"))
    assert hdr(d, "X-Forwarded-For") == ["127.0.0.1"]


def test_proxy_set_header_host_and_empty_value_removal(env):
    d = echo(get(env, "/hosted/echo", host="Proxy.Example.com:8080",
                 headers=[("Accept-Encoding", "gzip"), ("X-Real-IP", "1.1.1.1")]))
    assert hdr(d, "Host") == ["Proxy.Example.com:8080"]
    assert hdr(d, "X-Real-IP") == ["127.0.0.1"]  # set header replaces the client's
    assert hdr(d, "Accept-Encoding") == []         # "" removes the field
    # proxy_set_header at server level is not inherited into a location that has its own list (nginx).
    assert hdr(d, "X-Forwarded-For") == []


def test_pass_request_headers_off_and_pass_request_body_off(env):
    d = echo(get(env, "/noheaders/echo", headers=[("X-Client", "1")]))
    assert hdr(d, "X-Client") == [] and hdr(d, "Host") == [f"127.0.0.1:{env.o1.port}"]
    sut.nginx_deviation("with proxy_pass_request_body off nginx still sends the client's Content-Length "
                        "(its docs say to add proxy_set_header Content-Length \"\"), so the origin waits for a body")
    d = echo(get(env, "/nobody/echo", "POST", body=b"secret-body"))
    assert d["body_len"] == 0 and hdr(d, "Content-Length") == []


# ------------------------------------------------------------------------------------------------------------
# Hop-by-hop fields.


def test_hop_by_hop_request_fields_are_removed(env):
    sut.nginx_deviation("nginx forwards fields named in the client's Connection header and Proxy-* "
                        "(RFC 9110 §7.6.1: a proxy MUST remove them)")
    d = echo(get(env, "/v11/echo", headers=[
        ("Connection", "X-Drop-Me, keep-alive"), ("X-Drop-Me", "1"), ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"), ("Upgrade", "websocket"), ("Proxy-Authorization", "Basic eA=="),
        ("Proxy-Connection", "keep-alive"), ("Trailer", "X-T"), ("X-Keep-Me", "2")]))
    names = {k.lower() for k, _ in d["headers"]}
    for gone in ("x-drop-me", "keep-alive", "te", "upgrade", "proxy-authorization", "proxy-connection", "trailer"):
        assert gone not in names, (gone, d["headers"])
    assert hdr(d, "X-Keep-Me") == ["2"]
    assert hdr(d, "Connection") == ["close"]


def test_hop_by_hop_and_hidden_response_fields_are_removed(env):
    resp = get(env, "/hop")
    assert resp.status == 200 and resp.body == b"hop body"
    sut.nginx_deviation("nginx passes fields named in the upstream's Connection header, Proxy-Connection and "
                        "Trailer (RFC 9110 §7.6.1: a proxy MUST remove them)")
    for gone in ("X-Secret", "Keep-Alive", "Proxy-Connection", "Trailer", "Upgrade", "X-Pad", "X-Accel-Buffering"):
        assert not resp.has(gone), (gone, resp.headers)
    assert resp.header_list("Server") != ["origin-server/1.0"]  # the proxy's own Server and Date
    assert "2001" not in (resp.header("Date") or "")
    assert resp.header_list("Set-Cookie") == ["a=1", "b=2"]
    assert resp.header("X-Kept") == "yes"
    assert resp.header("ETag") == '"e1"'
    assert resp.header("Last-Modified") == "Tue, 02 Jan 2001 00:00:00 GMT"
    assert resp.header("Cache-Control") == "max-age=60"
    assert resp.header_list("Connection") == ["close"]  # sut.request asked for close


def test_proxy_hide_header_and_pass_header(env):
    resp = get(env, "/hide/hop")
    assert not resp.has("X-Kept")
    assert resp.header("X-Pad") == "avoid"


# ------------------------------------------------------------------------------------------------------------
# Response framing.


def test_chunked_upstream_response_is_dechunked_and_rechunked(env):
    resp = get(env, "/chunked")
    assert resp.status == 200 and resp.body == b"hello world!"
    assert resp.chunked  # length unknown: chunked to an HTTP/1.1 client
    assert not resp.has("X-Trailer")


def test_http10_client_gets_close_delimited_body(env):
    ex = sut.exchange(env.port, b"GET /chunked HTTP/1.0\r\nHost: proxy.example.com\r\n\r\n", timeout=10)
    resp = ex.one()
    assert resp.status == 200 and resp.body == b"hello world!" and not resp.chunked
    assert ex.closed
    # Close-delimited upstream responses (HTTP/1.1 with Connection: close, and HTTP/1.0).
    for route, body in (("closedelimited", b"until the end"), ("http10", b"old style body")):
        resp = get(env, f"/{route}")
        assert resp.status == 200 and resp.body == body, route


def test_interim_upstream_responses_are_not_passed_on(env):
    sut.nginx_deviation("nginx 1.22 takes an upstream 100 for the final response and passes the rest as its body")
    ex = sut.exchange(env.port, b"GET /interim HTTP/1.1\r\nHost: proxy.example.com\r\nConnection: close\r\n\r\n",
                      timeout=10)
    assert [r.status for r in ex.responses] == [200]
    assert ex.responses[0].body == b"after interim"


# ------------------------------------------------------------------------------------------------------------
# Large bodies, both directions (bounded memory: the proxy streams).


@pytest.mark.parametrize("route", ["big", "bigchunked"])
def test_32mib_response(env, route):
    prefix = "/nobuf" if route == "bigchunked" else ""  # proxy_buffering off for one of them
    status, headers, n, digest, chunked, complete = stream_exchange(
        env.port, f"GET {prefix}/{route} HTTP/1.1\r\nHost: proxy.example.com\r\nConnection: close\r\n\r\n".encode())
    assert status == 200 and complete
    assert n == BIG and digest == sha(big_bytes())
    assert chunked == (route == "bigchunked")
    if route == "big":
        assert headers["content-length"] == [str(BIG)]


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_32mib_request_body(env, framing):
    data, step = big_bytes(), 300_000

    def pieces():
        if framing == "length":
            yield f"POST /echo HTTP/1.1\r\nHost: proxy.example.com\r\nContent-Length: {BIG}\r\n\r\n".encode()
            yield from (data[i:i + step] for i in range(0, BIG, step))
            return
        sut.nginx_deviation("nginx buffers the whole body (proxy_request_buffering on) and sends Content-Length")
        yield b"POST /v11/echo HTTP/1.1\r\nHost: proxy.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
        yield from (b"%x\r\n" % len(data[i:i + step]) + data[i:i + step] + b"\r\n" for i in range(0, BIG, step))
        yield b"0\r\n\r\n"

    status, _, _, _, _, complete = stream_exchange(env.port, pieces())
    assert status == 200 and complete
    req = env.o1.last("echo")
    assert req.chunked == (framing == "chunked") and req.body_len == BIG and req.body_sha == sha(data)


# ------------------------------------------------------------------------------------------------------------
# Upstream connections: keepalive reuse, balancing, failover.


def test_keepalive_connections_are_reused(env):
    conns = set()
    with sut.Conn(env.port, timeout=10) as c:
        for i in range(30):
            c.send(f"GET /ka/echo?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            assert r.status == 200
            assert echo(r)["version"] == "HTTP/1.1"
            assert hdr(echo(r), "Connection") == []  # proxy_set_header Connection ""
            conns.add(r.header("X-Conn"))
    assert env.o1.hits("echo") == 30
    # One client connection = one core = one cached upstream connection for all 30 requests.
    assert len(conns) == 1, conns
    assert env.o1.connections <= 1
    # Separate client connections may land on different cores: at most one origin connection per core.
    env.reset()
    for i in range(20):
        assert get(env, f"/ka/echo?j={i}").status == 200
    assert env.o1.connections <= sut.WORKERS
    # Without `keepalive` in the group, every request opens its own upstream connection.
    env.reset()
    with sut.Conn(env.port, timeout=10) as c:
        for i in range(5):
            c.send(f"GET /echo?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            assert c.read_response(timeout=10).status == 200
    assert env.o1.connections == 5


def test_cached_connection_closed_by_origin_is_detected(env):
    with sut.Conn(env.port, timeout=10) as c:
        c.send(b"GET /ka/echo HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n")
        assert c.read_response(timeout=10).status == 200
        env.o1.close_idle()  # the origin's keep-alive timer expires
        time.sleep(0.3)
        log_before = len(env.server.error_log())
        for _ in range(3):
            c.send(b"GET /ka/echo HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n")
            r = c.read_response(timeout=10)
            assert r.status == 200, r
    assert 1 <= env.o1.connections <= 2
    # The closed cached connection was noticed while idle, not by failing a request on it.
    assert "upstream" not in env.server.error_log()[log_before:]


def origins_on_one_connection(env: Env, prefix: str, n: int) -> list[str]:
    with sut.Conn(env.port, timeout=10) as c:
        out = []
        for i in range(n):
            c.send(f"GET {prefix}who?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            out.append(c.read_response(timeout=10).header("X-Origin"))
    return out


def ketama_pick(servers: list[str], keys: list[str]) -> list[int]:
    """nginx's `hash KEY consistent` (Cache::Memcached::Fast's ketama): 160 points per server, each
    crc32(HOST "\\0" PORT PREV_HASH) with the previous point's hash little-endian; a key goes to the first point at
    or above crc32(key), wrapping around. Returns the index of each key's server."""
    points: dict[int, int] = {}
    for idx, name in enumerate(servers):
        host, port = name.rsplit(":", 1)
        base, prev = host.encode() + b"\0" + port.encode(), 0
        for _ in range(160):
            prev = zlib.crc32(base + prev.to_bytes(4, "little"))
            points.setdefault(prev, idx)  # equal hashes: the first server's point stays
    hashes = sorted(points)
    out = []
    for key in keys:
        i = bisect.bisect_left(hashes, zlib.crc32(key.encode()))
        out.append(points[hashes[i % len(hashes)]])
    return out


def test_round_robin_weights_and_consistent_hash(env):
    seen = collections.Counter(get(env, f"/rr/who?i={i}").header("X-Origin") for i in range(20))
    # Each core runs its own round robin; with one client connection per request the split is within ±WORKERS.
    assert abs(seen["o1"] - seen["o2"]) <= 2 * sut.WORKERS, seen
    order = origins_on_one_connection(env, "/rr/", 6)  # one connection = one core: strict alternation
    assert all(order[i] != order[i + 1] for i in range(5)), order
    assert collections.Counter(origins_on_one_connection(env, "/weighted/", 40)) == {"o1": 30, "o2": 10}
    first = {i: get(env, f"/hashed/who?key={i}").header("X-Origin") for i in range(12)}
    assert all(get(env, f"/hashed/who?key={i}").header("X-Origin") == first[i] for i in range(12))
    # Each key lands where nginx would put it. (Asserting only that both origins get keys failed in CI on
    # 2026-11-30: the origins' ports are random, and for some pairs all twelve similar URIs fall on one.)
    want = ketama_pick([f"127.0.0.1:{env.o1.port}", f"127.0.0.1:{env.o2.port}"],
                       [f"/hashed/who?key={i}" for i in range(12)])
    assert [first[i] for i in range(12)] == [("o1", "o2")[w] for w in want], (first, want)


def test_failover_to_next_upstream_when_one_is_down(env):
    for i in range(6):
        resp = get(env, f"/failover/echo?i={i}")
        assert resp.status == 200 and resp.header("X-Origin") == "o1"
    assert env.o1.hits("echo") == 6
    errors = env.server.error_log()
    assert "Connection refused" in errors or "connect() failed" in errors
    resp = get(env, "/backup/who")  # the only primary is down: the backup server answers
    assert resp.status == 200 and resp.header("X-Origin") == "o2"


def test_next_upstream_http_502_and_passing_5xx_through(env):
    for i in range(4):
        resp = get(env, f"/flaky/flaky?i={i}")
        assert resp.status == 200 and resp.body == b"o1 ok", resp
    assert env.o1.hits("flaky") == 4
    # Without http_502 in proxy_next_upstream the 502 is passed through as the origin sent it.
    seen = set()
    for i in range(4):
        resp = get(env, f"/flakyoff/flaky?i={i}")
        seen.add((resp.status, resp.body))
    assert (502, b"o2 is broken") in seen and (200, b"o1 ok") in seen
    resp = get(env, "/status?code=503")
    assert resp.status == 503 and resp.body == b"upstream broke"


def test_post_is_not_retried_after_it_was_sent(env):
    # The origin closes without answering after reading the whole request: a POST must not be repeated.
    resp = get(env, "/retry/noanswer", "POST", body=b"once")
    assert resp.status == 502
    assert env.o1.hits("noanswer") + env.o2.hits("noanswer") == 1
    # An idempotent GET is tried on the next server (proxy_next_upstream error).
    resp = get(env, "/retry/noanswer")
    assert resp.status == 502
    assert env.o1.hits("noanswer") + env.o2.hits("noanswer") == 3


# ------------------------------------------------------------------------------------------------------------
# Errors: 502 / 504, cut-off responses, client aborts.


def test_502_on_refused_connection_invalid_response_and_close_without_answer(env):
    assert get(env, "/dead/x").status == 502
    assert get(env, "/noanswer").status == 502
    sut.nginx_deviation("nginx accepts a response without a status line as HTTP/0.9 and passes it on")
    assert get(env, "/garbage").status == 502
    assert "upstream" in env.server.error_log()


def test_504_on_read_connect_and_send_timeouts(env):
    t0 = time.monotonic()
    resp = get(env, "/timeout/echo?delay=3000", timeout=10)
    elapsed = time.monotonic() - t0
    assert resp.status == 504
    assert 0.9 <= elapsed < 2.8, elapsed
    t0 = time.monotonic()  # proxy_connect_timeout: the connect never completes
    assert get(env, "/hole/x", timeout=10).status == 504
    assert 0.9 <= time.monotonic() - t0 < 2.8
    # proxy_send_timeout: the origin takes the head but never reads the 32 MiB body.
    data = big_bytes()
    status, _, _, _, _, _ = stream_exchange(env.port, [
        f"POST /timeout/stall HTTP/1.1\r\nHost: proxy.example.com\r\nContent-Length: {BIG}\r\n\r\n".encode(), data])
    assert status == 504


@pytest.mark.parametrize("route", ["cut", "cutchunked"])
def test_response_cut_off_mid_body_is_never_complete(env, route):
    with sut.Conn(env.port, timeout=10) as c:
        c.send(f"GET /{route} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
        closed = c.wait_closed(5)
        raw = bytes(c.raw)
    assert closed, "the client connection must be cut"
    r = sut.parse_response(raw, "GET", eof=False)
    assert r is None, f"a truncated response must not parse as complete: {raw[:200]!r}"
    assert raw == b"" or raw.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("how", ["reset-while-waiting", "close-mid-response"])
def test_client_going_away_closes_the_upstream_connection(env, how):
    c = socket.create_connection(("127.0.0.1", env.port))
    target = "/ka/echo?delay=2000" if how == "reset-while-waiting" else "/ka/big"
    c.sendall(f"GET {target} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
    if how == "reset-while-waiting":
        time.sleep(0.3)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST
    else:
        got = 0
        while got < 200_000:
            got += len(c.recv(65536))
    c.close()
    deadline = time.monotonic() + 10
    while not env.o1.aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.o1.aborted == [target]
    assert get(env, "/ka/echo").status == 200  # the aborted connection was not cached


# ------------------------------------------------------------------------------------------------------------
# Conformance cases (shared/cases/http-conformance.md).


def test_content_length_with_transfer_encoding(env):
    prefix = f"/r{random.randrange(10**6):06d}"
    raw = (f"POST {prefix}/c01 HTTP/1.1\r\nHost: proxy.example.com\r\n"
           "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n"
           f"29\r\nGET {prefix}/c01-evil HTTP/1.1\r\nHost: x\r\n\r\n\r\n"
           "0\r\n\r\n").encode()
    ex = sut.exchange(env.port, raw, timeout=5)
    statuses = [r.status for r in ex.finals]
    if statuses == [400]:
        assert ex.closed
    else:
        assert statuses == [200], statuses  # forwarded by Transfer-Encoding only
    time.sleep(0.2)
    assert not any("c01-evil" in t for t in env.o1.targets())
    for o in env.origins():
        for r in o.requests:
            assert not (r.has("Content-Length") and r.has("Transfer-Encoding")), r


def test_invalid_content_length_with_transfer_encoding(env):
    prefix = f"/r{random.randrange(10**6):06d}"
    raw = (f"POST {prefix}/c02 HTTP/1.1\r\nHost: proxy.example.com\r\n"
           "Content-Length: blahblahblah\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nZ\r\n0\r\n\r\n").encode()
    ex = sut.exchange(env.port, raw, timeout=5)
    assert [r.status for r in ex.finals] in ([400], [200])
    for o in env.origins():
        for r in o.requests:
            assert "blah" not in (r.header("Content-Length") or ""), r
            assert not (r.has("Content-Length") and r.has("Transfer-Encoding")), r


def test_pipelined_responses_in_request_order(env):
    prefix = f"/r{random.randrange(10**6):06d}"
    with sut.Conn(env.port, timeout=10) as c:
        c.send((f"GET {prefix}/c19-slow?delay=1000 HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n"
                f"GET {prefix}/c19-fast HTTP/1.1\r\nHost: proxy.example.com\r\nConnection: close\r\n\r\n").encode())
        rs = c.read_responses(2, timeout=10)
    assert [r.status for r in rs] == [200, 200]
    assert [r.body for r in rs] == [b"route c19-slow", b"route c19-fast"]


def test_many_concurrent_clients(env):
    from concurrent.futures import ThreadPoolExecutor

    def one(n: int) -> bool:
        with sut.Conn(env.port, timeout=10, record_io=False) as c:
            c.send(f"GET /ka/echo?n={n} HTTP/1.1\r\nHost: proxy.example.com\r\nConnection: close\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            return r is not None and r.status == 200 and json.loads(r.body)["target"] == f"/ka/echo?n={n}"

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(200)))
    assert all(results), results.count(False)
    assert env.o1.hits("echo") == 200
    # Cached connections are reused under load. Not a tight bound: a core whose share of the 20 concurrent
    # clients exceeds `keepalive 8` opens (and then closes) extra connections in every wave, and how the
    # clients spread over the cores varies from run to run (a loaded machine: 45 of 200 seen).
    assert env.o1.connections <= 200 // 2


# ------------------------------------------------------------------------------------------------------------
# $upstream_* variables (ngx_http_upstream_module), in log_format and add_header.


def upstream_log_lines(env: Env, prefix: str, n: int, timeout: float = 5.0) -> list[list[str]]:
    """The access-log lines (split on '|') whose $request_uri starts with prefix, once there are n of them
    (the log is flushed within a second)."""
    path = env.server.workdir / "upstream.log"
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        mine = [ln.split("|") for ln in lines if ln.startswith(prefix)]
        if len(mine) >= n or time.monotonic() > deadline:
            return mine
        time.sleep(0.1)


SECONDS = r"\d+\.\d{3}"


def test_upstream_variables_in_the_access_log_and_add_header(env):
    import re

    prefix = f"/logged/r{random.randrange(10**6):06d}"
    dead, o1 = f"127.0.0.1:{env.dead}", f"127.0.0.1:{env.o1.port}"
    headers = []
    with sut.Conn(env.port, timeout=10) as c:  # one connection = one core: the round robin alternates
        for i in range(4):
            c.send(f"GET {prefix}/echo?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            assert r.status == 200
            headers.append((r.header("X-Up"), len(r.body)))
    lines = upstream_log_lines(env, prefix, 4)
    assert len(lines) == 4, lines
    two = [ln for ln in lines if ln[1] == f"{dead}, {o1}"]
    one = [ln for ln in lines if ln[1] == o1]
    assert len(two) >= 1 and len(two) + len(one) == 4, lines
    for ln in two:  # a refused try: 502, never connected, no header; then the answer
        _, _, status, rtime, ctime, htime, length = ln
        assert status == "502, 200"
        assert re.fullmatch(f"{SECONDS}, {SECONDS}", rtime), ln
        assert re.fullmatch(f"-, {SECONDS}", ctime), ln
        assert re.fullmatch(f"-, {SECONDS}", htime), ln
        assert re.fullmatch(r"0, \d+", length), ln
    for ln in one:
        assert ln[2] == "200" and re.fullmatch(SECONDS, ln[3]) and re.fullmatch(SECONDS, ln[4]), ln
    # $upstream_response_length is the body the upstream sent.
    by_i = {ln[0]: ln for ln in lines}
    for i, (xup, blen) in enumerate(headers):
        ln = by_i[f"{prefix}/echo?i={i}"]
        assert ln[6].split(", ")[-1] == str(blen)
        # add_header sees the same tries, at header time.
        addr, status, ctime = xup.split("|")
        assert (addr, status) == (ln[1], ln[2])
        assert re.fullmatch(f"(-, )?{SECONDS}", ctime), xup
    # Times measure the upstream: a 300 ms origin delay shows in the header and response times.
    with sut.Conn(env.port, timeout=10) as c:
        for i in range(2):
            c.send(f"GET {prefix}/echo?delay=300&j={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            assert c.read_response(timeout=10).status == 200
    for ln in upstream_log_lines(env, f"{prefix}/echo?delay", 2):
        assert float(ln[5].split(", ")[-1]) >= 0.29 and float(ln[3].split(", ")[-1]) >= 0.29, ln
        assert float(ln[4].split(", ")[-1]) < 0.29, ln
    # No upstream: "-" for every variable (log_format's default escaping prints "-" for an unset variable).
    assert get(env, "/noupstream?x=1").status == 200
    ln = upstream_log_lines(env, "/noupstream?x=1", 1)[0]
    assert ln[1:] == ["-"] * 6, ln


def test_no_live_upstreams_records_the_group_name_and_502(env):
    """nginx's ngx_http_upstream_connect on NGX_BUSY: when no server of the group is usable the request is 502,
    "no live upstreams" is logged, and the try shows in $upstream_addr as the group's name with status 502."""
    import re

    tag = f"r{random.randrange(10**6):06d}"
    # Every server `down`.
    assert get(env, f"/alldown/{tag}/echo").status == 502
    ln = upstream_log_lines(env, f"/alldown/{tag}/", 1)[0]
    assert ln[1:3] == ["alldown", "502"], ln
    assert re.fullmatch(SECONDS, ln[3]) and ln[4] == "-" and ln[5] == "-", ln
    # Every server failed max_fails times within fail_timeout. One connection = one core (one worker): its
    # first request fails over both servers, the second finds none usable.
    with sut.Conn(env.port, timeout=10) as c:
        for i in range(2):
            c.send(f"GET /nolive/{tag}/echo?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            assert r is not None and r.status == 502, r
    first, second = upstream_log_lines(env, f"/nolive/{tag}/", 2)
    assert first[1:3] == [f"127.0.0.1:{env.dead}, 127.0.0.2:{env.dead}", "502, 502"], first
    assert second[1:3] == ["allfail", "502"], second
    assert second[4] == "-" and second[6] == "0", second
    deadline = time.monotonic() + 5
    while "no live upstreams" not in env.server.error_log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "no live upstreams" in env.server.error_log()


# ------------------------------------------------------------------------------------------------------------
# proxy_redirect (Location and Refresh).


def test_proxy_redirect_default_text_regex_and_off(env):
    o1 = f"http://127.0.0.1:{env.o1.port}"

    def redirect(path: str, loc: str) -> tuple[str, str]:
        r = get(env, f"{path}?loc={urllib.parse.quote(loc, safe='')}")
        assert r.status == 302, r
        location = r.header("Location")
        # nginx's header filter then makes a relative Location absolute (absolute_redirect); kosoku passes it on.
        own = f"http://proxy.example.com:{env.port}"
        if sut.SUT == "nginx" and location.startswith(own + "/"):
            location = location[len(own):]
        return location, r.header("Refresh")

    # default with a URI part: "http://127.0.0.1:PORT/one/" -> "/rd/".
    assert redirect("/rd/redirect", f"{o1}/one/next?a=1") == ("/rd/next?a=1", "3; url=/rd/next?a=1")
    assert redirect("/rd/redirect", f"{o1}/elsewhere") == (f"{o1}/elsewhere", f"3; url={o1}/elsewhere")
    # default without a URI part: "http://127.0.0.1:PORT/" -> "/".
    assert redirect("/rdplain/redirect", f"{o1}/rdplain/x") == ("/rdplain/x", "3; url=/rdplain/x")
    # Text with variables, and a regex whose captures build the replacement.
    assert redirect("/rdtext/redirect", "http://internal.example/a/b")[0] == "http://proxy.example.com/ext/a/b"
    assert redirect("/rdtext/redirect", "https://cdn.internal/img/x/y.png")[0] == "/cdn/x/y.png?bucket=img"
    assert redirect("/rdtext/redirect", f"{o1}/kept")[0] == f"{o1}/kept"  # explicit lines replace the default
    # off.
    assert redirect("/rdoff/redirect", f"{o1}/one/next") == (f"{o1}/one/next", f"3; url={o1}/one/next")


# ------------------------------------------------------------------------------------------------------------
# Upstream host names, resolved when the configuration loads.


def test_upstream_and_proxy_pass_host_names(env):
    d = echo(get(env, "/named/echo?x=1"))
    assert d["origin"] == "o1" and d["version"] == "HTTP/1.1"
    assert echo(get(env, "/byname/echo?y=2"))["origin"] == "o1"
    ln = upstream_log_lines(env, "/byname/echo?y=2", 1)[0]
    assert ln[1] == f"127.0.0.1:{env.o1.port}"  # localhost's address (/etc/hosts)


def test_unresolvable_host_name_fails_the_configuration(tmp_path):
    body = "server {\n    listen 127.0.0.1:1;\n    location / {\n        proxy_pass http://nosuchhost.invalid:8080;\n    }\n}"
    p = sut.ServerProcess(sut.SUT, tmp_path, body, [])
    r = p.check_config()
    err = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode != 0, err
    assert 'host not found in upstream "nosuchhost.invalid"' in err, err
    if sut.SUT == "kosoku":
        line = p.conf_text.splitlines().index("        proxy_pass http://nosuchhost.invalid:8080;") + 1
        assert f"{p.conf_path}:{line}:20:" in err, err  # file:line:col of the address
    body2 = "upstream u { server 127.0.0.1:1; server nosuchhost.invalid; }\nserver { listen 127.0.0.1:1; }"
    r = sut.ServerProcess(sut.SUT, tmp_path / "2", body2, []).check_config()
    assert r.returncode != 0 and b'host not found in upstream "nosuchhost.invalid"' in r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------------------
# Upstream 1xx interim responses are skipped (also when caching, split over several reads, on a cached
# keepalive connection that stays usable afterwards).


def test_interim_responses_through_the_cache_and_keepalive(env):
    sut.nginx_deviation("nginx 1.22 takes an upstream 100 for the final response and passes the rest as its body")
    prefix = f"/cached/r{random.randrange(10**6):06d}"
    for route, body in (("interimcc", b"after interim"), ("interimslow", b"final answer")):
        r = get(env, f"{prefix}/{route}")
        assert (r.status, r.body, r.header("X-Cache")) == (200, body, "MISS"), route
        assert not r.has("Link")
        r = get(env, f"{prefix}/{route}")
        assert (r.status, r.body, r.header("X-Cache")) == (200, body, "HIT"), route
        assert env.o1.hits(route) == 1
    env.reset()
    with sut.Conn(env.port, timeout=10) as c:
        for i in range(3):
            c.send(f"GET /ka/interim?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            assert (r.status, r.body) == (200, b"after interim")
            c.send(f"GET /ka/interimslow?i={i} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
            r = c.read_response(timeout=10)
            assert (r.status, r.body) == (200, b"final answer")
    assert env.o1.connections <= 1 and len({r.conn_id for r in env.o1.requests}) == 1  # reused for all six


# ------------------------------------------------------------------------------------------------------------
# A client that goes away while the upstream is slow: the upstream request is abandoned.


def test_client_close_while_waiting_abandons_the_upstream_request(env):
    target = f"/ka/r{random.randrange(10**6):06d}/echo?delay=3000"
    c = socket.create_connection(("127.0.0.1", env.port))
    c.sendall(f"GET {target} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
    time.sleep(0.4)
    c.close()  # FIN, not RST (nginx: "client prematurely closed connection, so upstream connection is closed too")
    t0 = time.monotonic()
    while not env.o1.aborted and time.monotonic() - t0 < 2.5:
        time.sleep(0.05)
    # The origin saw its connection closed before it answered: abandoned, so never back in the keepalive pool.
    assert env.o1.aborted == [target], "the upstream connection was not closed before the origin answered"
    t0 = time.monotonic()
    for i in range(3):  # the pool serves at once
        assert get(env, f"/ka/echo?after={i}").status == 200
    assert time.monotonic() - t0 < 2


def test_client_close_during_a_cacheable_fetch_keeps_filling(env):
    # nginx: for a cacheable request the upstream request goes on when the client closes (u->cacheable in
    # ngx_http_upstream_check_broken_connection); the response is stored and requests waiting on the cache
    # lock get it.
    target = f"/cached/r{random.randrange(10**6):06d}/slowfill?delay=1500"
    c = socket.create_connection(("127.0.0.1", env.port))
    c.sendall(f"GET {target} HTTP/1.1\r\nHost: proxy.example.com\r\n\r\n".encode())
    time.sleep(0.4)
    c.close()
    time.sleep(0.2)
    t0 = time.monotonic()
    r = get(env, target)  # waits on the lock for the abandoned client's fill
    assert (r.status, r.body) == (200, b"route slowfill")
    assert time.monotonic() - t0 < 3
    assert env.o1.aborted == []  # the upstream request was not cut short
    if sut.SUT == "kosoku":
        # The fill completed and the lock waiter got the entry. (nginx 1.22 keeps the upstream request too,
        # but loses the fill when sending the head to the departed client fails: the waiter fetches again.)
        assert r.header("X-Cache") == "HIT" and env.o1.hits("slowfill") == 1
        assert get(env, target).header("X-Cache") == "HIT"
