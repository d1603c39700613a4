"""End-to-end tests of the proxy cache (core/cache/): the real kosoku binary in front of a scripted python origin
that counts the requests it receives per path ("origin hits", shared/cases/http-conformance.md §0.4), so a hit
is told from a miss without relying on any header of the product under test. Every test uses its own random
path prefix, so cached state never leaks between tests or runs.

Sequences: MISS→HIT, expiry, revalidation with 304, stale on origin down/5xx, proxy_cache_lock collapsing
concurrent misses into one origin request (across both workers), lock timeout, purge (exact, wildcard, all,
the purge location), restart keeps the cache (the cache loader), max_size eviction, min_uses, bypass,
proxy_cache_convert_head, split_clients over two cache paths, background update, and the conformance cases
C13, C15, C17, C22, C23, C26 for proxy.example.com.

kosoku only: the configuration uses kosoku's purge and disk_queue directives (nginx has no proxy_cache_purge).
"""
from __future__ import annotations

import collections
import email.utils
import os
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

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's proxy cache (purge, disk_queue directives)")

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


# ------------------------------------------------------------------------------------------------------------
# Basic sequences.


def test_miss_then_hit_with_age(env):
    p = prefix() + "/a"
    env.origin.route(p, fixed(b"hello cache", extra=[("ETag", '"a1"')]))
    r1 = get(env.port, p)
    assert (r1.status, r1.body, status(r1)) == (200, b"hello cache", "MISS")
    assert not r1.has("Age")
    time.sleep(1.1)
    r2 = get(env.port, p)
    assert (r2.status, r2.body, status(r2)) == (200, b"hello cache", "HIT")
    assert r2.header("ETag") == '"a1"'
    assert r2.header("Content-Type") == "text/plain"
    assert r2.header("Content-Length") == "11"
    assert int(r2.header("Age")) >= 1  # RFC 9111 §5.1: a reused response carries Age
    assert env.origin.count(p) == 1
    # The origin never sees the client's conditional fields for a cacheable request (the cache answers them).
    r3 = get(env.port, p, headers=[("If-None-Match", '"zzz"'), ("Range", "bytes=0-1")])
    assert (r3.status, r3.body) == (206, b"he")
    assert env.origin.count(p) == 1


def test_entry_is_committed_before_the_miss_response_ends(env):
    # nginx renames the temp file before it finalizes the request; so does kosoku: a request that follows a
    # completed MISS — on either worker — is a HIT, never a second origin request.
    p = prefix()
    for i in range(30):
        env.origin.route(f"{p}/{i}", fixed(b"x" * (i * 997)))
        assert status(get(env.port, f"{p}/{i}")) == "MISS"
        assert status(get(env.port, f"{p}/{i}")) == "HIT", i
        assert env.origin.count(f"{p}/{i}") == 1


def test_query_is_part_of_the_key(env):
    p = prefix() + "/q"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], req.target.encode()))
    assert get(env.port, p + "?a=1").body == (p + "?a=1").encode()
    assert get(env.port, p + "?a=2").body == (p + "?a=2").encode()
    assert status(get(env.port, p + "?a=1")) == "HIT"
    assert env.origin.count(p) == 2


def test_expiry_refetches(env):
    p = prefix() + "/exp"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=2")], b"v%d" % n))
    assert get(env.port, p).body == b"v1"
    assert status(get(env.port, p)) == "HIT"
    time.sleep(3.1)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"v2", "EXPIRED")
    assert status(get(env.port, p)) == "HIT"
    assert env.origin.count(p) == 2


def test_default_validity_by_status(env):
    p = prefix()
    env.origin.route(p + "/plain", lambda req, n: Reply(200, [], b"plain"))  # no explicit freshness: 60s
    env.origin.route(p + "/missing", lambda req, n: Reply(404, [], b"gone %d" % n))  # 3s
    env.origin.route(p + "/created", lambda req, n: Reply(201, [], b"made"))  # not cached
    for _ in range(2):
        get(env.port, p + "/plain")
        get(env.port, p + "/missing")
        get(env.port, p + "/created")
    assert env.origin.count(p + "/plain") == 1
    assert env.origin.count(p + "/missing") == 1
    assert env.origin.count(p + "/created") == 2
    time.sleep(3.2)
    assert get(env.port, p + "/missing").body == b"gone 2"


def test_revalidation_with_304(env):
    p = prefix() + "/rv"

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"v1"':
            return Reply(304, [("ETag", '"v1"'), ("Cache-Control", "max-age=30"), ("X-Revalidated", str(n))])
        return Reply(200, [("ETag", '"v1"'), ("Cache-Control", "max-age=1"), ("Content-Type", "text/plain")],
                     b"body v1")

    env.origin.route(p, handler)
    assert get(env.port, p).body == b"body v1"
    time.sleep(2.1)
    r = get(env.port, p)
    assert (r.status, r.body, status(r)) == (200, b"body v1", "REVALIDATED")
    assert r.header("X-Revalidated") == "2"  # the 304's fields are merged into the stored head (RFC 9111 §4.3.4)
    assert r.header("Cache-Control") == "max-age=30"
    assert env.origin.log[p][1].header("If-None-Match") == '"v1"'  # RFC 9111 §4.3.1
    time.sleep(0.3)  # the entry is rewritten with the merged head in the background
    r = get(env.port, p)
    assert (r.body, status(r), r.header("X-Revalidated")) == (b"body v1", "HIT", "2")
    assert env.origin.count(p) == 2


def test_max_age_zero_with_validator_revalidates_every_time(env):
    p = prefix() + "/mz"

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"z"':
            return Reply(304, [("ETag", '"z"'), ("Cache-Control", "max-age=0")])
        return Reply(200, [("ETag", '"z"'), ("Cache-Control", "max-age=0")], b"zero body")

    env.origin.route(p, handler)
    assert status(get(env.port, p)) == "MISS"
    for _ in range(3):
        r = get(env.port, p)
        assert (r.body, status(r)) == (b"zero body", "REVALIDATED")
    assert env.origin.count(p) == 4
    assert all(req.header("If-None-Match") == '"z"' for req in env.origin.log[p][1:])


def test_revalidation_validators_sent_without_the_clients_fields(env):
    # proxy_pass_request_headers off drops the client's fields, not the cache's own: the revalidation still
    # carries the stored validator (RFC 9111 §4.3.1) and a 304 refreshes the entry.
    p = "/norh" + prefix()

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"n"':
            return Reply(304, [("ETag", '"n"'), ("Cache-Control", "max-age=0")])
        return Reply(200, [("ETag", '"n"'), ("Cache-Control", "max-age=0")], b"norh body")

    env.origin.route(p, handler)
    assert status(get(env.port, p)) == "MISS"
    r = get(env.port, p, headers=[("X-Client", "1")])
    assert (r.body, status(r)) == (b"norh body", "REVALIDATED")
    assert env.origin.log[p][1].header("If-None-Match") == '"n"'
    assert env.origin.log[p][1].header("X-Client") is None  # the client's own fields stay off


def test_response_cut_off_by_origin_is_never_cached(env):
    p = prefix() + "/cut"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"x" * 100000, cut_after=5000))
    ex = sut.exchange(env.port, sut.build_request("GET", p, host=HOST), timeout=5)
    assert not ex.finals or len(ex.finals[0].body) < 100000  # the client never sees it as complete
    ex = sut.exchange(env.port, sut.build_request("GET", p, host=HOST), timeout=5)
    assert env.origin.count(p) == 2


def test_min_uses(env):
    p = "/minuses" + prefix()
    env.origin.route(p, fixed(b"mu"))
    assert status(get(env.port, p)) == "MISS"
    assert status(get(env.port, p)) == "MISS"  # second use: stored now
    assert status(get(env.port, p)) == "HIT"
    assert env.origin.count(p) == 2


def test_bypass_and_no_cache(env):
    p = "/bypass" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"n%d" % n))
    assert get(env.port, p + "?nostore=1").body == b"n1"  # not stored
    assert status(get(env.port, p)) == "MISS"
    assert status(get(env.port, p)) == "HIT"
    r = get(env.port, p + "?nocache=1")  # a different key, but bypass: no lookup, response stored
    assert (r.body, status(r)) == (b"n3", "BYPASS")
    assert status(get(env.port, p + "?nocache=1")) == "BYPASS"
    assert env.origin.count(p) == 4


def test_head_is_fetched_as_get_and_stored(env):
    p = prefix() + "/head"
    env.origin.route(p, fixed(b"0123456789"))
    r = get(env.port, p, method="HEAD")
    assert (r.status, r.body, r.header("Content-Length")) == (200, b"", "10")
    assert env.origin.log[p][0].method == "GET"  # proxy_cache_convert_head on
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"0123456789", "HIT")
    assert env.origin.count(p) == 1


def test_uncacheable_methods_pass_through(env):
    p = prefix() + "/post"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"p%d" % n))
    assert get(env.port, p, method="POST").body == b"p1"
    r = get(env.port, p, method="POST")
    assert (r.body, status(r)) == (b"p2", None)


# ------------------------------------------------------------------------------------------------------------
# Cache lock.


def parallel(n: int, fn) -> list:
    out: list = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, fn())) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_lock_collapses_concurrent_misses(env):
    p = prefix() + "/slow"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"slow body %d" % n,
                                             delay=1.0))
    rs = parallel(12, lambda: get(env.port, p))
    assert env.origin.count(p) == 1  # one origin request for 12 concurrent misses, on both workers
    assert all(r.status == 200 and r.body == b"slow body 1" for r in rs)
    st = collections.Counter(status(r) for r in rs)
    assert st["MISS"] == 1 and st["HIT"] == 11, st


def test_lock_timeout_goes_to_origin_uncached(env):
    p = "/lockto" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"t%d" % n, delay=2.0))
    t0 = time.monotonic()
    rs = parallel(2, lambda: get(env.port, p))
    assert env.origin.count(p) == 2
    assert time.monotonic() - t0 < 4.5
    assert sorted(r.body for r in rs) == [b"t1", b"t2"]
    assert status(get(env.port, p)) == "HIT"  # the lock holder's response was stored
    assert env.origin.count(p) == 2


# ------------------------------------------------------------------------------------------------------------
# Stale content.


def test_stale_when_origin_down_and_background_update(env):
    p = "/bg" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=3")], b"b%d" % n))
    assert get(env.port, p).body == b"b1"
    time.sleep(3.2)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"b1", "STALE")  # answered at once; refreshed in the background
    time.sleep(0.5)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"b2", "HIT")
    assert env.origin.count(p) == 2


def test_updating_serves_stale_while_one_request_refreshes(env):
    p = "/upd" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=1")], b"u%d" % n,
                                             delay=0 if n == 1 else 1.5))
    assert get(env.port, p).body == b"u1"
    time.sleep(2.1)
    results: dict[str, tuple] = {}

    def refresh() -> None:
        r = get(env.port, p)
        results["refresh"] = (r.body, status(r))

    t = threading.Thread(target=refresh)
    t.start()
    time.sleep(0.4)
    t0 = time.monotonic()
    r = get(env.port, p)
    elapsed = time.monotonic() - t0
    t.join()
    assert (r.body, status(r)) == (b"u1", "UPDATING")  # the stale copy, at once, while the refresh runs
    assert elapsed < 1.0
    assert results["refresh"] == (b"u2", "EXPIRED")
    assert env.origin.count(p) == 2


# ------------------------------------------------------------------------------------------------------------
# Purge.


def test_purge_exact_wildcard_all(env):
    p = prefix()
    for name in ("a.png", "b.png", "page.html"):
        env.origin.route(f"{p}/img/{name}" if name.endswith("png") else f"{p}/{name}", fixed(name.encode()))
    for t in (f"{p}/img/a.png", f"{p}/img/b.png", f"{p}/page.html"):
        assert status(get(env.port, t)) == "MISS"
        assert status(get(env.port, t)) == "HIT"
    r = get(env.port, f"{p}/page.html", method="PURGE")
    assert r.status == 200
    assert get(env.port, f"{p}/page.html", method="PURGE").status == 404
    assert env.origin.count(f"{p}/page.html") == 1  # PURGE is never forwarded upstream
    assert status(get(env.port, f"{p}/page.html")) == "MISS"
    r = get(env.port, f"{p}/img/*", method="PURGE")
    assert r.status == 200 and b"Entries: 2" in r.body
    assert status(get(env.port, f"{p}/img/a.png")) == "MISS"
    assert status(get(env.port, f"{p}/img/b.png")) == "MISS"
    # The purge location: key from the query.
    assert get(env.port, f"/purge/?key={p}/img/a.png").status == 200
    assert get(env.port, f"/purge/?key={p}/img/a.png").status == 404
    assert status(get(env.port, f"{p}/img/a.png")) == "MISS"
    # Purge all.
    assert get(env.port, "/purge-all").status == 200
    assert status(get(env.port, f"{p}/img/b.png")) == "MISS"


def test_purge_variants(env):
    p = prefix() + "/v"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")],
                                             (req.header("Accept-Language") or "none").encode()))
    for lang in ("en", "fr"):
        get(env.port, p, headers=[("Accept-Language", lang)])
        assert status(get(env.port, p, headers=[("Accept-Language", lang)])) == "HIT"
    r = get(env.port, p, method="PURGE")
    assert r.status == 200 and b"Entries: 3" in r.body  # the primary and both variants
    for lang in ("en", "fr"):
        assert status(get(env.port, p, headers=[("Accept-Language", lang)])) == "MISS"


# ------------------------------------------------------------------------------------------------------------
# Several cache paths, eviction, restart.


def test_split_clients_spreads_keys_over_zones(env):
    p = "/split" + prefix()
    paths = [f"{p}/{i}" for i in range(16)]
    for t in paths:
        env.origin.route(t, fixed(t.encode()))
        get(env.port, t)
        assert status(get(env.port, t)) == "HIT"

    def files(d: str) -> int:
        return sum(1 for f in (env.workdir / d).rglob("*") if f.is_file())

    assert files("d1") > 0 and files("d2") > 0
    assert files("d1") + files("d2") == 16


def test_max_size_eviction(env):
    p = "/small" + prefix()
    body = os.urandom(100 * 1024)
    for i in range(6):
        env.origin.route(f"{p}/{i}", fixed(body))
        assert get(env.port, f"{p}/{i}").body == body
        time.sleep(1.05)  # the zone's LRU clock counts seconds (cache_zone.hh)
    time.sleep(1.5)  # the cache manager runs every second
    total = sum(f.stat().st_size for f in (env.workdir / "small").rglob("*") if f.is_file())
    assert total <= 300 * 1024
    assert status(get(env.port, f"{p}/5")) == "HIT"  # the most recent stay
    assert status(get(env.port, f"{p}/0")) == "MISS"  # the least recently used went
    assert env.origin.count(f"{p}/0") == 2


def test_restart_keeps_cache(tmp_path):
    origin = Origin()
    port = sut.free_port()
    p = prefix()
    origin.route(p + "/keep", fixed(b"kept across restarts"))
    origin.route(p + "/vary", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                          ("Vary", "Accept-Language")], b"lang"))
    s = start_server(tmp_path, port, origin)
    try:
        assert status(get(port, p + "/keep")) == "MISS"
        get(port, p + "/vary", headers=[("Accept-Language", "en")])
        time.sleep(0.2)
    finally:
        assert s.stop() == 0
    # A new port: the old one may still have TIME_WAIT connections (what matters here is the cache directory).
    port = sut.free_port()
    s = start_server(tmp_path, port, origin)
    try:
        time.sleep(0.5)  # the cache loader
        r = get(port, p + "/keep")
        assert (r.body, status(r)) == (b"kept across restarts", "HIT")
        assert status(get(port, p + "/vary", headers=[("Accept-Language", "en")])) == "HIT"
        assert origin.count(p + "/keep") == 1 and origin.count(p + "/vary") == 1
        assert "http file cache:" in s.error_log()
    finally:
        assert s.stop() == 0
        origin.stop()


def test_status_page_shows_cache_counters(env):
    import json

    p = prefix() + "/st"
    env.origin.route(p, fixed(b"stats"))
    get(env.port, p)
    for _ in range(3):
        assert status(get(env.port, p)) == "HIT"
    doc = json.loads(get(env.port, "/kosoku-status?format=json").body)
    metrics = doc["extra"]["proxy_cache"]
    by = lambda name, **labels: [m["value"] for m in metrics
                                 if m["name"] == name and all(m["labels"].get(k) == v for k, v in labels.items())]
    assert sum(by("cache_responses_total", status="HIT")) >= 3
    assert sum(by("cache_responses_total", status="MISS")) >= 1
    assert by("cache_entries", zone="main")[0] >= 1
    assert by("cache_bytes", zone="main")[0] > 0
    assert by("cache_max_size_bytes", zone="small") == [300 * 1024]
    assert by("cache_loaded", zone="main") == [1]
    prom = get(env.port, "/kosoku-status?format=prometheus").body.decode()
    assert 'kosoku_cache_responses_total{core="0",status="HIT"}' in prom


# ------------------------------------------------------------------------------------------------------------
# Conformance cases (shared/cases/http-conformance.md) for proxy.example.com.


def test_c13_ranges_never_expose_cache_file_bytes(env):
    p = prefix() + "/c13"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                   ("X-Origin-Secret", "c13-secret-header")], b"0123456789"))
    assert get(env.port, p).body == b"0123456789"
    raw = (f"GET {p} HTTP/1.1\r\nHost: {HOST}\r\nRange: bytes=-1000,-9223372036854774808\r\n"
           f"Connection: close\r\n\r\n").encode()
    ex = sut.exchange(env.port, raw)
    r = ex.one()
    assert r.status in (200, 206, 416)
    assert b"c13-secret-header" not in r.body and b"KSKCACH" not in r.body and b"http:" not in r.body
    assert len(r.body) <= 2048
    if r.status == 206:
        assert r.header("Content-Range") == "bytes 0-9/10" and r.body == b"0123456789"
    for rng, want_status, want_body in (("bytes=-1000", 206, b"0123456789"), ("bytes=-0", 416, None),
                                        ("bytes=0-99999999999999999999999", 206, b"0123456789"),
                                        ("bytes=8-", 206, b"89"), ("bytes=10-", 416, None)):
        r = get(env.port, p, headers=[("Range", rng)])
        assert r.status == want_status, rng
        if want_body is not None:
            assert r.body == want_body
        else:
            assert r.header("Content-Range") == "bytes */10"
    assert env.origin.count(p) == 1


def test_c15_weak_etags_and_lists_on_a_hit(env):
    p = prefix() + "/c15"
    env.origin.route(p, lambda req, n: Reply(200, [("ETag", 'W/"c15"'), ("Cache-Control", "max-age=60")],
                                             b"hello c15"))
    assert get(env.port, p).body == b"hello c15"
    for inm, want in (('W/"c15"', 304), ('"c15"', 304), ('"x", W/"c15"', 304), ('"x", "y"', 200), ("*", 304)):
        r = get(env.port, p, headers=[("If-None-Match", inm)])
        assert r.status == want, inm
        assert r.body == (b"" if want == 304 else b"hello c15")
    assert env.origin.count(p) == 1  # RFC 9111 §4.3.2: the cache answers the conditionals itself


def test_c17_304_carries_the_200s_fields(env):
    p = prefix() + "/c17"
    expires = http_date(time.time() + 60)
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("ETag", '"c17"'),
                                                   ("Vary", "Accept-Encoding"), ("Expires", expires),
                                                   ("Content-Location", p)], b"c17 body"))
    full = get(env.port, p)
    assert full.body == b"c17 body"
    r = get(env.port, p, headers=[("If-None-Match", '"c17"')])
    assert r.status == 304 and r.body == b""
    for name in ("Date", "ETag", "Vary", "Cache-Control", "Expires", "Content-Location"):
        assert r.header(name) is not None, name
    assert r.header("ETag") == '"c17"'
    assert r.header("Vary") == "Accept-Encoding" and r.header("Expires") == expires
    assert r.header("Content-Length") in (None, "8")
    assert env.origin.count(p) == 1


def test_c22_set_cookie_never_leaks(env):
    p = prefix()

    def cookie(cc: str):
        return lambda req, n: Reply(200, [("Cache-Control", cc),
                                          ("Set-Cookie", "session=USER-A-SECRET; Path=/" if n == 1 else
                                           "session=USER-B; Path=/")], b"c22 body")

    for path, cc in ((p + "/c22", "public, max-age=60"), (p + "/c22b", 'no-cache="Set-Cookie", max-age=60')):
        env.origin.route(path, cookie(cc))
        a = get(env.port, path)
        assert "USER-A-SECRET" in (a.header("Set-Cookie") or "")
        b = get(env.port, path)
        assert "USER-A-SECRET" not in (b.header("Set-Cookie") or "")
        assert "USER-A-SECRET" not in b.raw_head.decode("latin-1")
    # With proxy_ignore_headers Set-Cookie the response is stored, without its Set-Cookie.
    q = "/ignore" + prefix()
    env.origin.route(q, cookie("public, max-age=60"))
    assert "USER-A-SECRET" in (get(env.port, q).header("Set-Cookie") or "")
    b = get(env.port, q)
    assert status(b) == "HIT" and not b.has("Set-Cookie")


def test_c23_vary_is_part_of_the_key(env):
    p = prefix()
    env.origin.route(p + "/c23", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                            ("Vary", "Accept-Language")],
                                                      b"lang=" + (req.header("Accept-Language") or "none").encode()))
    bodies = [get(env.port, p + "/c23", headers=[("Accept-Language", l)] if l else []).body
              for l in ("en", "fr", "en", None)]
    assert bodies == [b"lang=en", b"lang=fr", b"lang=en", b"lang=none"]
    assert env.origin.count(p + "/c23") == 3
    env.origin.route(p + "/c23star", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("Vary", "*")],
                                                          b"star-%d" % n))
    assert [get(env.port, p + "/c23star").body for _ in range(2)] == [b"star-1", b"star-2"]


def test_c26_stale_on_error_and_when_forbidden(env):
    p = prefix()

    def then(fail: Reply, cc: str):
        return lambda req, n: (Reply(200, [("ETag", '"c26"'), ("Cache-Control", cc)], b"fresh-1") if n == 1
                               else fail)

    bad = Reply(502, [("Content-Type", "text/plain")], b"upstream broke")
    cases = {"c26": then(bad, "max-age=1"), "c26b": then(bad, "max-age=1, must-revalidate"),
             "c26c": then(Reply(close_without_answer=True), "max-age=1"), "c26d": then(bad, "max-age=0, s-maxage=1")}
    for name, fn in cases.items():
        env.origin.route(f"{p}/{name}", fn)
        assert get(env.port, f"{p}/{name}").body == b"fresh-1"
    time.sleep(2.5)
    for name in ("c26", "c26c"):
        r = get(env.port, f"{p}/{name}")
        assert (r.status, r.body, status(r)) == (200, b"fresh-1", "STALE"), name
        assert r.has("Age"), name
    for name in ("c26b", "c26d"):
        r = get(env.port, f"{p}/{name}")
        assert r.status in (502, 504), name
        assert r.body != b"fresh-1"


# ------------------------------------------------------------------------------------------------------------
# A MISS answers the client's conditionals and ranges as a HIT does (nginx: the cache's request to the origin
# carries no If-*/Range; the not_modified and range filters run on the origin's 200 as it passes).


def test_miss_answers_if_none_match_with_304(env):
    p = prefix() + "/mc"
    env.origin.route(p, fixed(b"conditional body", extra=[("ETag", '"mc1"')]))
    r = get(env.port, p, headers=[("If-None-Match", '"mc1"')])
    assert (r.status, r.body, status(r), r.header("ETag")) == (304, b"", "MISS", '"mc1"')
    assert env.origin.log[p][0].header("If-None-Match") is None  # the origin got an unconditional GET
    r = get(env.port, p)  # the whole body was stored although the client got a 304
    assert (r.status, r.body, status(r)) == (200, b"conditional body", "HIT")
    r = get(env.port, p, headers=[("If-None-Match", '"mc1"')])
    assert (r.status, status(r)) == (304, "HIT")
    assert env.origin.count(p) == 1


def test_miss_answers_if_modified_since_and_preconditions(env):
    p = prefix() + "/mims"
    lm = http_date(time.time() - 3600)
    env.origin.route(p, fixed(b"dated body", extra=[("Last-Modified", lm)]))
    r = get(env.port, p, headers=[("If-Modified-Since", lm)])
    assert (r.status, r.body, status(r)) == (304, b"", "MISS")
    q = prefix() + "/mim"
    env.origin.route(q, fixed(b"tagged", extra=[("ETag", '"t1"')]))
    r = get(env.port, q, headers=[("If-Match", '"other"')])
    assert r.status == 412  # as a HIT would (RFC 9110 §13.2.2); add_header skips a 412 (nginx)
    assert env.origin.log[q][0].header("If-Match") is None
    # A miss whose If-None-Match does not match gets the whole 200.
    r = get(env.port, q, headers=[("If-None-Match", '"nope"')])
    assert (r.status, r.body) == (200, b"tagged")


def test_miss_answers_range_with_206_and_stores_the_whole_body(env):
    p = prefix() + "/mr"
    body = bytes(range(256)) * 400  # 102400 bytes: several reads through the proxy's ring
    env.origin.route(p, fixed(body, extra=[("ETag", '"mr"')]))
    r = get(env.port, p, headers=[("Range", "bytes=0-9")])
    assert (r.status, r.body, status(r)) == (206, body[:10], "MISS")
    assert r.header("Content-Range") == f"bytes 0-9/{len(body)}"
    assert r.header("Content-Length") == "10"
    assert env.origin.log[p][0].header("Range") is None
    r = get(env.port, p)  # the cache holds the FULL body
    assert (r.status, len(r.body), r.body == body, status(r)) == (200, len(body), True, "HIT")
    assert r.header("Content-Length") == str(len(body))
    assert env.origin.count(p) == 1
    # Further shapes on a miss: a range in the middle, a suffix, several ascending ranges (multipart),
    # an unsatisfiable one.
    for rng, first, last in (("bytes=70000-70009", 70000, 70009), ("bytes=-5", len(body) - 5, len(body) - 1)):
        q = prefix() + "/mr2"
        env.origin.route(q, fixed(body))
        r = get(env.port, q, headers=[("Range", rng)])
        assert (r.status, r.body, status(r)) == (206, body[first:last + 1], "MISS"), rng
        assert r.header("Content-Range") == f"bytes {first}-{last}/{len(body)}"
        assert get(env.port, q).body == body
    q = prefix() + "/mr3"
    env.origin.route(q, fixed(body))
    r = get(env.port, q, headers=[("Range", "bytes=1-2,50000-50001")])
    assert (r.status, status(r)) == (206, "MISS")
    ctype = r.header("Content-Type")
    assert ctype.startswith("multipart/byteranges; boundary=")
    boundary = ctype.split("boundary=")[1].encode()
    parts = [x for x in r.body.split(b"--" + boundary) if x.strip() not in (b"", b"--")]
    assert len(parts) == 2
    assert parts[0].endswith(b"\r\n\r\n" + body[1:3] + b"\r\n") and b"bytes 1-2/102400" in parts[0]
    assert parts[1].endswith(b"\r\n\r\n" + body[50000:50002] + b"\r\n") and b"bytes 50000-50001/102400" in parts[1]
    assert int(r.header("Content-Length")) == len(r.body)
    hit = get(env.port, q, headers=[("Range", "bytes=1-2,50000-50001")])
    assert (hit.status, status(hit), len(hit.body)) == (206, "HIT", len(r.body))
    q = prefix() + "/mr4"
    env.origin.route(q, fixed(b"0123456789"))
    r = get(env.port, q, headers=[("Range", "bytes=10-")])
    assert (r.status, r.header("Content-Range")) == (416, "bytes */10")  # add_header skips a 416 (nginx)


def test_expired_and_bypass_answer_ranges_too(env):
    p = prefix() + "/er"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=1")], b"version %d body" % n))
    assert get(env.port, p).body == b"version 1 body"
    time.sleep(2.1)
    r = get(env.port, p, headers=[("Range", "bytes=8-8")])
    assert (r.status, r.body, status(r)) == (206, b"2", "EXPIRED")
    assert status(get(env.port, p)) == "HIT"
    q = "/bypass" + prefix()
    env.origin.route(q, fixed(b"bypassed body", extra=[("ETag", '"bp"')]))
    r = get(env.port, q + "?nocache=1", headers=[("Range", "bytes=0-7")])
    assert (r.status, r.body, status(r)) == (206, b"bypassed", "BYPASS")
    r = get(env.port, q + "?nocache=1", headers=[("If-None-Match", '"bp"')])
    assert (r.status, status(r)) == (304, "BYPASS")


def test_background_update_revalidates_conditionally(env):
    # proxy_cache_background_update + proxy_cache_revalidate: the refresh carries the stale entry's validators and
    # the origin's 304 refreshes the entry's head and validity without sending the body again.
    p = "/bg" + prefix()
    sent = collections.Counter()
    lm = http_date(time.time() - 600)

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"bg1"' and req.header("If-Modified-Since") == lm:
            sent[304] += 1
            return Reply(304, [("ETag", '"bg1"'), ("Cache-Control", "max-age=2"), ("X-Refresh", str(n))])
        sent[200] += 1
        return Reply(200, [("ETag", '"bg1"'), ("Last-Modified", lm), ("Cache-Control", "max-age=2"),
                           ("X-Refresh", str(n))], b"background body " * 1000)

    env.origin.route(p, handler)
    r = get(env.port, p)
    assert (status(r), r.header("X-Refresh")) == ("MISS", "1")
    for round_ in (2, 3):
        time.sleep(2.2)
        r = get(env.port, p)
        assert (r.status, status(r), len(r.body)) == (200, "STALE", 16000)  # the stale copy, at once
        deadline = time.time() + 3
        while sent[304] < round_ - 1 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the entry is rewritten with the merged head
        r = get(env.port, p)
        assert (r.status, status(r), r.body) == (200, "HIT", b"background body " * 1000)
        assert r.header("X-Refresh") == str(round_)  # the 304's fields were merged (RFC 9111 §4.3.4)
    assert (sent[200], sent[304]) == (1, 2)  # the body went over the wire once
    assert env.origin.log[p][1].header("If-None-Match") == '"bg1"'
