"""`error_page` and named locations (nginx's ngx_http_core_module): an error answered by an internal redirect
to a page (with the error's status, `=CODE` or `=` the page's own), to a `@named` location, or by a redirect to
a URL; variables and arguments in the URI; the page sent whole whatever the client's Range and preconditions;
server-level pages inherited by locations without their own; no second redirect when the page itself fails;
and the configuration errors.

Runs against nginx too (SUT=nginx): the same config, the same answers.
"""
from __future__ import annotations

import pytest

import sut


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("error_page")
    www = work / "www"
    (www / "err").mkdir(parents=True)
    (www / "err" / "404.html").write_text("custom 404\n")
    (www / "err" / "50x.html").write_text("custom 50x\n")
    (www / "present.txt").write_text("here\n")
    port = sut.free_port()
    closed = sut.free_port()  # nothing listens there: the proxy answers 502
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        error_page 404 /err/404.html;
        error_page 500 502 503 504 /err/50x.html;
        location /plain/ {{ }}
        location /ok/ {{ error_page 404 =200 /err/404.html; }}
        location /own/ {{ error_page 404 = /err/404.html; }}
        location /named/ {{ error_page 404 @fallback; }}
        location /url/ {{ error_page 404 http://example.com/moved; }}
        location /url301/ {{ error_page 404 =301 http://example.com/gone; }}
        location /broken/ {{ error_page 404 /err/missing.html; }}
        location /upstream/ {{ proxy_pass http://127.0.0.1:{closed}; }}
        location /denied/ {{ error_page 403 /echo?from=$uri; deny all; }}
        location /own-list/ {{ error_page 403 /err/404.html; }}
        location = /echo {{ return 200 "uri=$uri args=$args method=$request_method\\n"; }}
        location /named-any/ {{ error_page 405 @fallback; }}
        location @fallback {{ return 200 "fallback for $uri ($request_method)\\n"; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0


def _get(srv, path: str, method: str = "GET", headers=()) -> sut.Response:
    return sut.request(srv.port, method, path, headers=headers)


@pytest.mark.parametrize("path, status, body", [
    ("/plain/nothing", 404, b"custom 404\n"),
    ("/own-list/nothing", 404, b"custom 404\n"),  # its own list has no 404: not the server's either
    ("/ok/nothing", 200, b"custom 404\n"),
    ("/own/nothing", 200, b"custom 404\n"),
    ("/named/nothing", 404, b"fallback for /named/nothing (GET)\n"),
    ("/upstream/x", 502, b"custom 50x\n"),
    ("/denied/x", 403, b"uri=/echo args=from=/denied/x method=GET\n"),
])
def test_error_answered_by_the_page(srv, path, status, body):
    resp = _get(srv, path)
    assert resp.status == status, resp
    if path != "/own-list/nothing":
        assert resp.body == body, resp
    if status != 200:
        # The page is not the resource: no Last-Modified, no ranges.
        assert not resp.has("Last-Modified") and not resp.has("Accept-Ranges"), resp


def test_named_location_keeps_the_method(srv):
    resp = _get(srv, "/named-any/x", method="DELETE")  # the static handler refuses DELETE: 405
    assert (resp.status, resp.body) == (405, b"fallback for /named-any/x (DELETE)\n"), resp


def test_request_with_a_body_gets_the_error_itself(srv):
    """kosoku answers an error of a request that carries a body as is (nginx discards the body first and sends
    the page): the body's framing stays the connection's. A chunk split across reads, whose rest carries a
    request line, stays body: one answer, no second request."""
    sut.nginx_deviation("nginx redirects a request with a body to its error page after discarding the body")
    with sut.Conn(srv.port) as c:
        c.send(b"POST /plain/nothing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n0123456789")
        first = c.read_response()
        assert first.status in (404, 405) and b"custom 404" not in first.body, first
        rest = b"0\r\n\r\nGET /present.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        c.send(rest + b"x" * (0x40 - 10 - len(rest)) + b"\r\n0\r\n\r\n")
        c.send(sut.build_request("GET", "/err/50x.html"))
        second = c.read_response()
    assert second is not None and second.body == b"custom 50x\n", second  # the next request, not /present.txt


def test_own_list_replaces_the_server_s(srv):
    resp = _get(srv, "/own-list/nothing")
    assert resp.status == 404
    assert b"<center><h1>404 Not Found</h1></center>" in resp.body  # the built-in page, not custom 404


@pytest.mark.parametrize("path, status, location", [
    ("/url/x", 302, "http://example.com/moved"),
    ("/url301/x", 301, "http://example.com/gone"),
])
def test_error_page_url_redirects(srv, path, status, location):
    resp = _get(srv, path)
    assert resp.status == status and resp.header("Location") == location, resp


def test_a_failing_page_is_not_redirected_again(srv):
    resp = _get(srv, "/broken/nothing")
    assert resp.status == 404
    assert b"<center><h1>404 Not Found</h1></center>" in resp.body


def test_the_page_ignores_range_and_preconditions(srv):
    plain = _get(srv, "/plain/nothing")
    for headers in ([("Range", "bytes=0-3")], [("If-None-Match", plain.header("ETag") or '"x"')],
                    [("If-Modified-Since", "Thu, 01 Jan 2037 00:00:00 GMT")]):
        resp = _get(srv, "/plain/nothing", headers=headers)
        assert resp.status == 404 and resp.body == b"custom 404\n", (headers, resp)


def test_head_gets_the_page_s_head(srv):
    resp = sut.request(srv.port, "HEAD", "/plain/nothing")
    assert resp.status == 404 and resp.body == b""
    assert int(resp.header("Content-Length")) == len(b"custom 404\n")


def test_keep_alive_after_an_error_page(srv):
    with sut.Conn(srv.port) as c:
        c.send(sut.build_request("GET", "/plain/nothing", close=False) + sut.build_request("GET", "/present.txt"))
        first, second = c.read_responses(2)
    assert (first.status, first.body) == (404, b"custom 404\n")
    assert (second.status, second.body) == (200, b"here\n")


@pytest.mark.parametrize("body, message", [
    ("error_page 404;", 'invalid number of arguments in "error_page" directive'),
    ("error_page 200 /x;", 'value "200" must be between 300 and 599'),
    ("location /a { location @n { } }", 'named location "@n" can be on the server level only'),
])
def test_config_errors(tmp_path, body, message):
    s = sut.ServerProcess(sut.SUT, tmp_path, f"    server {{ listen 127.0.0.1:{sut.free_port()}; {body} }}", [])
    r = s.check_config()
    assert r.returncode == 1 and message in r.stderr.decode(), r.stderr
