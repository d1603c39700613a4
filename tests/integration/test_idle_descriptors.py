"""An idle keep-alive connection holds no descriptor but its socket: the static handler and the cache let go of
the file a response was read from as soon as the response is complete (Exchange::finish →
ContentState::on_response_complete), not at the connection's next request. Without open_file_cache, 10,000
idle keep-alive clients would otherwise hold 20,000 descriptors and new file requests fail with 500 (EMFILE).

Every way a static response ends is covered (200 streamed in several chunks, HEAD, 304, 206, 416, the directory
301, a 404), and a cache HIT read from the cache file. The count is of kosoku's descriptors that point into the
docroot or the cache directory (regular files), read from /proc/PID/fd while the clients stay connected.
"""
from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import pytest

import sut
from test_engine import Kosoku, tmp  # noqa: F401 (fixture)
from test_shared_buffer_paths import read_responses

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's process descriptors")

CLIENTS = 24


def open_files_under(pid: int, d: Path, files_only: bool = False) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith(str(d) + "/") and (os.path.isfile(target) or not files_only):
            out.append(target)
    return out


def request(s: socket.socket, line: str, method: str = "GET"):
    s.sendall(line.encode())
    (r,) = read_responses(s, [method])
    return r


def test_idle_keepalive_static_connections_hold_no_file_descriptor(tmp):
    k = Kosoku(tmp, workers=2, server="location /chunked/ { sendfile_max_chunk 16k; }")
    rnd = random.Random(3)
    bodies = {}
    for i in range(CLIENTS):
        bodies[f"f{i}.bin"] = rnd.randbytes(rnd.choice([100, 70000, 300000]))
        (k.www / f"f{i}.bin").write_bytes(bodies[f"f{i}.bin"])
    (k.www / "chunked").mkdir()
    (k.www / "chunked" / "c.bin").write_bytes(bodies["f0.bin"])
    (k.www / "dir").mkdir()
    (k.www / "dir" / "index.html").write_bytes(b"dir index\n")
    k.start()
    clients = []
    try:
        for i in range(CLIENTS):
            s = socket.create_connection(("127.0.0.1", k.port), timeout=10 * sut.SLOWDOWN)
            clients.append(s)
            name = f"f{i}.bin"
            size = len(bodies[name])
            r = request(s, f"GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n")
            assert r.status == 200 and r.body == bodies[name]
            kind = i % 8
            if kind == 1:
                r = request(s, f"HEAD /{name} HTTP/1.1\r\nHost: t\r\n\r\n", "HEAD")
                assert r.status == 200 and r.body == b""
            elif kind == 2:
                etag = r.header("ETag")
                r = request(s, f"GET /{name} HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n")
                assert r.status == 304
            elif kind == 3:
                r = request(s, f"GET /{name} HTTP/1.1\r\nHost: t\r\nRange: bytes=10-49\r\n\r\n")
                assert r.status == 206 and r.body == bodies[name][10:50]
            elif kind == 4:
                r = request(s, f"GET /{name} HTTP/1.1\r\nHost: t\r\nRange: bytes={size + 5}-\r\n\r\n")
                assert r.status == 416
            elif kind == 5:
                r = request(s, "GET /dir HTTP/1.1\r\nHost: t\r\n\r\n")
                assert r.status == 301
                r = request(s, "GET /dir/ HTTP/1.1\r\nHost: t\r\n\r\n")
                assert r.status == 200 and r.body == b"dir index\n"
            elif kind == 6:
                r = request(s, "GET /missing.bin HTTP/1.1\r\nHost: t\r\n\r\n")
                assert r.status == 404
            elif kind == 7:
                r = request(s, "GET /chunked/c.bin HTTP/1.1\r\nHost: t\r\n\r\n")
                assert r.status == 200 and r.body == bodies["f0.bin"]
        time.sleep(0.3)
        assert k.status()["connections"]["waiting"] >= CLIENTS
        held = open_files_under(k.proc.pid, k.www)
        assert held == [], f"{len(held)} docroot files held open by {CLIENTS} idle keep-alive connections: {held[:5]}"
        # The connections are still usable after giving their files back.
        for i, s in enumerate(clients):
            r = request(s, f"GET /f{i}.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            assert r.status == 200 and r.body == bodies[f"f{i}.bin"]
    finally:
        for s in clients:
            s.close()
        rc = k.stop()
    assert rc == 0


def test_idle_keepalive_cache_hit_connections_hold_no_cache_file(tmp):
    origin_port = sut.free_port()
    origin_www = tmp / "origin"
    origin_www.mkdir()
    cache = tmp / "cache"
    rnd = random.Random(5)
    bodies = {f"o{i}.bin": rnd.randbytes(rnd.choice([500, 90000, 400000])) for i in range(CLIENTS)}
    for name, data in bodies.items():
        (origin_www / name).write_bytes(data)
    k = Kosoku(tmp, workers=2,
               http=f"""access_log off;
    proxy_cache_path {cache} levels=1:2 keys_zone=z:1m;
    server {{ listen 127.0.0.1:{origin_port}; root {origin_www}; }}""",
               server=f"""location /c/ {{ proxy_pass http://127.0.0.1:{origin_port}/; proxy_cache z;
                          proxy_cache_valid 200 10m; add_header X-Cache $upstream_cache_status; }}""")
    k.start()
    clients = []
    try:
        for name in bodies:  # fill the cache
            r = k.get(f"/c/{name}")
            assert r.status == 200 and r.body == bodies[name]
        for i, name in enumerate(bodies):
            s = socket.create_connection(("127.0.0.1", k.port), timeout=10 * sut.SLOWDOWN)
            clients.append(s)
            r = request(s, f"GET /c/{name} HTTP/1.1\r\nHost: t\r\n\r\n")
            assert r.status == 200 and r.body == bodies[name] and r.header("X-Cache") == "HIT"
            if i % 3 == 1:
                r = request(s, f"GET /c/{name} HTTP/1.1\r\nHost: t\r\nRange: bytes=1-20\r\n\r\n")
                assert r.status == 206 and r.body == bodies[name][1:21]
            elif i % 3 == 2:
                r = request(s, f"HEAD /c/{name} HTTP/1.1\r\nHost: t\r\n\r\n", "HEAD")
                assert r.status == 200
        time.sleep(0.3)
        held = open_files_under(k.proc.pid, cache, files_only=True)  # not the cache's own directories
        assert held == [], f"{len(held)} cache files held open by {CLIENTS} idle keep-alive connections: {held[:5]}"
    finally:
        for s in clients:
            s.close()
        rc = k.stop()
    assert rc == 0
