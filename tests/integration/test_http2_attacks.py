"""Hostile HTTP/2 clients, one scripted raw-frame client per attack (h2_harness.H2Raw: frames built by hand with
struct and hpack.Encoder): rapid reset, CONTINUATION floods, an HPACK bomb, header lists past
large_client_header_buffers, SETTINGS / PING floods from a client that never reads, WINDOW_UPDATE floods and
overflows, a zero-window stall (send_timeout), DATA after END_STREAM, malformed requests (pseudo-header fields,
connection-specific fields, upper-case names), Content-Length disagreeing with DATA, stream ids going backwards or
even, and frame-level violations whose error code RFC 9113 dictates.

Each test asserts the GOAWAY / RST_STREAM error code (exactly, where RFC 9113 names it; from the RFC-permitted set
where servers legitimately differ, said in a comment), and that a normal client is served meanwhile and afterwards:
a bystander connection opened before the attack and a new one after it (assert_serving).

One module-scoped server (one worker, so every attack hits the process that serves the bystander):
  h2c  `listen ... http2` cleartext      tls  `listen ... ssl http2`
  large_client_header_buffers 4 8k (the header-list bound: 32 KiB), send_timeout 2s, keepalive_requests 100000
  (so the request limit never ends a connection before a defence does), client_max_body_size 1m, /proxy/ to a
  python origin (test_proxy.Origin; its /echo reports the body's length and sha256).

Runs against nginx 1.22 too; where nginx lacks a defence or answers otherwise, the test asserts what nginx does
and then calls sut.nginx_deviation (the reason names the RFC clause): pytest -rs lists them.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import time

import hpack
import pytest

import h2_harness as H
import sut
from h2_harness import (ACK, CANCEL, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS, END_STREAM,
                        ENABLE_PUSH, ENHANCE_YOUR_CALM, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, GOAWAY, HEADERS,
                        INITIAL_WINDOW_SIZE, INTERNAL_ERROR, MAX_FRAME_SIZE, NO_ERROR, PING, PRIORITY,
                        PROTOCOL_ERROR, PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, SETTINGS, STREAM_CLOSED,
                        WINDOW_UPDATE, H2Raw, err_name, frame, request_headers)
from test_proxy import Origin

ABC = b"abcdefghijklmnopqrstuvwxyz"
HEADER_LIST_BOUND = 4 * 8192   # large_client_header_buffers 4 8k


class Env:
    def __init__(self, site: H.Site, origin: Origin):
        self.site, self.origin, self.ca = site, origin, site.ca_cert
        self.h2c, self.tls = sut.free_ports(2)
        body = f"""
    large_client_header_buffers 4 8k;
    server {{
        listen 127.0.0.1:{self.h2c} http2;
        listen 127.0.0.1:{self.tls} ssl http2;
        server_name a.test;
        {site.ssl_lines()}
        root {site.www};
        send_timeout 2s;
        keepalive_timeout 30s;
        keepalive_requests 100000;
        client_max_body_size 1m;
        location /proxy/ {{ proxy_pass http://127.0.0.1:{origin.port}; }}
    }}
"""
        self.server = sut.ServerProcess(sut.SUT, site.dir / "server-h2-attacks", body, [self.h2c, self.tls],
                                        workers=1)

    def conn(self, **kw) -> H2Raw:
        return H2Raw(self.h2c, **kw)

    def fresh(self, settings=None, **kw) -> H2Raw:
        return H2Raw(self.h2c, **kw).handshake(settings)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("h2attacks")
    os.chmod(d, 0o755)
    origin = Origin("o1")
    e = Env(H.Site(d, big=False), origin)
    e.server.start()
    yield e
    try:
        H.stop_server(e.server)
    finally:
        origin.stop()


@pytest.fixture
def bystander(env):
    """A TLS HTTP/2 connection opened (and used once) before the test's attack."""
    c = H2Raw(env.tls, tls_ca=env.ca).handshake()
    r = c.get("/abc.txt")
    assert (r.status, bytes(r.body)) == (200, ABC)
    yield c
    c.close()


@pytest.fixture(autouse=True)
def _alive(request):
    yield
    H.fail_if_died(request, "env")


def assert_serving(env: Env, bystander: H2Raw | None = None) -> None:
    """The server still answers: on the bystander connection (if given) and on a new cleartext one."""
    if bystander is not None:
        r = bystander.get("/abc.txt", timeout=5)
        assert (r.status, bytes(r.body)) == (200, ABC), f"the bystander connection is no longer served: {r}"
    c = env.fresh()
    r = c.get("/abc.txt", timeout=5)
    assert (r.status, bytes(r.body)) == (200, ABC), r
    c.close()
    assert env.server.alive()


def refused(c: H2Raw, sid: int, stream_codes: set[int], conn_codes: set[int], status: set[int]) -> str:
    """How the server refused stream `sid`: "status N" (an error response ending the stream), "rst CODE" or
    "goaway CODE"; asserts it is one of the permitted outcomes."""
    st = c.stream(sid)
    if st.status is not None and st.status in status:
        assert st.ended or st.reset is not None, f"the {st.status} response did not end the stream: {st}"
        return f"status {st.status}"
    if st.reset is not None:
        assert st.reset in stream_codes, f"RST_STREAM {err_name(st.reset)}, permitted: " \
            f"{sorted(err_name(x) for x in stream_codes)}"
        return f"rst {err_name(st.reset)}"
    if c.goaway is not None:
        assert c.goaway.error_code in conn_codes, f"GOAWAY {err_name(c.goaway.error_code)}, permitted: " \
            f"{sorted(err_name(x) for x in conn_codes)}"
        return f"goaway {err_name(c.goaway.error_code)}"
    raise AssertionError(f"stream {sid} was neither refused nor reset, and no GOAWAY: status={st.status} "
                         f"reset={err_name(st.reset)} closed={c.closed}")


def connection_error(c: H2Raw, codes: set[int], timeout: float = 3.0) -> H.Frame:
    """Waits for the server's GOAWAY and the close after it (RFC 9113 §5.4.1); asserts the error code."""
    g = c.wait_goaway(timeout)
    assert g is not None, f"no GOAWAY (closed={c.closed})"
    assert g.error_code in codes, f"GOAWAY {err_name(g.error_code)}, expected {sorted(err_name(x) for x in codes)}"
    assert c.wait_closed(timeout), "the connection stayed open after the GOAWAY"
    return g


# ---------------------------------------------------------------------------------------------- stream floods


def test_rapid_reset(env, bystander):
    """HEADERS + RST_STREAM(CANCEL) for 5000 streams in one burst (CVE-2023-44487): the server ends the connection
    with GOAWAY before it has accepted them all; kosoku says ENHANCE_YOUR_CALM (RFC 9113 §10.5, §7)."""
    c = env.fresh(record_frames=False)
    block = c.encode(request_headers("/abc.txt", scheme="http"))
    out = bytearray()
    for i in range(5000):
        sid = 1 + 2 * i
        out += frame(HEADERS, END_STREAM | END_HEADERS, sid, block if i == 0 else c.encode(
            request_headers("/abc.txt", scheme="http")))
        out += H.rst_frame(sid, CANCEL)
    t0 = time.monotonic()
    c.send_raw(bytes(out))
    closed = c.wait_closed(5)
    secs = time.monotonic() - t0
    sut.record(f"rapid reset: closed={closed} after {secs:.2f}s goaway={c.goaway and c.goaway.summary()}", b"")
    assert closed, "the connection is still open after 5000 reset streams"
    assert c.goaway is not None, "closed without GOAWAY"
    assert c.goaway.last_sid < 9999, f"every stream was accepted: {c.goaway.summary()}"
    assert_serving(env, bystander)
    if sut.SUT == "nginx":
        assert c.goaway.error_code == NO_ERROR, c.goaway.summary()
    sut.nginx_deviation("nginx 1.22 (Debian's CVE-2023-44487 backport) ends the connection with GOAWAY NO_ERROR "
                        "(\"client sent too many refused streams\"); kosoku names the abuse ENHANCE_YOUR_CALM "
                        "(RFC 9113 §10.5: SHOULD use ENHANCE_YOUR_CALM for such behaviour)")
    assert c.goaway.error_code == ENHANCE_YOUR_CALM, c.goaway.summary()


def _continuation_flood(env: Env, piece: bytes, limit: int) -> tuple[H2Raw, int, float, int]:
    """HEADERS without END_HEADERS, then CONTINUATION frames (each `piece`, never END_HEADERS) until the server
    closes or `limit` bytes went out. Returns (client, bytes sent, seconds until closed, the server's RSS growth
    in KiB)."""
    rss0 = H.tree_rss_kib(env.server.proc.pid)
    c = env.fresh(record_frames=False)
    c.send_headers(1, request_headers("/abc.txt", scheme="http"), end_stream=True, end_headers=False)
    burst = b"".join(frame(CONTINUATION, 0, 1, piece) for _ in range(max(1, 65536 // (len(piece) + 9))))
    sent, t0, peak = 0, time.monotonic(), 0
    while sent < limit and time.monotonic() - t0 < 8:
        if not c.send_raw(burst):
            break
        sent += len(burst)
        c.wait(lambda f: False, 0.001)
        if c.closed or c.goaway is not None:
            break
        if sent % (1 << 20) < len(burst):
            peak = max(peak, H.tree_rss_kib(env.server.proc.pid) - rss0)
    closed = c.wait_closed(5)
    secs = time.monotonic() - t0
    peak = max(peak, H.tree_rss_kib(env.server.proc.pid) - rss0)
    sut.record(f"CONTINUATION flood piece[{len(piece)}]: sent {sent} closed={closed} {secs:.2f}s "
               f"goaway={c.goaway and c.goaway.summary()} rss +{peak} KiB", b"")
    assert closed, f"connection still open after {sent} bytes of CONTINUATION"
    assert secs < 6, f"closed only after {secs:.2f}s"
    return c, sent, secs, peak


def test_continuation_flood_with_header_fields(env, bystander):
    """An endless header block of 1 KiB literal fields (CVE-2024-27316 class): the server stops at its header-list
    bound and closes with GOAWAY; its memory stays bounded. RFC 9113 names no code for this; the permitted ones:
    ENHANCE_YOUR_CALM (§10.5), PROTOCOL_ERROR, COMPRESSION_ERROR (the HPACK context is abandoned, §4.3)."""
    piece = hpack.Encoder().encode([("x-flood", "v" * 1000)], huffman=False)   # without indexing
    c, sent, secs, rss = _continuation_flood(env, piece, 32 << 20)
    assert c.goaway is not None, "closed without GOAWAY"
    assert c.goaway.error_code in {ENHANCE_YOUR_CALM, PROTOCOL_ERROR, COMPRESSION_ERROR}, c.goaway.summary()
    assert rss < 16 << 10, f"server memory grew by {rss} KiB during the flood"
    assert_serving(env, bystander)


def test_continuation_flood_of_empty_frames(env, bystander):
    """Empty CONTINUATION frames never end the block and add nothing to it: a limit on bytes never fires, so the
    server needs a limit on frames. Connection closed with GOAWAY within a few seconds."""
    c, sent, secs, rss = _continuation_flood(env, b"", 16 << 20)
    assert c.goaway is not None, "closed without GOAWAY"
    assert rss < 16 << 10, f"server memory grew by {rss} KiB during the flood"
    assert_serving(env, bystander)
    if sut.SUT == "nginx":
        assert c.goaway.error_code == NO_ERROR, c.goaway.summary()   # "http2 flood detected"
    sut.nginx_deviation("nginx 1.22 closes an empty-CONTINUATION flood with GOAWAY NO_ERROR (\"http2 flood "
                        "detected\"); kosoku gives the reason (RFC 9113 §5.4.1: the GOAWAY's code says why)")
    assert c.goaway.error_code in {ENHANCE_YOUR_CALM, PROTOCOL_ERROR}, c.goaway.summary()


# ---------------------------------------------------------------------------------------------- header lists


# Refusing a header list past the bound: RFC 9113 §10.5.1 lets a server answer 431 (RFC 6585 §5) or reset the
# stream (REFUSED_STREAM, ENHANCE_YOUR_CALM, PROTOCOL_ERROR or INTERNAL_ERROR: the RFC names no code) or end the
# connection (ENHANCE_YOUR_CALM, §10.5; COMPRESSION_ERROR when it stops decoding the block, §4.3).
LIST_STREAM_CODES = {REFUSED_STREAM, ENHANCE_YOUR_CALM, PROTOCOL_ERROR, INTERNAL_ERROR}
LIST_CONN_CODES = {ENHANCE_YOUR_CALM, COMPRESSION_ERROR}


def test_hpack_bomb(env, bystander):
    """One 4000-byte field is added to the dynamic table (HPACK incremental indexing) and then referenced 2000
    times with a 1-byte index: < 10 KiB on the wire, 8 MB decoded, far past the 32 KiB header-list bound."""
    c = env.fresh()
    e = hpack.Encoder()
    block = e.encode(request_headers("/abc.txt", scheme="http"))
    block += e.encode([("x-bomb", "b" * 4000)], huffman=False)   # literal with incremental indexing -> index 62
    block += bytes([0x80 | 62]) * 2000                            # indexed header field, index 62
    assert len(block) < 10 << 10
    c.send_headers(1, block)
    c.response(1, timeout=5)
    c.pump(0.2)
    how = refused(c, 1, LIST_STREAM_CODES, LIST_CONN_CODES, {431})
    sut.record(f"hpack bomb: {how}", b"")
    if how.startswith("goaway"):
        assert c.wait_closed(3)
    assert_serving(env, bystander)


@pytest.mark.parametrize("shape", ["many-fields", "one-huge-field"])
def test_header_list_larger_than_large_client_header_buffers(env, bystander, shape):
    """400 fields of ~106 bytes (42 KiB), or one field of 40 KiB, against large_client_header_buffers 4 8k: the
    request is refused (see LIST_*_CODES); the HEADERS block is sent as HEADERS + CONTINUATION (16 KiB frames)."""
    c = env.fresh()
    extra = [(f"x-f{i:03d}", "v" * 100) for i in range(400)] if shape == "many-fields" else [("x-big", "v" * 40960)]
    sid = c.request("/abc.txt", extra=extra)
    c.response(sid, timeout=5)
    c.pump(0.2)
    how = refused(c, sid, LIST_STREAM_CODES, LIST_CONN_CODES, {431})
    sut.record(f"{shape}: {how}", b"")
    if how.startswith("goaway"):
        assert c.wait_closed(3)
    assert_serving(env, bystander)


def test_header_list_within_large_client_header_buffers_is_served(env):
    """The bound is the whole list (4 x 8k), not one buffer: 200 fields of ~106 bytes (21 KiB) are served, through
    the proxy too (the origin sees them all)."""
    c = env.fresh()
    extra = [(f"x-f{i:03d}", "v" * 100) for i in range(200)]
    r = c.get("/abc.txt", extra=extra)
    assert (r.status, bytes(r.body)) == (200, ABC), r
    r = c.get("/proxy/hl/echo", extra=extra)
    assert r.status == 200, r
    got = [k for k, _ in json.loads(bytes(r.body))["headers"] if k.startswith("x-f")]
    assert got == [k for k, _ in extra]


# ---------------------------------------------------------------------------------------------- control floods


def _flood_unread(env: Env, unit: bytes, count: int) -> tuple[H2Raw, float]:
    """Sends `count` copies of a frame that demands an answer (SETTINGS / PING), never reading the answers (a small
    receive buffer, so they back up in the server). Returns (client, seconds until the server closed)."""
    c = env.conn(rcvbuf=4096, record_frames=False).handshake()
    c.auto_ack = False
    c.sock.setblocking(False)
    data, off, t0 = unit * count, 0, time.monotonic()
    while off < len(data) and time.monotonic() - t0 < 5:
        try:
            off += c.sock.send(data[off:off + 65536])
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:
            break
    c.sock.setblocking(True)
    closed = c.wait_closed(5)
    secs = time.monotonic() - t0
    sut.record(f"flood of {count} x {unit[:9].hex()}: sent {off}, closed={closed} after {secs:.2f}s "
               f"reset={c.reset} goaway={c.goaway and c.goaway.summary()}", b"")
    assert closed, f"the connection is still open {secs:.1f}s after {off} bytes of frames it must answer"
    return c, secs


@pytest.mark.parametrize("kind", ["settings", "ping"])
def test_control_frame_flood_without_reading(env, bystander, kind):
    """200,000 SETTINGS (or PING) frames from a client that reads none of the ACKs (CVE-2019-9515 / -9512): the
    server closes the connection (GOAWAY ENHANCE_YOUR_CALM if it gets through, else just the close: the unread
    ACKs may turn the close into a reset) instead of queueing ACKs without bound."""
    unit = H.settings_frame({INITIAL_WINDOW_SIZE: 65535}) if kind == "settings" else H.ping_frame(b"12345678")
    c, secs = _flood_unread(env, unit, 200_000)
    if c.goaway is not None and sut.SUT == "kosoku":
        assert c.goaway.error_code == ENHANCE_YOUR_CALM, c.goaway.summary()
    assert_serving(env, bystander)


def test_window_update_flood(env, bystander):
    """100,000 WINDOW_UPDATE frames of increment 1 on the connection and 1,000 on a stream, with its request, in
    one write (no answer is due, no window overflows): the response still arrives byte-exact and the connection
    keeps working, or the server calls it abuse (RFC 9113 §10.5: GOAWAY ENHANCE_YOUR_CALM); others are served."""
    c = env.fresh(record_frames=False)
    sid = c.new_sid()
    c.send_raw(frame(HEADERS, END_STREAM | END_HEADERS, sid, c.encode(request_headers("/rand1m.bin", scheme="http")))
               + H.window_update_frame(sid, 1) * 1_000 + H.window_update_frame(0, 1) * 100_000)
    t0 = time.monotonic()
    c.wait(lambda f: c.stream(sid).done or f.type == GOAWAY, timeout=10)
    st = c.stream(sid)
    sut.record(f"window update flood: {time.monotonic() - t0:.2f}s", b"")
    if c.goaway is None:
        assert st.ended and hashlib.sha256(st.body).digest() == hashlib.sha256(env.site.files["/rand1m.bin"]).digest()
        assert c.get("/abc.txt").status == 200
    else:
        sut.record(f"window update flood: {c.goaway.summary()}", b"")
        assert c.wait_closed(3)
        if sut.SUT == "nginx":
            assert c.goaway.error_code == NO_ERROR, c.goaway.summary()
            sut.nginx_deviation("nginx 1.22 ends it with GOAWAY NO_ERROR (\"http2 flood detected\")")
        assert c.goaway.error_code == ENHANCE_YOUR_CALM, c.goaway.summary()
    assert_serving(env, bystander)


@pytest.mark.parametrize("where", ["connection", "stream"])
def test_window_overflow_is_a_flow_control_error(env, bystander, where):
    """Two increments of 2^31-1 push a window past 2^31-1 whatever was sent meanwhile: RFC 9113 §6.9.1 says a
    connection error FLOW_CONTROL_ERROR for the connection window, a stream error (RST_STREAM FLOW_CONTROL_ERROR)
    for a stream's (which a server may escalate to the connection, §5.4.1)."""
    c = env.fresh()
    if where == "connection":
        c.send_raw(H.window_update_frame(0, 0x7FFFFFFF) * 2)
        connection_error(c, {FLOW_CONTROL_ERROR})
    else:
        c.auto_window = False
        sid = c.request("/rand1m.bin")
        c.send_raw(H.window_update_frame(sid, 0x7FFFFFFF) * 2)
        c.wait(lambda f: c.stream(sid).reset is not None or f.type == GOAWAY, timeout=3)
        if c.goaway is not None:
            assert c.goaway.error_code == FLOW_CONTROL_ERROR, c.goaway.summary()
        else:
            assert c.stream(sid).reset == FLOW_CONTROL_ERROR, err_name(c.stream(sid).reset)
    assert_serving(env, bystander)


@pytest.mark.parametrize("where", ["connection", "stream"])
def test_window_update_of_zero(env, where):
    """RFC 9113 §6.9: an increment of 0 is PROTOCOL_ERROR: a connection error on stream 0, a stream error on a
    stream (a server may escalate it to a connection error, §5.4.1)."""
    c = env.fresh()
    if where == "connection":
        c.send_raw(H.window_update_frame(0, 0))
        connection_error(c, {PROTOCOL_ERROR})
    else:
        c.auto_window = False
        sid = c.request("/rand1m.bin")
        c.send_raw(H.window_update_frame(sid, 0))
        c.wait(lambda f: c.stream(sid).reset is not None or f.type == GOAWAY, timeout=3)
        if c.goaway is not None:
            assert c.goaway.error_code == PROTOCOL_ERROR, c.goaway.summary()
        else:
            assert c.stream(sid).reset == PROTOCOL_ERROR, err_name(c.stream(sid).reset)
    assert_serving(env)


def test_zero_window_stall_ends_after_send_timeout(env, bystander):
    """SETTINGS_INITIAL_WINDOW_SIZE 0 and never a WINDOW_UPDATE: the response cannot move, so send_timeout (2s)
    ends it: the stream is reset or the connection closed, after about 2 s (not at once, not never). RFC 9113 names
    no code for a timeout."""
    c = env.fresh({INITIAL_WINDOW_SIZE: 0})
    c.auto_window = False
    t0 = time.monotonic()
    sid = c.request("/rand1m.bin")
    c.wait(lambda f: c.stream(sid).reset is not None or f.type == GOAWAY, timeout=8)
    secs = time.monotonic() - t0
    st = c.stream(sid)
    assert st.reset is not None or c.goaway is not None or c.closed, \
        f"the stalled response is still pending after {secs:.1f}s (send_timeout 2s)"
    assert 1.5 <= secs <= 5.0, f"ended after {secs:.2f}s, send_timeout is 2s"
    assert st.body == b"" and not st.ended
    assert_serving(env, bystander)


# ---------------------------------------------------------------------------------------------- stream state


def test_data_after_end_stream(env, bystander):
    """DATA on a stream the client already half-closed (END_STREAM on its HEADERS; the response is held by a zero
    window so the stream is still half-closed (remote) on the server): RFC 9113 §5.1 and §6.1 say a stream error
    STREAM_CLOSED (a server may make it a connection error of the same code, §5.4.1)."""
    c = env.fresh({INITIAL_WINDOW_SIZE: 0})
    c.auto_window = False
    sid = c.request("/rand1m.bin")
    c.wait(lambda f: f.type == HEADERS and f.sid == sid, timeout=3)
    c.send_data(sid, b"x" * 10)
    c.wait(lambda f: c.stream(sid).reset is not None or f.type == GOAWAY, timeout=3)
    if c.goaway is not None:
        assert c.goaway.error_code == STREAM_CLOSED, c.goaway.summary()
    else:
        assert c.stream(sid).reset == STREAM_CLOSED, err_name(c.stream(sid).reset)
        c.send_raw(H.settings_frame({INITIAL_WINDOW_SIZE: 65535}))
        assert c.get("/abc.txt").status == 200   # only that stream
    assert_serving(env, bystander)


@pytest.mark.parametrize("case", ["even-id", "id-zero", "id-backwards", "closed-id-reused"])
def test_stream_ids(env, bystander, case):
    """RFC 9113 §5.1.1: client streams are odd and increase; an even id or a lower id than one already used is a
    connection error PROTOCOL_ERROR; HEADERS on stream 0 too (§6.2). A closed stream's id again: PROTOCOL_ERROR
    (§5.1.1) or STREAM_CLOSED (§5.1, "closed")."""
    c = env.fresh()
    codes = {PROTOCOL_ERROR}
    if case == "even-id":
        c.send_headers(2, request_headers("/abc.txt", scheme="http"))
    elif case == "id-zero":
        c.send_headers(0, request_headers("/abc.txt", scheme="http"))
    elif case == "id-backwards":
        c.next_sid = 5
        assert c.get("/abc.txt").status == 200
        c.send_headers(3, request_headers("/abc.txt", scheme="http"))   # never used, but below 5
    else:
        assert c.get("/abc.txt").status == 200
        assert c.get("/abc.txt").status == 200
        c.send_headers(1, request_headers("/abc.txt", scheme="http"))
        codes = {PROTOCOL_ERROR, STREAM_CLOSED}
    connection_error(c, codes)
    assert_serving(env, bystander)


# ---------------------------------------------------------------------------------------------- malformed requests


B = [(":method", "GET"), (":scheme", "http"), (":authority", "a.test"), (":path", "/abc.txt")]
MALFORMED = {   # RFC 9113 §8.1.1: malformed -> stream error PROTOCOL_ERROR; the server MAY answer (400) first
    "missing-path": B[:3],
    "missing-method": B[1:],
    "missing-scheme": [B[0]] + B[2:],
    "empty-path": B[:3] + [(":path", "")],
    "duplicate-path": B + [(":path", "/abc.txt")],
    "unknown-pseudo": B + [(":foo", "bar")],
    "response-pseudo": B + [(":status", "200")],
    "upper-case-name": B + [("X-Upper", "1")],          # §8.2.1
    "colon-in-name": B + [("x:a", "b")],                # §8.2.1
    "crlf-in-value": B + [("x-a", "b\r\nc")],           # §8.2.1
    "host-differs-from-authority": B + [("host", "other.test")],  # §8.3.1 SHOULD treat as malformed
    "pseudo-after-regular": B[:3] + [("x-a", "b"), (":path", "/abc.txt")],   # §8.3
    "connection": B + [("connection", "keep-alive")],                        # §8.2.2
    "keep-alive": B + [("keep-alive", "timeout=5")],
    "proxy-connection": B + [("proxy-connection", "keep-alive")],
    "transfer-encoding": B + [("transfer-encoding", "chunked")],
    "upgrade": B + [("upgrade", "h2c")],
    "te-not-trailers": B + [("te", "gzip")],                                  # §8.2.2: only "trailers"
}
NGINX_ACCEPTS = {   # what nginx 1.22 serves with 200 instead of refusing
    "pseudo-after-regular": "§8.3: pseudo-header fields after a regular field make the request malformed",
    "connection": "§8.2.2: connection-specific fields make the request malformed",
    "keep-alive": "§8.2.2: connection-specific fields make the request malformed",
    "proxy-connection": "§8.2.2: connection-specific fields make the request malformed",
    "transfer-encoding": "§8.2.2: connection-specific fields make the request malformed",
    "upgrade": "§8.2.2: connection-specific fields make the request malformed",
    "te-not-trailers": "§8.2.2: TE other than \"trailers\" makes the request malformed",
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_refused(env, case):
    c = env.fresh()
    c.encoder = hpack.Encoder()
    sid = c.new_sid()
    c.send_headers(sid, MALFORMED[case])
    c.response(sid, timeout=3)
    st = c.stream(sid)
    if sut.SUT == "nginx" and case in NGINX_ACCEPTS:
        assert st.status == 200, st
        sut.nginx_deviation(f"nginx 1.22 serves it ({NGINX_ACCEPTS[case]})")
    how = refused(c, sid, {PROTOCOL_ERROR}, {PROTOCOL_ERROR}, {400})
    sut.record(f"{case}: {how}", b"")
    if not c.closed:   # a stream error: the connection goes on
        r = c.get("/abc.txt")
        assert (r.status, bytes(r.body)) == (200, ABC)
    c.close()


def test_te_trailers_is_allowed(env):
    """§8.2.2: TE: trailers is the one TE value an HTTP/2 request may carry."""
    c = env.fresh()
    r = c.get("/abc.txt", extra=[("te", "trailers")])
    assert (r.status, bytes(r.body)) == (200, ABC), r


P = [(":method", "POST"), (":scheme", "http"), (":authority", "a.test"), (":path", "/proxy/cl/echo")]


@pytest.mark.parametrize("case", ["shorter", "longer", "longer-in-a-later-frame"])
def test_content_length_disagreeing_with_data(env, bystander, case):
    """RFC 9113 §8.1.1: a content-length that is not the sum of the DATA payloads makes the request malformed:
    stream error PROTOCOL_ERROR (a 400 first is allowed); the origin never sees it."""
    n = env.origin.hits("echo")
    c = env.fresh()
    sid = c.new_sid()
    if case == "shorter":          # declares 10, sends 5 and END_STREAM
        c.send_headers(sid, P + [("content-length", "10")], end_stream=False)
        c.send_data(sid, b"12345", end_stream=True)
    elif case == "longer":         # declares 3, sends 5 in one frame
        c.send_headers(sid, P + [("content-length", "3")], end_stream=False)
        c.send_data(sid, b"12345", end_stream=True)
    else:                          # declares 3, sends 2 then 3
        c.send_headers(sid, P + [("content-length", "3")], end_stream=False)
        c.send_frame(DATA, 0, sid, b"12")
        c.send_frame(DATA, END_STREAM, sid, b"345")
    c.response(sid, timeout=5)
    how = refused(c, sid, {PROTOCOL_ERROR}, {PROTOCOL_ERROR}, {400})
    sut.record(f"{case}: {how}", b"")
    assert env.origin.hits("echo") == n, "a request whose body disagrees with its content-length was forwarded"
    # the agreeing case is forwarded byte-exact
    c = env.fresh()
    sid = c.new_sid()
    c.send_headers(sid, P + [("content-length", "5")], end_stream=False)
    c.send_data(sid, b"12345", end_stream=True)
    st = c.response(sid, timeout=5)
    e = json.loads(bytes(st.body))
    assert (st.status, e["body_len"], e["body_sha"]) == (200, 5, hashlib.sha256(b"12345").hexdigest())
    assert_serving(env, bystander)


# ---------------------------------------------------------------------------------------------- frame-level rules


FRAME_VIOLATIONS = {   # case: (frame bytes, the code RFC 9113 dictates)
    "settings-initial-window-too-big": (H.settings_frame({INITIAL_WINDOW_SIZE: 1 << 31}), FLOW_CONTROL_ERROR),  # §6.5.2
    "settings-enable-push-2": (H.settings_frame({ENABLE_PUSH: 2}), PROTOCOL_ERROR),                     # §6.5.2
    "settings-max-frame-too-small": (H.settings_frame({MAX_FRAME_SIZE: 100}), PROTOCOL_ERROR),          # §6.5.2
    "settings-max-frame-too-big": (H.settings_frame({MAX_FRAME_SIZE: 1 << 24}), PROTOCOL_ERROR),        # §6.5.2
    "settings-length-not-multiple-of-6": (frame(SETTINGS, 0, 0, b"\0" * 5), FRAME_SIZE_ERROR),          # §6.5
    "settings-ack-with-payload": (frame(SETTINGS, ACK, 0, b"\0" * 6), FRAME_SIZE_ERROR),                # §6.5
    "settings-on-a-stream": (frame(SETTINGS, 0, 1), PROTOCOL_ERROR),                                    # §6.5
    "ping-length-7": (frame(PING, 0, 0, b"\0" * 7), FRAME_SIZE_ERROR),                                  # §6.7
    "ping-on-a-stream": (frame(PING, 0, 1, b"\0" * 8), PROTOCOL_ERROR),                                 # §6.7
    "window-update-length-3": (frame(WINDOW_UPDATE, 0, 0, b"\0" * 3), FRAME_SIZE_ERROR),                # §6.9
    "goaway-on-a-stream": (frame(GOAWAY, 0, 1, b"\0" * 8), PROTOCOL_ERROR),                             # §6.8
    "continuation-without-headers": (frame(CONTINUATION, END_HEADERS, 1), PROTOCOL_ERROR),              # §6.10
    "push-promise-from-a-client": (frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2"), PROTOCOL_ERROR),   # §8.4
    "rst-stream-on-an-idle-stream": (H.rst_frame(7, CANCEL), PROTOCOL_ERROR),                           # §6.4
    "data-on-an-idle-stream": (frame(DATA, 0, 9, b"abc"), PROTOCOL_ERROR),                              # §5.1 idle
    "frame-between-headers-and-continuation": (
        frame(HEADERS, END_STREAM, 1, hpack.Encoder().encode(request_headers("/abc.txt", scheme="http")))
        + H.ping_frame(), PROTOCOL_ERROR),                                                               # §6.10
}
NGINX_IGNORES = {"rst-stream-on-an-idle-stream": "§6.4", "data-on-an-idle-stream": "§5.1 (idle)"}


@pytest.mark.parametrize("case", list(FRAME_VIOLATIONS))
def test_frame_level_violation_is_a_connection_error(env, case):
    data, code = FRAME_VIOLATIONS[case]
    c = env.fresh()
    c.send_raw(data, case)
    if sut.SUT == "nginx" and case in NGINX_IGNORES:
        c.pump(0.5)
        assert not c.closed and c.goaway is None
        sut.nginx_deviation(f"nginx 1.22 ignores it (RFC 9113 {NGINX_IGNORES[case]}: MUST be a connection error "
                            f"PROTOCOL_ERROR)")
    connection_error(c, {code})


def test_unknown_frame_type_is_ignored(env):
    """RFC 9113 §4.1 / §5.5: frames of unknown types MUST be ignored."""
    c = env.fresh()
    c.send_raw(frame(0xFA, 0, 0, b"hello") + frame(0xFB, 0xFF, 1, b"x" * 100))
    r = c.get("/abc.txt")
    assert (r.status, bytes(r.body)) == (200, ABC) and c.goaway is None


@pytest.mark.parametrize("case", ["depends-on-itself", "length-4"])
def test_bad_priority_frame_is_a_stream_error(env, case):
    """PRIORITY frames (deprecated, still parsed: RFC 9113 §5.3.2): a stream that depends on itself is a stream
    error PROTOCOL_ERROR (§5.3.1), a length other than 5 a stream error FRAME_SIZE_ERROR (§6.3); a server may
    escalate either to a connection error of the same code (§5.4.1)."""
    c = env.fresh()
    if case == "depends-on-itself":
        c.send_raw(frame(PRIORITY, 0, 1, struct.pack(">IB", 1, 16)), case)
        code = PROTOCOL_ERROR
    else:
        c.send_raw(frame(PRIORITY, 0, 1, b"\0" * 4), case)
        code = FRAME_SIZE_ERROR
    c.wait(lambda f: f.type in (RST_STREAM, GOAWAY), timeout=3)
    if c.goaway is not None:
        assert c.goaway.error_code == code, c.goaway.summary()
    else:
        assert c.stream(1).reset == code, err_name(c.stream(1).reset)
        r = c.get("/abc.txt")   # stream 3: the connection goes on
        assert (r.status, bytes(r.body)) == (200, ABC)
