"""Self-tests of the raw HTTP client in sut.py (no server needed): if the parser were wrong, every other
test's verdict would be too."""
from __future__ import annotations

import pytest

import sut


def test_content_length_pipelined_and_leftover():
    buf = (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
           b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
           b"junk")
    rs, left = sut.parse_responses(buf, eof=False)
    assert [(r.status, r.body) for r in rs] == [(200, b"abc"), (404, b"")]
    assert left == b"junk"


def test_chunked_with_extensions_and_trailers():
    buf = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\nNEXT")
    rs, left = sut.parse_responses(buf, eof=False)
    assert rs[0].body == b"abc0123456789abcdef" and rs[0].chunked
    assert rs[0].trailers == [("X-T", "1")]
    assert left == b"NEXT"


def test_chunked_incomplete_waits():
    assert sut.parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab") is None


def test_head_304_204_1xx_have_no_body():
    buf = (b"HTTP/1.1 100 Continue\r\n\r\n"
           b"HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\n"          # answer to HEAD
           b"HTTP/1.1 304 Not Modified\r\nContent-Length: 26\r\n\r\n"
           b"HTTP/1.1 204 No Content\r\n\r\n")
    rs, left = sut.parse_responses(buf, methods=["HEAD", "GET", "GET"], eof=False)
    assert [r.status for r in rs] == [100, 200, 304, 204]
    assert all(r.body == b"" for r in rs) and left == b""


def test_close_delimited_needs_eof():
    buf = b"HTTP/1.0 200 OK\r\n\r\nuntil close"
    assert sut.parse_response(buf, eof=False) is None
    r, n = sut.parse_response(buf, eof=True)
    assert r.body == b"until close" and n == len(buf)


@pytest.mark.parametrize("bad", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    b"HTTX/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
])
def test_malformed_responses_raise(bad):
    with pytest.raises(sut.ParseError):
        sut.parse_response(bad, eof=True)


def test_multipart_byteranges_parser():
    body = (b"\r\n--B1\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-4/26\r\n\r\nabcde"
            b"\r\n--B1\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-14/26\r\n\r\nklmno"
            b"\r\n--B1--\r\n")
    r = sut.Response("HTTP/1.1", 206, "Partial Content",
                     [("Content-Type", "multipart/byteranges; boundary=B1")], body, b"")
    parts = sut.parse_byteranges(r)
    assert [(p.first, p.last, p.complete_length, p.data) for p in parts] == [(0, 4, 26, b"abcde"),
                                                                            (10, 14, 26, b"klmno")]
    r.body = body.replace(b"abcde", b"abcdeX")
    with pytest.raises(AssertionError):
        sut.parse_byteranges(r)
