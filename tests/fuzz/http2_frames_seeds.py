#!/usr/bin/python3
"""Writes the seed corpus of tests/fuzz/http2_frames_fuzz.cc into tests/fuzz/corpus/http2_frames/.

Each seed: byte 0 = the fuzzer's flags (slicing, back-pressure, timeouts, shutdown, end by reset), byte 1 = the
seed of its choices, then the client's frames after the connection preface (which the fuzzer adds).
Run: /usr/bin/python3 tests/fuzz/http2_frames_seeds.py  (needs the hpack and hyperframe packages)
"""
import os

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, PingFrame,
                              PriorityFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "http2_frames")


def req(enc, sid, path, method="GET", extra=(), end_stream=True, authority="localhost"):
    fields = [(":method", method), (":scheme", "http"), (":authority", authority), (":path", path)]
    fields += list(extra)
    f = HeadersFrame(sid, enc.encode(fields))
    f.flags.add("END_HEADERS")
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def settings(**kw):
    f = SettingsFrame(0, settings={getattr(SettingsFrame, k): v for k, v in kw.items()})
    return f.serialize()


def ack():
    f = SettingsFrame(0)
    f.flags.add("ACK")
    return f.serialize()


def data(sid, payload, end=False):
    f = DataFrame(sid, payload)
    if end:
        f.flags.add("END_STREAM")
    return f.serialize()


seeds = {}

enc = hpack.Encoder()
seeds["get_root"] = (0x00, 1, settings() + req(enc, 1, "/") + ack())

enc = hpack.Encoder()
b = settings(INITIAL_WINDOW_SIZE=65535) + ack()
for i, p in enumerate(["/", "/big", "/s/a.txt", "/s/big.txt", "/status", "/redirect", "/empty", "/s/empty",
                       "/s/missing", "/admin/rules", "/admin/rules/example.com"]):
    b += req(enc, 1 + 2 * i, p)
b += req(enc, 23, "/big", method="HEAD")
b += req(enc, 25, "/", authority="other.test")
seeds["many_gets"] = (0x02, 7, b)
seeds["many_gets_slow_client"] = (0x05, 9, b)

enc = hpack.Encoder()
body = b'{"patterns": ["^/static/", "\\\\.jpg$"]}'
b = settings() + req(enc, 1, "/admin/rules/example.com", method="PUT",
                     extra=[("content-type", "application/json"), ("content-length", str(len(body)))],
                     end_stream=False)
b += data(1, body[:10]) + data(1, body[10:], end=True)
b += req(enc, 3, "/admin/rules/example.com")
b += req(enc, 5, "/admin/rules/example.com", method="DELETE")
seeds["put_rules"] = (0x01, 3, b)

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/admin/rules/a.example", method="PUT",
                     extra=[("expect", "100-continue")], end_stream=False)
b += data(1, b'{"patterns": []}') + data(1, b"", end=True)
b += req(enc, 3, "/", method="POST", end_stream=False) + data(3, b"x" * 5000, end=True)
seeds["put_expect_and_post"] = (0x02, 5, b)

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/admin/rules/b.example", method="PUT", end_stream=False)
b += data(1, b'{"patterns": ["^/a"]}')
t = HeadersFrame(1, enc.encode([("x-trailer", "1")]))
t.flags.add("END_HEADERS")
t.flags.add("END_STREAM")
b += t.serialize()
seeds["trailers"] = (0x00, 11, b)

enc = hpack.Encoder()
b = settings(INITIAL_WINDOW_SIZE=0) + req(enc, 1, "/big") + req(enc, 3, "/s/big.txt")
b += WindowUpdateFrame(1, window_increment=1000).serialize()
b += WindowUpdateFrame(0, window_increment=100000).serialize()
seeds["zero_window"] = (0x08, 13, b)
seeds["zero_window_timeouts"] = (0x88, 14, b)

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/s/big.txt") + RstStreamFrame(1, error_code=8).serialize()
b += req(enc, 3, "/big") + RstStreamFrame(3, error_code=0).serialize() + req(enc, 5, "/")
seeds["reset_streams"] = (0x01, 17, b)

b = settings(HEADER_TABLE_SIZE=0, MAX_FRAME_SIZE=16384, MAX_CONCURRENT_STREAMS=100, ENABLE_PUSH=0)
b += PingFrame(0, opaque_data=b"12345678").serialize()
b += PriorityFrame(1, depends_on=0, stream_weight=16).serialize()
b += WindowUpdateFrame(0, window_increment=1 << 20).serialize()
enc = hpack.Encoder()
enc.header_table_size = 0
b += req(enc, 1, "/", extra=[("priority", "u=1, i")])
b += GoAwayFrame(0, last_stream_id=0, error_code=0).serialize()
seeds["control_frames"] = (0x00, 19, b)

enc = hpack.Encoder()
block = enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/big"),
                    ("user-agent", "seed/1"), ("cookie", "a=1"), ("cookie", "b=2"), ("accept", "*/*")])
h = HeadersFrame(1, block[:5])
h.flags.add("END_STREAM")
c1 = ContinuationFrame(1, block[5:12])
c2 = ContinuationFrame(1, block[12:])
c2.flags.add("END_HEADERS")
seeds["continuation"] = (0x01, 23, settings() + h.serialize() + c1.serialize() + c2.serialize())

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/", extra=[("x-big", "v" * 1500), ("x-big2", "w" * 1500), ("x-big3", "z" * 1500)])
b += req(enc, 3, "/", extra=[("connection", "close")])
b += req(enc, 5, "/", extra=[("x-a", "b")] * 120)
seeds["header_limits"] = (0x00, 29, b)

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/") + b"\x00\x00\x03\x00\x00\x00\x00\x00\x00bad"  # DATA on stream 0
seeds["data_on_stream_0"] = (0x00, 31, b)

enc = hpack.Encoder()
b = settings()
for i in range(30):
    b += req(enc, 1 + 2 * i, "/")
seeds["keepalive_requests"] = (0x13, 37, b)
enc = hpack.Encoder()
b = settings()
for i in range(250):  # more resets than the rapid-reset budget (about twice the stream limit, at least 200)
    b += req(enc, 1 + 2 * i, "/big") + RstStreamFrame(1 + 2 * i, error_code=8).serialize()
seeds["rapid_reset"] = (0x00, 47, b)

enc = hpack.Encoder()
b = settings() + req(enc, 1, "/", extra=[("x-h%d" % i, "v" * 1900) for i in range(6)])  # over the list bound: 431
b += req(enc, 3, "/", extra=[("x-long", "v" * 2100)])  # one field over large_client_header_buffers: 431
seeds["header_list_431"] = (0x00, 53, b)

enc = hpack.Encoder()
b = settings() + req(enc, 5, "/") + req(enc, 3, "/")  # a stream id below one already opened
seeds["stream_id_below"] = (0x00, 59, b)

seeds["end_by_reset"] = (0x46, 41, settings() + req(hpack.Encoder(), 1, "/s/big.txt"))
seeds["reclaim_idle"] = (0x20, 43, settings() + ack())

for name, (flags, seed, frames) in seeds.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(bytes([flags, seed]) + frames)
print("wrote", len(seeds), "seeds")
