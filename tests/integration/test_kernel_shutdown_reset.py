"""Shutdown on the kernel-socket backend (issue 4): SIGTERM/SIGINT/SIGQUIT stop accepting, close idle keep-alive
connections at once (a FIN: nothing is lost) and let requests in progress finish for up to 10 s (README
"Signals"). Connections still open when that drain ends get a RST (SO_LINGER {1, 0}, then close), as kosoku's
own TCP does on `network dpdk` (TcpStack::reset_all, test_dpdk_ops.py): the client learns at once that the
response is incomplete, rather than a FIN that reads like the end of a response, or silence.
Each test starts its own kosoku (test_engine.Kosoku, 1 worker) and takes ~10 s (the drain).
"""
from __future__ import annotations

import signal
import socket
import time

import pytest

import sut
from test_engine import Kosoku, tmp  # noqa: F401 (tmp: the fixture)

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's shutdown drain")


def outcome(s: socket.socket, limit: float = 30) -> tuple[str, int, float]:
    """Reads until EOF, an error or `limit` seconds: ("eof" | "reset" | "timeout", bytes read, seconds)."""
    t0 = time.monotonic()
    n = 0
    s.settimeout(limit)
    try:
        while True:
            d = s.recv(1 << 20)
            if not d:
                return "eof", n, time.monotonic() - t0
            n += len(d)
    except ConnectionResetError:
        return "reset", n, time.monotonic() - t0
    except socket.timeout:
        return "timeout", n, time.monotonic() - t0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT])
def test_request_in_progress_after_the_drain_gets_a_rst(tmp, sig):
    k = Kosoku(tmp, workers=1)
    k.start()
    try:
        stalled = socket.create_connection(("127.0.0.1", k.port))
        stalled.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n")  # the head never ends
        idle = socket.create_connection(("127.0.0.1", k.port))
        idle.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 200")  # then idle in keep-alive
        time.sleep(0.2)
        t0 = time.monotonic()
        k.proc.send_signal(sig)
        # The idle keep-alive connection is closed at once, gracefully (nginx does the same).
        got, _, took = outcome(idle, 5)
        assert got == "eof" and took < 2, (got, took)
        got, _, took = outcome(stalled, 30)
        exited = k.proc.wait(timeout=20)
        print(f"{signal.Signals(sig).name}: stalled request saw {got} after {took:.1f} s; kosoku exited "
              f"{time.monotonic() - t0:.1f} s after the signal")
        assert exited == 0
        assert got == "reset", f"the client saw {got} (expected a RST when the drain ended)"
        assert 9 <= took <= 15, took
        assert "1 connection(s) still open at exit were reset" in k.log()
    finally:
        if k.proc.poll() is None:
            k.proc.kill()


def test_stalled_download_is_reset_not_truncated_with_a_fin(tmp):
    """A client that stops reading a large response: the drain cannot finish it; at the end the client reads what
    reached its buffer and then ECONNRESET, never a clean EOF after a truncated body."""
    k = Kosoku(tmp, workers=1)
    blob_size = 64 * 1024 * 1024
    (k.www / "big.bin").write_bytes(b"\0" * blob_size)
    k.start()
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        s.connect(("127.0.0.1", k.port))
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        time.sleep(0.5)  # the windows fill; the client reads nothing
        t0 = time.monotonic()
        k.proc.send_signal(signal.SIGTERM)
        assert k.proc.wait(timeout=20) == 0
        exited = time.monotonic() - t0
        got, n, _ = outcome(s, 10)
        print(f"stalled download: kosoku exited after {exited:.1f} s; the client then read {n} bytes and saw {got}")
        assert 9 <= exited <= 15, exited
        assert got == "reset", got
        assert n < blob_size
    finally:
        if k.proc.poll() is None:
            k.proc.kill()
