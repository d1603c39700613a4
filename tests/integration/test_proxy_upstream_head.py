"""The proxy reading an origin's response head, against a scripted python origin that misbehaves on purpose.

- proxy_read_timeout runs from the request being sent to the final head, as nginx's: a head dribbled byte by
  byte, or 1xx responses trickling in, end in 504 with nginx's "upstream timed out" line once it is over;
- 1xx responses are skipped, but together they may take at most proxy_buffer_size: a flood of them is 502
  with nginx's "upstream sent too big header" line;
- an origin that closes before the final head (after 1xx responses, or in the middle of the head) is 502 with
  "upstream prematurely closed connection"; garbage instead of a status line is 502;
- an origin's head is bounded by its bytes (proxy_buffer_size), not by its number of fields: 300 small fields
  pass through (also into the cache and out of it again), a head over proxy_buffer_size is 502;
- a slow origin is waited for up to proxy_read_timeout even when client_header_timeout is shorter (the client's
  header timer stops once its request head is in).

Runs against nginx too (SUT=nginx), except where nginx 1.22 differs (it takes a 1xx as the final response, and
passes garbage on as an HTTP/0.9 body); those tests say so.
"""
from __future__ import annotations

import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut

READ_TIMEOUT_S = 1.0  # proxy_read_timeout of the default location
HOLD_S = 20.0         # how long a misbehaving origin keeps at it unless the proxy gives up first


def fields_head(n: int, width: int = 0) -> bytes:
    lines = b"".join(b"X-F%d: v%s\r\n" % (i, b"p" * width) for i in range(n))
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCache-Control: max-age=60\r\n" + lines + b"\r\nok"


class Origin(sut.ScriptedOrigin):
    """Plays the script named by the last path segment of the request; see _play."""

    def serve(self, c: socket.socket) -> None:
        try:
            buf = sut.recv_request_head(c)
            if buf is None:
                return
            u = urllib.parse.urlsplit(buf.split(b" ", 2)[1].decode())
            q = dict(urllib.parse.parse_qsl(u.query))
            self._play(c, u.path.rsplit("/", 1)[-1], q)
        except OSError:
            pass  # the proxy gave up on us: that is what most scripts wait for
        finally:
            c.close()

    @staticmethod
    def _hold(c: socket.socket) -> None:
        """Keeps the connection open, sending nothing, until the proxy closes it (or HOLD_S)."""
        c.settimeout(HOLD_S)
        try:
            while c.recv(65536):
                pass
        except socket.timeout:
            pass

    def _play(self, c: socket.socket, script: str, q: dict) -> None:
        if script == "interim-flood":
            # 100 Continue responses back to back, far more than proxy_buffer_size, then silence.
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * int(q.get("n", "400")))
            self._hold(c)
        elif script == "interim-trickle":
            # One 103 Early Hints every 0.3 s and never a final head.
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                c.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
                time.sleep(0.3)
        elif script == "interim-then-close":
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 5)
            time.sleep(0.2)
            c.shutdown(socket.SHUT_WR)
            self._hold(c)
        elif script == "close-mid-head":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Le")
            time.sleep(0.2)
            c.shutdown(socket.SHUT_WR)
            self._hold(c)
        elif script == "garbage":
            c.sendall(b"\x16\x03\x01\x00\xa5 this is not HTTP\r\n\r\n")
            self._hold(c)
        elif script == "dribble":
            # A head that starts well and then comes one byte every 0.1 s, never ending.
            c.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                c.sendall(b"s")
                time.sleep(0.1)
        elif script == "fields":
            c.sendall(fields_head(int(q["n"]), int(q.get("w", "0"))))
            self._hold(c)
        elif script == "slow":
            time.sleep(float(q["s"]))
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow")
        else:
            c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@dataclass
class Env:
    port: int
    origin: Origin
    server: sut.ServerProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    origin = Origin()
    port = sut.free_port()
    work = tmp_path_factory.mktemp("upstreamhead")
    o = f"http://127.0.0.1:{origin.port}"
    conf = f"""
    proxy_cache_path {work}/cache levels=1:2 keys_zone=uh:1m;
    server {{
        listen 127.0.0.1:{port} default_server;
        client_header_timeout 1s;
        location / {{ proxy_pass {o}; proxy_read_timeout {int(READ_TIMEOUT_S * 1000)}ms; }}
        location /big/ {{ proxy_pass {o}; proxy_buffer_size 16k; proxy_buffers 8 16k; }}
        location /cached/ {{
            proxy_pass {o};
            proxy_cache uh;
            proxy_cache_valid 200 60s;
            add_header X-Cache-Status $upstream_cache_status;
        }}
        location /patient/ {{ proxy_pass {o}; proxy_read_timeout 10s; }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, Path(work), conf, [port])
    srv.start()
    yield Env(port, origin, srv)
    rc = srv.stop()
    origin.close()
    assert rc == 0, f"{sut.SUT} exited with {rc}\n" + srv.diagnostics()


def get(env: Env, target: str, timeout: float = 8.0) -> tuple[sut.Response, float]:
    """One GET with Connection: close; the final response and the seconds it took."""
    t0 = time.monotonic()
    ex = sut.exchange(env.port, sut.build_request("GET", target, host="origin.test"), timeout=timeout)
    elapsed = time.monotonic() - t0
    assert ex.finals, f"no response to {target} after {elapsed:.1f}s (closed={ex.closed}, reset={ex.reset})"
    return ex.one(), elapsed


def logged(env: Env, what: str, target: str, timeout: float = 5.0) -> list[str]:
    """The error-log lines with `what` for `target` (waiting for the first one up to `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln for ln in env.server.error_log().splitlines()
                 if what in ln and f'request: "GET {target} HTTP/1.1"' in ln]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


TIMED_OUT = "upstream timed out (110: Connection timed out) while reading response header from upstream"
CLOSED = "upstream prematurely closed connection while reading response header from upstream"
TOO_BIG = "upstream sent too big header while reading response header from upstream"


def test_a_head_dribbled_byte_by_byte_times_out_after_proxy_read_timeout(env):
    r, elapsed = get(env, "/x/dribble")
    assert r.status == 504
    assert READ_TIMEOUT_S - 0.1 <= elapsed < READ_TIMEOUT_S + 1.5, elapsed
    assert len(logged(env, TIMED_OUT, "/x/dribble")) == 1


def test_interim_responses_do_not_restart_proxy_read_timeout(env):
    sut.nginx_deviation("nginx 1.22 takes an origin's 1xx response as the final one")
    r, elapsed = get(env, "/x/interim-trickle")
    assert r.status == 504
    assert READ_TIMEOUT_S - 0.1 <= elapsed < READ_TIMEOUT_S + 1.5, elapsed
    assert len(logged(env, TIMED_OUT, "/x/interim-trickle")) == 1


def test_a_flood_of_interim_responses_is_502(env):
    sut.nginx_deviation("nginx 1.22 takes an origin's 1xx response as the final one")
    r, elapsed = get(env, "/x/interim-flood")
    assert r.status == 502
    assert elapsed < READ_TIMEOUT_S, elapsed  # refused for its bytes, not after the timeout
    assert len(logged(env, TOO_BIG, "/x/interim-flood")) == 1
    # A few interim responses before a late final head are fine (here the origin closes instead: 502 below).


def test_an_origin_closing_after_interim_responses_is_502(env):
    sut.nginx_deviation("nginx 1.22 takes an origin's 1xx response as the final one")
    r, _ = get(env, "/x/interim-then-close")
    assert r.status == 502
    assert len(logged(env, CLOSED, "/x/interim-then-close")) == 1


def test_an_origin_closing_in_the_middle_of_the_head_is_502(env):
    r, _ = get(env, "/x/close-mid-head")
    assert r.status == 502
    assert len(logged(env, CLOSED, "/x/close-mid-head")) == 1


def test_garbage_instead_of_a_status_line_is_502(env):
    sut.nginx_deviation("nginx 1.22 passes bytes without a status line on as an HTTP/0.9 response")
    r, elapsed = get(env, "/x/garbage")
    assert r.status == 502
    assert elapsed < READ_TIMEOUT_S, elapsed
    assert len(logged(env, "upstream sent invalid header", "/x/garbage")) == 1


def test_many_small_fields_within_proxy_buffer_size_pass_through(env):
    assert len(fields_head(300)) < 4096
    r, _ = get(env, "/x/fields?n=300")
    assert (r.status, r.body) == (200, b"ok")
    assert [r.header(f"X-F{i}") for i in range(300)] == ["v"] * 300
    # With proxy_buffer_size 16k, 1,200 of them.
    r, _ = get(env, "/big/fields?n=1200")
    assert (r.status, r.body) == (200, b"ok")
    assert sum(1 for k, _ in r.headers if k.startswith("X-F")) == 1200


def test_a_head_over_proxy_buffer_size_is_502_whatever_its_field_count(env):
    assert len(fields_head(300, 4)) > 4096
    r, _ = get(env, "/x/fields?n=300&w=4")
    assert r.status == 502
    assert len(logged(env, TOO_BIG, "/x/fields?n=300&w=4")) == 1


def test_a_cached_response_with_many_fields_is_served_from_the_cache(env):
    first, _ = get(env, "/cached/fields?n=300")
    second, _ = get(env, "/cached/fields?n=300")
    for r in (first, second):
        assert (r.status, r.body) == (200, b"ok")
        assert [r.header(f"X-F{i}") for i in range(300)] == ["v"] * 300
    assert (first.header("X-Cache-Status"), second.header("X-Cache-Status")) == ("MISS", "HIT")


def test_a_slow_origin_outlives_client_header_timeout(env):
    # client_header_timeout 1s, proxy_read_timeout 10s, the origin answers after 2.5 s.
    r, elapsed = get(env, "/patient/slow?s=2.5")
    assert (r.status, r.body) == (200, b"slow")
    assert elapsed >= 2.4
