"""`listen ... rcvbuf=SIZE sndbuf=SIZE` (nginx) on the kernel-socket backend: SO_RCVBUF / SO_SNDBUF of the
listening sockets (one per worker, SO_REUSEPORT), inherited by the accepted ones, seen by `ss -m` (skmem rb/tb:
Linux doubles what setsockopt is given), and `kosoku -t`'s errors for bad values and for conflicting options on
one address. Skipped when SUT=nginx (the test reads kosoku's own sockets) or without `ss`.
"""
from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time

import pytest

import sut
from test_engine import Kosoku, tmp  # noqa: F401 (tmp: the fixture)

pytestmark = [pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's sockets"),
              pytest.mark.skipif(shutil.which("ss") is None, reason="iproute2 `ss` is missing")]


def skmem(state: str, port: int) -> list[tuple[int, int]]:
    """(rb, tb) of every TCP socket in `state` ("listening" or "established") whose local port is `port`."""
    r = subprocess.run(["ss", "-tmnH", "state", state, "sport", "=", f":{port}"], capture_output=True, text=True,
                       check=True, timeout=10)
    return [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", r.stdout)]


def test_listening_and_accepted_sockets_take_the_sizes(tmp):
    port2 = sut.free_port()
    k = Kosoku(tmp, workers=2, server=f"listen 127.0.0.1:{port2} rcvbuf=48k sndbuf=24k;")
    k.start()
    try:
        tuned = skmem("listening", port2)
        plain = skmem("listening", k.port)
        print(f"listen rcvbuf=48k sndbuf=24k: skmem (rb, tb) {tuned}; plain listen: {plain}")
        assert tuned == [(2 * 48 * 1024, 2 * 24 * 1024)] * 2  # one listening socket per worker
        assert plain and all(p != tuned[0] for p in plain)
        with socket.create_connection(("127.0.0.1", port2)) as c:
            c.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            accepted = skmem("established", port2)
            print(f"accepted connection: skmem (rb, tb) {accepted}")
            assert accepted == [(2 * 48 * 1024, 2 * 24 * 1024)]
    finally:
        assert k.stop() == 0


def config_test(tmp, server: str) -> subprocess.CompletedProcess:
    conf = tmp / "t.conf"
    (tmp / "logs").mkdir(exist_ok=True)  # -t opens the default error log (logs/error.log) as the start does
    conf.write_text(f"worker_processes 1;\nhttp {{\n{server}\n}}\n")
    return subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("server, where, message", [
    ("server { listen 8099 rcvbuf=lots; }", "3:22", 'invalid rcvbuf "rcvbuf=lots"'),
    ("server { listen 8099 backlog=10 sndbuf=4g; }", "3:33", 'invalid sndbuf "sndbuf=4g": more than 1g'),
    ("server { listen 8099 sndbuf=; }", "3:22", 'invalid sndbuf "sndbuf="'),
    ("server { listen 8099 rcvbuf=64k; }\nserver { listen 8099 sndbuf=64k; }", "4:10",
     "duplicate listen options for 0.0.0.0:8099"),
])
def test_config_test_refuses_bad_values_with_position(tmp, server, where, message):
    r = config_test(tmp, server)
    assert r.returncode == 1, r
    assert f"t.conf:{where}: {message}" in r.stderr, r.stderr


def test_config_test_accepts_nginx_sizes(tmp):
    r = config_test(tmp, "server { listen 8099 rcvbuf=64k sndbuf=1M; }\nserver { listen 8099; server_name b; }\n"
                         "server { listen 8098 rcvbuf=131072 sndbuf=1g reuseport; }")
    assert r.returncode == 0, r.stderr
