"""Static-file behaviour users expect from an nginx-compatible server, run against the SUT (kosoku or nginx).

Where nginx 1.22 knowingly differs from the RFC, the test asserts the RFC behaviour and calls
sut.nginx_deviation(reason) just before that assertion, so a run with SUT=nginx reports it as skipped with the
reason instead of failing. Everything before that call is asserted for both servers.
"""
from __future__ import annotations

import hashlib
import http.client
import re
import subprocess
import threading
import time
import uuid

import pytest

import sut
from conftest import BIG64_SIZE, DEFAULT_TYPE
from sut import Conn, build_request, exchange, request

ABC = sut.STATIC_FILES["/abc.txt"]
HOME = sut.STATIC_FILES["/index.html"]
DIR_INDEX = sut.STATIC_FILES["/dir/index.html"]
FILE100 = sut.STATIC_FILES["/file100.bin"]
HOST = b"Host: static.example.com\r\n"


def get(env, target, host="static.example.com", headers=(), method="GET", body=b""):
    return request(env.port, method, target, host=host, headers=headers, body=body)


# --- index, redirects, 404/403 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target,body", [("/", HOME), ("/dir/", DIR_INDEX), ("/index.html", HOME)])
def test_index(env, target, body):
    r = get(env, target)
    assert r.status == 200 and r.body == body
    assert r.header("content-type") == "text/html"


@pytest.mark.parametrize("target,loc_suffix", [
    ("/dir", "/dir/"),
    ("/dir?x=1&y=2", "/dir/?x=1&y=2"),
    ("/sp%20", "/sp%20/"),
])
def test_directory_without_slash_redirects(env, target, loc_suffix):
    r = get(env, target)
    assert r.status == 301
    loc = r.header("location")
    assert loc is not None and loc.endswith(loc_suffix), f"Location {loc!r}"
    assert loc.startswith("/") or re.match(r"^http://static\.example\.com(:\d+)?/", loc), f"Location {loc!r}"


@pytest.mark.parametrize("target", ["/nope.txt", "/dir/nope", "/nodir/", "/abc.txt/", "/index.html/x"])
def test_not_found(env, target):
    r = get(env, target)
    assert r.status == 404


@pytest.mark.parametrize("target", ["/protected/secret.txt", "/protected/", "/protected/missing",
                                    "/protected/../protected/secret.txt", "/%70rotected/secret.txt"])
def test_deny_all_location(env, target):
    r = get(env, target)
    assert r.status == 403
    assert b"TOPSECRET" not in r.body


def test_return_answers_before_access_checks(env):
    # nginx's order: `return` belongs to the REWRITE phase, which runs before ACCESS (allow/deny).
    r = get(env, "/protected-return")
    assert (r.status, r.body) == (200, b"returned\n")


def test_date_header_on_every_response(env):
    for target in ("/abc.txt", "/nope", "/protected/secret.txt", "/dir"):
        r = get(env, target)
        d = r.header("date")
        assert d and re.match(r"^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT$", d), d


# --- path decoding ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,body", [
    (b"/sp%20/a.txt", b"space-dir\n"),
    (b"/caf%C3%A9.txt", b"accent\n"),
    (b"/caf%c3%a9.txt", b"accent\n"),
    (b"/caf\xc3\xa9.txt", b"accent\n"),
    (b"/%61bc.txt", ABC),
    (b"/abc.txt?x=1&y=%2F", ABC),
    (b"/dir/./index.html", DIR_INDEX),
    (b"/dir//index.html", DIR_INDEX),
])
def test_path_decoding(env, target, body):
    r = get(env, target)
    assert r.status == 200 and r.body == body


# --- MIME types --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host,target,ctype", [
    ("static.example.com", "/index.html", "text/html"),
    ("static.example.com", "/abc.txt", "text/plain"),
    ("static.example.com", "/file100.bin", "application/octet-stream"),
    ("extra.example.com", "/style.css", "text/css"),
    ("extra.example.com", "/app.js", "application/javascript"),
    ("extra.example.com", "/pic.png", "image/png"),
    ("extra.example.com", "/data.json", "application/json"),
    ("extra.example.com", "/UPPER.TXT", "text/plain"),
    ("extra.example.com", "/noext", DEFAULT_TYPE),
])
def test_mime_types(env, host, target, ctype):
    r = get(env, target, host=host)
    assert r.status == 200
    assert r.header("content-type") == ctype


# --- HEAD --------------------------------------------------------------------------------------------------

def test_head_same_headers_no_body(env):
    g = get(env, "/abc.txt")
    data = (b"HEAD /abc.txt HTTP/1.1\r\n" + HOST + b"\r\n"
            b"GET /file100.bin HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
    ex = exchange(env.port, data, methods=["HEAD", "GET"])
    assert ex.leftover == b"" and len(ex.finals) == 2, "HEAD response must carry no body bytes"
    h, nxt = ex.finals
    assert h.status == 200 and h.body == b""
    assert h.header("content-length") == "26"
    for name in ("content-type", "etag", "last-modified", "accept-ranges"):
        assert h.header(name) == g.header(name), name
    assert nxt.status == 200 and nxt.body == FILE100


# --- validators and conditional requests -------------------------------------------------------------------

def test_etag_and_last_modified_format(env):
    r = get(env, "/abc.txt")
    et = r.header("etag")
    assert et is not None and re.fullmatch(r'"[0-9a-f]+-[0-9a-f]+"', et), et
    assert et == sut.etag_of(env.www / "abc.txt")
    assert r.header("last-modified") == sut.http_date_of(env.www / "abc.txt")
    assert r.header("accept-ranges") == "bytes"
    big = get(env, "/big.bin")
    assert big.header("etag") == sut.etag_of(env.www / "big.bin")
    assert big.header("etag").endswith('-100000"')


def test_etag_off(env):
    r = get(env, "/noetag/abc.txt", host="feat.example.com")
    assert r.status == 200 and r.body == ABC
    assert not r.has("etag")
    assert r.has("last-modified")


def _cond(env, headers, target="/abc.txt", host="static.example.com"):
    return get(env, target, host=host, headers=headers)


def test_if_modified_since_exact_match_304(env):
    lm = sut.http_date_of(env.www / "abc.txt")
    r = _cond(env, [("If-Modified-Since", lm)])
    assert r.status == 304 and r.body == b""
    assert r.header("etag") == sut.etag_of(env.www / "abc.txt")


def test_if_modified_since_older_200(env):
    r = _cond(env, [("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")])
    assert r.status == 200 and r.body == ABC


def test_if_modified_since_later_date(env):
    later = "Fri, 01 Jan 2100 00:00:00 GMT"
    # nginx default `if_modified_since exact`: only an exact match gives 304.
    assert _cond(env, [("If-Modified-Since", later)]).status == 200
    # `if_modified_since before`: a date at or after the file's mtime gives 304 (RFC 9110 §13.1.3).
    r = _cond(env, [("If-Modified-Since", later)], target="/imsbefore/abc.txt", host="feat.example.com")
    assert r.status == 304 and r.body == b""


def test_if_modified_since_invalid_date_ignored(env):
    r = _cond(env, [("If-Modified-Since", "not a date")])
    assert r.status == 200 and r.body == ABC


def test_if_none_match(env):
    et = sut.etag_of(env.www / "abc.txt")
    assert _cond(env, [("If-None-Match", et)]).status == 304
    assert _cond(env, [("If-None-Match", "*")]).status == 304
    assert _cond(env, [("If-None-Match", '"nope"')]).status == 200
    # If-None-Match present and not matching: If-Modified-Since must be ignored (RFC 9110 §13.2.2 step 4).
    lm = sut.http_date_of(env.www / "abc.txt")
    r = _cond(env, [("If-None-Match", '"nope"'), ("If-Modified-Since", lm)])
    assert r.status == 200 and r.body == ABC


def test_if_none_match_overrides_if_modified_since(env):
    et = sut.etag_of(env.www / "abc.txt")
    r = _cond(env, [("If-None-Match", et), ("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")])
    if r.status == 200:
        sut.nginx_deviation("nginx evaluates If-Modified-Since even when If-None-Match matched; RFC 9110 "
                            "§13.1.3 says a recipient MUST ignore If-Modified-Since when If-None-Match is present")
    assert r.status == 304 and r.body == b""


def test_if_unmodified_since(env):
    assert _cond(env, [("If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")]).status == 412
    lm = sut.http_date_of(env.www / "abc.txt")
    r = _cond(env, [("If-Unmodified-Since", lm)])
    assert r.status == 200 and r.body == ABC


def test_if_match(env):
    et = sut.etag_of(env.www / "abc.txt")
    assert _cond(env, [("If-Match", '"nope"')]).status == 412
    assert _cond(env, [("If-Match", "W/" + et)]).status == 412, "If-Match uses the strong comparison"
    for v in (et, "*", f'"nope", {et}'):
        r = _cond(env, [("If-Match", v)])
        assert r.status == 200 and r.body == ABC, v


# --- Range --------------------------------------------------------------------------------------------------

def _range(env, target, rng, extra=()):
    return get(env, target, headers=[("Range", rng), *extra])


@pytest.mark.parametrize("rng,first,last", [
    ("bytes=2-5", 2, 5), ("bytes=-3", 23, 25), ("bytes=23-", 23, 25), ("bytes=0-0", 0, 0),
    ("bytes=25-25", 25, 25), ("bytes=0-", 0, 25),
])
def test_range_single(env, rng, first, last):
    r = _range(env, "/abc.txt", rng)
    assert r.status == 206
    assert r.header("content-range") == f"bytes {first}-{last}/26"
    assert r.header("content-length") == str(last - first + 1)
    assert r.body == ABC[first:last + 1]
    assert r.header("content-type") == "text/plain"


@pytest.mark.parametrize("rng,spans", [
    ("bytes=0-0,2-3,-1", [(0, 0), (2, 3), (25, 25)]),
    ("bytes=20-,0-2", [(20, 25), (0, 2)]),
])
def test_range_multipart_abc(env, rng, spans):
    r = _range(env, "/abc.txt", rng)
    assert r.status == 206
    parts = sut.parse_byteranges(r)
    assert [(p.first, p.last) for p in parts] == spans
    for p in parts:
        assert p.complete_length == 26
        assert p.data == ABC[p.first:p.last + 1]
        assert p.headers.get("content-type") == "text/plain"
    assert r.header("content-length") == str(len(r.body))


def test_range_multipart_binary(env):
    r = _range(env, "/file100.bin", "bytes=0-9,50-59,90-")
    assert r.status == 206
    parts = sut.parse_byteranges(r)
    assert [(p.first, p.last) for p in parts] == [(0, 9), (50, 59), (90, 99)]
    for p in parts:
        assert p.data == FILE100[p.first:p.last + 1]
        assert p.complete_length == 100


def test_range_large_file_tail(env):
    r = _range(env, "/big.bin", "bytes=1048000-")
    assert r.status == 206
    assert r.header("content-range") == "bytes 1048000-1048575/1048576"
    assert r.body == b"A" * 576


@pytest.mark.parametrize("rng", ["bytes=26-", "bytes=26-30", "bytes=1000-2000,500-"])
def test_range_416(env, rng):
    r = _range(env, "/abc.txt", rng)
    assert r.status == 416
    assert r.header("content-range") == "bytes */26"


def test_range_unknown_unit_ignored(env):
    r = _range(env, "/abc.txt", "items=0-1")
    assert r.status == 200 and r.body == ABC


def test_if_range(env):
    et = sut.etag_of(env.www / "abc.txt")
    lm = sut.http_date_of(env.www / "abc.txt")
    r = _range(env, "/abc.txt", "bytes=0-2", [("If-Range", et)])
    assert r.status == 206 and r.body == b"abc"
    r = _range(env, "/abc.txt", "bytes=0-2", [("If-Range", lm)])
    assert r.status == 206 and r.body == b"abc"
    for stale in ('"other"', "W/" + et, "Sat, 01 Jan 2000 00:00:00 GMT"):
        r = _range(env, "/abc.txt", "bytes=0-2", [("If-Range", stale)])
        assert r.status == 200 and r.body == ABC, f"If-Range {stale}"


# --- connections: keep-alive, pipelining, HTTP/1.0, close ----------------------------------------------------

def test_keepalive_reuse_sequential(env):
    with Conn(env.port) as c:
        for target, body in [("/abc.txt", ABC), ("/index.html", HOME), ("/file100.bin", FILE100),
                             ("/dir/", DIR_INDEX), ("/abc.txt", ABC)]:
            c.send(build_request("GET", target, close=False))
            r = c.read_response()
            assert r is not None and r.status == 200 and r.body == body, target
            assert not c.closed
            assert (r.header("connection") or "keep-alive").lower() != "close"
        assert c.buf == b""


def test_pipelined_ten_in_order(env):
    targets = ["/abc.txt", "/index.html", "/file100.bin", "/dir/", "/nope"] * 2
    data = b"".join(build_request("GET", t, close=False) for t in targets)
    data += build_request("GET", "/abc.txt", close=True)
    ex = exchange(env.port, data)
    assert ex.closed and ex.leftover == b""
    assert len(ex.finals) == 11
    expect = {"/abc.txt": ABC, "/index.html": HOME, "/file100.bin": FILE100, "/dir/": DIR_INDEX}
    for t, r in zip(targets + ["/abc.txt"], ex.finals):
        if t == "/nope":
            assert r.status == 404
        else:
            assert r.status == 200 and r.body == expect[t], t


def test_http10_keepalive(env):
    with Conn(env.port) as c:
        c.send(b"GET /abc.txt HTTP/1.0\r\nHost: static.example.com\r\nConnection: keep-alive\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and r.body == ABC
        assert (r.header("connection") or "").lower() == "keep-alive"
        assert not c.wait_closed(0.3), "HTTP/1.0 keep-alive connection closed early"
        c.send(b"GET /index.html HTTP/1.0\r\nHost: static.example.com\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and r.body == HOME
        assert c.wait_closed(3) and c.buf == b""


def test_connection_close(env):
    ex = exchange(env.port, build_request("GET", "/abc.txt", close=True)
                  + build_request("GET", "/index.html", close=True))
    r = ex.one()  # the request after `Connection: close` is never answered
    assert r.body == ABC
    assert (r.header("connection") or "").lower() == "close"
    assert ex.closed


def test_expect_100_continue_post_static(env):
    with Conn(env.port) as c:
        c.send(b"POST /abc.txt HTTP/1.1\r\nHost: static.example.com\r\nContent-Length: 5\r\n"
               b"Expect: 100-continue\r\n\r\n")
        first = c.read_responses(1, timeout=2)
        interim = [r for r in first if r.interim]
        finals = [r for r in first if not r.interim]
        if interim and not finals:
            assert interim[0].status == 100
            c.send(b"hello")
            r = c.read_response()
            assert r is not None and r.status == 405
        else:
            assert len(finals) == 1 and finals[0].status == 405, first
            assert all(r.status == 100 for r in interim)
            c.send(b"hello")  # a client may send the body anyway (RFC 9110 §10.1.1)
        # The connection is either closed, or the 5 body bytes were consumed and the next request is clean.
        c.send(build_request("GET", "/abc.txt", close=True))
        rest = c.read_responses(1, timeout=3)
        if rest:
            assert [r.status for r in rest] == [200], f"body bytes were parsed as a request: {rest}"
            assert rest[0].body == ABC
        else:
            assert c.closed, "no response to the follow-up request and the connection was not closed"
        assert c.wait_closed(3) and c.buf == b""


def test_chunked_request_body_discarded(env):
    data = (b"POST /abc.txt HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n"
            + build_request("GET", "/abc.txt", close=True))
    ex = exchange(env.port, data, methods=["POST", "GET"])
    assert ex.leftover == b""
    assert [r.status for r in ex.finals] == [405, 200]
    assert ex.finals[1].body == ABC


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_405_for_unsupported_methods(env, method):
    body = b"abc" if method in ("POST", "PUT", "PATCH") else b""
    r = get(env, "/abc.txt", method=method, body=body)
    assert r.status == 405
    sut.nginx_deviation("nginx sends 405 without Allow; RFC 9110 §15.5.6: an origin server MUST generate Allow "
                        "in a 405 response")
    allow = {t.strip().upper() for t in (r.header("allow") or "").split(",")}
    assert allow == {"GET", "HEAD"}, r.header("allow")


@pytest.mark.parametrize("te", ["gzip", "gzip, chunked", "identity", "x-custom"])
def test_501_unknown_transfer_encoding(env, te):
    data = (b"POST /abc.txt HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: " + te.encode() + b"\r\n\r\n"
            b"0\r\n\r\n" + build_request("GET", "/abc.txt", close=True))
    ex = exchange(env.port, data, methods=["POST"])
    r = ex.finals[0] if ex.finals else None
    assert r is not None, "no response"
    assert len(ex.finals) == 1, "framing is unknown: nothing after it may be answered"
    assert r.status in (501, 400) if te == "identity" else r.status == 501, r.status
    assert ex.closed


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/3.0"])
def test_505_unsupported_major_version(env, version):
    ex = exchange(env.port, b"GET /abc.txt " + version + b"\r\n" + HOST + b"\r\n")
    r = ex.one()
    assert r.status == 505
    assert ex.closed


# --- limits --------------------------------------------------------------------------------------------------

def test_414_request_line_over_8k(env):
    r = exchange(env.port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n" + HOST + b"\r\n").one()
    assert r.status == 414


def test_request_line_under_8k_ok(env):
    r = get(env, "/abc.txt?" + "q" * 7000)
    assert r.status == 200 and r.body == ABC


def _big_header_status(env, headers: bytes) -> sut.Exchange:
    return exchange(env.port, b"GET /abc.txt HTTP/1.1\r\n" + HOST + headers + b"Connection: close\r\n\r\n")


def test_431_one_header_over_8k(env):
    ex = _big_header_status(env, b"X-Big: " + b"a" * 9000 + b"\r\n")
    r = ex.one()
    assert ex.closed
    if sut.SUT == "nginx":
        assert r.status == 400
    sut.nginx_deviation("nginx answers an oversized header with 400 'Request Header Or Cookie Too Large'; "
                        "RFC 6585 §5 defines 431 for it (C05: 431 preferred)")
    assert r.status == 431


def test_431_header_section_over_32k(env):
    ex = _big_header_status(env, b"".join(b"X-H%d: " % i + b"b" * 7000 + b"\r\n" for i in range(5)))
    r = ex.one()
    if sut.SUT == "nginx":
        assert r.status == 400
    sut.nginx_deviation("nginx answers an oversized header section with 400; RFC 6585 §5 defines 431")
    assert r.status == 431


def test_header_section_under_limit_ok(env):
    r = _big_header_status(env, b"".join(b"X-H%d: " % i + b"b" * 7000 + b"\r\n" for i in range(3))).one()
    assert r.status == 200 and r.body == ABC


def test_413_client_max_body_size(env):
    # Default 1m: a declared 2 MB body is refused before it is read.
    ex = exchange(env.port, b"POST /abc.txt HTTP/1.1\r\n" + HOST + b"Content-Length: 2000000\r\n\r\n",
                  expect=1, methods=["POST"])
    assert ex.finals and ex.finals[0].status == 413
    # `client_max_body_size 10` in /small/: 11 bytes is too much, 10 is fine (then 405 for POST on a file).
    r = get(env, "/small/abc.txt", host="feat.example.com", method="POST", body=b"x" * 11)
    assert r.status == 413
    r = get(env, "/small/abc.txt", host="feat.example.com", method="POST", body=b"x" * 10)
    assert r.status == 405


# --- request smuggling and malformed requests: 400 and close ------------------------------------------------

SMUGGLING = {
    "cl-and-te": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"0\r\n\r\n",
    "differing-cl": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
    "cl-list": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: 1, 2\r\n\r\nxx",
    "non-numeric-cl": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: abc\r\n\r\n",
    "negative-cl": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: -1\r\n\r\n",
    "plus-cl": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nContent-Length: +3\r\n\r\nabc",
    "bad-chunk-size": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "obs-fold": b"GET /abc.txt HTTP/1.1\r\nHost: s\r\nX-A: a\r\n b\r\n\r\n",
    "bare-cr": b"GET /abc.txt HTTP/1.1\r\nHost: s\r\nX-A: a\rb\r\n\r\n",
    "nul-in-value": b"GET /abc.txt HTTP/1.1\r\nHost: s\r\nX-A: a\x00b\r\n\r\n",
    "space-before-colon": b"GET /abc.txt HTTP/1.1\r\nHost: s\r\nX-A : b\r\n\r\n",
    "invalid-method-token": b"G(T /abc.txt HTTP/1.1\r\nHost: s\r\n\r\n",
    "missing-host-http11": b"GET /abc.txt HTTP/1.1\r\nX-A: b\r\n\r\n",
    "duplicate-host": b"GET /abc.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "invalid-name-token": b"GET /abc.txt HTTP/1.1\r\nHost: s\r\nX(A: b\r\n\r\n",
    "te-space-before-colon": b"POST /abc.txt HTTP/1.1\r\nHost: s\r\nTransfer-Encoding : chunked\r\n"
                             b"Content-Length: 5\r\n\r\n0\r\n\r\n",
}
# Errors found only while reading the body: a server may answer the method first (405 on a static file) as
# long as it then closes instead of parsing the rest as a new request.
BODY_LEVEL = {"bad-chunk-size"}
NGINX_IGNORES = {
    "invalid-name-token": "nginx drops header lines with invalid name characters (ignore_invalid_headers on) and "
                          "serves 200; RFC 9112 §2.2 says a server SHOULD answer 400 to a request that does not "
                          "match the grammar, and kosoku is expected to",
}


@pytest.mark.parametrize("name", list(SMUGGLING))
def test_400_malformed_and_smuggling(env, name):
    data = SMUGGLING[name] + b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n\r\n"
    if name in NGINX_IGNORES and sut.SUT == "nginx":
        ex = exchange(env.port, data, expect=2)  # what nginx does: ignores the line, answers both
        assert [r.status for r in ex.finals] == [200, 200]
        sut.nginx_deviation(NGINX_IGNORES[name])
    ex = exchange(env.port, data, methods=["POST" if data.startswith(b"POST") else "GET"])
    assert ex.finals, "no response"
    r = ex.finals[0]
    assert r.status in ((400, 405) if name in BODY_LEVEL else (400,)), f"status {r.status}"
    assert len(ex.finals) == 1, "bytes after a malformed request must never be answered"
    assert ex.leftover == b""
    assert ex.closed, "the connection must be closed after a 400 for bad framing"


# --- return, add_header, alias, try_files -----------------------------------------------------------------------

def test_return_text(env):
    r = get(env, "/text", host="feat.example.com")
    assert r.status == 200 and r.body == b"returned text\n"
    assert r.header("content-type") == DEFAULT_TYPE
    h = exchange(env.port, build_request("HEAD", "/text", host="feat.example.com"), methods=["HEAD"]).one()
    assert h.status == 200 and h.body == b"" and h.header("content-length") == "14"


def test_return_redirect_and_code(env):
    r = get(env, "/go", host="feat.example.com")
    assert r.status == 301
    assert r.header("location") == "http://target.example.org/landing?x=1"
    assert get(env, "/gone", host="feat.example.com").status == 410


def test_add_header(env):
    ok = get(env, "/hdr/abc.txt", host="feat.example.com")
    assert ok.status == 200 and ok.body == ABC
    assert ok.header("x-a") == "b" and ok.header("x-b") == "c"
    nf = get(env, "/hdr/nope", host="feat.example.com")
    assert nf.status == 404
    assert nf.header("x-a") == "b", "`always` adds the header to error responses too"
    assert not nf.has("x-b"), "without `always` the header is only added to 2xx/3xx"
    st = get(env, "/abc.txt")
    assert st.header("cache-control") == "public, max-age=60"


@pytest.mark.parametrize("target,status,body", [
    ("/aliased/index.html", 200, DIR_INDEX),
    ("/aliased/", 200, DIR_INDEX),
    ("/aliased/nope", 404, None),
    ("/aliased/../abc.txt", 200, ABC),  # normalised to /abc.txt before location matching
])
def test_alias(env, target, status, body):
    r = get(env, target, host="feat.example.com")
    assert r.status == status
    if body is not None:
        assert r.body == body


@pytest.mark.parametrize("target,status,body", [
    ("/abc.txt", 200, ABC),
    ("/dir/", 200, DIR_INDEX),
    ("/nope", 404, None),
    ("/spa/anything/here", 200, HOME),
    ("/spa/", 200, HOME),
])
def test_try_files(env, target, status, body):
    r = get(env, target, host="tf.example.com")
    assert r.status == status
    if body is not None:
        assert r.body == body


def test_try_files_directory_without_slash(env):
    r = get(env, "/dir", host="tf.example.com")
    assert r.status == 301 and (r.header("location") or "").endswith("/dir/")


# --- virtual server and location selection ---------------------------------------------------------------------

@pytest.mark.parametrize("host,expect", [
    ("static.example.com", b"static\n"),
    ("first.example.com", b"first\n"),
    ("exact.example.com", b"exact\n"),
    ("EXACT.Example.COM", b"exact\n"),
    ("exact.example.com:8080", b"exact\n"),
    ("exact.example.com.", b"exact\n"),
    ("a.wild.example.com", b"wild-lead\n"),
    ("www.wild.example.com", b"wild-lead\n"),   # leading wildcard beats trailing wildcard and regex
    ("www.wild.org", b"wild-trail\n"),          # trailing wildcard beats regex
    ("dot.example.com", b"dot\n"),
    ("a.b.dot.example.com", b"dot\n"),
    ("re42.example.com", b"regex\n"),           # first matching regex in file order
    ("re5.example.com", b"regex\n"),
    ("unknown.example.net", b"static\n"),       # default_server, not the first server
    (None, b"static\n"),                        # HTTP/1.0 without Host
])
def test_server_name_selection(env, host, expect):
    version = "HTTP/1.0" if host is None else "HTTP/1.1"
    r = exchange(env.port, build_request("GET", "/whoami", host=host, version=version)).one()
    assert r.status == 200 and r.body == expect


def test_absolute_form_target_overrides_host(env):
    data = b"GET http://exact.example.com/whoami HTTP/1.1\r\nHost: static.example.com\r\nConnection: close\r\n\r\n"
    r = exchange(env.port, data).one()
    assert r.status == 200 and r.body == b"exact\n"


@pytest.mark.parametrize("target,expect", [
    ("/exact", b"exact\n"),
    ("/exact/", b"root\n"),
    ("/exactly", b"root\n"),
    ("/noregex/a.php", b"noregex\n"),
    ("/long/prefix/a.php", b"regex-php\n"),
    ("/long/prefix/a", b"long-prefix\n"),
    ("/long/prefix", b"short-prefix\n"),
    ("/long/a", b"short-prefix\n"),
    ("/a.JPG", b"iregex-jpg\n"),
    ("/a.jpg", b"iregex-jpg\n"),
    ("/a.PHP", b"root\n"),
    ("/first/second/x", b"regex-first\n"),
    ("/x.php?y=1", b"regex-php\n"),
    ("/%61.php", b"regex-php\n"),
    ("/other", b"root\n"),
])
def test_location_precedence(env, target, expect):
    r = get(env, target, host="prec.example.com")
    assert r.status == 200 and r.body == expect


# --- symlinks, big files, concurrency -------------------------------------------------------------------------

@pytest.mark.parametrize("target,body", [
    ("/link.txt", b"real file\n"),
    ("/linkdir/", b"<p>realdir</p>\n"),
    ("/linkdir/index.html", b"<p>realdir</p>\n"),
    ("/outlink.txt", b"linked from outside\n"),  # nginx default `disable_symlinks off` follows it
])
def test_symlinks_followed(env, target, body):
    r = get(env, target, host="extra.example.com")
    assert r.status == 200 and r.body == body


def test_big_file_64mib_sha256(env):
    expected = hashlib.sha256((env.extra / "big64.bin").read_bytes()).hexdigest()
    conn = http.client.HTTPConnection("127.0.0.1", env.port, timeout=60)
    try:
        conn.request("GET", "/big64.bin", headers={"Host": "extra.example.com"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Length") == str(BIG64_SIZE)
        h = hashlib.sha256()
        n = 0
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
        assert n == BIG64_SIZE
        assert h.hexdigest() == expected
        # The connection is still usable after a big body (keep-alive).
        conn.request("GET", "/real.txt", headers={"Host": "extra.example.com"})
        r2 = conn.getresponse()
        assert r2.status == 200 and r2.read() == b"real file\n"
    finally:
        conn.close()


def test_big_bin_1mib(env):
    r = get(env, "/big.bin")
    assert r.status == 200 and r.body == sut.STATIC_FILES["/big.bin"]


def test_200_concurrent_clients(env):
    files = ["/abc.txt", "/index.html", "/file100.bin", "/dir/index.html", "/big.bin", "/sp%20/a.txt"]
    bodies = {f: sut.STATIC_FILES[f.replace("%20", " ")] for f in files}
    n = 200
    barrier = threading.Barrier(n)
    errors: list[str] = []

    def client(i: int):
        try:
            c = Conn(env.port, timeout=30, record_io=False)
            with c:
                barrier.wait(30)
                t1, t2 = files[i % len(files)], files[(i + 1) % len(files)]
                c.send(build_request("GET", t1, close=False))
                r = c.read_response(timeout=30)
                if r is None or r.status != 200 or r.body != bodies[t1]:
                    errors.append(f"client {i} {t1}: {r!r}")
                    return
                c.send(build_request("GET", t2, close=True))
                r = c.read_response(timeout=30)
                if r is None or r.status != 200 or r.body != bodies[t2]:
                    errors.append(f"client {i} {t2}: {r!r}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, f"{len(errors)} of {n} clients failed, first: {errors[:5]}"


# --- keep-alive limits and timeouts --------------------------------------------------------------------------

def test_keepalive_requests_3_pipelined(env):
    data = b"".join(build_request("GET", "/abc.txt", host="ka.example.com", close=False) for _ in range(4))
    ex = exchange(env.port, data)
    assert ex.closed, "connection must close after the 3rd response"
    assert len(ex.finals) == 3 and ex.leftover == b""
    assert all(r.status == 200 and r.body == ABC for r in ex.finals)
    assert (ex.finals[2].header("connection") or "").lower() == "close"


def test_keepalive_requests_3_sequential(env):
    with Conn(env.port) as c:
        for i in range(3):
            c.send(build_request("GET", "/abc.txt", host="ka.example.com", close=False))
            r = c.read_response()
            assert r is not None and r.status == 200 and r.body == ABC
            assert ((r.header("connection") or "").lower() == "close") == (i == 2)
        assert c.wait_closed(3) and c.buf == b""


def test_keepalive_timeout(env):
    with Conn(env.port) as c:
        c.send(build_request("GET", "/abc.txt", host="ka.example.com", close=False))
        assert c.read_response().status == 200
        t0 = time.monotonic()
        assert c.wait_closed(5), "idle keep-alive connection not closed (keepalive_timeout 1s)"
        dt = time.monotonic() - t0
        assert 0.7 <= dt <= 4.5, f"closed after {dt:.2f}s, keepalive_timeout is 1s"
        assert c.buf == b"", "nothing may be sent on an idle keep-alive close"


@pytest.mark.parametrize("partial", [b"", b"GET /abc.txt HTTP/1.1\r\nHost: static.example.com\r\n"],
                         ids=["no-bytes", "half-request"])
def test_client_header_timeout(env, partial):
    with Conn(env.timeout_port) as c:
        t0 = time.monotonic()
        if partial:
            c.send(partial)
        assert c.wait_closed(6), "connection not closed (client_header_timeout 1s)"
        dt = time.monotonic() - t0
        assert 0.7 <= dt <= 4.5, f"closed after {dt:.2f}s, client_header_timeout is 1s"
        if c.buf:
            rs, left = sut.parse_responses(c.buf)
            assert [r.status for r in rs] == [408] and left == b"", f"only a 408 may be sent: {c.buf!r}"


# --- access log, config check, kosoku-only ----------------------------------------------------------------------

def test_access_log_custom_format(env):
    tag = uuid.uuid4().hex
    r = get(env, f"/abc.txt?log={tag}", headers=[("User-Agent", "itest-agent/1.0")])
    assert r.status == 200
    want = f"127.0.0.1|GET|/abc.txt?log={tag}|200|26|itest-agent/1.0|static.example.com"
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        if env.access_log.exists():
            lines = [ln for ln in env.access_log.read_text(errors="replace").splitlines() if tag in ln]
            if lines:
                break
        time.sleep(0.1)
    assert lines == [want]


def test_config_check_mode(env, tmp_path):
    ok = env.server.check_config()
    assert ok.returncode == 0, ok.stderr.decode(errors="replace")
    bad = sut.ServerProcess(sut.SUT, tmp_path / "bad", "    bogus_directive on;\n", [])
    res = bad.check_config()
    assert res.returncode != 0
    msg = (res.stderr + res.stdout).decode(errors="replace")
    assert "bogus_directive" in msg and str(bad.conf_path) in msg, msg


def test_kosoku_status_location(env):
    if sut.SUT != "kosoku":
        pytest.skip("`status;` is a kosoku-only directive (not configured for nginx)")
    r = get(env, "/kosoku-status")
    assert r.status == 200 and r.body


def test_error_log_has_no_crit_or_alert(env):
    text = env.server.error_log()
    bad = [ln for ln in text.splitlines() if re.search(r"\[(emerg|alert|crit)\]", ln)]
    assert not bad, "\n".join(bad[:20])
