"""The proxy cache's end-to-end harness (test_cache.py, test_cache_conditionals.py): a scripted python origin
that counts the requests it receives per path ("origin hits"), so a hit is told from a miss without relying on
any header of the product under test; the kosoku configuration in front of it; the module-scoped `env`
fixture (one server per test file) and small request helpers. Every test uses its own random path prefix
(prefix()), so cached state never leaks between tests or runs.
"""
from __future__ import annotations

import collections
import email.utils
import random
import socket
import string
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest

import sut

HOST = "proxy.example.com"


# ------------------------------------------------------------------------------------------------------------
# The scripted origin.


@dataclass
class OriginRequest:
    method: str
    target: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> Optional[str]:
        v = [b for a, b in self.headers if a.lower() == name.lower()]
        return ", ".join(v) if v else None

    @property
    def path(self) -> str:
        return urllib.parse.urlsplit(self.target).path


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    delay: float = 0.0
    close_without_answer: bool = False
    cut_after: Optional[int] = None  # send only this many body bytes, then close


class Origin:
    """A threaded HTTP/1.1 origin: routes by exact path, counts requests per path, keeps every request."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.routes: dict[str, Callable[[OriginRequest, int], Reply]] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.log: dict[str, list[OriginRequest]] = collections.defaultdict(list)
        self.lock = threading.Lock()
        self.stopped = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def route(self, path: str, fn: Callable[[OriginRequest, int], Reply]) -> None:
        self.routes[path] = fn

    def count(self, path: str) -> int:
        with self.lock:
            return self.hits[path]

    def _accept(self) -> None:
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = []
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    headers.append((k.strip(), v.strip()))
                cl = [int(v) for k, v in headers if k.lower() == "content-length"]
                if cl:
                    while len(buf) < cl[0]:
                        buf += c.recv(65536)
                    buf = buf[cl[0]:]
                req = OriginRequest(method, target, headers)
                with self.lock:
                    self.hits[req.path] += 1
                    n = self.hits[req.path]
                    self.log[req.path].append(req)
                fn = self.routes.get(req.path)
                reply = fn(req, n) if fn else Reply(404, [("Content-Type", "text/plain")], b"no route\n")
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.close_without_answer:
                    return
                hdrs = list(reply.headers)
                if not any(k.lower() == "content-length" for k, _ in hdrs) and reply.status not in (204, 304):
                    hdrs.append(("Content-Length", str(len(reply.body))))
                out = f"HTTP/1.1 {reply.status} X\r\n".encode()
                out += b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in hdrs) + b"\r\n"
                body = reply.body if method != "HEAD" else b""
                if reply.cut_after is not None:
                    c.sendall(out + body[:reply.cut_after])
                    return
                c.sendall(out + body)
        except OSError:
            return
        finally:
            c.close()

    def stop(self) -> None:
        # shutdown() ends the accept() in progress, which close() alone leaves running: a later Origin whose
        # socket got the same descriptor had its connections served with this one's routes.
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._acceptor.join(timeout=5)
        self.sock.close()


def http_date(t: float) -> str:
    return email.utils.formatdate(t, usegmt=True)


# ------------------------------------------------------------------------------------------------------------
# The server under test.


def cache_config(port: int, origin_port: int, w: Path) -> str:
    return f"""
    proxy_cache_path {w}/cache levels=1:2 keys_zone=main:10m inactive=10m use_temp_path=off;
    proxy_cache_path {w}/small levels=1:2 keys_zone=small:1m max_size=300k manager_files=100;
    proxy_cache_path {w}/d1 levels=2 keys_zone=d1:1m;
    proxy_cache_path {w}/d2 levels=2 keys_zone=d2:1m;
    split_clients "$request_uri" $cache_disk {{ 50% d1; * d2; }}
    upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        server_name {HOST};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_cache main;
        proxy_cache_key $scheme:$host$request_uri;
        proxy_cache_valid 200 301 302 60s;
        proxy_cache_valid 404 3s;
        proxy_cache_revalidate on;
        proxy_cache_use_stale error timeout http_500 http_502 http_503 http_504;
        proxy_cache_lock on;
        proxy_read_timeout 5s;
        add_header X-Cache-Status $upstream_cache_status;
        location / {{
            proxy_pass http://origin;
            proxy_cache_purge PURGE wildcard from 127.0.0.1;
        }}
        location /lockto/ {{
            proxy_pass http://origin;
            proxy_cache_lock_timeout 1s;
        }}
        location /minuses/ {{
            proxy_pass http://origin;
            proxy_cache_min_uses 2;
        }}
        location /bypass/ {{
            proxy_pass http://origin;
            proxy_cache_bypass $arg_nocache;
            proxy_no_cache $arg_nostore;
        }}
        location /bg/ {{
            proxy_pass http://origin;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
        }}
        location /upd/ {{
            proxy_pass http://origin;
            proxy_cache_use_stale updating;
        }}
        location /small/ {{
            proxy_pass http://origin;
            proxy_cache small;
        }}
        location /split/ {{
            proxy_pass http://origin;
            proxy_cache $cache_disk;
        }}
        location /ignore/ {{
            proxy_pass http://origin;
            proxy_ignore_headers Set-Cookie;
        }}
        location /norh/ {{
            proxy_pass http://origin;
            proxy_pass_request_headers off;
        }}
        location /purge/ {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge main "$scheme:$host$arg_key";
        }}
        location = /kosoku-status {{
            allow 127.0.0.1;
            deny all;
            status;
        }}
        location = /purge-all {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge main "*";
        }}
    }}
"""


@dataclass
class Env:
    origin: Origin
    server: sut.ServerProcess
    port: int
    workdir: Path


def start_server(workdir: Path, port: int, origin: Origin) -> sut.ServerProcess:
    return sut.ServerProcess(sut.SUT, workdir, cache_config(port, origin.port, workdir), [port]).start()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    origin = Origin()
    workdir = tmp_path_factory.mktemp("cache")
    port = sut.free_port()
    server = start_server(workdir, port, origin)
    yield Env(origin, server, port, workdir)
    alive = server.alive()
    rc = server.stop()
    origin.stop()
    assert alive, "kosoku died during the cache tests\n" + server.diagnostics()
    assert rc == 0, f"kosoku exited with {rc}\n" + server.diagnostics()


@pytest.fixture(autouse=True)
def _alive(request):
    yield
    if "env" in request.fixturenames:
        e = request.getfixturevalue("env")
        if not e.server.alive():
            pytest.fail("kosoku died during this test\n" + e.server.diagnostics(), pytrace=False)


def prefix() -> str:
    return "/r" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(10))


def get(port: int, target: str, headers=(), method: str = "GET", host: str = HOST) -> sut.Response:
    return sut.request(port, method, target, host=host, headers=headers)


def status(r: sut.Response) -> Optional[str]:
    return r.header("X-Cache-Status")


def fixed(body: bytes, cc: str = "max-age=60", extra=()) -> Callable[[OriginRequest, int], Reply]:
    return lambda req, n: Reply(200, [("Content-Type", "text/plain"), ("Cache-Control", cc), *extra], body)
