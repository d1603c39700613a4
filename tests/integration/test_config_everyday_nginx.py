"""Directives that real nginx configuration files carry in their main, events and http parts, and what
`-t` and the start do with them: nginx's internal tuning accepted with a notice naming each, `server_tokens`,
`pid`, `-t` opening the error log as the start does, and the parse errors a new user meets first.

Runs against nginx too (SUT=nginx), but for the few refusals only kosoku words its own way.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import sut

# Main and events directives of nginx's own process management: nginx accepts them all; kosoku accepts them
# with a notice. `user`, `daemon` and `master_process` are written only for kosoku (the harness gives nginx
# its own `user` and `-g 'daemon off;'`), as is `worker_aio_requests` (Debian's nginx is built without file AIO).
MAIN_BOTH = ["worker_rlimit_core 1m;", "worker_priority 0;", "timer_resolution 100ms;", "pcre_jit on;",
             "lock_file logs-lock;"]
MAIN_KOSOKU = ["user www-data;", "daemon off;", "master_process on;"]
EVENTS_BOTH = ["multi_accept on;", "use epoll;", "accept_mutex off;", "accept_mutex_delay 100ms;"]
EVENTS_KOSOKU = ["worker_aio_requests 32;"]
HTTP_BOTH = ["types_hash_max_size 2048;", "types_hash_bucket_size 64;", "server_names_hash_max_size 1024;",
             "server_names_hash_bucket_size 64;", "variables_hash_max_size 1024;",
             "variables_hash_bucket_size 64;", "map_hash_max_size 2048;", "map_hash_bucket_size 64;",
             "proxy_headers_hash_max_size 512;", "proxy_headers_hash_bucket_size 64;",
             "reset_timedout_connection on;", "output_buffers 2 32k;", "postpone_output 1460;", "read_ahead 0;",
             "open_log_file_cache off;"]


def _with_main(conf: str, main: list[str], events: list[str]) -> str:
    """`conf` (sut.render_config's text) with `main` lines first and `events` lines inside its events block."""
    conf = conf.replace("events {\n", "events {\n" + "".join(f"    {e}\n" for e in events), 1)
    return "".join(f"{m}\n" for m in main) + conf


def _server(tmp_path: Path, http_body: str, main: list[str] = (), events: list[str] = (),
            port: int | None = None) -> sut.ServerProcess:
    srv = sut.ServerProcess(sut.SUT, tmp_path / "srv", http_body, [port] if port else [])
    srv.conf_text = _with_main(srv.conf_text, list(main), list(events))
    srv.conf_path.write_text(srv.conf_text)
    return srv


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


def _version_token() -> str:
    """`kosoku/0.1.0` or `nginx/1.22.1`, as the binary's -v prints it."""
    p = subprocess.run([sut.sut_bin(), "-v"], capture_output=True, text=True, timeout=10)
    m = re.search(r"version: (\S+)", p.stdout + p.stderr)
    assert m, p
    return m.group(1)


def test_internal_tuning_directives_are_accepted_each_with_a_notice(tmp_path):
    port = sut.free_port()
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("hello\n")
    body = "\n".join(f"    {h}" for h in HTTP_BOTH) + f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location / {{ output_buffers 1 64k; reset_timedout_connection off; }}
    }}"""
    kosoku = sut.SUT == "kosoku"
    srv = _server(tmp_path, body, MAIN_BOTH + (MAIN_KOSOKU if kosoku else []),
                  EVENTS_BOTH + (EVENTS_KOSOKU if kosoku else []), port)
    (srv.workdir / "logs-lock").touch()
    r = srv.check_config()
    err = r.stderr.decode()
    assert r.returncode == 0, err
    if kosoku:
        for d in MAIN_BOTH + MAIN_KOSOKU + EVENTS_BOTH + EVENTS_KOSOKU + HTTP_BOTH:
            name = d.split()[0]
            line = _line_of(srv.conf_text, d)
            want = f'[notice] {srv.conf_path}:{line}:'
            hits = [l for l in err.split("\n") if want in l and f'"{name}" directive has no effect in kosoku: ' in l]
            assert len(hits) == 1, (name, line, err)
        assert err.count("has no effect in kosoku") == len(MAIN_BOTH + MAIN_KOSOKU + EVENTS_BOTH + EVENTS_KOSOKU
                                                           + HTTP_BOTH) + 2, err  # + the location's two
        assert "[warn]" not in err and "[emerg]" not in err, err
    srv.start()
    try:
        resp = sut.request(port, "GET", "/index.html")
        assert resp.status == 200 and resp.body == b"hello\n"
    finally:
        assert srv.stop() == 0


def test_server_tokens_sign_the_server_field_and_error_pages(tmp_path):
    port = sut.free_port()
    www = tmp_path / "www"
    (www / "off").mkdir(parents=True)
    srv = _server(tmp_path, f"""
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location /off/ {{ server_tokens off; }}
        location /build/ {{ server_tokens build; }}
    }}""", port=port)
    srv.start()
    try:
        token = _version_token()
        bare = token.split("/")[0]
        for path, want in (("/missing", token), ("/build/missing", token), ("/off/missing", bare)):
            resp = sut.request(port, "GET", path)
            assert resp.status == 404, path
            assert resp.header("Server") == want, (path, resp)
            assert f"<hr><center>{want}</center>".encode() in resp.body, (path, resp.body)
            assert int(resp.header("Content-Length")) == len(resp.body)
    finally:
        assert srv.stop() == 0


def test_server_tokens_value_is_checked(tmp_path):
    srv = _server(tmp_path, f"    server_tokens maybe;\n    server {{ listen 127.0.0.1:{sut.free_port()}; }}")
    r = srv.check_config()
    assert r.returncode != 0
    assert 'invalid value "maybe" in ' in r.stderr.decode(), r.stderr  # nginx names the file, kosoku the directive


def test_pid_file_holds_the_pid_while_running_and_is_removed_at_exit(tmp_path):
    port = sut.free_port()
    kosoku = sut.SUT == "kosoku"
    pid_file = tmp_path / "srv" / ("kosoku.pid" if kosoku else "nginx.pid")  # the harness gives nginx its own
    srv = _server(tmp_path, f"    server {{ listen 127.0.0.1:{port}; return 204; }}",
                  main=[f"pid {pid_file};"] if kosoku else [], port=port)
    srv.start()
    try:
        assert pid_file.read_text() == f"{srv.proc.pid}\n"
    finally:
        assert srv.stop() == 0
    assert not pid_file.exists()


def test_pid_file_that_cannot_be_written_stops_the_start(tmp_path):
    sut.nginx_deviation("the harness's nginx config already names its own pid file")
    port = sut.free_port()
    srv = _server(tmp_path, f"    server {{ listen 127.0.0.1:{port}; }}", main=[f"pid {tmp_path}/no/such/dir/k.pid;"])
    p = subprocess.run(srv.argv(), cwd=srv.workdir, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert f'[emerg] open() "{tmp_path}/no/such/dir/k.pid" failed (2: No such file or directory)' in p.stderr


def test_config_test_opens_the_error_log_as_the_start_does(tmp_path):
    srv = _server(tmp_path, f"    server {{ listen 127.0.0.1:{sut.free_port()}; }}")
    missing = tmp_path / "no-such-dir" / "error.log"
    srv.conf_text = re.sub(r"error_log \S+", f"error_log {missing}", srv.conf_text)
    srv.conf_path.write_text(srv.conf_text)
    r = srv.check_config()
    assert r.returncode != 0
    assert f'open() "{missing}" failed (2: No such file or directory)' in r.stderr.decode(), r.stderr
    # A log that can be opened is created by the test, as by the start.
    ok = tmp_path / "error-ok.log"
    srv.conf_text = srv.conf_text.replace(str(missing), str(ok))
    srv.conf_path.write_text(srv.conf_text)
    r = srv.check_config()
    assert r.returncode == 0, r.stderr
    assert ok.exists()


def test_missing_opening_brace_names_the_directive(tmp_path):
    srv = _server(tmp_path, f"""    server {{
        listen 127.0.0.1:{sut.free_port()};
        location /x
            root /tmp;
        }}
    }}""")
    r = srv.check_config()
    err = r.stderr.decode()
    assert r.returncode != 0
    assert 'directive "location" has no opening "{"' in err, err
    line = _line_of(srv.conf_text, "location /x")
    # nginx names the line where the directive's `;` ends it, kosoku where the directive starts.
    assert re.search(rf"{re.escape(str(srv.conf_path))}:({line}|{line + 1})\b", err), err


@pytest.mark.parametrize("line, message", [
    ("load_module modules/ngx_stream_module.so;",
     'load_module "modules/ngx_stream_module.so": kosoku has no dynamic modules'),
    ("stream {\n}", 'the "stream" block is not supported: kosoku serves HTTP only (TCP/UDP proxying'),
    ("mail {\n}", 'the "mail" block is not supported: kosoku serves HTTP only (mail proxying'),
])
def test_what_kosoku_does_not_have_is_refused_saying_so(tmp_path, line, message):
    sut.nginx_deviation("nginx loads dynamic modules and has stream and mail")
    srv = _server(tmp_path, f"    server {{ listen 127.0.0.1:{sut.free_port()}; }}", main=[line])
    r = srv.check_config()
    assert r.returncode == 1
    assert f"[emerg] {srv.conf_path}:1:" in r.stderr.decode() and message in r.stderr.decode(), r.stderr


def test_proxy_pass_to_a_unix_socket_is_refused_saying_so(tmp_path):
    sut.nginx_deviation("nginx proxies to unix domain sockets")
    srv = _server(tmp_path, f"""    server {{
        listen 127.0.0.1:{sut.free_port()};
        location / {{ proxy_pass http://unix:/tmp/app.sock; }}
    }}""")
    r = srv.check_config()
    assert r.returncode == 1
    assert 'unix domain sockets are not supported in "proxy_pass"' in r.stderr.decode(), r.stderr


def test_stub_status_is_nginx_s_page_byte_for_byte(tmp_path):
    port = sut.free_port()
    srv = _server(tmp_path, f"""    server {{
        listen 127.0.0.1:{port};
        location = /basic_status {{ stub_status; }}
        location = /old_form {{ stub_status on; }}
    }}""", port=port)
    srv.start()
    try:
        with sut.Conn(port) as c:  # the harness's start probe connected once: count from there
            base = None
            for n, path in enumerate(("/basic_status", "/old_form")):
                c.send(sut.build_request("GET", path, close=False))
                resp = c.read_response()
                assert resp.status == 200 and resp.header("Content-Type") == "text/plain", resp
                assert not resp.has("Cache-Control")
                m = re.fullmatch(rb"Active connections: (\d+) \nserver accepts handled requests\n (\d+) (\d+) (\d+) \n"
                                 rb"Reading: 0 Writing: 1 Waiting: (\d+) \n", resp.body)
                assert m, resp.body
                active, accepts, handled, requests, waiting = (int(g) for g in m.groups())
                # Ours is the one writing; the harness's start probe may not be closed yet on its core.
                assert accepts == handled and active == 1 + waiting and waiting <= 1, resp.body
                if base is None:
                    base = (accepts, requests)
                assert (accepts, requests) == (base[0], base[1] + n), resp.body  # same connection, one more request
    finally:
        assert srv.stop() == 0


def test_block_directive_names_are_data_inside_map_and_split_clients(tmp_path):
    """The parser names a block directive ended by `;` (`location /x;`), but inside a block of data lines a
    first word such as `http` or `location` is a key, not a directive."""
    port = sut.free_port()
    srv = _server(tmp_path, f"""    map $arg_k $v {{
        http      80;
        location  loc;
        events    ev;
        default   none;
    }}
    split_clients "$arg_k" $bucket {{
        100%      http;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "$v $bucket\\n"; }}
    }}""", port=port)
    srv.start()
    try:
        for k, want in (("http", b"80 http\n"), ("location", b"loc http\n"), ("events", b"ev http\n"),
                        ("other", b"none http\n")):
            resp = sut.request(port, "GET", f"/?k={k}")
            assert (resp.status, resp.body) == (200, want), (k, resp)
    finally:
        assert srv.stop() == 0


def test_log_not_found_off_keeps_missing_files_out_of_the_error_log(tmp_path):
    port = sut.free_port()
    www = tmp_path / "www"
    (www / "quiet").mkdir(parents=True)
    (www / "loud").mkdir()
    srv = _server(tmp_path, f"""    server {{
        listen 127.0.0.1:{port};
        root {www};
        location /quiet/ {{ log_not_found off; }}
    }}""", port=port)
    srv.start()
    try:
        for path in ("/quiet/missing-a", "/loud/missing-b"):
            assert sut.request(port, "GET", path).status == 404
    finally:
        assert srv.stop() == 0
    log = srv.error_log()
    assert f'open() "{www}/loud/missing-b" failed (2: No such file or directory)' in log, log
    assert "missing-a" not in log, log
