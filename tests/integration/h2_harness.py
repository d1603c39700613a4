"""HTTP/2 end-to-end harness (test_http2.py, test_http2_attacks.py): a raw-frame HTTP/2 client over TCP or TLS
(ALPN h2) that builds every frame by hand (struct + hpack.Encoder), so a test can send exactly the bytes an attack
needs and see exactly the frames that come back; the docroot and certificates both modules serve.

    c = H2Raw(port, tls_ca=ca)              # TLS + ALPN h2 (or H2Raw(port) for h2c with prior knowledge)
    c.handshake()                           # preface + SETTINGS, waits for the server's SETTINGS
    r = c.get("/abc.txt")                   # one request on the next stream id: r.status, r.headers, r.body
    c.send_headers(3, [(":method", "GET"), ...], end_stream=True)
    f = c.wait(lambda f: f.type == GOAWAY)  # frames are read (and SETTINGS/PING acknowledged) until one matches

Frames the client receives are decoded as they arrive: HEADERS/CONTINUATION through one hpack.Decoder (the
connection's state), DATA is counted per stream and given back to the server with WINDOW_UPDATE unless the test
asks otherwise (auto_window=False, or a stream in `stalled`). Everything sent and received is summarised frame by
frame into sut's transcript (conftest.py prints it when a test fails).

The error codes and frame types are RFC 9113's (§6, §7).
"""
from __future__ import annotations

import os
import random
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import hpack

import sut
import tls_certs

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_NAMES = {DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM",
               SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY",
               WINDOW_UPDATE: "WINDOW_UPDATE", CONTINUATION: "CONTINUATION"}
# Flags.
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# Error codes (RFC 9113 §7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, FRAME_SIZE_ERROR, \
    REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, ENHANCE_YOUR_CALM, INADEQUATE_SECURITY, \
    HTTP_1_1_REQUIRED = range(14)
ERROR_NAMES = {v: k for k, v in dict(
    NO_ERROR=0, PROTOCOL_ERROR=1, INTERNAL_ERROR=2, FLOW_CONTROL_ERROR=3, SETTINGS_TIMEOUT=4, STREAM_CLOSED=5,
    FRAME_SIZE_ERROR=6, REFUSED_STREAM=7, CANCEL=8, COMPRESSION_ERROR=9, CONNECT_ERROR=10, ENHANCE_YOUR_CALM=11,
    INADEQUATE_SECURITY=12, HTTP_1_1_REQUIRED=13).items()}
# Settings (RFC 9113 §6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)

# Connection-specific fields that RFC 9113 §8.2.2 forbids in HTTP/2 messages.
CONNECTION_SPECIFIC = ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade")


def err_name(code: Optional[int]) -> str:
    return "none" if code is None else ERROR_NAMES.get(code, f"0x{code:x}")


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """One frame's bytes (RFC 9113 §4.1): 24-bit length, type, flags, R + 31-bit stream id, payload."""
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags, sid & 0x7FFFFFFF) + payload


def settings_frame(settings: dict[int, int] | None = None, ack: bool = False) -> bytes:
    return frame(SETTINGS, ACK if ack else 0, 0,
                 b"".join(struct.pack(">HI", k, v) for k, v in (settings or {}).items()))


def window_update_frame(sid: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", increment & 0x7FFFFFFF))


def rst_frame(sid: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def ping_frame(data: bytes = b"\0" * 8, ack: bool = False) -> bytes:
    return frame(PING, ACK if ack else 0, 0, data)


def goaway_frame(last_sid: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_sid, code) + debug)


def request_headers(path: str, authority: str = "a.test", method: str = "GET", scheme: str = "https",
                    extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    return [(":method", method), (":scheme", scheme), (":authority", authority), (":path", path)] + (extra or [])


@dataclass
class Frame:
    type: int
    flags: int
    sid: int
    payload: bytes
    headers: list[tuple[str, str]] | None = None   # decoded header block (HEADERS, after its CONTINUATIONs)

    @property
    def name(self) -> str:
        return FRAME_NAMES.get(self.type, f"type{self.type}")

    @property
    def error_code(self) -> Optional[int]:
        if self.type == RST_STREAM and len(self.payload) >= 4:
            return struct.unpack(">I", self.payload[:4])[0]
        if self.type == GOAWAY and len(self.payload) >= 8:
            return struct.unpack(">I", self.payload[4:8])[0]
        return None

    @property
    def last_sid(self) -> Optional[int]:
        return struct.unpack(">I", self.payload[:4])[0] & 0x7FFFFFFF if self.type == GOAWAY else None

    @property
    def debug_data(self) -> bytes:
        return self.payload[8:] if self.type == GOAWAY else b""

    def settings(self) -> dict[int, int]:
        assert self.type == SETTINGS
        return {k: v for k, v in (struct.unpack(">HI", self.payload[i:i + 6])
                                  for i in range(0, len(self.payload) - 5, 6))}

    def summary(self) -> str:
        s = f"{self.name} sid={self.sid} flags=0x{self.flags:x} len={len(self.payload)}"
        if self.type in (RST_STREAM, GOAWAY):
            s += f" error={err_name(self.error_code)}"
        if self.type == GOAWAY:
            s += f" last_sid={self.last_sid} debug={self.debug_data[:100]!r}"
        if self.headers is not None:
            s += f" headers={self.headers}"
        if self.type == SETTINGS and not self.flags & ACK:
            s += f" {self.settings()}"
        if self.type == WINDOW_UPDATE:
            s += f" increment={struct.unpack('>I', self.payload[:4])[0] & 0x7FFFFFFF}"
        return s


@dataclass
class Stream:
    sid: int
    headers: list[tuple[str, str]] = field(default_factory=list)   # the final response's fields
    interim: list[list[tuple[str, str]]] = field(default_factory=list)
    trailers: list[tuple[str, str]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    data_frames: list[int] = field(default_factory=list)           # payload length of each DATA frame
    ended: bool = False
    reset: Optional[int] = None                                    # RST_STREAM error code

    @property
    def status(self) -> Optional[int]:
        v = self.header(":status")
        return int(v) if v else None

    def header(self, name: str) -> Optional[str]:
        vals = [v for k, v in self.headers if k == name]
        return ", ".join(vals) if vals else None

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None


def client_ssl_context(ca: Optional[Path], alpn: list[str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if not ca:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(alpn or ["h2"])
    return ctx


class H2Raw:
    """A hand-driven HTTP/2 client connection (see the module docstring)."""

    def __init__(self, port: int, tls_ca: Optional[Path] = None, tls: bool | None = None,
                 server_name: str = "a.test", timeout: float = 10.0, rcvbuf: Optional[int] = None,
                 alpn: list[str] | None = None, record_frames: bool = True):
        self.id = next(sut._conn_ids)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)   # before connect: the window scale
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls = bool(tls_ca) if tls is None else tls
        if self.tls:
            s = client_ssl_context(tls_ca, alpn).wrap_socket(s, server_hostname=server_name)
            self.alpn = s.selected_alpn_protocol()
        else:
            self.alpn = None
        self.sock = s
        self.scheme = "https" if self.tls else "http"
        self.authority = server_name
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 30     # the client imposes no limit of its own
        self.decoder.max_allowed_table_size = 1 << 16
        self.buf = bytearray()
        self.frames: list[Frame] = []          # every frame received, in order
        self.streams: dict[int, Stream] = {}
        self.server_settings: dict[int, int] = {}
        self.got_server_settings = False
        self.settings_acked = 0
        self.goaway: Optional[Frame] = None
        self.closed = False                    # EOF or reset seen
        self.reset = False                     # the connection was reset (ECONNRESET)
        self.next_sid = 1
        self.auto_window = True                # give DATA back with WINDOW_UPDATE (stream and connection)
        self.stalled: set[int] = set()         # streams whose window is never given back
        self.auto_ack = True                   # acknowledge SETTINGS and PING
        self.record_frames = record_frames
        self._pending_block: Optional[tuple[Frame, bytearray]] = None

    # ------------------------------------------------------------------ sending

    def _log(self, direction: str, text: str) -> None:
        if self.record_frames:
            sut.record(f"h2#{self.id} {direction} {text}", b"")

    def send_raw(self, data: bytes, label: str = "") -> bool:
        """Sends bytes; False if the server already closed or reset the connection."""
        if label:
            self._log(">>>", label)
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout, OSError) as e:
            self._log("!!!", f"send failed: {e!r}")
            return False

    def send_frame(self, ftype: int, flags: int, sid: int, payload: bytes = b"") -> bool:
        return self.send_raw(frame(ftype, flags, sid, payload),
                             f"{FRAME_NAMES.get(ftype, ftype)} sid={sid} flags=0x{flags:x} len={len(payload)}")

    def handshake(self, settings: dict[int, int] | None = None, window: int = 0, wait: bool = True) -> "H2Raw":
        """The client connection preface (RFC 9113 §3.4): the magic, SETTINGS, optionally a connection-level
        WINDOW_UPDATE; then waits for the server's SETTINGS."""
        data = PREFACE + settings_frame(settings)
        if window:
            data += window_update_frame(0, window)
        self.send_raw(data, f"preface + SETTINGS {settings or {}}" + (f" + WINDOW_UPDATE {window}" if window else ""))
        if wait:
            f = self.wait(lambda f: f.type == SETTINGS and not f.flags & ACK, timeout=5)
            assert f is not None, f"no SETTINGS from the server (closed={self.closed})"
        return self

    def encode(self, headers: list[tuple[str, str]], huffman: bool = True) -> bytes:
        return self.encoder.encode(headers, huffman=huffman)

    def send_headers(self, sid: int, headers: list[tuple[str, str]] | bytes, end_stream: bool = True,
                     end_headers: bool = True) -> bool:
        """HEADERS (+ CONTINUATION when the block is longer than 16384 bytes, the smallest SETTINGS_MAX_FRAME_SIZE
        a server may have, RFC 9113 §4.2). end_headers=False leaves the block open for the test's CONTINUATIONs."""
        block = headers if isinstance(headers, bytes) else self.encode(headers)
        es = END_STREAM if end_stream else 0
        self._log(">>>", f"HEADERS sid={sid} end_stream={end_stream} end_headers={end_headers} "
                  + (f"{headers}"[:2000] if not isinstance(headers, bytes) else f"block[{len(block)}]"))
        pieces = [block[i:i + 16384] for i in range(0, len(block), 16384)] or [b""]
        out = bytearray()
        for i, piece in enumerate(pieces):
            eh = END_HEADERS if (end_headers and i == len(pieces) - 1) else 0
            out += frame(HEADERS, es | eh, sid, piece) if i == 0 else frame(CONTINUATION, eh, sid, piece)
        return self.send_raw(bytes(out))

    def send_data(self, sid: int, data: bytes, end_stream: bool = False, max_frame: int = 16384) -> bool:
        if not data:
            return self.send_frame(DATA, END_STREAM if end_stream else 0, sid)
        out = bytearray()
        for i in range(0, len(data), max_frame):
            last = i + max_frame >= len(data)
            out += frame(DATA, END_STREAM if (end_stream and last) else 0, sid, data[i:i + max_frame])
        return self.send_raw(bytes(out), f"DATA sid={sid} {len(data)} bytes end_stream={end_stream}")

    def new_sid(self) -> int:
        sid = self.next_sid
        self.next_sid += 2
        return sid

    def request(self, path: str, method: str = "GET", extra: list[tuple[str, str]] | None = None,
                body: Optional[bytes] = None, authority: Optional[str] = None) -> int:
        """Opens a stream with a request (HEADERS with END_STREAM unless there is a body); returns its id."""
        sid = self.new_sid()
        hdrs = request_headers(path, authority or self.authority, method, self.scheme, extra)
        self.send_headers(sid, hdrs, end_stream=body is None)
        if body is not None:
            self.send_data(sid, body, end_stream=True)
        return sid

    def get(self, path: str, timeout: float = 10.0, **kw) -> Stream:
        sid = self.request(path, **kw)
        return self.response(sid, timeout)

    def response(self, sid: int, timeout: float = 10.0) -> Stream:
        """Reads until stream `sid` ended or was reset (or the connection closed, or the timeout)."""
        self.wait(lambda f: self.stream(sid).done, timeout=timeout)
        return self.stream(sid)

    # ------------------------------------------------------------------ receiving

    def stream(self, sid: int) -> Stream:
        if sid not in self.streams:
            self.streams[sid] = Stream(sid)
        return self.streams[sid]

    def _recv(self, deadline: float) -> bool:
        if self.closed:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            d = self.sock.recv(1 << 20)
        except (socket.timeout, ssl.SSLWantReadError):
            return False
        except (ConnectionResetError, ssl.SSLError, OSError) as e:
            self.closed = True
            self.reset = isinstance(e, ConnectionResetError)
            self._log("<<<", f"connection error {e!r}")
            return False
        if not d:
            self.closed = True
            self._log("<<<", "EOF")
            return False
        self.buf += d
        return True

    def _next_frame(self) -> Optional[Frame]:
        if len(self.buf) < 9:
            return None
        n = int.from_bytes(self.buf[:3], "big")
        if len(self.buf) < 9 + n:
            return None
        ftype, flags, sid = self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
        payload = bytes(self.buf[9:9 + n])
        del self.buf[:9 + n]
        return Frame(ftype, flags, sid, payload)

    def _unpad(self, f: Frame) -> bytes:
        p = f.payload
        if f.flags & PADDED:
            pad = p[0]
            p = p[1:len(p) - pad]
        if f.type == HEADERS and f.flags & PRIORITY_FLAG:
            p = p[5:]
        return p

    def _handle(self, f: Frame) -> None:
        if f.type in (HEADERS, PUSH_PROMISE):
            block = self._unpad(f)
            if f.type == PUSH_PROMISE:
                block = block[4:]
            if not f.flags & END_HEADERS:
                self._pending_block = (f, bytearray(block))
                return
            self._header_block(f, bytes(block))
        elif f.type == CONTINUATION:
            assert self._pending_block is not None, "CONTINUATION without HEADERS"
            first, block = self._pending_block
            block += f.payload
            if f.flags & END_HEADERS:
                self._pending_block = None
                self._header_block(first, bytes(block))
        elif f.type == DATA:
            st = self.stream(f.sid)
            data = self._unpad(f)
            st.body += data
            st.data_frames.append(len(data))
            if f.flags & END_STREAM:
                st.ended = True
            if self.auto_window and len(f.payload):
                upd = window_update_frame(0, len(f.payload))
                if f.sid not in self.stalled and not st.ended:
                    upd += window_update_frame(f.sid, len(f.payload))
                self.send_raw(upd)
        elif f.type == SETTINGS:
            if f.flags & ACK:
                self.settings_acked += 1
            else:
                self.server_settings.update(f.settings())
                self.got_server_settings = True
                if self.auto_ack:
                    self.send_raw(settings_frame(ack=True))
        elif f.type == PING:
            if not f.flags & ACK and self.auto_ack:
                self.send_raw(ping_frame(f.payload, ack=True))
        elif f.type == RST_STREAM:
            self.stream(f.sid).reset = f.error_code
        elif f.type == GOAWAY:
            self.goaway = f

    def _header_block(self, f: Frame, block: bytes) -> None:
        hdrs = [(k.decode("latin-1") if isinstance(k, bytes) else k,
                 v.decode("latin-1") if isinstance(v, bytes) else v)
                for k, v in self.decoder.decode(block, raw=True)]
        f.headers = hdrs
        if f.type == PUSH_PROMISE:
            return
        st = self.stream(f.sid)
        status = next((v for k, v in hdrs if k == ":status"), None)
        if status is not None and status.startswith("1"):
            st.interim.append(hdrs)
        elif st.headers:
            st.trailers = hdrs
        else:
            st.headers = hdrs
        if f.flags & END_STREAM:
            st.ended = True

    def wait(self, pred: Callable[[Frame], bool], timeout: float = 10.0) -> Optional[Frame]:
        """Reads and handles frames until pred(frame) is true for one (returned), the connection closes, or the
        timeout passes (None)."""
        deadline = time.monotonic() + timeout
        while True:
            while (f := self._next_frame()) is not None:
                self._handle(f)
                self.frames.append(f)
                if self.record_frames and (f.type != DATA or f.flags & END_STREAM
                                           or len(self.stream(f.sid).data_frames) <= 3):
                    self._log("<<<", f.summary())
                if pred(f):
                    return f
            if not self._recv(deadline):
                return None

    def wait_goaway(self, timeout: float = 10.0) -> Optional[Frame]:
        if self.goaway is not None:
            return self.goaway
        return self.wait(lambda f: f.type == GOAWAY, timeout)

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """Reads (handling frames) until the server closes the connection; True if it did within timeout."""
        self.wait(lambda f: False, timeout)
        return self.closed

    def pump(self, seconds: float) -> None:
        """Handles whatever arrives for `seconds`."""
        self.wait(lambda f: False, seconds)

    def rst_for(self, sid: int) -> Optional[int]:
        return self.stream(sid).reset

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "H2Raw":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- h2 library client


class H2Lib:
    """A client on the python `h2` library (an independent HTTP/2 implementation that validates what it receives:
    upper-case or connection-specific response fields, bad frames and flow-control violations raise
    h2.exceptions.ProtocolError). It does flow control for request bodies; streams in `stalled` never get their
    window back (only the connection window, opened wide at the start)."""

    def __init__(self, port: int, tls_ca: Optional[Path] = None, tls: bool | None = None,
                 server_name: str = "a.test", timeout: float = 20.0, conn_window: int = 16 << 20):
        import h2.config
        import h2.connection

        self.id = next(sut._conn_ids)
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls = bool(tls_ca) if tls is None else tls
        if self.tls:
            s = client_ssl_context(tls_ca).wrap_socket(s, server_hostname=server_name)
            assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
        self.sock = s
        self.authority = server_name
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="latin-1"))
        self.conn.initiate_connection()
        if conn_window:
            self.conn.increment_flow_control_window(conn_window)
        self.streams: dict[int, Stream] = {}
        self.bodies: dict[int, memoryview] = {}
        self.stalled: set[int] = set()
        self.goaway = None
        self.closed = False
        self.remote_settings_seen = False
        self.flush()

    def flush(self) -> None:
        self._send_bodies()
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def _send_bodies(self) -> None:
        for sid in list(self.bodies):
            view = self.bodies[sid]
            while view:
                n = min(len(view), self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if n <= 0:
                    break
                self.conn.send_data(sid, bytes(view[:n]))
                view = view[n:]
            self.bodies[sid] = view
            if not view:
                del self.bodies[sid]
                self.conn.end_stream(sid)

    def request(self, path: str, method: str = "GET", extra: list[tuple[str, str]] | None = None,
                body: Optional[bytes] = None) -> int:
        sid = self.conn.get_next_available_stream_id()
        hdrs = request_headers(path, self.authority, method, "https" if self.tls else "http", extra)
        self.conn.send_headers(sid, hdrs, end_stream=body is None)
        sut.record(f"h2lib#{self.id} >>> HEADERS sid={sid} {hdrs}"[:500], b"")
        self.streams[sid] = Stream(sid)
        if body is not None:
            self.bodies[sid] = memoryview(body)
        self.flush()
        return sid

    def run(self, pred: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Receives and handles events until pred() is true (True) or the connection closes / times out (False)."""
        import h2.events as ev

        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                return pred()
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            if not data:
                self.closed = True
                sut.record(f"h2lib#{self.id} <<< EOF", b"")
                return pred()
            for e in self.conn.receive_data(data):
                sid = getattr(e, "stream_id", None)
                st = self.streams.get(sid) if sid else None
                if isinstance(e, ev.ResponseReceived):
                    st.headers = list(e.headers)
                    sut.record(f"h2lib#{self.id} <<< HEADERS sid={sid} {e.headers}"[:500], b"")
                elif isinstance(e, ev.InformationalResponseReceived):
                    st.interim.append(list(e.headers))
                elif isinstance(e, ev.TrailersReceived):
                    st.trailers = list(e.headers)
                elif isinstance(e, ev.DataReceived):
                    st.body += e.data
                    st.data_frames.append(len(e.data))
                    if sid not in self.stalled:
                        self.conn.acknowledge_received_data(e.flow_controlled_length, sid)
                elif isinstance(e, ev.StreamEnded):
                    st.ended = True
                elif isinstance(e, ev.StreamReset):
                    if st is not None:
                        st.reset = e.error_code
                    sut.record(f"h2lib#{self.id} <<< RST_STREAM sid={sid} {err_name(e.error_code)}", b"")
                elif isinstance(e, ev.ConnectionTerminated):
                    self.goaway = e
                    sut.record(f"h2lib#{self.id} <<< GOAWAY {err_name(e.error_code)} last={e.last_stream_id}", b"")
                elif isinstance(e, ev.RemoteSettingsChanged):
                    self.remote_settings_seen = True
            self.flush()
        return True

    def get(self, path: str, timeout: float = 20.0, **kw) -> Stream:
        sid = self.request(path, **kw)
        self.run(lambda: self.streams[sid].done, timeout)
        return self.streams[sid]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "H2Lib":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tree_rss_kib(pid: int) -> int:
    """VmRSS of a process and all its descendants (nginx's master and workers; kosoku is one process), in KiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for t in Path(f"/proc/{p}/task").iterdir():
                kids = (t / "children").read_text().split()
                todo.extend(int(k) for k in kids)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


# ---------------------------------------------------------------------------------------------- the site


class Site:
    """What both HTTP/2 modules serve: F-STATIC, 100 distinct files of various sizes (/many/fN.bin), a 1 MiB, an
    8 MiB and a 64 MiB pseudo-random file; a private CA with a leaf for a.test."""

    MANY = 100

    def __init__(self, d: Path, big: bool = True):
        self.dir = d
        self.www = sut.build_static_root(d)
        rnd = random.Random(2)
        self.files: dict[str, bytes] = {}
        for i in range(self.MANY):
            size = rnd.choice([0, 1, 100, 4096, 16384, 16385, 65535, 65536, 65537]) if i < 18 \
                else rnd.randrange(1, 300_000)
            self.files[f"/many/f{i}.bin"] = rnd.randbytes(size)
        self.files["/rand1m.bin"] = random.Random(1).randbytes(1 << 20)
        self.files["/rand8m.bin"] = random.Random(8).randbytes(8 << 20)
        if big:
            self.files["/rand64m.bin"] = random.Random(64).randbytes(64 << 20)
        mtime = int(time.time()) - sut.PAST_SECONDS
        for url, data in self.files.items():
            p = self.www / url.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            os.utime(p, (mtime, mtime))
            os.chmod(p.parent, 0o755)
        pki = d / "pki"
        self.ca = tls_certs.CA(pki)
        self.leaf = self.ca.leaf("a.test")

    @property
    def ca_cert(self) -> Path:
        return self.ca.cert

    def ssl_lines(self) -> str:
        return (f"ssl_certificate {self.leaf.chain};\n        ssl_certificate_key {self.leaf.key};\n"
                f"        ssl_protocols TLSv1.2 TLSv1.3;")


def start_server(name: str, site: Site, body: str, ports: list[int], workers: int = 1) -> sut.ServerProcess:
    srv = sut.ServerProcess(sut.SUT, site.dir / f"server-{name}", body, ports, workers=workers)
    srv.start()
    return srv


def stop_server(srv: sut.ServerProcess) -> None:
    alive = srv.alive()
    rc = srv.stop()
    assert alive, "server died during the module\n" + srv.diagnostics()
    if sut.SUT == "kosoku":
        assert rc == 0, f"kosoku exited with {rc}\n" + srv.diagnostics()


def fail_if_died(request, fixture: str) -> None:
    """After a test: fails it when the module's server (fixture `fixture`, with a `.server`) is no longer running."""
    import pytest

    if fixture in request.fixturenames:
        e = request.getfixturevalue(fixture)
        if not e.server.alive():
            pytest.fail(f"{e.server.kind} died during this test\n" + e.server.diagnostics(), pytrace=False)
