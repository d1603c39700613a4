"""The static cases of shared/cases/http-conformance.md (F-STATIC vhost), with the exact expected values.

Covered: C01(A), C02(A,B), C05, C08, C11, C13 (static), C15 (static), C17 (static), C19 (items 1 and 3).
The proxy parts (C01 B, C02 C, C13/C15/C17 proxy, C19 item 2, C22-C26) need F-PROXY and are not here.
"""
from __future__ import annotations

import time

import pytest

import sut
from sut import Conn, build_request, exchange

HOST = b"Host: static.example.com\r\n"
ABC = sut.STATIC_FILES["/abc.txt"]
GET_ABC = b"GET /abc.txt HTTP/1.1\r\n" + HOST + b"\r\n"


def _assert_single_4xx_and_closed(ex: sut.Exchange, allowed=range(400, 500)) -> sut.Response:
    assert ex.closed, "the connection must be closed after the error response (read timed out instead)"
    finals = ex.finals
    assert len(finals) == 1, f"exactly one response expected, got {len(finals)}: {finals}"
    assert ex.leftover == b"", f"stray bytes after the response: {ex.leftover[:300]!r}"
    r = finals[0]
    assert r.status in allowed, f"status {r.status} not in {allowed}"
    assert ABC not in r.body, "the smuggled GET /abc.txt was answered"
    return r


# --- C01: Content-Length together with Transfer-Encoding ----------------------------------------------------

def test_cl_and_te_static(env):
    data = (b"POST /index.html HTTP/1.1\r\nHost: static.example.com\r\n"
            b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\n"
            b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n\r\n")
    ex = exchange(env.port, data, methods=["POST", "GET"], timeout=5)
    r = _assert_single_4xx_and_closed(ex)
    assert r.status == 400 or 400 <= r.status < 500  # 400 preferred (nginx >= 1.21.1), any 4xx accepted


# --- C02: duplicate or invalid Content-Length ------------------------------------------------------------------

def test_differing_content_lengths(env):
    data = (b"POST /index.html HTTP/1.1\r\nHost: static.example.com\r\n"
            b"Content-Length: 0\r\nContent-Length: 51\r\n\r\n"
            b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n\r\n")
    assert len(b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n\r\n") == 51
    ex = exchange(env.port, data, methods=["POST", "GET"], timeout=5)
    _assert_single_4xx_and_closed(ex, allowed=[400])


def test_identical_duplicate_content_lengths(env):
    data = (b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n"
            b"Content-Length: 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    ex = exchange(env.port, data, timeout=5)
    r = ex.one()
    assert r.status in (200, 400)
    if r.status == 200:
        assert r.body == ABC


# --- C05: oversized header field and request-target ------------------------------------------------------------

def test_oversized_header_field(env):
    data = b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"
    ex = exchange(env.port, data, timeout=5)
    assert ex.finals, f"no HTTP response at all (reset={ex.reset}): RFC 9110 §5.4 requires a 4xx response"
    r = ex.finals[0]
    assert len(ex.finals) == 1
    assert r.status in (431, 400), f"status {r.status}: 431 preferred, 400 tolerated"
    r2 = sut.request(env.port, "GET", "/abc.txt")
    assert r2.status == 200 and r2.body == ABC


def test_oversized_request_target(env):
    data = b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: static.example.com\r\n\r\n"
    ex = exchange(env.port, data, timeout=5)
    assert ex.finals, f"no HTTP response at all (reset={ex.reset})"
    assert len(ex.finals) == 1
    assert ex.finals[0].status == 414
    r2 = sut.request(env.port, "GET", "/abc.txt")
    assert r2.status == 200 and r2.body == ABC


# --- C08: encoded dot-segments and traversal -------------------------------------------------------------------

C08_ATTACKS = [
    b"/../outside.txt",
    b"/%2e%2e/outside.txt",
    b"/%2E%2E/outside.txt",
    b"/.%2e/outside.txt",
    b"/dir/%2e%2e/%2e%2e/outside.txt",
    b"/..%2foutside.txt",
    b"/dir/..%2f..%2foutside.txt",
    b"/..%5coutside.txt",
    b"/dir/%252e%252e/%252e%252e/outside.txt",
    b"/%c0%ae%c0%ae/outside.txt",
    b"/dir/..\\..\\outside.txt",
]


@pytest.mark.parametrize("target", C08_ATTACKS, ids=[t.decode() for t in C08_ATTACKS])
def test_traversal_attack(env, target):
    data = b"GET " + target + b" HTTP/1.1\r\nHost: static.example.com\r\nConnection: close\r\n\r\n"
    ex = exchange(env.port, data, timeout=5)
    r = ex.one()
    assert b"OUTSIDE-DOCROOT" not in r.body
    assert r.status in (400, 403, 404), f"status {r.status}"


@pytest.mark.parametrize("target,status,body", [
    (b"/dir/../abc.txt", 200, ABC),
    (b"/./abc.txt", 200, ABC),
    (b"//abc.txt", 200, ABC),
    (b"/dir/", 200, b"<p>dir</p>\n"),
    (b"/dir", 301, None),
], ids=["dir-dotdot-abc", "dot-abc", "double-slash-abc", "dir-slash", "dir-no-slash"])
def test_controls(env, target, status, body):
    data = b"GET " + target + b" HTTP/1.1\r\nHost: static.example.com\r\nConnection: close\r\n\r\n"
    r = exchange(env.port, data, timeout=5).one()
    assert r.status == status
    if body is not None:
        assert r.body == body
    if status == 301:
        loc = r.header("location")
        assert loc is not None and loc.endswith("/dir/"), f"Location {loc!r}"


# --- C11: multiple, adjacent and partly satisfiable ranges ------------------------------------------------------

def range_parts(r: sut.Response) -> list[tuple[int, int, bytes]]:
    """(first, last, data) of a 206, single-part or multipart; checks each part against abc.txt."""
    assert r.status == 206
    ctype = r.header("content-type") or ""
    if ctype.lower().startswith("multipart/byteranges"):
        assert not r.has("content-range"), "a multipart 206 must not carry Content-Range (RFC 9110 §14.6)"
        parts = [(p.first, p.last, p.complete_length, p.data) for p in sut.parse_byteranges(r)]
    else:
        first, last, total = sut.parse_content_range(r.header("content-range") or "")
        parts = [(first, last, total, r.body)]
    for first, last, total, data in parts:
        assert total == 26
        assert data == ABC[first:last + 1]
    return [(f, l, d) for f, l, _, d in parts]


def _get_abc_range(env, rng: str) -> sut.Response:
    return sut.request(env.port, "GET", "/abc.txt", headers=[("Range", rng)])


def test_two_ranges(env):
    r = _get_abc_range(env, "bytes=0-4, 10-14")
    assert r.status in (206, 200), "416 is never acceptable here"
    if r.status == 200:
        assert r.body == ABC
        return
    assert (r.header("content-type") or "").startswith("multipart/byteranges; boundary=")
    assert range_parts(r) == [(0, 4, b"abcde"), (10, 14, b"klmno")]


def test_overlapping_adjacent_ranges(env):
    r = _get_abc_range(env, "bytes=0-5, 5-10")
    assert r.status in (206, 200), "416 is never acceptable here"
    if r.status == 200:
        assert r.body == ABC
        return
    parts = range_parts(r)
    assert parts in ([(0, 5, b"abcdef"), (5, 10, b"fghijk")], [(0, 10, b"abcdefghijk")])


def test_partly_satisfiable(env):
    r = _get_abc_range(env, "bytes=0-1, 100-200")
    assert r.status == 206
    assert range_parts(r) == [(0, 1, b"ab")]


def test_unsatisfiable(env):
    r = _get_abc_range(env, "bytes=100-200")
    assert r.status == 416
    assert r.header("content-range") == "bytes */26"


def test_last_pos_clamped(env):
    r = _get_abc_range(env, "bytes=20-100")
    assert r.status == 206
    assert r.header("content-range") == "bytes 20-25/26"
    assert r.body == b"uvwxyz"


# --- C13: suffix longer than the representation; overflow ------------------------------------------------------

def test_suffix_longer_than_representation(env):
    r = _get_abc_range(env, "bytes=-1000")
    assert r.status == 206
    assert r.header("content-range") == "bytes 0-25/26"
    assert r.body == ABC


def test_zero_suffix(env):
    r = _get_abc_range(env, "bytes=-0")
    assert r.status == 416
    assert r.header("content-range") == "bytes */26"


def test_huge_last_pos(env):
    r = _get_abc_range(env, "bytes=0-99999999999999999999999")
    assert r.status < 500
    assert r.status in (206, 200, 416), f"status {r.status}"
    if r.status == 206:
        assert r.header("content-range") == "bytes 0-25/26"
        assert r.body == ABC
    elif r.status == 200:
        assert r.body == ABC
    else:
        assert r.header("content-range") == "bytes */26"
    assert len(r.body) <= 2048


# --- C15: weak ETag and ETag lists in If-None-Match (static part) ------------------------------------------------

@pytest.mark.parametrize("form", ["weak", "list"])
def test_if_none_match_static(env, form):
    et = sut.etag_of(env.www / "abc.txt")
    value = "W/" + et if form == "weak" else f'"zzz", {et}'
    data = build_request("GET", "/abc.txt", headers=[("If-None-Match", value)])
    ex = exchange(env.port, data, timeout=5)
    r = ex.one()
    assert r.status == 304
    assert r.body == b""


# --- C17: headers required in a 304 (static part) ---------------------------------------------------------------

def test_headers_static(env):
    full = sut.request(env.port, "GET", "/abc.txt")
    assert full.status == 200
    et = full.header("etag")
    assert et
    data = (b"GET /abc.txt HTTP/1.1\r\n" + HOST + b"If-None-Match: " + et.encode() + b"\r\n\r\n"
            b"GET /abc.txt HTTP/1.1\r\n" + HOST + b"If-None-Match: " + et.encode() + b"\r\n"
            b"Connection: close\r\n\r\n")
    ex = exchange(env.port, data, timeout=5)
    assert ex.closed
    assert len(ex.responses) == 2, f"two responses expected: {ex.responses}"
    assert ex.leftover == b"", f"stray bytes between/after the 304s: {ex.leftover!r}"
    for r in ex.responses:
        assert r.status == 304
        assert r.body == b""
        assert r.has("date")
        for name in ("content-location", "etag", "vary", "cache-control", "expires"):
            if full.has(name):
                assert r.header(name) == full.header(name), f"{name} differs from the 200's"
        if r.has("content-length"):
            assert r.header("content-length") == "26"


# --- C19: pipelining, partial pipelined requests, keep-alive and close -------------------------------------------

def test_pipelined_with_split_third_request(env):
    with Conn(env.port, timeout=10) as c:
        t0 = time.monotonic()
        c.send(GET_ABC + b"GET /index.html HTTP/1.1\r\n" + HOST + b"\r\n" + b"GE")
        first = c.read_responses(2, timeout=1.9)
        assert [r.status for r in first] == [200, 200], "both complete responses must arrive before the " \
                                                        "third request is finished"
        assert first[0].body == ABC
        assert first[1].body == sut.STATIC_FILES["/index.html"]
        assert c.buf == b"" and not c.closed
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
        c.send(b"T /file100.bin HTTP/1.1\r\nHost: static.example.com\r\nConnection: close\r\n\r\n")
        third = c.read_responses(1, timeout=5)
        assert len(third) == 1 and third[0].status == 200
        assert third[0].body == sut.STATIC_FILES["/file100.bin"]
        assert c.wait_closed(5), "server must close after the Connection: close request"
        assert c.buf == b""


def test_http10_closes(env):
    ex = exchange(env.port, b"GET /abc.txt HTTP/1.0\r\nHost: static.example.com\r\n\r\n", timeout=5)
    r = ex.one()
    assert r.status == 200 and r.body == ABC
    assert ex.closed, "HTTP/1.0 without keep-alive: the server must close after the response (RFC 9112 §9.3)"
