"""QA: an upstream group whose servers all failed stays "no live upstreams" for fail_timeout (nginx 1.22).

nginx's ngx_http_upstream_get_round_robin_peer returns NGX_BUSY when no server of the group is usable and keeps
the failure counts: every request within fail_timeout is answered 502 at once, logged as "no live upstreams",
with the group's name in $upstream_addr, and no connect() is attempted. (nginx 1.0 reset the counts "for quick
recovery"; nginx 1.22, Debian 12's, does not: checked with SUT=nginx.)

The real server binary, one worker (failure counts are per worker), two refused ports as the group's servers,
max_fails=1 fail_timeout=30s; the access log shows which servers each request tried. The second test gives the
cost: with servers that do not answer SYNs, kosoku makes every other request wait proxy_connect_timeout per server
(2 s here, 2 min with the 60 s default and two servers) where nginx answers 502 at once.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

import sut


def _log_lines(path: Path, n: int, timeout: float = 5.0) -> list[list[str]]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            break
        time.sleep(0.05)
    return [ln.split("|") for ln in lines]


def test_all_failed_group_stays_unavailable_for_fail_timeout(tmp_path):
    dead1, dead2, port = sut.free_ports(3)
    w = tmp_path / "srv"
    body = f"""
    log_format up '$request_uri|$status|$upstream_addr|$upstream_status';
    upstream grp {{
        server 127.0.0.1:{dead1} max_fails=1 fail_timeout=30s;
        server 127.0.0.1:{dead2} max_fails=1 fail_timeout=30s;
    }}
    server {{
        listen 127.0.0.1:{port};
        access_log {w}/access.log up;
        location / {{ proxy_pass http://grp; }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, w, body, [port], workers=1).start()
    try:
        with sut.Conn(port, timeout=10) as c:
            for i in range(4):
                c.send(f"GET /r{i} HTTP/1.1\r\nHost: qa.example.com\r\n\r\n".encode())
                r = c.read_response(timeout=10)
                assert r is not None and r.status == 502, r
        lines = _log_lines(w / "access.log", 4)
        assert len(lines) == 4, lines
        # The first request tries both servers and marks them failed ...
        assert sorted(lines[0][2].split(", ")) == sorted([f"127.0.0.1:{dead1}", f"127.0.0.1:{dead2}"]), lines
        # ... every later one within fail_timeout finds none usable and tries no server.
        for ln in lines[1:]:
            assert ln[1:] == ["502", "grp", "502"], lines
        log = srv.error_log()
        assert log.count("no live upstreams") == 3, log
        assert log.count("connect() failed") == 2, log
    finally:
        assert srv.stop() == 0


def _unanswering_listeners(n: int) -> tuple[list[socket.socket], list[socket.socket]]:
    """n listening sockets whose accept queue (backlog 0) is full: the kernel drops further SYNs, so a connect()
    to them times out, like a server that is down without a RST."""
    holes, fillers = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        holes.append(s)
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(s.getsockname())
            except BlockingIOError:
                pass
            fillers.append(c)
    time.sleep(0.2)
    return holes, fillers


def test_dead_group_fails_fast_within_fail_timeout(tmp_path):
    holes, fillers = _unanswering_listeners(2)
    port = sut.free_port()
    servers = " ".join(f"server 127.0.0.1:{h.getsockname()[1]} max_fails=1 fail_timeout=30s;" for h in holes)
    body = f"""
    upstream g {{ {servers} }}
    server {{
        listen 127.0.0.1:{port};
        proxy_connect_timeout 1s;
        location / {{ proxy_pass http://g; }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, tmp_path / "srv", body, [port], workers=1).start()
    try:
        took = []
        with sut.Conn(port, timeout=20) as c:
            for i in range(5):
                t0 = time.monotonic()
                c.send(f"GET /t{i} HTTP/1.1\r\nHost: qa.example.com\r\n\r\n".encode())
                r = c.read_response(timeout=20)
                took.append(round(time.monotonic() - t0, 2))
                assert r is not None, took
                assert r.status == (504 if i == 0 else 502), (i, r.status, took)
        assert took[0] >= 1.9, took  # both servers timed out once (1 s each) ...
        assert all(t < 0.5 for t in took[1:]), took  # ... then 502 at once for fail_timeout
    finally:
        assert srv.stop() == 0
        for s in holes + fillers:
            s.close()
