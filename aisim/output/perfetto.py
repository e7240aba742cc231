"""A minimal writer of Perfetto's trace format (protobuf TracePackets with TrackEvents) and of
the Chrome JSON trace format, for `aisim trace` (docs/timeline.md).

Only what a timeline needs: named tracks in a tree, slices (begin / end), instants, counters
and debug annotations. Field numbers are those of Perfetto's public protos (trace_packet,
track_event, track_descriptor, debug_annotation); the file opens in ui.perfetto.dev and in its
trace processor.
"""

from __future__ import annotations

import struct

# TrackEvent.type
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3  # (counters ride on slice begins: extra values)
_SEQUENCE = 1  # every packet on one writer sequence
_INCREMENTAL_STATE_CLEARED = 1


def _varint_slow(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 fields: two's complement, ten bytes
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# a trace of a long run encodes millions of small integers (keys, track ids, counts)
_SMALL = [_varint_slow(n) for n in range(1 << 14)]


def _varint(n: int) -> bytes:
    return _SMALL[n] if 0 <= n < 16384 else _varint_slow(n)


def _key(field: int, wire: int) -> bytes:
    return _SMALL[field << 3 | wire]


def _uint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n)


def _double(field: int, x: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", x)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _text(field: int, s: str) -> bytes:
    return _bytes(field, s.encode())


_NAMES: dict[str, bytes] = {}


def _annotation(name: str, value) -> bytes:
    body = _NAMES.get(name) or _NAMES.setdefault(name, _text(10, name))
    if isinstance(value, bool):
        body += _uint(2, int(value))
    elif isinstance(value, int):
        body += _uint(4, value)
    elif isinstance(value, float):
        body += _double(5, value)
    else:
        body += _text(6, str(value))
    return _bytes(4, body)


_BEGIN, _END = _uint(9, SLICE_BEGIN), _uint(9, SLICE_END)
_TIME, _ON_SEQUENCE = _key(8, 0), _uint(10, _SEQUENCE)


class PerfettoTrace:
    """Packets collected, then written in timestamp order (descriptors first)."""

    def __init__(self) -> None:
        self._descriptors: list[bytes] = []
        self._events: list[tuple[int, int, bytes]] = []  # (ns, order, packet)

    def track(self, uuid: int, name: str, parent: int | None = None, counter: bool = False):
        body = _uint(1, uuid) + _text(2, name)
        if parent is not None:
            body += _uint(5, parent)
        if counter:
            body += _bytes(8, b"")  # an empty CounterDescriptor: a counter track
        self._descriptors.append(_bytes(60, body))

    def _event(self, ns: int, body: bytes) -> None:
        packet = _TIME + _varint(ns) + _ON_SEQUENCE + _bytes(11, body)
        self._events.append((ns, len(self._events), packet))

    def slice(
        self, track: int, name: str, start_ns: int, end_ns: int, args=None, counters=None
    ) -> None:
        """`counters`: (counter track, value) pairs sampled at the slice's start, carried by
        its begin event (one packet instead of one per counter)."""
        body = _BEGIN + _uint(11, track) + _text(23, name)
        for k, v in (args or {}).items():
            if v is not None:
                body += _annotation(k, v)
        pairs = tuple(counters or ())
        for tid, _ in pairs:
            body += _uint(31, tid)
        for _, value in pairs:
            body += _uint(12, int(value))
        self._event(start_ns, body)
        self._event(max(end_ns, start_ns), _END + _uint(11, track))

    def instant(self, track: int, name: str, ns: int) -> None:
        self._event(ns, _uint(9, INSTANT) + _uint(11, track) + _text(23, name))

    def to_bytes(self) -> bytes:
        self._events.sort()
        first = _uint(10, _SEQUENCE) + _uint(13, _INCREMENTAL_STATE_CLEARED)
        packets = [_bytes(1, first)]
        packets += [_bytes(1, _uint(10, _SEQUENCE) + d) for d in self._descriptors]
        packets += [_bytes(1, p) for _, _, p in self._events]
        return b"".join(packets)


class ChromeTrace:
    """The same timeline as Chrome's JSON trace events (microseconds)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._names: dict[int, tuple[int, int, str]] = {}  # track -> (pid, tid, name)

    def track(self, uuid: int, name: str, parent: int | None = None, counter: bool = False):
        pid = uuid if parent is None else self._names[parent][0]
        self._names[uuid] = (pid, uuid, name)
        kind = "process_name" if parent is None else "thread_name"
        self.events.append(
            {"ph": "M", "name": kind, "pid": pid, "tid": uuid, "args": {"name": name}}
        )

    def slice(
        self, track: int, name: str, start_ns: int, end_ns: int, args=None, counters=None
    ) -> None:
        for tid, value in counters or ():
            self.counter(tid, start_ns, value)
        pid, tid, _ = self._names[track]
        event = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": start_ns / 1000.0}
        event["dur"] = max(end_ns - start_ns, 0) / 1000.0
        if args:
            event["args"] = {k: v for k, v in args.items() if v is not None}
        self.events.append(event)

    def instant(self, track: int, name: str, ns: int) -> None:
        pid, tid, _ = self._names[track]
        self.events.append(
            {"ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid, "ts": ns / 1000.0}
        )

    def counter(self, track: int, ns: int, value: float) -> None:
        pid, _, name = self._names[track]
        self.events.append(
            {"ph": "C", "name": name, "pid": pid, "ts": ns / 1000.0, "args": {"value": value}}
        )

    def to_bytes(self) -> bytes:
        import json

        doc = {"traceEvents": self.events, "displayTimeUnit": "ms"}
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
