"""Records as JetStream messages and back (the ``Gw-*`` headers), topic names as stream and
subject tokens, and the JetStream API errors the backend acts on. No I/O."""

from __future__ import annotations

import base64
import json
import struct
from datetime import datetime
from typing import Any

from gateway.backends.nats.client import STATUS_NO_RESPONDERS
from gateway.backends.nats.protocol import Msg
from gateway.model import Record

FIELD = struct.Struct("<HI")

# JetStream API error codes (err_code) we act on
JS_STREAM_NOT_FOUND = 10059
JS_STREAM_NAME_IN_USE = 10058
JS_WRONG_LAST_SEQUENCE = 10071
JS_WRONG_LAST_MSG_ID = 10070
JS_SUBJECT_OVERLAP = 10065
JS_NOT_ENABLED = (10039, 10076)
MAX_SEQUENCE = (1 << 63) - 1  # offsets are int64 everywhere (Kafka); JetStream's are uint64


def enc(name: str) -> str:
    """A topic name as a stream-name and subject token: letters, digits and '-' kept, every
    other byte as ``_XX``."""
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch == "-"):
            out.append(ch)
        else:
            out.extend(f"_{b:02X}" for b in ch.encode())
    return "".join(out)


def _encode_record_headers(headers: tuple[tuple[str, bytes], ...]) -> str:
    parts = []
    for name, value in headers:
        raw = name.encode()
        parts.append(FIELD.pack(len(raw), len(value)))
        parts.append(raw)
        parts.append(value)
    return base64.b64encode(b"".join(parts)).decode()


def _decode_record_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    data = base64.b64decode(text)
    out = []
    pos = 0
    while pos < len(data):
        nlen, vlen = FIELD.unpack_from(data, pos)
        pos += 6
        name = data[pos : pos + nlen].decode()
        pos += nlen
        out.append((name, data[pos : pos + vlen]))
        pos += vlen
    return tuple(out)


def _js_time_us(text: str) -> int:
    # RFC 3339 with nanoseconds: 2026-11-22T01:20:57.084410116Z
    head, _, frac = text.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(head + "+00:00").timestamp()
    return int(seconds) * 1_000_000 + int((frac + "000000")[:6])


def record_headers(r: Record, ts: int) -> bytes:
    h = [f"Gw-Ts: {ts}"]
    if r.key is not None:
        h.append(f"Gw-Key: {base64.b64encode(r.key).decode()}")
    if r.value is None:
        h.append("Gw-Null: 1")
    if r.headers:
        h.append(f"Gw-H: {_encode_record_headers(r.headers)}")
    return ("NATS/1.0\r\n" + "\r\n".join(h) + "\r\n\r\n").encode()


def msg_record(m: Msg, offset: int) -> Record:
    rh = m.raw_header
    ts = rh(b"\r\nGw-Ts: ")
    if ts is not None:
        timestamp = int(ts)
    else:
        stamp = m.header("Nats-Time-Stamp")
        timestamp = _js_time_us(stamp) if stamp else -1
    key = rh(b"\r\nGw-Key: ")
    hdrs = rh(b"\r\nGw-H: ")
    return Record(
        base64.b64decode(key) if key is not None else None,
        None if b"\r\nGw-Null: " in m.raw else m.payload,
        _decode_record_headers(hdrs.decode()) if hdrs else (),
        timestamp,
        offset,
    )


def msg_seq(m: Msg) -> int:
    """The stream sequence of a direct-get reply (the server writes ``Nats-Sequence: N``)."""
    value = m.raw_header(b"\r\nNats-Sequence: ")
    return int(value) if value else 0


def js_error(msg: Msg) -> dict[str, Any] | None:
    """The JetStream API error of a reply, or None. A 503 status means no responders."""
    if msg.status == STATUS_NO_RESPONDERS:
        return {"code": 503, "err_code": 0, "description": "no responders"}
    if not msg.payload:
        return None
    data = json.loads(msg.payload)
    return data.get("error")


def wrong_last_sequence(err: dict[str, Any]) -> bool:
    """A refusal of ``Nats-Expected-Last-Sequence``: err_code 10071 (also what the commit of
    an atomic batch whose first message carried it answers)."""
    return err.get("err_code") == JS_WRONG_LAST_SEQUENCE
