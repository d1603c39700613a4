"""`set`, `if` and `break` (nginx's ngx_http_rewrite_module): variables given values in file order (a value may
use other variables and the variable itself), named anywhere in the file (before the `set` too), empty until set
(with nginx's warning); the rewrite directives of
a block run in one list, interleaved, a server's before any location is chosen; `if` conditions `($var)`,
`=`, `!=`, `~`, `~*`, `!~`, `!~*` with their captures as $1..$9 and named groups; `break` stopping the list;
`rewrite_log`; the configuration errors.

A location's `if` with other directives (add_header, root ...) is a location of its own, as nginx's.

Runs against nginx too (SUT=nginx), but for what kosoku refuses at load that nginx has (file tests, and an `if`
block with location directives that would need the enclosing location's content handler).
"""
from __future__ import annotations

import time

import pytest

import sut


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("set_if")
    www = work / "www"
    (www / "brk").mkdir(parents=True)
    (www / "brk" / "index.html").write_text("brk index\n")
    for d, text in (("ifstatic", "ifstatic\n"), ("ifroot", "main root\n"), ("alt/ifroot", "alt root\n")):
        (www / d).mkdir(parents=True)
        (www / d / "index.html").write_text(text)
    port = sut.free_port()
    conf = f"""
    log_format setvars '$uri lv=[$logged]';
    access_log {work}/access.log setvars;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        rewrite_log on;
        set $srv_var "server-$host";
        if ($http_x_block) {{ return 403; }}
        if ($arg_tag) {{ set $tagged "tag=$arg_tag"; }}
        if ($arg_go = srv) {{ rewrite ^ /echo/from-server-if? last; }}

        location /echo/ {{ return 200 "uri=$uri args=$args\\n"; }}
        location /set/ {{
            set $a "A";
            set $b "$a-B-$uri";
            set $a "${{a}}2";
            return 200 "a=$a b=$b srv=$srv_var tagged=$tagged\\n";
        }}
        location /logvar/ {{ set $logged "lv-$arg_x"; return 204; }}
        location /early/ {{ add_header X-Early "[$early]" always; set $early "e-$arg_x"; return 200 "[$early]\\n"; }}
        location /decl/ {{ set $never "x"; return 204; }}
        location /unset/ {{ return 200 "[$never]\\n"; }}
        location /order/ {{
            set $x 1;
            if ($arg_a) {{ set $x 2; }}
            set $y "y$x";
            if ($arg_b) {{ return 200 "early x=$x y=$y\\n"; }}
            set $y "$y-after";
            return 200 "x=$x y=$y\\n";
        }}
        location /brk/ {{
            set $v before;
            if ($arg_stop) {{ break; }}
            set $v after;
            add_header X-V $v always;
            return 200 "v=$v\\n";
        }}
        location /cors/ {{
            if ($request_method = OPTIONS) {{ add_header X-Cors preflight always; return 204; }}
            add_header X-Cors normal always;
            return 200 "get\\n";
        }}
        location /ifstatic/ {{ add_header X-Outer outer; if ($arg_v) {{ add_header X-If yes; }} }}
        location /ifroot/ {{ if ($arg_alt) {{ root {www}/alt; }} }}
        location /brk-rewrite/ {{ rewrite ^ /echo/never last; }}
        location = /c/true {{ if ($arg_v) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/eq {{ if ($arg_v = abc) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/ne {{ if ($arg_v != abc) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/eqvar {{ if ( $arg_v = "w-$arg_w" ) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/re {{ if ($http_user_agent ~ ^Mozilla/([0-9]+)) {{ return 200 "moz $1\\n"; }} return 200 "no\\n"; }}
        location = /c/rei {{ if ($http_user_agent ~* ^mozilla) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/nre {{ if ($arg_v !~ ^[0-9]+$) {{ return 200 "not a number\\n"; }} return 200 "number\\n"; }}
        location = /c/nrei {{ if ($arg_v !~* ^ab$) {{ return 200 "yes\\n"; }} return 200 "no\\n"; }}
        location = /c/named {{
            if ($arg_v ~ "^(?<word>[a-z]+)-(?<num>[0-9]+)$") {{ return 200 "$word $num\\n"; }}
            return 200 "no\\n";
        }}
        location /ifrw/ {{ if ($arg_old) {{ rewrite ^/ifrw/(.*)$ /echo/$1 last; }} return 200 "kept $uri\\n"; }}
        location /ifcap/ {{ if ($arg_p ~ ^(\\w+)$) {{ set $p $1; rewrite ^ /echo/$p? last; }} return 200 "none\\n"; }}
        location /ifcap-gone/ {{ if ($arg_p ~ ^(\\w+)$) {{ rewrite ^ /echo/$1? last; }} }}
        location /logged/ {{ rewrite ^/logged/(.*)$ /echo/$1 last; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    s.access_log = work / "access.log"
    yield s
    assert s.stop() == 0


def _get(srv, path: str, headers=()) -> sut.Response:
    return sut.request(srv.port, "GET", path, headers=headers)


@pytest.mark.parametrize("path, body", [
    ("/set/p", b"a=A2 b=A-B-/set/p srv=server-static.example.com tagged=\n"),
    ("/set/p?tag=t1", b"a=A2 b=A-B-/set/p srv=server-static.example.com tagged=tag=t1\n"),
    ("/order/", b"x=1 y=y1-after\n"),
    ("/order/?a=1", b"x=2 y=y2-after\n"),
    ("/order/?a=1&b=1", b"early x=2 y=y2\n"),
    ("/x?go=srv", b"uri=/echo/from-server-if args=\n"),
])
def test_set_values_in_file_order(srv, path, body):
    resp = _get(srv, path)
    assert (resp.status, resp.body) == (200, body), resp


def test_variable_named_before_its_set(srv):
    """A template may name a `set` variable before the `set` (an add_header above it, a log_format in http)."""
    resp = _get(srv, "/early/?x=1")
    assert (resp.status, resp.body, resp.header("X-Early")) == (200, b"[e-1]\n", "[e-1]"), resp
    assert _get(srv, "/logvar/?x=7").status == 204
    deadline = time.monotonic() + 3 * sut.SLOWDOWN
    while "/logvar/ lv=[lv-7]" not in srv.access_log.read_text():
        assert time.monotonic() < deadline, srv.access_log.read_text()
        time.sleep(0.05)


def test_unset_variable_is_empty_with_a_warning(srv):
    resp = _get(srv, "/unset/")
    assert (resp.status, resp.body) == (200, b"[]\n"), resp
    assert 'using uninitialized "never" variable' in srv.error_log()


def test_server_level_if(srv):
    resp = _get(srv, "/set/p", headers=[("X-Block", "1")])
    assert resp.status == 403, resp
    resp = _get(srv, "/set/p", headers=[("X-Block", "0")])  # "0" is false
    assert resp.status == 200, resp


def test_break_stops_the_directives(srv):
    resp = _get(srv, "/brk/")
    assert (resp.status, resp.body, resp.header("X-V")) == (200, b"v=after\n", "after"), resp
    # break: neither the later `set` nor `return` runs; the location's static content answers
    resp = _get(srv, "/brk/?stop=1")
    assert (resp.status, resp.body) == (200, b"brk index\n"), resp


@pytest.mark.parametrize("path, headers, body", [
    ("/c/true?v=1", [], b"yes\n"),
    ("/c/true?v=abc", [], b"yes\n"),
    ("/c/true?v=0", [], b"no\n"),
    ("/c/true?v=", [], b"no\n"),
    ("/c/true", [], b"no\n"),
    ("/c/eq?v=abc", [], b"yes\n"),
    ("/c/eq?v=ABC", [], b"no\n"),
    ("/c/ne?v=abc", [], b"no\n"),
    ("/c/ne?v=x", [], b"yes\n"),
    ("/c/eqvar?v=w-q&w=q", [], b"yes\n"),
    ("/c/eqvar?v=w-q&w=r", [], b"no\n"),
    ("/c/re", [("User-Agent", "Mozilla/5.0 (X11)")], b"moz 5\n"),
    ("/c/re", [("User-Agent", "mozilla/5.0")], b"no\n"),
    ("/c/rei", [("User-Agent", "MOZILLA/4")], b"yes\n"),
    ("/c/rei", [("User-Agent", "curl/8")], b"no\n"),
    ("/c/nre?v=123", [], b"number\n"),
    ("/c/nre?v=12a", [], b"not a number\n"),
    ("/c/nrei?v=AB", [], b"no\n"),
    ("/c/nrei?v=abc", [], b"yes\n"),
    ("/c/named?v=abc-42", [], b"abc 42\n"),
    ("/c/named?v=abc", [], b"no\n"),
    ("/ifrw/p?old=1", [], b"uri=/echo/p args=old=1\n"),
    ("/ifrw/p", [], b"kept /ifrw/p\n"),
    ("/ifcap/?p=hello", [], b"uri=/echo/hello args=\n"),
    ("/ifcap/?p=a-b", [], b"none\n"),
    ("/ifcap-gone/?p=hello", [], b"uri=/echo/ args=\n"),  # the groupless `^` left no $1 (nginx)
])
def test_if_conditions(srv, path, headers, body):
    resp = _get(srv, path, headers=headers)
    assert (resp.status, resp.body) == (200, body), resp


def test_location_directives_inside_if(srv):
    """A location's `if` block with other directives is a location of its own, merged from the enclosing one:
    its add_header list replaces the enclosing one's, its root serves the files; when the condition does not
    hold, the enclosing location's."""
    resp = sut.request(srv.port, "OPTIONS", "/cors/")
    assert (resp.status, resp.header_list("X-Cors")) == (204, ["preflight"]), resp
    resp = _get(srv, "/cors/")
    assert (resp.status, resp.body, resp.header_list("X-Cors")) == (200, b"get\n", ["normal"]), resp
    resp = _get(srv, "/ifstatic/")
    assert (resp.status, resp.body, resp.header("X-Outer"), resp.header("X-If")) == (200, b"ifstatic\n", "outer", None)
    resp = _get(srv, "/ifstatic/?v=1")
    assert (resp.status, resp.body, resp.header("X-Outer"), resp.header("X-If")) == (200, b"ifstatic\n", None, "yes")
    assert _get(srv, "/ifroot/").body == b"main root\n"
    assert _get(srv, "/ifroot/?alt=1").body == b"alt root\n"


def test_rewrite_log(srv):
    """rewrite_log (here the server's, inherited): rewrite and `if` regexes, matching or not, at `notice`."""
    assert _get(srv, "/logged/a").body == b"uri=/echo/a args=\n"
    assert _get(srv, "/c/nre?v=12a").body == b"not a number\n"
    log = srv.error_log()
    assert '"^/logged/(.*)$" matches "/logged/a"' in log, log[-2000:]
    assert '"^[0-9]+$" does not match "12a"' in log, log[-2000:]


def _check(tmp_path, name: str, server_body: str) -> tuple[int, str, sut.ServerProcess]:
    p = sut.ServerProcess(sut.SUT, tmp_path / name, f"    server {{\n{server_body}\n    }}\n", [])
    return *p.config_check_output(), p


@pytest.mark.parametrize("line, message", [
    ("set foo bar;", 'invalid variable name "foo"'),
    ("set $uri bar;", 'the duplicate "uri" variable'),
    ("set $a;", 'invalid number of arguments in "set" directive'),
    ("if $arg_a { return 204; }", 'invalid condition "$arg_a"'),
    ("if ($arg_a x) { return 204; }", 'invalid condition "$arg_a"'),
    ("if ($arg_a ~~ x) { return 204; }", 'unexpected "~~" in condition'),
    ("if ($arg_a) { if ($arg_b) { return 204; } }", '"if" directive is not allowed here'),
    ("if ($arg_a) { location /x { } }", '"location" directive is not allowed here'),
    ("location /l { if ($arg_a) { location /l/x { } } }", '"location" directive is not allowed here'),
    ("location /l { if ($arg_a) { add_header X 1; if ($arg_b) { return 204; } } }",
     '"if" directive is not allowed here'),
    ("if ($arg_a) { add_header X 1; }", '"add_header" directive is not allowed here'),
    ("if ($arg_a) return 204;", 'directive "if" has no opening "{"'),
    ("break 1;", 'invalid number of arguments in "break" directive'),
    ("rewrite_log maybe;", 'invalid value "maybe" in "rewrite_log" directive, it must be "on" or "off"'),
])
def test_configuration_errors(tmp_path, line, message):
    code, msg, p = _check(tmp_path, "bad", f"        {line}")
    assert code != 0 and message in msg, msg
    if sut.SUT == "kosoku":
        assert f"{p.conf_path}:{p.line_of(line)}:" in msg, msg


@pytest.mark.parametrize("line, message", [
    ("if (-f $uri) { return 204; }",
     'the file test "-f" in "if" is not supported by kosoku yet (it would need the disk queue); '
     'try_files does the same check'),
    ("if (!-d $uri) { return 204; }", 'the file test "!-d" in "if" is not supported by kosoku yet'),
    ("location / { if ($arg_a) { add_header X-A 1; } proxy_pass http://127.0.0.1:9; }",
     'an "if" block with location directives in a location served by "proxy" needs a content directive of its '
     'own or a final "return" in kosoku (it would be served by "static")'),
])
def test_what_kosoku_refuses_inside_if(tmp_path, line, message):
    sut.nginx_deviation("nginx has file tests, and serves an if block with the enclosing location's handler over "
                        "the block's configuration; kosoku refuses them at load")
    code, msg, p = _check(tmp_path, "gap", f"        {line}")
    assert code != 0 and message in msg and f"{p.conf_path}:" in msg, msg
