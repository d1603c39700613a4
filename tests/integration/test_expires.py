"""`expires` (nginx's ngx_http_headers_module): Expires and Cache-Control from a time after the response, after
its Last-Modified, at a time of day, `epoch`, `max`, `off` and a variable; only for the statuses add_header
applies to; replacing an origin's own Expires and Cache-Control; add_header's fields after them.

Runs against nginx too (SUT=nginx): the same config, the same fields.
"""
from __future__ import annotations

import os
from email.utils import parsedate_to_datetime

import pytest

import sut

LAST_MODIFIED = 1577836800  # 2020-01-01 00:00:00 UTC


# Every request is answered with the origin's own Expires, Cache-Control and Last-Modified.
ORIGIN_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nExpires: Thu, 01 Jan 2099 00:00:00 GMT\r\n"
                 b"Cache-Control: public, max-age=99\r\nLast-Modified: Wed, 01 Jan 2020 00:00:00 GMT\r\n"
                 b"X-Origin: 1\r\nConnection: close\r\n\r\nok")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("expires")
    www = work / "www"
    www.mkdir()
    f = www / "file.txt"
    f.write_text("hi\n")
    os.utime(f, (LAST_MODIFIED, LAST_MODIFIED))
    origin = sut.AnsweringOrigin(lambda head: ORIGIN_ANSWER)
    port = sut.free_port()
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        expires 2h;
        location /epoch/ {{ expires epoch; return 200 x; }}
        location /max/ {{ expires max; return 200 x; }}
        location /negative/ {{ expires -1; return 200 x; }}
        location /hour/ {{ expires 1h; return 200 x; }}
        location /inherited/ {{ return 200 x; }}
        location /off/ {{ expires off; return 200 x; }}
        location /modified-no-lm/ {{ expires modified 1h; return 200 x; }}
        location = /file.txt {{ expires modified 10y; }}
        location /missing/ {{ expires 1h; }}
        location /redirect/ {{ expires 1h; return 302 /elsewhere; }}
        location /daily/ {{ expires @23h59m59s; return 200 x; }}
        location /add/ {{ expires 1h; add_header Cache-Control private; return 200 x; }}
        location /var/ {{ expires $arg_e; return 200 x; }}
        location /proxied/ {{ expires 30m; proxy_pass http://127.0.0.1:{origin.port}; }}
        location /proxied-modified/ {{ expires modified 1d; proxy_pass http://127.0.0.1:{origin.port}; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0
    origin.close()


def parse_http_date(value: str) -> int:
    return int(parsedate_to_datetime(value).timestamp())


def _get(srv, path: str) -> sut.Response:
    return sut.request(srv.port, "GET", path)


def _expires_after_date(resp: sut.Response) -> int:
    return parse_http_date(resp.header("Expires")) - parse_http_date(resp.header("Date"))


@pytest.mark.parametrize("path, expires, cache_control", [
    ("/epoch/", "Thu, 01 Jan 1970 00:00:01 GMT", ["no-cache"]),
    ("/max/", "Thu, 31 Dec 2037 23:55:55 GMT", ["max-age=315360000"]),
    ("/file.txt", "Sat, 29 Dec 2029 00:00:00 GMT", None),  # Last-Modified + 10 y of 365 d (3 leap days)
])
def test_fixed_expires_values(srv, path, expires, cache_control):
    resp = _get(srv, path)
    assert resp.status == 200
    assert resp.header_list("Expires") == [expires]
    if cache_control is not None:
        assert resp.header_list("Cache-Control") == cache_control


@pytest.mark.parametrize("path, seconds", [("/hour/", 3600), ("/inherited/", 7200), ("/modified-no-lm/", 3600),
                                           ("/redirect/", 3600)])
def test_expires_counts_from_the_response_time(srv, path, seconds):
    resp = _get(srv, path)
    assert resp.status in (200, 302)
    # The clock may tick between Date and Expires: one second of slack, max-age agreeing with Expires.
    delta = _expires_after_date(resp)
    assert seconds - 1 <= delta <= seconds, resp
    assert resp.header_list("Cache-Control") in ([f"max-age={seconds}"], [f"max-age={seconds - 1}"]), resp


def test_negative_time_says_no_cache(srv):
    resp = _get(srv, "/negative/")
    assert resp.header_list("Cache-Control") == ["no-cache"]
    assert -2 <= _expires_after_date(resp) <= -1


def test_modified_counts_from_the_file_s_last_modified(srv):
    # /file.txt is Last-Modified 2020 + 10 y: still ahead of now until 2029-12-29, so max-age is the distance.
    resp = _get(srv, "/file.txt")
    age = int(resp.header("Cache-Control").removeprefix("max-age="))
    assert abs(age - (parse_http_date(resp.header("Expires")) - parse_http_date(resp.header("Date")))) <= 1


def test_time_of_day(srv):
    resp = _get(srv, "/daily/")
    exp = parse_http_date(resp.header("Expires"))
    date = parse_http_date(resp.header("Date"))
    assert 0 <= exp - date <= 24 * 3600
    # The local time of day: this machine's zone is UTC in CI; the assertion holds for any whole-hour zone.
    assert exp % 3600 == 3599, resp.header("Expires")


def test_off_and_error_statuses_get_no_fields(srv):
    for path, status in (("/off/", 200), ("/missing/x", 404)):
        resp = _get(srv, path)
        assert resp.status == status
        assert not resp.has("Expires") and not resp.has("Cache-Control"), (path, resp)


def test_add_header_comes_after_expires(srv):
    resp = _get(srv, "/add/")
    assert resp.header_list("Cache-Control")[0].startswith("max-age=")
    assert resp.header_list("Cache-Control")[1:] == ["private"]


@pytest.mark.parametrize("value, fields", [
    ("max", ("Thu, 31 Dec 2037 23:55:55 GMT", ["max-age=315360000"])),
    ("epoch", ("Thu, 01 Jan 1970 00:00:01 GMT", ["no-cache"])),
    ("off", None), ("bogus", None), ("", None),
])
def test_expires_from_a_variable(srv, value, fields):
    resp = _get(srv, f"/var/?e={value}")
    assert resp.status == 200
    if fields is None:
        assert not resp.has("Expires") and not resp.has("Cache-Control"), resp
    else:
        assert (resp.header("Expires"), resp.header_list("Cache-Control")) == fields


def test_variable_time_value(srv):
    resp = _get(srv, "/var/?e=1h")
    assert 3599 <= _expires_after_date(resp) <= 3600


def test_proxied_response_fields_are_replaced(srv):
    resp = _get(srv, "/proxied/")
    assert resp.status == 200 and resp.header("X-Origin") == "1" and resp.body == b"ok"
    assert len(resp.header_list("Expires")) == 1 and 1799 <= _expires_after_date(resp) <= 1800
    assert resp.header_list("Cache-Control") in (["max-age=1800"], ["max-age=1799"])


def test_proxied_modified_counts_from_the_origin_s_last_modified(srv):
    resp = _get(srv, "/proxied-modified/")
    assert resp.header_list("Expires") == ["Thu, 02 Jan 2020 00:00:00 GMT"]
    assert resp.header_list("Cache-Control") == ["no-cache"]
