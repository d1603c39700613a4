"""`rewrite REGEX REPLACEMENT [last|break|redirect|permanent]` (nginx's ngx_http_rewrite_module): at server
level before the location is chosen, at location level with `last` (search the location again), `break` (stay
in the location with the new URI), no flag (go on with the next directive, then search again); $1..$9 and named
groups in REPLACEMENT; the request's arguments kept, dropped by a final `?`, or appended after REPLACEMENT's own;
redirects (`redirect`, `permanent`, a URL), with the arguments; what proxy_pass sends upstream after a
rewrite (the new URI; after `break` the whole of it, proxy_pass's own URI ignored); the limit of 10 URI changes (500 and nginx's
error line); the configuration errors.

Runs against nginx too (SUT=nginx): the same config, the same answers.
"""
from __future__ import annotations

import pytest

import sut


def _echo_target(head: bytes) -> bytes:
    target = head.split(b"\r\n", 1)[0].split(b" ")[1]
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(target), target)


@pytest.fixture(scope="module")
def origin():
    o = sut.AnsweringOrigin(_echo_target)
    yield o
    o.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory, origin):
    work = tmp_path_factory.mktemp("rewrite")
    www = work / "www"
    (www / "new").mkdir(parents=True)
    (www / "new" / "file.txt").write_text("new file\n")
    port = sut.free_port()
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        rewrite ^/srv-old/(.*)$ /srv-new/$1;
        rewrite ^/srv-last/(.*)$ /srv-new/last-$1 last;
        rewrite ^/srv-break/(.*)$ /srv-new/break-$1 break;
        rewrite ^/srv-break/ /never-reached;
        location /srv-new/ {{ return 200 "srv-new uri=$uri args=$args\\n"; }}

        location /echo/ {{ return 200 "uri=$uri args=$args is_args=$is_args\\n"; }}
        location /cap/ {{ return 200 "uri=$uri 1=$1 2=$2\\n"; }}

        location /last/ {{ rewrite ^/last/(\\w+)/(\\w+)$ /echo/$2/$1 last; return 200 "not reached\\n"; }}
        location /noflag/ {{ rewrite ^/noflag/(.*)$ /echo/$1; return 200 "went on: uri=$uri 1=$1\\n"; }}
        location /noflag-search/ {{ rewrite ^/noflag-search/(.*)$ /echo/$1; }}
        location /nomatch/ {{ rewrite ^/nomatch/only-this$ /echo/x last; return 200 "no match: uri=$uri\\n"; }}
        location /break/ {{ rewrite ^/break/(.*)$ /new/$1 break; return 403; }}
        location /twice/ {{ rewrite ^/twice/(.*)$ /step/$1; rewrite ^/step/(.*)$ /echo/$1-twice last; }}
        location /named/ {{ rewrite "^/named/(?<id>[0-9]+)/(?<rest>.*)$" /cap/id-$id/$rest last; }}
        location /chain/ {{ rewrite ^/chain/a$ /chain/b last; rewrite ^/chain/b$ /chain/c last;
                             rewrite ^/chain/c$ /echo/chained last; }}
        location /outer/ {{
            rewrite ^ /echo/outer last;
            location /outer/inner/ {{ return 200 "inner $uri\\n"; }}
        }}
        location /keepcap/ {{ rewrite ^/keepcap/(.*)$ /cap/$1 last; }}
        location /loop/ {{ rewrite ^/loop/(.*)$ /loop/$1 last; }}

        location /args/ {{
            rewrite ^/args/keep$ /echo/keep last;
            rewrite ^/args/drop$ /echo/drop? last;
            rewrite ^/args/own$ /echo/own?b=2 last;
            rewrite ^/args/own-only$ /echo/own?b=2? last;
        }}

        location /api/ {{ rewrite ^/api/(.*)$ /v2/$1 break; proxy_pass http://127.0.0.1:{origin.port}; }}
        location /apiu/ {{ rewrite ^/apiu/(.*)$ /v3/$1 break; proxy_pass http://127.0.0.1:{origin.port}/ignored/; }}
        location /to-up/ {{ rewrite ^/to-up/(.*)$ /up/$1 last; }}
        location /up/ {{ proxy_pass http://127.0.0.1:{origin.port}/base/; }}
        location /raw/ {{ proxy_pass http://127.0.0.1:{origin.port}; }}
        location /ifpass/ {{ if ($arg_o) {{ proxy_pass http://127.0.0.1:{origin.port}; }} }}
        location /ifpass-return/ {{ if ($arg_o) {{ proxy_pass http://127.0.0.1:{origin.port}; }} return 200 "local\\n"; }}

        location /search/ {{ rewrite ^/search/(.*)$ /echo/x?q=$1 last; }}
        location /search-redir/ {{ rewrite ^/search-redir/(.*)$ /echo/$1?q=$1 redirect; }}
        location /redir/ {{ rewrite ^/redir/(.*)$ /echo/$1 redirect; }}
        location /perm/ {{ rewrite ^/perm/(.*)$ /echo/$1 permanent; }}
        location /url/ {{ rewrite ^/url/(.*)$ http://example.com/$1; }}
        location /redir-own/ {{ rewrite ^/redir-own/(.*)$ /echo/$1?b=2 permanent; }}
        location /redir-drop/ {{ rewrite ^ /echo/dropped? redirect; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0


def _get(srv, path: str) -> sut.Response:
    return sut.request(srv.port, "GET", path)


@pytest.mark.parametrize("path, body", [
    # server level: no flag, last and break all go on to the location of the final URI
    ("/srv-old/x?a=1", b"srv-new uri=/srv-new/x args=a=1\n"),
    ("/srv-last/x", b"srv-new uri=/srv-new/last-x args=\n"),
    ("/srv-break/x", b"srv-new uri=/srv-new/break-x args=\n"),
    # location level
    ("/last/one/two", b"uri=/echo/two/one args= is_args=\n"),
    ("/noflag/abc", b"went on: uri=/echo/abc 1=abc\n"),
    ("/noflag-search/abc", b"uri=/echo/abc args= is_args=\n"),
    ("/nomatch/other", b"no match: uri=/nomatch/other\n"),
    ("/twice/z", b"uri=/echo/z-twice args= is_args=\n"),
    ("/named/42/more/path", b"uri=/cap/id-42/more/path 1=42 2=more/path\n"),
    ("/chain/a", b"uri=/echo/chained args= is_args=\n"),
    # a location's rewrite directives are not inherited by the locations inside it
    ("/outer/x", b"uri=/echo/outer args= is_args=\n"),
    ("/outer/inner/x", b"inner /outer/inner/x\n"),
    # a prefix location keeps the captures of the rewrite that led there (nginx)
    ("/keepcap/x/y", b"uri=/cap/x/y 1=x/y 2=\n"),
    # the request's arguments: kept, dropped by a last `?`, after REPLACEMENT's own
    ("/args/keep?a=1", b"uri=/echo/keep args=a=1 is_args=?\n"),
    ("/args/drop?a=1", b"uri=/echo/drop args= is_args=\n"),
    ("/args/own?a=1", b"uri=/echo/own args=b=2&a=1 is_args=?\n"),
    ("/args/own", b"uri=/echo/own args=b=2 is_args=?\n"),
    ("/args/own-only?a=1", b"uri=/echo/own args=b=2 is_args=?\n"),
    # a capture in the arguments is escaped when the request's path was percent-encoded or held a '+'
    ("/search/a%26b", b"uri=/echo/x args=q=a%26b is_args=?\n"),
    ("/search/a%20b", b"uri=/echo/x args=q=a%20b is_args=?\n"),
    ("/search/a+b", b"uri=/echo/x args=q=a%2Bb is_args=?\n"),
    ("/search/a&b", b"uri=/echo/x args=q=a&b is_args=?\n"),
    ("/search/a%3Fb", b"uri=/echo/x args=q=a%3Fb is_args=?\n"),
])
def test_internal_rewrites(srv, path, body):
    resp = _get(srv, path)
    assert (resp.status, resp.body) == (200, body), resp


def test_head_through_a_rewrite(srv):
    resp = sut.request(srv.port, "HEAD", "/perm/y")
    assert (resp.status, resp.body) == (301, b""), resp
    assert resp.header("Location").endswith("/echo/y"), resp
    resp = sut.request(srv.port, "HEAD", "/break/file.txt")
    assert (resp.status, resp.header("Content-Length"), resp.body) == (200, "9", b""), resp


def test_break_stays_in_the_location_with_the_new_uri(srv):
    """`break`: the directives after it do not run and no other location is searched: the static handler of
    /break/ serves root + the new URI."""
    resp = _get(srv, "/break/file.txt")
    assert (resp.status, resp.body) == (200, b"new file\n"), resp


@pytest.mark.parametrize("path, target", [
    ("/api/users?id=1", b"/v2/users?id=1"),         # break: the new URI goes upstream
    ("/api/a%20b", b"/v2/a%20b"),                  # escaped again
    ("/apiu/a?x=1", b"/v3/a?x=1"),                 # break: proxy_pass's URI is ignored (nginx)
    ("/to-up/x?q=1", b"/base/x?q=1"),              # last: the new location's prefix is replaced
    ("/raw/a%41b?x=%20", b"/raw/a%41b?x=%20"),     # unchanged: the request's own target, as received
])
def test_what_goes_upstream_after_a_rewrite(srv, path, target):
    resp = _get(srv, path)
    assert (resp.status, resp.body) == (200, target), resp


def test_proxy_pass_inside_if(srv):
    """An `if` block's own proxy_pass serves the request when the condition holds; a `return` after the block
    still runs (the enclosing location's directives go on after it, as in nginx)."""
    assert (_get(srv, "/ifpass/x?o=1").body, _get(srv, "/ifpass/x").status) == (b"/ifpass/x?o=1", 404)
    assert _get(srv, "/ifpass-return/x?o=1").body == b"local\n"


@pytest.mark.parametrize("path, status, location", [
    ("/redir/x", 302, "/echo/x"),
    ("/redir/x?a=1", 302, "/echo/x?a=1"),
    ("/perm/y", 301, "/echo/y"),
    ("/url/some/where?q=1", 302, "http://example.com/some/where?q=1"),
    ("/redir-own/z?a=1", 301, "/echo/z?b=2&a=1"),
    ("/redir-drop/z?a=1", 302, "/echo/dropped"),
    ("/search-redir/a%26b", 302, "/echo/a&b?q=a%26b"),
    ("/search-redir/a%20b", 302, "/echo/a%20b?q=a%20b"),
])
def test_redirects(srv, path, status, location):
    resp = _get(srv, path)
    assert resp.status == status, resp
    got = resp.header("Location")
    if location.startswith("http://"):
        assert got == location, resp
    else:
        # nginx makes a relative redirect absolute (absolute_redirect on), kosoku sends it as written (as its
        # `return`): the path part is what is compared
        assert got is not None and got.endswith(location), resp


def test_pipelined_requests_through_rewrites(srv):
    """On one connection: a POST whose body a rewrite's redirect never reads, then requests that rewrite (last,
    break to a file, no flag): each answered in order, the connection kept."""
    data = (sut.build_request("POST", "/redir/x", body=b"abc", close=False)
            + sut.build_request("GET", "/last/one/two", close=False)
            + sut.build_request("GET", "/break/file.txt", close=False)
            + sut.build_request("GET", "/noflag-search/z"))
    ex = sut.exchange(srv.port, data, ["POST", "GET", "GET", "GET"])
    got = [(r.status, r.body if r.status == 200 else b"") for r in ex.finals]
    assert got == [(302, b""), (200, b"uri=/echo/two/one args= is_args=\n"), (200, b"new file\n"),
                   (200, b"uri=/echo/z args= is_args=\n")], ex.finals


def test_rewrite_cycle_is_a_500_with_nginx_error_line(srv):
    resp = _get(srv, "/loop/x")
    assert resp.status == 500, resp
    # the server keeps serving
    assert _get(srv, "/chain/a").status == 200
    assert 'rewrite or internal redirection cycle while processing "/loop/x"' in srv.error_log()


def _check(tmp_path, name: str, body: str) -> tuple[int, str, sut.ServerProcess]:
    p = sut.ServerProcess(sut.SUT, tmp_path / name, body, [])
    return *p.config_check_output(), p


@pytest.mark.parametrize("directive, message", [
    ("rewrite ^/a /b sideways;", 'invalid parameter "sideways"'),
    ("rewrite ^/a;", 'invalid number of arguments in "rewrite" directive'),
    ("rewrite ^/a /b last extra;", 'invalid number of arguments in "rewrite" directive'),
])
def test_configuration_errors(tmp_path, directive, message):
    code, msg, p = _check(tmp_path, "bad", f"    server {{\n        location / {{\n            {directive}\n"
                                           f"        }}\n    }}\n")
    assert code != 0 and message in msg, msg
    if sut.SUT == "kosoku":
        assert f"{p.conf_path}:{p.line_of(directive)}:" in msg, msg


def test_bad_regex_is_a_configuration_error(tmp_path):
    code, msg, p = _check(tmp_path, "re", '    server {\n        rewrite "^/(a" /b;\n    }\n')
    assert code != 0, msg
    if sut.SUT == "kosoku":
        line = p.line_of("rewrite")
        assert f'{p.conf_path}:{line}:17: invalid regular expression "^/(a": missing ): ^/(a' in msg, msg
