"""A row group: the records of a trace (the heads `engine.trace.reader.summarize` matched,
and their printk texts) turned into the dataset's Arrow columns (`columns`).

The printk texts are parsed by the tracepoint templates (`engine.trace.tracepoints`),
the same ones `replay --jsonl` parses with, a whole row group at a time: each
template's own regex (`Template.regex`) runs over the texts of its event in Arrow's
regex engine (RE2, whose captures follow the same leftmost-first rules as Python's
`re`), and each slot's captures are converted as its kind says (`%u` decimal, `%llx`
hex, ``{name?TRUE|FALSE}`` a comparison).  Variants are tried in `try_match`'s order,
each with the trailing space editors trim put back.  What this does not do, the
engine's own `printk_fields` does, row by row, with the same result (a test compares
the two on every fixture and on random events of every tracepoint and era):

- texts with anything but printable ASCII (Python's `\\d`, `\\s` and `str.strip`
  know Unicode and a few control characters that RE2 does not);
- templates that print a field twice or print pferr flags (`__print_flags`), and
  every variant after them;
- values a kind or a typed column cannot hold (hex longer than 16 digits, a decimal
  past 2**64, a negative gfn).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..events import FieldValue
from ..trace.kernel_fields import printed_as_they_are
from ..trace.lines import TEXT, printk_fields
from ..trace.printk import ACCESS_STR, KINDS, Slot, Template
from ..trace.tracepoints import TRACEPOINTS
from .columns import FIELDS, HEAD, TYPED, column_of, system_of

if TYPE_CHECKING:
    from ..kvm.rawtrace import Decoder, Format, RawEvent

MAP = pa.map_(pa.string(), pa.string())
SCHEMA = pa.schema(
    [pa.field(c.name, pa.type_for_alias(c.type)) for c in (*HEAD, *TYPED)] + [pa.field(FIELDS, MAP)]
)
_HEX_DIGITS = 16
_NIBBLE = np.zeros(256, dtype=np.uint8)  # a hex digit's value (the regexes let only those by)
for _i, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _NIBBLE[_c] = 10 + _i
_BOOL_TEXT = pa.array(["false", "true"])


class _RowByRow(Exception):
    """The rows at hand go to `printk_fields`, one by one."""


_HEAD_GROUPS = ("comm", "pid", "cpu", "flags", "ts", "event", "text")  # _LINE_RE's
_HEADS = pa.struct([(name, pa.string()) for name in _HEAD_GROUPS])


class Records:
    """Up to a row group of records, as the reader meets them: the groups of each
    record's head match (`_LINE_RE`: comm, pid, flags, ts, event, text), kept as the
    match's one tuple (`heads`; the reader appends to it directly), and the number of
    the first one in its trace (`first`)."""

    __slots__ = ("first", "heads")

    def __init__(self, first: int = 0) -> None:
        self.heads: list[tuple[str, ...]] = []
        self.first = first

    def __len__(self) -> int:
        return len(self.heads)

    def add(self, m: re.Match[str]) -> None:
        """A record whose head is `m` (a `_LINE_RE` match of its whole record)."""
        self.heads.append(m.groups())

    def continue_last(self, m: re.Match[str]) -> None:
        """The last record, glued to the line after it (`m`: the whole record)."""
        self.heads[-1] = m.groups()

    def table(self, *, vectorized: bool = True) -> pa.Table:
        """The records as a table of `SCHEMA`, in their order; `vectorized=False` parses
        every text with `printk_fields` (the reference the tests compare with).  The
        heads go into Arrow in one conversion (a struct of their groups); the repeated
        strings (event, comm) are worked on once per distinct value."""
        groups = pa.array(self.heads, _HEADS).flatten()
        comm, pid, cpu, _, ts, event, text = groups
        names = event.dictionary_encode()
        parsed = _parse(names, text, vectorized)
        systems = pa.array([system_of(n) for n in names.dictionary.to_pylist()], pa.string())
        comms = comm.dictionary_encode()
        stripped = pa.array([c.strip() for c in comms.dictionary.to_pylist()], pa.string())
        head = {
            "ts": _ts_ns(ts),
            "cpu": _int32(cpu),
            "pid": _int32(pid),
            "comm": stripped.take(comms.indices),
            "system": systems.take(names.indices),
            "event": event,
            "seq": pa.array(np.arange(self.first, self.first + len(self.heads), dtype=np.int64)),
        }
        return pa.Table.from_arrays(
            [head[c.name] for c in HEAD] + [parsed[c.name] for c in TYPED] + [parsed[FIELDS]],
            schema=SCHEMA,
        )


class RawRecords:
    """Up to a row group of ring-buffer records (`engine.kvm.rawtrace.RawEvent`, as
    `kvm --parquet` reads them) and the `Decoder` that knows their formats: `table()` is
    the table `Records` makes of the lines `Decoder.lines` prints of them, made from the
    records' bytes, no text printed nor parsed.  The head's columns come from the
    records' time (microseconds, as `trace_pipe` prints it), CPU and pid; the fields of
    an event whose printk prints each of them as it is (`printed_as_they_are`: walks,
    paging elements, A/D bits, spte requests) are read as columns from the bytes of all
    its records at once (one numpy record type over its format's fields); any other
    event's fields are `Decoder.fields` of each record (the text parser's, as
    `replay` reads the line) split into columns as `Records` splits them."""

    __slots__ = ("decoder", "first", "records")

    def __init__(self, decoder: Decoder, first: int = 0) -> None:
        self.decoder = decoder
        self.records: list[RawEvent] = []
        self.first = first

    def __len__(self) -> int:
        return len(self.records)

    def table(self) -> pa.Table:
        records, decoder = self.records, self.decoder
        count = len(records)
        stamps, cpus, kinds, datas = zip(*records, strict=True) if count else ((), (), (), ())
        usecs = (np.array(stamps, dtype=np.int64) + 500) // 1000  # ns2usecs(), as printed
        pids = np.frombuffer(b"".join([d[4:8] for d in datas]), dtype="<i4")  # common_pid
        distinct, codes = np.unique(np.array(kinds, dtype=np.int64), return_inverse=True)
        names = [decoder.name(int(kind)) for kind in distinct]
        order = np.argsort(codes, kind="stable")
        pieces: list[_Piece] = []
        start = 0
        for code, n in enumerate(np.bincount(codes, minlength=len(distinct))):
            rows = order[start : start + n]
            start += n
            pieces.append(self._piece(int(distinct[code]), names[code], rows, datas))
        parsed = _assemble(pieces, count)
        by_pid, pid_codes = np.unique(pids, return_inverse=True)
        comms = pa.array([decoder.comm(int(pid)).strip() for pid in by_pid], pa.string())
        events = pa.array(names, pa.string())
        head = {
            "ts": pa.array(usecs * 1000, pa.int64()),
            "cpu": pa.array(np.array(cpus, dtype=np.int32)),
            "pid": pa.array(pids.astype(np.int32)),
            "comm": comms.take(pa.array(pid_codes)),
            "system": pa.array([system_of(n) for n in names], pa.string()).take(pa.array(codes)),
            "event": events.take(pa.array(codes)),
            "seq": pa.array(np.arange(self.first, self.first + count, dtype=np.int64)),
        }
        return pa.Table.from_arrays(
            [head[c.name] for c in HEAD] + [parsed[c.name] for c in TYPED] + [parsed[FIELDS]],
            schema=SCHEMA,
        )

    def _piece(self, kind: int, name: str, rows: np.ndarray, datas: Sequence[bytes]) -> _Piece:
        fmt = self.decoder.formats.get(kind)
        if fmt is not None and printed_as_they_are(fmt.name):
            piece = _as_they_are(fmt, rows, [datas[i] for i in rows])
            if piece is not None:
                return piece
        records = self.records
        return _fields_piece(name, rows, [self.decoder.fields(records[i])[1] for i in rows])


def _as_they_are(fmt: Format, rows: np.ndarray, datas: list[bytes]) -> _Piece | None:
    """The rows of an event whose fields are printed as they are, read from their bytes
    as columns; None (then row by row) when a field is not an integer, overlaps another,
    or holds a value its typed column cannot."""
    fields = sorted(fmt.fields, key=lambda f: f.offset)
    at = 8  # the common fields'
    for f in fields:
        if f.array or f.size not in (1, 2, 4, 8) or f.offset < at:
            return None
        at = f.offset + f.size
    sizes = set(map(len, datas))
    width = max(at, *sizes)
    if sizes != {width}:  # records shorter than the format, or of other lengths: padded
        datas = [d.ljust(width, b"\0") for d in datas]
    blob = b"".join(datas)
    record = np.dtype(
        {
            "names": [f.name for f in fields],
            "formats": [f"<{'i' if f.signed else 'u'}{f.size}" for f in fields],
            "offsets": [f.offset for f in fields],
            "itemsize": width,
        }
    )
    values = np.frombuffer(blob, dtype=record)
    piece = _Piece(rows)
    rest_names: list[str] = []
    rest: list[pa.Array] = []
    for f in fields:
        column = pa.array(np.ascontiguousarray(values[f.name]))
        typed = column_of(fmt.name, f.name)
        if typed is not None and typed.name not in piece.typed:
            try:
                piece.typed[typed.name] = pc.cast(column, pa.type_for_alias(typed.type))
            except pa.ArrowInvalid:  # a value the column cannot hold: row by row
                return None
            continue
        rest_names.append(f.name)
        rest.append(pc.cast(column, pa.string()))
    piece.fields = _maps(rest_names, rest, len(rows))
    return piece


# -- the head's columns -------------------------------------------------------------------


def _ts_ns(stamps: pa.Array) -> pa.Array:
    """``secs.frac`` as nanoseconds (a bare counter as it is); past int64: NULL.  The
    stamps are `_LINE_RE`'s (digits, at most one ``.`` and 9 digits after it): the
    digits without the dot, scaled by the digits the fraction lacks."""
    dot = pc.find_substring(stamps, ".").to_numpy(zero_copy_only=False)
    length = pc.utf8_length(stamps).to_numpy(zero_copy_only=False)
    fraction = np.where(dot < 0, 0, length - dot - 1)
    scale = np.where(dot < 0, 1, 10 ** (9 - fraction)).astype(np.int64)
    try:
        digits = pc.cast(pc.replace_substring(stamps, ".", ""), pa.int64())
        return pc.multiply_checked(digits, pa.array(scale))
    except pa.ArrowInvalid:  # a counter past int64: only those rows are NULL
        return pa.array([_ts_row(s) for s in stamps.to_pylist()], pa.int64())


def _ts_row(stamp: str) -> int | None:
    secs, _, frac = stamp.partition(".")
    value = int(secs) * 1_000_000_000 + int(frac.ljust(9, "0")) if frac else int(secs)
    return value if value < 1 << 63 else None


def _int32(numbers: pa.Array) -> pa.Array:
    """A head's number (cpu, pid); past int32: NULL."""
    try:
        return pc.cast(numbers, pa.int32())
    except pa.ArrowInvalid:
        values = map(int, numbers.to_pylist())
        return pa.array([n if n < 1 << 31 else None for n in values], pa.int32())


# -- the printk texts ---------------------------------------------------------------------


@dataclass
class _Piece:
    """Parsed rows: their positions in the row group, their typed columns (absent: all
    NULL), their `fields` maps."""

    rows: np.ndarray
    typed: dict[str, pa.Array] = field(default_factory=dict)
    fields: pa.Array | None = None


def _parse(names: pa.DictionaryArray, text: pa.Array, vectorized: bool) -> dict[str, pa.Array]:
    """The typed columns and `fields` of every record (`names`: their events,
    dictionary-encoded), in the records' order."""
    texts = pc.utf8_rtrim(pc.utf8_ltrim(text, " "), "\r\n")  # event_of's and try_match's
    codes = names.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    sorted_texts = texts.take(pa.array(order))
    # printable ASCII (an empty text too): where RE2 and Python's re agree
    printable = pc.ascii_is_printable(sorted_texts).to_numpy(zero_copy_only=False)
    pieces: list[_Piece] = []
    start = 0
    for code, count in enumerate(np.bincount(codes, minlength=len(names.dictionary))):
        name = names.dictionary[code].as_py()
        rows = order[start : start + count]
        segment = sorted_texts.slice(start, count)
        fast = printable[start : start + count] if vectorized else np.zeros(count, dtype=bool)
        pieces += _parse_event(name, rows, segment, fast, text)
        start += count
    return _assemble(pieces, len(names))


def _parse_event(
    name: str, rows: np.ndarray, texts: pa.Array, fast: np.ndarray, raw: pa.Array
) -> list[_Piece]:
    """The pieces of one event's rows (`rows`: positions, `texts` their stripped
    texts, `fast`: which may be parsed as a column)."""
    pieces: list[_Piece] = []
    slow = ~fast
    if slow.any():
        pieces.append(_row_by_row(name, rows[slow], raw))
    left = np.flatnonzero(fast)  # positions in `texts` not parsed yet
    tracepoint = TRACEPOINTS.get(name)
    for template in tracepoint.templates.values() if tracepoint is not None else ():
        if not len(left):
            return pieces
        here = texts if len(left) == len(texts) else texts.take(pa.array(left))
        try:
            matched, piece = _match(name, template, rows[left], here)
        except _RowByRow:
            pieces.append(_row_by_row(name, rows[left], raw))
            return pieces
        if piece is not None:
            pieces.append(piece)
        left = left[~matched]
    if len(left):  # no template: the raw text (printk_fields' `text.rstrip()`)
        text = pc.utf8_rtrim(texts.take(pa.array(left)), " ")
        pieces.append(_Piece(rows[left], fields=_maps([TEXT], [text], len(left))))
    return pieces


def _match(
    name: str, template: Template, rows: np.ndarray, texts: pa.Array
) -> tuple[np.ndarray, _Piece | None]:
    """Which of `texts` `template` matches (`try_match`: as written, else with the
    trailing space editors trim put back), and the piece of those rows."""
    slots = template.group_slots
    pattern = f"^(?:{template.regex.pattern})$"
    matched, values = _attempt(slots, pattern, texts)
    retry = np.flatnonzero(~matched) if _may_end_in_space(template) else ()
    if len(retry):
        again = texts.take(pa.array(retry))
        spaced = pc.if_else(
            pc.ends_with(again, " "),
            pa.scalar(None, pa.string()),
            pc.binary_join_element_wise(again, " ", ""),
        )
        took, more = _attempt(slots, pattern, spaced)
        if took.any():
            where = np.concatenate([np.flatnonzero(matched), retry[took]])
            back = pa.array(np.argsort(where, kind="stable"))
            values = [
                pa.concat_arrays([a, b]).take(back) for a, b in zip(values, more, strict=True)
            ]
            matched[retry[took]] = True
    if not matched.any():
        return matched, None
    return matched, _piece(name, slots, values, rows[matched])


_ENDS_IN_SPACE: dict[int, bool] = {}


def _may_end_in_space(template: Template) -> bool:
    """Whether the template's text can end with a space (then a text an editor trimmed
    may match with the space put back): read from its end, past the slots that may
    print nothing (`{nul}`, a bool with an empty side, a kind whose regex matches "")."""
    known = _ENDS_IN_SPACE.get(id(template))
    if known is not None:
        return known
    answer = False
    for part in reversed(re.split(r"(\{[^}]*\})", template.text)):
        if not part.startswith("{"):
            if part:
                answer = part.endswith(" ")
                break
            continue
        name, kind = part[1:-1], ""
        if "?" in name:  # {name?TRUE|FALSE}
            true, _, false = name.partition("?")[2].partition("|")
            if true.endswith(" ") or false.endswith(" "):
                answer = True
                break
            if true and false:
                break
            continue
        name, _, kind = name.partition(":")
        if (not kind and name == "nul") or re.fullmatch(KINDS[kind][0], ""):
            continue
        break
    _ENDS_IN_SPACE[id(template)] = answer
    return answer


def _attempt(
    slots: Sequence[Slot], pattern: str, texts: pa.Array
) -> tuple[np.ndarray, list[pa.Array]]:
    """Which texts `pattern` matches and each slot converts (`Template.match`: a value
    its kind refuses, or a field printed twice with two values, is no match), and the
    slots' values for those."""
    found = pc.extract_regex(texts, pattern)
    hits = found.is_valid()
    matched = hits.to_numpy(zero_copy_only=False)
    if not matched.any():
        return matched, []
    if not matched.all():
        found = found.filter(hits)
    good = np.ones(len(found), dtype=bool)
    values: list[pa.Array] = []
    first: dict[str, pa.Array] = {}
    for index, slot in enumerate(slots):
        value, parsed = _KINDS.get(slot.kind, _by_dictionary)(pc.struct_field(found, [index]), slot)
        if parsed is not None:
            good &= parsed
        if slot.name in first:  # printed twice (pferr %x %s): both must agree
            same = pc.fill_null(pc.equal(value, first[slot.name]), False)
            good &= same.to_numpy(zero_copy_only=False)
        else:
            first[slot.name] = value
        values.append(value)
    if not good.all():
        matched[np.flatnonzero(matched)[~good]] = False
        keep = pa.array(good)
        values = [v.filter(keep) for v in values]
    return matched, values


def _piece(
    name: str, slots: Sequence[Slot], values: Sequence[pa.Array], rows: np.ndarray
) -> _Piece:
    piece = _Piece(rows)
    rest_names: list[str] = []
    rest: list[pa.Array] = []
    seen: set[str] = set()
    for slot, value in zip(slots, values, strict=True):
        if slot.name in seen:
            continue
        seen.add(slot.name)
        column = column_of(name, slot.name)
        if (
            column is not None
            and column.name not in piece.typed
            and pa.types.is_integer(value.type)
        ):
            try:
                piece.typed[column.name] = pc.cast(value, pa.type_for_alias(column.type))
            except pa.ArrowInvalid:  # a value the column cannot hold: row by row
                raise _RowByRow from None
            continue
        rest_names.append(slot.name)
        rest.append(_as_text(value))
    piece.fields = _maps(rest_names, rest, len(rows))
    return piece


def _as_text(value: pa.Array) -> pa.Array:
    if pa.types.is_boolean(value.type):
        return _BOOL_TEXT.take(pc.cast(value, pa.int8()))
    return value if pa.types.is_string(value.type) else pc.cast(value, pa.string())


def _maps(keys: Sequence[str], values: Sequence[pa.Array], rows: int) -> pa.Array:
    """One map per row, `keys[i]` -> `values[i][row]`."""
    width = len(keys)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    if not width:
        return pa.MapArray.from_arrays(
            offsets, pa.array([], pa.string()), pa.array([], pa.string())
        )
    interleave = (np.arange(rows)[:, None] + np.arange(width)[None, :] * rows).ravel()
    items = pa.concat_arrays(values).take(pa.array(interleave))
    names = pa.array(list(keys), pa.string()).take(pa.array(np.tile(np.arange(width), rows)))
    return pa.MapArray.from_arrays(offsets, names, items)


def _hex(texts: pa.Array) -> pa.Array:
    """Hex digits (1 to 16 of them) as uint64: padded to 16, each pair of digits one
    byte, the 8 bytes read as one big-endian number."""
    if not len(texts):
        return pa.array([], pa.uint64())
    if pc.max(pc.utf8_length(texts)).as_py() > _HEX_DIGITS:
        raise _RowByRow
    padded = pc.utf8_lpad(texts, _HEX_DIGITS, "0")
    data = np.frombuffer(padded.buffers()[2], dtype=np.uint8)
    data = data[padded.offset * _HEX_DIGITS : (padded.offset + len(padded)) * _HEX_DIGITS]
    nibbles = _NIBBLE[data].reshape(-1, _HEX_DIGITS)
    octets = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return pa.array(octets.view(">u8").ravel().astype(np.uint64), pa.uint64())


Converted = tuple[pa.Array, np.ndarray | None]  # the values, and which parsed (None: all)


def _decimal(type_: pa.DataType) -> Callable[[pa.Array, Slot], Converted]:
    def convert(texts: pa.Array, slot: Slot) -> Converted:
        try:
            return pc.cast(texts, type_), None
        except pa.ArrowInvalid:  # past 64 bits
            raise _RowByRow from None

    return convert


def _prefixed_hex(texts: pa.Array, slot: Slot) -> Converted:
    return _hex(pc.replace_substring_regex(texts, "^0[xX]", "")), None


def _pointer(texts: pa.Array, slot: Slot) -> Converted:
    """``%p``: NULL as ``(null)`` or ``(nil)`` is 0."""
    digits = pc.if_else(pc.starts_with(texts, "("), "0", texts)
    return _hex(pc.replace_substring_regex(digits, "^0x", "")), None


def _by_dictionary(texts: pa.Array, slot: Slot) -> Converted:
    """A kind whose texts repeat (pferr flags): its own parser (`printk.KINDS`) on each
    distinct text once; a text it refuses is no match."""
    parse = KINDS[slot.kind][2]
    distinct = texts.dictionary_encode()
    parsed: list[FieldValue | None] = []
    for text in distinct.dictionary.to_pylist():
        try:
            parsed.append(parse(text))
        except ValueError:
            parsed.append(None)
    if all(p is None for p in parsed):
        return pa.nulls(len(texts), pa.string()), np.zeros(len(texts), dtype=bool)
    unsigned = all(
        p is None or (isinstance(p, int) and not isinstance(p, bool) and p >= 0) for p in parsed
    )
    try:
        values = pa.array(parsed, pa.uint64() if unsigned else None).take(distinct.indices)
    except (pa.ArrowInvalid, OverflowError):
        raise _RowByRow from None
    return values, values.is_valid().to_numpy(zero_copy_only=False)


def _same(texts: pa.Array, slot: Slot) -> Converted:
    return texts, None


_ACCESS = pa.array(ACCESS_STR)
# the kinds of `printk.KINDS` (and bools) parsed as columns, each as its parser does
_KINDS: Mapping[str, Callable[[pa.Array, Slot], Converted]] = {
    "u": _decimal(pa.uint64()),
    "d": _decimal(pa.int64()),
    "x": lambda t, s: (_hex(t), None),
    "016x": lambda t, s: (_hex(t), None),
    "08x": lambda t, s: (_hex(t), None),
    "#x": _prefixed_hex,
    "#016x": _prefixed_hex,
    "p": _pointer,
    "01": lambda t, s: (pc.equal(t, "1"), None),
    "s": _same,
    "exit": _same,
    "rwxu": _same,
    "hexbytes": _same,
    "access": lambda t, s: (pc.cast(pc.index_in(t, value_set=_ACCESS), pa.uint64()), None),
    "bool": lambda t, s: (pc.equal(t, s.true), None),
}  # the rest (pferr flags) by `_by_dictionary`


# -- row by row, and the pieces put together ----------------------------------------------


def _row_by_row(name: str, rows: np.ndarray, raw: pa.Array) -> _Piece:
    """`printk_fields` of each row (its text as `event_of` hands it), split into typed
    columns and `fields` as the columns say."""
    texts = raw.take(pa.array(rows)).to_pylist()
    return _fields_piece(name, rows, [printk_fields(name, text.lstrip(" ")) for text in texts])


def _fields_piece(
    name: str, rows: np.ndarray, parsed: Sequence[Mapping[str, FieldValue]]
) -> _Piece:
    """The rows' fields (`parsed`, as the text parser names them) split into typed
    columns and `fields` as the columns say: a field at a time when every row has the
    same fields (`_by_field`), else row by row."""
    piece = _by_field(name, rows, parsed)
    if piece is not None:
        return piece
    typed: dict[str, list[int | None]] = {c.name: [None] * len(rows) for c in TYPED}
    maps: list[list[tuple[str, str]]] = []
    for i, fields in enumerate(parsed):
        rest: list[tuple[str, str]] = []
        for key, value in fields.items():
            column = column_of(name, key)
            if column is not None and column.holds(value) and typed[column.name][i] is None:
                typed[column.name][i] = value  # type: ignore[assignment]
            else:
                rest.append((key, _field_text(value)))
        maps.append(rest)
    return _Piece(
        rows,
        {c.name: pa.array(typed[c.name], pa.type_for_alias(c.type)) for c in TYPED},
        pa.array(maps, MAP),
    )


def _by_field(
    name: str, rows: np.ndarray, parsed: Sequence[Mapping[str, FieldValue]]
) -> _Piece | None:
    """`_fields_piece` a field at a time: None unless every row has the same fields in
    the same order, each field's values of one type (int, bool or str), and a typed
    column's values all fit it."""
    keys = tuple(parsed[0]) if parsed else ()
    if not keys or any(tuple(fields) != keys for fields in parsed):
        return None
    piece = _Piece(rows)
    rest_names: list[str] = []
    rest: list[pa.Array] = []
    for key in keys:
        values = [fields[key] for fields in parsed]
        kinds = {type(v) for v in values}
        if len(kinds) != 1:
            return None
        (kind,) = kinds
        column = column_of(name, key)
        if kind is int and column is not None and column.name not in piece.typed:
            numbers = [int(v) for v in values]
            low, high = column.bounds
            if not low <= min(numbers) <= max(numbers) <= high:  # some row by row
                return None
            piece.typed[column.name] = pa.array(numbers, pa.type_for_alias(column.type))
            continue
        rest_names.append(key)
        if kind is bool:
            rest.append(_as_text(pa.array(values, pa.bool_())))
        elif kind is str:
            rest.append(pa.array(values, pa.string()))
        else:  # int
            rest.append(pa.array([str(v) for v in values], pa.string()))
    piece.fields = _maps(rest_names, rest, len(rows))
    return piece


def _field_text(value: FieldValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _assemble(pieces: list[_Piece], rows: int) -> dict[str, pa.Array]:
    """The pieces' columns, each row back at its place."""
    where = np.concatenate([p.rows for p in pieces]) if pieces else np.zeros(0, np.int64)
    back = pa.array(np.argsort(where, kind="stable"))
    out: dict[str, pa.Array] = {}
    for column in TYPED:
        type_ = pa.type_for_alias(column.type)
        parts = [p.typed.get(column.name, pa.nulls(len(p.rows), type_)) for p in pieces]
        out[column.name] = pa.concat_arrays(parts).take(back) if parts else pa.nulls(0, type_)
    maps = [p.fields for p in pieces if p.fields is not None]
    out[FIELDS] = pa.concat_arrays(maps).take(back) if maps else pa.array([], MAP)
    assert len(out[FIELDS]) == rows
    return out


def fields_of(table: pa.Table) -> list[dict[str, object]]:
    """Each row's typed columns (non-NULL) and `fields`, as one dict: what a test
    compares."""
    out = []
    for row in table.to_pylist():
        found = {c.name: row[c.name] for c in TYPED if row[c.name] is not None}
        found.update(dict(row[FIELDS]))
        out.append(found)
    return out
