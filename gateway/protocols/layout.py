"""Declared message layouts: write a message's fields once, get its decoder and encoder from it.

Kafka 0.8, Iggy and TANK declare their messages with this module; each protocol module keeps
only what is truly its own (framing, validation, the hand-tuned hot paths).

How to declare a message
------------------------

1. Make a :class:`Wire` for the protocol, its byte order (errors are those of
   :mod:`gateway.protocols.errors` unless other types are given)::

       WIRE = Wire("<")

2. Take the types you need from it (fixed-size integers, length-prefixed text and bytes, arrays
   with a count in front)::

       U8, U16, U32 = WIRE.int("B", "u8"), WIRE.int("H", "u16"), WIRE.int("I", "u32")
       STR8 = Text(U8)                      # u8 length + UTF-8
       NAMES = Array(STR8, count=U16)       # u16 count + that many names

3. List the fields in wire order, once::

       RELOAD = Layout("Reload", [("request_id", U32), ("topic", STR8), ("partition", U16)])

   ``RELOAD.decode(payload)`` gives ``Reload(request_id=.., topic=.., partition=..)`` (a
   namedtuple made for the layout) and ``RELOAD.encode(value)`` gives the bytes back. Pass
   ``cls=SomeDataclass`` to decode into an existing class instead (fields are matched to its
   parameters by name and read back by attribute, so the class's own field order does not
   matter). Each layout generates its own straight-line ``read`` and ``write`` when declared.

4. Fields that depend on an earlier one are wrapped in :class:`When` (``When(lambda v:
   v["version"] >= 3, U8, default=0)``); a trailing field an older peer leaves out is
   :class:`Optional`. Anything irregular (a length separated from its data, a variant chosen by
   an error code) is a small :class:`Type` subclass with a ``read`` and a ``write`` side by side.

5. Put the layouts in a :class:`Table` keyed by ``(message key, version)`` so the codec looks
   them up instead of branching: ``Table([(key, first, last, layout), ...])``, ``last=None``
   for "every later version" (protocols without versions use version 0).

A type reads with ``read(buf, pos) -> (value, new_pos)`` and writes by appending to a list of
buffers (joined once at the end), so nested layouts cost no intermediate ``bytes``. Every read
checks its bounds first; short or inconsistent input raises the protocol's remote error with
kind ``truncated`` (or ``malformed`` / ``bad_utf8``), never ``struct.error`` or ``IndexError``.

Sans-IO: nothing here imports trio, sockets or metrics. Hot paths that measure faster written
by hand (Kafka Produce, Iggy send/poll, TANK bundles) stay hand-written next to their layout, and
tests prove they produce the same bytes and values.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import struct
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError

Buffer = bytes | bytearray | memoryview

_MAX_LEN = {"b": 127, "B": 255, "h": 32767, "H": 65535, "i": 2**31 - 1, "I": 2**32 - 1}
_MAX_LEN.update({"q": 2**63 - 1, "Q": 2**64 - 1})


class Wire:
    """A protocol's byte order (``">"`` or ``"<"``) and its two error types: ``remote(message,
    kind)`` builds the exception for bad input from the peer, ``local(message)`` the one for
    a value we cannot encode (a bug on our side)."""

    __slots__ = ("order", "remote", "local")

    def __init__(
        self,
        order: str,
        remote: Callable[[str, str], Exception] = RemoteProtocolError,
        local: Callable[[str], Exception] = LocalProtocolError,
    ) -> None:
        if order not in ("<", ">"):
            raise ValueError(f"byte order must be '<' or '>', not {order!r}")
        self.order = order
        self.remote = remote
        self.local = local

    def int(self, code: str, name: str) -> Fixed:
        """A fixed-size number in this byte order (``code`` is a :mod:`struct` letter)."""
        return Fixed(self, code, name)

    # ``int`` in this class body names the method above, hence ``builtins.int``
    def short(self, what: str, pos: builtins.int, n: builtins.int, size: builtins.int) -> Exception:
        return self.remote(
            f"{what} of {n} bytes at byte {pos} runs past the end ({size} bytes)", "truncated"
        )


class Type:
    """One wire type: ``read(buf, pos) -> (value, new_pos)`` and ``write(value, out)``."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def write(self, value: Any, out: list[Buffer]) -> None:
        raise NotImplementedError


class Fixed(Type):
    """A number of fixed size (one :class:`struct.Struct`)."""

    __slots__ = ("wire", "st", "size", "name", "max")

    def __init__(self, wire: Wire, code: str, name: str) -> None:
        self.wire = wire
        self.st = struct.Struct(wire.order + code)
        self.size = self.st.size
        self.name = name
        self.max = _MAX_LEN.get(code, 0)

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        end = pos + self.size
        if end > len(buf):
            raise self.wire.remote(f"truncated {self.name} at byte {pos}", "truncated")
        return self.st.unpack_from(buf, pos)[0], end

    def write(self, value: Any, out: list[Buffer]) -> None:
        try:
            out.append(self.st.pack(value))
        except struct.error as exc:
            raise self.wire.local(f"{self.name}: {value!r}: {exc}") from None


class Bool(Type):
    """One byte, any non-zero value reads as True; writes 1 or 0."""

    __slots__ = ("byte",)

    def __init__(self, byte: Fixed) -> None:
        self.byte = byte

    def read(self, buf: Buffer, pos: int) -> tuple[bool, int]:
        v, pos = self.byte.read(buf, pos)
        return v != 0, pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        out.append(b"\x01" if value else b"\x00")


def _need(wire: Wire, buf: Buffer, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise wire.short(what, pos, n, len(buf))


class Blob(Type):
    """``length`` then that many bytes. ``nullable``: length -1 is None."""

    __slots__ = ("length", "nullable", "what", "_pack", "_unpack", "_null")

    def __init__(self, length: Fixed, nullable: bool = False, what: str = "bytes") -> None:
        self.length = length
        self.nullable = nullable
        self.what = what
        self._pack = length.st.pack
        self._unpack = length.st.unpack_from
        self._null = length.st.pack(-1) if nullable else b""

    def read(self, buf: Buffer, pos: int) -> tuple[bytes | None, int]:
        size = self.length.size
        if pos + size > len(buf):
            raise self.length.wire.short(f"{self.what} length", pos, size, len(buf))
        (n,) = self._unpack(buf, pos)
        pos += size
        if n < 0:
            if n == -1 and self.nullable:
                return None, pos
            raise self.length.wire.remote(f"negative {self.what} length {n}", "malformed")
        _need(self.length.wire, buf, pos, n, self.what)
        return bytes(buf[pos : pos + n]), pos + n

    def write(self, value: Buffer | None, out: list[Buffer]) -> None:
        if value is None:
            if self.nullable:
                out.append(self._null)
                return
            raise self.length.wire.local(f"{self.what}: None where bytes are required")
        n = len(value)
        if n > self.length.max:
            raise self.length.wire.local(f"{self.what} of {n} bytes is too long")
        out.append(self._pack(n))
        out.append(value)


class Text(Type):
    """``length`` then that much UTF-8. ``nullable``: length -1 is None. ``errors`` is the
    decoding error handler; with ``"strict"`` bad UTF-8 is a remote error of ``bad_utf8_kind``."""

    __slots__ = (
        "length",
        "nullable",
        "errors",
        "bad_utf8_kind",
        "_pack",
        "_unpack",
        "_null",
        "_max",
    )

    def __init__(
        self,
        length: Fixed,
        nullable: bool = False,
        errors: str = "strict",
        bad_utf8_kind: str = "bad_utf8",
    ) -> None:
        self.length = length
        self.nullable = nullable
        self.errors = errors
        self.bad_utf8_kind = bad_utf8_kind
        self._pack = length.st.pack
        self._unpack = length.st.unpack_from
        self._null = length.st.pack(-1) if nullable else b""
        self._max = length.max
        if errors == "strict":
            self.errors = ""  # the default handler, without passing it (faster)

    def read(self, buf: Buffer, pos: int) -> tuple[str | None, int]:
        size = self.length.size
        if pos + size > len(buf):
            raise self.length.wire.short("string length", pos, size, len(buf))
        (n,) = self._unpack(buf, pos)
        pos += size
        if n < 0:
            if n == -1 and self.nullable:
                return None, pos
            raise self.length.wire.remote(f"negative string length {n}", "malformed")
        _need(self.length.wire, buf, pos, n, "string")
        try:
            return str(buf[pos : pos + n], "utf-8", self.errors or "strict"), pos + n
        except UnicodeDecodeError:
            raise self.length.wire.remote("string is not UTF-8", self.bad_utf8_kind) from None

    def write(self, value: str | None, out: list[Buffer]) -> None:
        if value is None:
            if self.nullable:
                out.append(self._null)
                return
            raise self.length.wire.local("a string that cannot be null is None")
        raw = value.encode("utf-8", self.errors) if self.errors else value.encode()
        n = len(raw)
        if n > self._max:
            raise self.length.wire.local(f"string of {n} bytes is too long: {value!r:.40}")
        out.append(self._pack(n))
        out.append(raw)


class Array(Type):
    """``count`` then that many ``item``s. A negative count reads as empty."""

    __slots__ = ("item", "count", "_pack", "_unpack")

    def __init__(self, item: Type, count: Fixed) -> None:
        self.item = item
        self.count = count
        self._pack = count.st.pack
        self._unpack = count.st.unpack_from

    def read(self, buf: Buffer, pos: int) -> tuple[list[Any], int]:
        size = self.count.size
        if pos + size > len(buf):
            raise self.count.wire.short("array count", pos, size, len(buf))
        (n,) = self._unpack(buf, pos)
        pos += size
        out = []
        read = self.item.read
        for _ in range(max(0, n)):
            v, pos = read(buf, pos)
            out.append(v)
        return out, pos

    def write(self, value: Sequence[Any], out: list[Buffer]) -> None:
        try:
            out.append(self._pack(len(value)))
        except struct.error:
            raise self.count.wire.local(
                f"{len(value)} items do not fit a {self.count.name}"
            ) from None
        write = self.item.write
        for v in value:
            write(v, out)


class Repeat(Type):
    """``item`` repeated up to the end of the buffer (no count on the wire)."""

    __slots__ = ("item",)

    def __init__(self, item: Type) -> None:
        self.item = item

    def read(self, buf: Buffer, pos: int) -> tuple[list[Any], int]:
        out = []
        end = len(buf)
        while pos < end:
            v, pos = self.item.read(buf, pos)
            out.append(v)
        return out, pos

    def write(self, value: Iterable[Any], out: list[Buffer]) -> None:
        for v in value:
            self.item.write(v, out)


class Optional(Type):
    """A trailing field an older peer leaves out: read only when bytes remain (else
    ``default``); always written."""

    __slots__ = ("item", "default")

    def __init__(self, item: Type, default: Any) -> None:
        self.item = item
        self.default = default

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            return self.default, pos
        return self.item.read(buf, pos)

    def write(self, value: Any, out: list[Buffer]) -> None:
        self.item.write(value, out)


class When:
    """A field present only when ``cond(values)`` holds, ``values`` being the fields before it
    (by name); absent, it decodes as ``default`` and is not written."""

    __slots__ = ("cond", "item", "default")

    def __init__(self, cond: Callable[[Mapping[str, Any]], bool], item: Type, default: Any) -> None:
        self.cond = cond
        self.item = item
        self.default = default


class Layout(Type):
    """A structure: fields in wire order.

    Without ``cls`` the values decode into a namedtuple made for the layout (``layout.cls``;
    calling the layout builds one) and encode from any sequence in field order. With ``cls``
    they decode into an instance of ``cls`` (fields passed by name) and encode from the object's
    attributes. Fields listed in ``defaults`` (name -> value) may be left out when calling the
    layout.

    ``read`` and ``write`` are generated for each layout when it is declared (as
    :func:`collections.namedtuple` generates its class): straight-line code with consecutive
    fixed-size numbers read by one ``struct`` call and the object built positionally, as fast
    as a hand-written decoder. The methods of the class are the plain interpreted version the
    generated code must agree with (``tests/protocols/test_layout.py`` compares them).
    """

    def __init__(
        self,
        name: str,
        fields: Sequence[tuple[str, Type | When]],
        cls: type | None = None,
        defaults: Mapping[str, Any] | None = None,
        wire: Wire | None = None,
    ) -> None:
        self.name = name
        self.wire = wire or _find_wire(t for _, t in fields)
        self.fields = tuple(fields)
        self.names = tuple(n for n, _ in self.fields)
        self.types = tuple(t for _, t in self.fields)
        for n in self.names:
            if not n.isidentifier() or n.startswith("_"):
                raise ValueError(f"{name}: field name {n!r} must be a public identifier")
        self._by_name = cls is not None
        self.cls: Callable[..., Any]
        if cls is None:
            defaults = defaults or {}
            trailing: list[Any] = []
            for n in reversed(self.names):
                if n not in defaults:
                    break
                trailing.insert(0, defaults[n])
            self.cls = _tuple_class(name, self.names, trailing or None)
        else:
            self.cls = cls
        # the generated code replaces the reference methods on the instance (mypy does not
        # model per-instance method replacement)
        self.read, self.write = _compile(self)  # type: ignore[method-assign]

    # the interpreted reference; instances use the generated ``read`` / ``write``
    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for n, t in self.fields:
            if isinstance(t, When):
                if not t.cond(values):
                    values[n] = t.default
                    continue
                t = t.item
            values[n], pos = t.read(buf, pos)
        if self._by_name:
            return self.cls(**values), pos
        return self.cls(*values.values()), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        if self._by_name:
            values = {n: getattr(value, n) for n in self.names}
        else:
            if len(value) != len(self.types):
                raise self.wire.local(f"{self.name}: expected {len(self.types)} fields")
            values = dict(zip(self.names, value, strict=True))
        for n, t in self.fields:
            if isinstance(t, When):
                if not t.cond(values):
                    continue
                t = t.item
            t.write(values[n], out)

    def decode(self, buf: Buffer, pos: int = 0, exact: bool = False) -> Any:
        """``buf`` from ``pos`` as this layout. ``exact``: bytes left over are a remote error of
        kind ``trailing_bytes`` (otherwise they are ignored)."""
        value, end = self.read(buf, pos)
        if exact and end != len(buf):
            raise self.wire.remote(
                f"{self.name}: {len(buf) - end} unexpected bytes after it", "trailing_bytes"
            )
        return value

    def encode(self, value: Any) -> bytes:
        out: list[Buffer] = []
        self.write(value, out)
        return b"".join(out)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.cls(*args, **kwargs)


def _tuple_class(name: str, names: Sequence[str], defaults: list[Any] | None) -> type:
    # a function of its own: mypy types a namedtuple() call only as a statement-level class
    return namedtuple(name, names, defaults=defaults)


_SIMPLE_DEFAULTS = (int, float, str, bytes, bool, type(None), tuple, frozenset)


def _call(cls: Any, names: Sequence[str], ns: dict[str, Any]) -> str:
    """The expression building ``cls`` from locals ``v0``, ``v1``... (the fields in wire
    order): positional in the order ``cls``'s signature wants, skipped parameters filled with
    their (immutable) defaults, keywords only where it must (a keyword call to a slotted
    dataclass costs four times a positional one). ``cls`` may be a ``functools.partial`` of a
    class with keyword arguments only."""
    index = {n: i for i, n in enumerate(names)}
    target, fixed = cls, {}
    if isinstance(cls, functools.partial) and not cls.args:
        target, fixed = cls.func, dict(cls.keywords)
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    ns["CLS"] = target
    args: list[str] = []
    wanted = set(index) | set(fixed)
    by_keyword = not params
    for p in params:
        if not wanted:
            break
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            by_keyword = True
        if p.name in index:
            expr = f"v{index[p.name]}"
        elif p.name in fixed:
            expr = f"K_{p.name}"
            ns[expr] = fixed[p.name]
        elif not by_keyword and isinstance(p.default, _SIMPLE_DEFAULTS):
            expr = f"K_{p.name}"
            ns[expr] = p.default
        else:
            by_keyword = True
            continue
        wanted.discard(p.name)
        args.append(f"{p.name}={expr}" if by_keyword else expr)
    for n in sorted(wanted):
        if n in fixed:
            ns[f"K_{n}"] = fixed[n]
        args.append(f"{n}=v{index[n]}" if n in index else f"{n}=K_{n}")
    return f"CLS({', '.join(args)})"


def _compile(lay: Layout) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Generate ``read(buf, pos)`` and ``write(value, out)`` for ``lay``."""
    ns: dict[str, Any] = {"WIRE": lay.wire, "struct_error": struct.error}
    if lay._by_name:
        build = _call(lay.cls, lay.names, ns)
        get = [f"value.{n}" for n in lay.names]
    else:
        ns["CLS"] = lay.cls
        build = f"CLS({', '.join(f'v{i}' for i in range(len(lay.names)))})"
        get = [f"value[{i}]" for i in range(len(lay.names))]
    read = ["def read(buf, pos):", "    end = len(buf)"]
    write = ["def write(value, out):"]
    if not lay._by_name:
        n = len(lay.names)
        write += [
            f"    if len(value) != {n}:",
            f"        raise WIRE.local({lay.name!r} + ': expected {n} fields')",
        ]

    def seen(upto: int) -> str:
        return "{" + ", ".join(f"{lay.names[k]!r}: v{k}" for k in range(upto)) + "}"

    def seen_w(upto: int) -> str:
        return "{" + ", ".join(f"{lay.names[k]!r}: {get[k]}" for k in range(upto)) + "}"

    i = 0
    fields = lay.fields
    while i < len(fields):
        j = i
        codes = []
        while j < len(fields):
            f = fields[j][1]
            if type(f) is not Fixed:
                break
            codes.append(f.st.format[1:])
            j += 1
        if j > i:  # fixed-size numbers i..j-1: one struct
            code = lay.wire.order + "".join(codes)
            st = struct.Struct(code)
            ns[f"S{i}"] = st
            targets = "".join(f"v{k}, " for k in range(i, j))
            what = "/".join(lay.names[i:j])
            read += [
                f"    if pos + {st.size} > end:",
                f"        raise WIRE.short({lay.name + ' ' + what!r}, pos, {st.size}, end)",
                f"    {targets}= S{i}.unpack_from(buf, pos)",
                f"    pos += {st.size}",
            ]
            write += [
                "    try:",
                f"        out.append(S{i}.pack({', '.join(get[i:j])}))",
                "    except struct_error as exc:",
                f"        raise WIRE.local({lay.name + ' ' + what + ': '!r} + str(exc)) from None",
            ]
            i = j
            continue
        t = fields[i][1]
        if isinstance(t, When):
            ns[f"C{i}"], ns[f"T{i}"], ns[f"D{i}"] = t.cond, t.item, t.default
            read += [
                f"    if C{i}({seen(i)}):",
                f"        v{i}, pos = T{i}.read(buf, pos)",
                "    else:",
                f"        v{i} = D{i}",
            ]
            write += [f"    if C{i}({seen_w(i)}):", f"        T{i}.write({get[i]}, out)"]
        elif type(t) is Array:  # inlined: the count, then the items' own read
            ns[f"T{i}"], ns[f"N{i}"], ns[f"R{i}"] = t, t.count.st, t.item.read
            size = t.count.size
            read += [
                f"    if pos + {size} > end:",
                f"        raise WIRE.short({lay.name + ' ' + lay.names[i] + ' count'!r}, pos,"
                f" {size}, end)",
                f"    (n,) = N{i}.unpack_from(buf, pos)",
                f"    pos += {size}",
                f"    v{i} = []",
                "    for _ in range(n):",
                f"        x, pos = R{i}(buf, pos)",
                f"        v{i}.append(x)",
            ]
            ns[f"W{i}"] = t.item.write
            too_many = f"{lay.name} {lay.names[i]}: too many"
            write += [
                f"    x = {get[i]}",
                "    try:",
                f"        out.append(N{i}.pack(len(x)))",
                "    except struct_error:",
                f"        raise WIRE.local({too_many!r}) from None",
                "    for y in x:",
                f"        W{i}(y, out)",
            ]
        else:
            ns[f"T{i}"] = t
            read.append(f"    v{i}, pos = T{i}.read(buf, pos)")
            write.append(f"    T{i}.write({get[i]}, out)")
        i += 1
    read.append(f"    return {build}, pos")
    if len(write) == 1:
        write.append("    pass")
    exec("\n".join(read), ns)  # noqa: S102 - source built from checked field names
    exec("\n".join(write), ns)  # noqa: S102
    return ns["read"], ns["write"]


_NO_WIRE = Wire(">")


def _find_wire(types: Iterable[Any]) -> Wire:
    """The wire of the first fixed-size number inside ``types`` (depth first)."""
    for t in types:
        if isinstance(t, Fixed):
            return t.wire
        if isinstance(t, Layout):
            if t.wire is not _NO_WIRE:
                return t.wire
            continue
        inner = [getattr(t, a, None) for a in ("item", "length", "count", "byte")]
        found = _find_wire(i for i in inner if i is not None)
        if found is not _NO_WIRE:
            return found
    return _NO_WIRE


def layout(name: str, *fields: tuple[str, Type | When], **options: Any) -> Layout:
    """``Layout(name, fields, **options)`` with the fields as arguments."""
    return Layout(name, fields, **options)


class Table:
    """Layouts by ``(key, version)``: rows of ``(key, first_version, last_version, layout)``,
    ``last_version`` None for every later version. ``get`` is one dict lookup for versions 0 to
    :attr:`EXPANDED` (the ones peers send), a scan of the key's rows for any other."""

    EXPANDED = 64

    __slots__ = ("_exact", "_rows")

    def __init__(self, rows: Iterable[tuple[int, int, int | None, Any]]) -> None:
        self._exact: dict[tuple[int, int], Any] = {}
        self._rows: dict[int, list[tuple[int, int | None, Any]]] = {}
        for key, first, last, item in rows:
            for other_first, other_last, _ in self._rows.get(key, ()):
                if (last is None or other_first <= last) and (
                    other_last is None or first <= other_last
                ):
                    raise ValueError(f"two layouts for key {key} versions {first}..{last}")
            self._rows.setdefault(key, []).append((first, last, item))
            top = self.EXPANDED if last is None else min(last, self.EXPANDED)
            for v in range(max(first, 0), top + 1):
                self._exact[(key, v)] = item

    def get(self, key: int, version: int = 0) -> Any:
        """The layout for (key, version), or None."""
        item = self._exact.get((key, version))
        if item is None and not 0 <= version <= self.EXPANDED:
            for first, last, candidate in self._rows.get(key, ()):
                if first <= version and (last is None or version <= last):
                    return candidate
        return item

    def keys(self) -> set[int]:
        return set(self._rows)
