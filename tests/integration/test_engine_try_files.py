"""try_files' last parameter is an internal redirect (nginx's ngx_http_core_module): a URI is searched again as a
request's, so `try_files $uri $uri/ /index.php?$args;` reaches the location for /index.php (the front-controller
pattern of most PHP sites and single-page apps), a `@name` runs that named location with the URI kept, the
method and fields go along, and a redirect that never ends is a 500 ("rewrite or internal redirection cycle").

Runs against nginx too (SUT=nginx): the same config, the same answers.
"""
from __future__ import annotations

import pytest

import sut


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("try_files")
    www = work / "www"
    (www / "dir").mkdir(parents=True)
    (www / "present.txt").write_text("static here\n")
    (www / "dir" / "index.html").write_text("dir index\n")
    (www / "app.html").write_text("the app\n")
    port = sut.free_port()
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location / {{ try_files $uri $uri/ /index.php?$args; }}
        location ~ \\.php$ {{ return 200 "php uri=$uri args=$args method=$request_method\\n"; }}
        location /named/ {{ try_files $uri @backend; }}
        location @backend {{ return 200 "backend uri=$uri method=$request_method h=$http_x_probe\\n"; }}
        location /spa/ {{ try_files $uri /app.html; }}
        location /loop/ {{ try_files /nothing-here /loop/again; }}
        location /code/ {{ try_files $uri =418; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0


def _get(srv, path: str, method: str = "GET", headers=()) -> sut.Response:
    return sut.request(srv.port, method, path, headers=headers)


@pytest.mark.parametrize("path, body", [
    ("/present.txt", b"static here\n"),
    ("/dir/", b"dir index\n"),
    ("/missing", b"php uri=/index.php args= method=GET\n"),
    ("/missing/page?a=1&b=2", b"php uri=/index.php args=a=1&b=2 method=GET\n"),
    ("/named/x", b"backend uri=/named/x method=GET h=\n"),
    ("/spa/deep/link", b"the app\n"),
])
def test_the_last_parameter_is_searched_as_a_request(srv, path, body):
    r = _get(srv, path)
    assert (r.status, r.body) == (200, body), r


def test_the_method_and_fields_go_along(srv):
    r = _get(srv, "/missing", method="POST")
    assert (r.status, r.body) == (200, b"php uri=/index.php args= method=POST\n")
    r = _get(srv, "/named/y", method="DELETE", headers=[("X-Probe", "p1")])
    assert (r.status, r.body) == (200, b"backend uri=/named/y method=DELETE h=p1\n")


def test_a_redirect_that_never_ends_is_a_500(srv):
    assert _get(srv, "/loop/start").status == 500
    assert "rewrite or internal redirection cycle" in srv.error_log()
    assert _get(srv, "/present.txt").status == 200  # the server goes on


def test_a_code_answers_as_is(srv):
    assert _get(srv, "/code/none").status == 418


def test_a_found_entry_is_still_get_and_head_only(srv):
    assert _get(srv, "/present.txt", method="POST").status == 405
