"""`charset` and `charset_types` (nginx's ngx_http_charset_module, labelling): "; charset=NAME" on the
Content-Type of the listed types (text/html always), from files, `return`, error pages and proxied responses,
never over a charset the response names itself; `charset off`; `charset_types *`; and the recoding
directives kosoku refuses.

Runs against nginx too (SUT=nginx): the same config, the same Content-Type.
"""
from __future__ import annotations


import pytest

import sut


def origin_answer(head: bytes) -> bytes:
    """GET /p/html → text/html; GET /p/labelled → text/html; charset=iso-8859-1; else image/png."""
    target = head.split(b" ")[1]
    ctype = {b"/p/html": b"text/html", b"/p/labelled": b"text/html; charset=iso-8859-1"}.get(target, b"image/png")
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("charset")
    www = work / "www"
    (www / "dir").mkdir(parents=True)
    (www / "page.html").write_text("<p>é</p>\n")
    (www / "notes.txt").write_text("é\n")
    (www / "pic.png").write_bytes(b"\x89PNG")
    origin = sut.AnsweringOrigin(origin_answer)
    port = sut.free_port()
    conf = f"""
    charset utf-8;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location /json/ {{ default_type application/json; return 200 x; }}
        location /all/ {{ charset_types *; default_type application/json; return 200 x; }}
        location /own/ {{ default_type "text/plain; charset=koi8-r"; return 200 x; }}
        location /off/ {{ charset off; return 200 x; }}
        location /latin/ {{ charset windows-1251; return 200 x; }}
        location /p/ {{ proxy_pass http://127.0.0.1:{origin.port}; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0
    origin.close()


@pytest.mark.parametrize("path, status, ctype", [
    ("/page.html", 200, "text/html; charset=utf-8"),
    ("/notes.txt", 200, "text/plain; charset=utf-8"),
    ("/pic.png", 200, "image/png"),
    ("/missing", 404, "text/html; charset=utf-8"),
    ("/json/", 200, "application/json"),
    ("/all/", 200, "application/json; charset=utf-8"),
    ("/own/", 200, "text/plain; charset=koi8-r"),
    ("/off/", 200, "text/plain"),
    ("/latin/", 200, "text/plain; charset=windows-1251"),
    ("/p/html", 200, "text/html; charset=utf-8"),
    ("/p/labelled", 200, "text/html; charset=iso-8859-1"),
    ("/p/image", 200, "image/png"),
])
def test_content_type_label(srv, path, status, ctype):
    resp = sut.request(srv.port, "GET", path)
    assert resp.status == status, resp
    assert resp.header_list("Content-Type") == [ctype], resp


@pytest.mark.parametrize("line, message", [
    ("charset utf-8; source_charset koi8-r;", '"source_charset" "koi8-r" differs from "charset"'),
    ("override_charset on;", '"override_charset on" is not supported'),
    ("charset $x;", 'variables in "charset" are not supported'),
])
def test_recoding_is_refused_saying_so(tmp_path, line, message):
    sut.nginx_deviation("nginx recodes between charsets and takes variables")
    s = sut.ServerProcess(sut.SUT, tmp_path, f"    {line}\n    server {{ listen 127.0.0.1:{sut.free_port()}; }}", [])
    r = s.check_config()
    assert r.returncode == 1 and message in r.stderr.decode(), r.stderr


def test_same_source_charset_is_accepted(tmp_path):
    s = sut.ServerProcess(sut.SUT, tmp_path, "    charset utf-8; source_charset utf-8; override_charset off;\n"
                          f"    server {{ listen 127.0.0.1:{sut.free_port()}; }}", [])
    r = s.check_config()
    assert r.returncode == 0, r.stderr
