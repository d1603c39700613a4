"""A TLS connection whose client stops reading near the end of a `Connection: close` response is closed within
send_timeout (plus the lingering bound), as a plain one is: the graceful close that still has plaintext to
encrypt is bounded too (core/tls/tls_stream.cc: TlsStream::close, fire). Runs against nginx too."""
import socket
import ssl
import subprocess
import time

import pytest

import sut
import tls_certs


@pytest.fixture
def server(tmp_path):
    pki = tls_certs.CA(tmp_path / "pki")
    cert = pki.leaf("a.test")
    www = tmp_path / "www"
    www.mkdir()
    (www / "big.bin").write_bytes(bytes(range(256)) * (64 << 12))  # 64 MiB
    port = sut.free_port()
    body = f"""
    send_timeout 2s;
    server {{
        listen 127.0.0.1:{port} ssl sndbuf=16k;
        ssl_certificate {cert.chain};
        ssl_certificate_key {cert.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        root {www};
    }}
"""
    s = sut.ServerProcess(sut.SUT, tmp_path / "run", body, [port])
    s.start()
    yield port
    s.stop()


def test_a_client_that_stops_reading_before_the_end_is_closed(server):
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    raw.connect(("127.0.0.1", server))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    t = ctx.wrap_socket(raw, server_hostname="a.test")
    t.sendall(b"GET /big.bin HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    want, got = (64 << 20) - 350_000, 0
    while got < want:
        got += len(t.recv(min(65536, want - got)))
    local = t.getsockname()[1]
    deadline = time.monotonic() + 45  # send_timeout 2 s + nginx's lingering_time 30 s, with room
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(["ss", "-tnH", "state", "established", f"( dport = :{local} )"], capture_output=True,
                             text=True).stdout
        state = out.strip()
        if not state:
            break
        time.sleep(0.5)
    t.close()
    assert not state, f"the server still holds the connection open: {state}"
