"""`internal` (nginx's ngx_http_core_module): a location reached only by an internal redirect (error_page,
try_files) or a rewrite; a client asking for its URI itself gets a 404 (and the 404's error_page).

Runs against nginx too (SUT=nginx): the same config, the same answers.
"""
from __future__ import annotations

import pytest

import sut


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("internal")
    www = work / "www"
    www.mkdir(parents=True)
    port = sut.free_port()
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location /int/ {{ internal; return 200 "internal $uri\\n"; }}
        location /err/ {{ error_page 404 =200 /int/from-error-page; }}
        location /rw/ {{ rewrite ^ /int/from-rewrite last; }}
        location /try/ {{ try_files $uri /int/from-try-files; }}
        location /with-page/ {{ error_page 404 =200 /page-for-404; location /with-page/int/ {{ internal; }} }}
        location = /page-for-404 {{ return 200 "the 404 page\\n"; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0


def _get(srv, path: str) -> sut.Response:
    return sut.request(srv.port, "GET", path)


def test_a_client_asking_for_an_internal_location_gets_404(srv):
    assert _get(srv, "/int/x").status == 404


@pytest.mark.parametrize("path, body", [
    ("/err/missing", b"internal /int/from-error-page\n"),
    ("/rw/anything", b"internal /int/from-rewrite\n"),
    ("/try/missing", b"internal /int/from-try-files\n"),
])
def test_internal_redirects_and_rewrites_reach_it(srv, path, body):
    r = _get(srv, path)
    assert (r.status, r.body) == (200, body), r


def test_the_404_goes_through_error_page(srv):
    r = _get(srv, "/with-page/int/x")
    assert (r.status, r.body) == (200, b"the 404 page\n"), r
