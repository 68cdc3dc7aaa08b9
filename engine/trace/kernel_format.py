"""A tracepoint as the running kernel describes it: a tracefs ``events/SYSTEM/NAME/format``
file read back (kernel/trace/trace_events.c, ``f_show``): the ``TP_STRUCT__entry`` fields
(``field:TYPE NAME; offset:…; size:…; signed:…;``) and the ``print fmt:`` line — the
TP_printk format string and its arguments as the preprocessor left them
(``REC->field``, ``__print_flags(…)``, ``__print_symbolic(…)``, ``cond ? "a" : "b"``, and
the statement expression of ``KVM_MMU_PAGE_PRINTK()`` with its own ``trace_seq_printf``).

`KernelFormat.regex` turns the print fmt into a regex that matches the lines the kernel's
``vsnprintf`` would print for some values of the fields (lib/vsprintf.c: ``%x`` without
leading zeros, ``%08x`` padded to 8, ``%#llx`` of 0 as ``0x0``, a hashed ``%p`` as 16 hex
digits or ``(null)``; ``__print_flags`` names joined by its delimiter then leftover bits as
``0x…``, ``__print_symbolic`` a name or ``0x…``; kernel/trace/trace_output.c).  An
argument that is one plain field, ``REC->name``, is a named group: `KernelFormat.values`
reads those fields back from a line, so a printer's field names and values can be checked
against the kernel's own.  Used by tests/test_kernel_formats.py against the running kernel.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_FIELD_RE = re.compile(r"\s*field:(?P<decl>[^;]*);\s*offset:\d+;\s*size:(?P<size>\d+);")
_CONV_RE = re.compile(
    r"%(?P<flags>[-#0 +]*)(?P<width>\d*)(?:\.\d+)?(?:hh|h|ll|l|z|L)?(?P<conv>[diuxXpsc%])"
)
_PLAIN_RE = re.compile(r"\(*REC->(?P<name>\w+)\)*")
_HEX_NUM = "0x[0-9a-f]+"


@dataclass(frozen=True, slots=True)
class KernelField:
    """One ``TP_STRUCT__entry`` field (the ``common_*`` header fields left out)."""

    name: str
    type: str
    size: int


@dataclass(frozen=True, slots=True)
class KernelFormat:
    """One tracepoint's ``format`` file: its fields and its print fmt."""

    system: str
    name: str
    fields: tuple[KernelField, ...]
    fmt: str  # the TP_printk format string, C escapes decoded
    args: tuple[str, ...]  # its argument expressions, as written

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def plain_args(self) -> tuple[str, ...]:
        """The fields printed as they are (``REC->name`` arguments), in print order."""
        names = (_plain(arg) for arg in self.args)
        return tuple(dict.fromkeys(n for n in names if n is not None))

    def regex(self) -> re.Pattern[str]:
        """The lines this print fmt can produce; a named group per plain field."""
        return self._compiled()[0]

    def _compiled(self) -> tuple[re.Pattern[str], dict[str, str]]:
        return _compile(self.fmt, self.args)

    def values(self, line: str) -> dict[str, int | str] | None:
        """The plain fields printed in ``line``, or None if the kernel cannot print it."""
        regex, named = self._compiled()
        m = regex.fullmatch(line)
        if m is None:
            return None
        return {name: _decode(raw, named[name]) for name, raw in m.groupdict().items()}

    def flag_tables(self) -> dict[str, tuple[tuple[int, str], ...]]:
        """Each ``__print_flags(VALUE, DELIM, {mask, "NAME"}, …)`` of the print fmt, by its
        value expression: the (mask, name) table in the kernel's order."""
        tables = {}
        for arg in self.args:
            for _, _, call in _call_args(arg, "__print_flags"):
                entries = [_split_args(e.strip()[1:-1]) for e in call[2:] if e.startswith("{")]
                table = [(_const(mask), _literals(label)[0]) for mask, label in map(tuple, entries)]
                tables[call[0]] = tuple(table)
        return tables


@functools.lru_cache(maxsize=256)
def _compile(fmt: str, args: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    """The print fmt's regex and its named groups' conversions (group -> ``%x`` etc.)."""
    named: dict[str, str] = {}
    return re.compile(_format_regex(fmt, args, {}, named)), named


_BINOPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
}


def _const(expr: str) -> int:
    """A C integer constant expression: literals (``1UL``), shifts, ``| & + - ~``."""
    tree = ast.parse(re.sub(r"(?<=[0-9a-fA-F])[uUlL]+\b", "", expr.strip()), mode="eval")
    return _evaluate(tree.body, expr)


def _evaluate(node: ast.expr, expr: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_evaluate(node.left, expr), _evaluate(node.right, expr))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert | ast.USub):
        value = _evaluate(node.operand, expr)
        return ~value if isinstance(node.op, ast.Invert) else -value
    raise ValueError(f"not a C integer constant: {expr!r}")


def parse_format_file(text: str, system: str, name: str) -> KernelFormat:
    """A ``format`` file's text; ValueError (one line) when it has no ``print fmt:``."""
    fields = []
    for line in text.splitlines():
        m = _FIELD_RE.match(line)
        if m is None:
            continue
        decl = m["decl"].strip()
        decl = re.sub(r"\[\d*\]$", "", decl)  # arrays: the name before the brackets
        ftype, _, fname = decl.rpartition(" ")
        if not fname.startswith("common_"):
            fields.append(KernelField(fname.lstrip("*"), ftype.strip(), int(m["size"])))
    _, sep, printfmt = text.partition("print fmt: ")
    if not sep:
        raise ValueError(f"{system}/{name}: no 'print fmt:' in its format file")
    fmt, rest = _string_literals(printfmt.strip())
    args = tuple(_split_args(rest.lstrip(", ")))
    return KernelFormat(system, name, tuple(fields), fmt, args)


def read_format(tracefs: Path, system: str, name: str) -> KernelFormat | None:
    """``tracefs/events/system/name/format``, or None when the kernel has no such event."""
    path = tracefs / "events" / system / name / "format"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return parse_format_file(text, system, name)


# -- C text --------------------------------------------------------------------------------


def _string_literals(text: str) -> tuple[str, str]:
    """The adjacent C string literals at the start of ``text`` (concatenated, escapes
    decoded), and what follows them."""
    out = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos >= len(text) or text[pos] != '"':
            break
        end = _literal_end(text, pos)
        out.append(_unescape(text[pos + 1 : end]))
        pos = end + 1
    if not out:
        raise ValueError(f"expected a string literal at {text[:40]!r}")
    return "".join(out), text[pos:]


def _literal_end(text: str, start: int) -> int:
    """The index of the quote closing the literal opened at ``start``."""
    pos = start + 1
    while text[pos] != '"':
        pos += 2 if text[pos] == "\\" else 1
    return pos


def _unescape(body: str) -> str:
    table = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "0": "\0"}
    return re.sub(r"\\(.)", lambda m: table.get(m[1], m[1]), body)


def _split_args(text: str) -> Iterator[str]:
    """Top-level comma-separated expressions (brackets and string literals respected)."""
    depth, start, pos = 0, 0, 0
    while pos < len(text):
        char = text[pos]
        if char == '"':
            pos = _literal_end(text, pos)
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            yield text[start:pos].strip()
            start = pos + 1
        pos += 1
    if text[start:].strip():
        yield text[start:].strip()


def _call_args(expr: str, func: str) -> Iterator[tuple[int, int, list[str]]]:
    """(start, end, arguments) of each call of ``func`` in ``expr``."""
    for m in re.finditer(rf"\b{func}\(", expr):
        depth, pos = 1, m.end()
        while depth:
            if expr[pos] == '"':
                pos = _literal_end(expr, pos)
            elif expr[pos] == "(":
                depth += 1
            elif expr[pos] == ")":
                depth -= 1
            pos += 1
        yield m.start(), pos, list(_split_args(expr[m.end() : pos - 1]))


_LITERAL = r'"(?:[^"\\]|\\.)*"'


def _literals(expr: str) -> list[str]:
    """The string literals of ``expr``, adjacent ones concatenated (``"KVM_EXIT_" "IO"``)."""
    return [
        "".join(_unescape(part[1:-1]) for part in re.findall(_LITERAL, m[0]))
        for m in re.finditer(rf"{_LITERAL}(?:\s*{_LITERAL})*", expr)
    ]


def _plain(arg: str) -> str | None:
    m = _PLAIN_RE.fullmatch(arg.strip())
    return m["name"] if m else None


# -- print fmt -> regex ----------------------------------------------------------------


def _format_regex(
    fmt: str, args: tuple[str, ...], arrays: dict[str, list[str]], named: dict[str, str]
) -> str:
    """The regex of ``fmt`` printed with ``args``; plain fields become named groups."""
    out, pos, index = [], 0, 0
    for m in _CONV_RE.finditer(fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        pos = m.end()
        if m["conv"] == "%":
            out.append("%")
            continue
        arg = args[index] if index < len(args) else ""
        index += 1
        body = _conv_regex(m, arg, arrays, named)
        name = _plain(arg)
        if name is not None and name not in named and m["conv"] != "c":
            named[name] = m["flags"] + m["conv"]
            body = f"(?P<{name}>{body})"
        out.append(body)
    out.append(re.escape(fmt[pos:]))
    return "".join(out)


def _conv_regex(
    m: re.Match[str], arg: str, arrays: dict[str, list[str]], named: dict[str, str]
) -> str:
    conv, flags, width = m["conv"], m["flags"], int(m["width"] or 0)
    if conv in "di":
        body = r"-?(?:0|[1-9]\d*)"
    elif conv == "u":
        body = r"(?:0|[1-9]\d*)"
    elif conv in "xX":
        lead, digit = ("1-9a-f", "0-9a-f") if conv == "x" else ("1-9A-F", "0-9A-F")
        digits = width - 2 if "#" in flags else width  # the "0x" counts in the width
        if width and "0" in flags:  # zero-padded to width, or longer without a leading 0
            body = f"(?:[{digit}]{{{digits}}}|[{lead}][{digit}]{{{digits},}})"
        else:
            body = f"(?:0|[{lead}][{digit}]*)"
        if "#" in flags:
            body = "0x" + body
    elif conv == "p":
        body = r"(?:[0-9a-f]{16}|\(null\)|\(____ptrval____\))"
    elif conv == "c":
        body = "\x00?" if arg.strip() == "0" else "(?s:.)"
    else:
        body = _string_regex(arg, arrays, named)
    if width and "0" not in flags and conv not in "xXc":
        body = f" *{body}" if "-" not in flags else f"{body} *"
    return body


def _string_regex(expr: str, arrays: dict[str, list[str]], named: dict[str, str]) -> str:
    """A ``%s`` argument: a nested trace_seq_printf, flags, symbols, or literals."""
    nested = list(_call_args(expr, "trace_seq_printf"))
    if nested:
        _, _, call = nested[0]
        fmt, _ = _string_literals(" ".join(call[1:2]) if len(call) > 1 else '""')
        local = dict(arrays)
        for am in re.finditer(r"(\w+)\[\]\s*=\s*\{([^}]*)\}", expr):
            local[am[1]] = _literals(am[2])
        return f"(?:{_format_regex(fmt, tuple(call[2:]), local, named)})"
    if expr.lstrip().startswith("__print_hex("):  # trace_print_hex_seq: "%02x", " " between
        return "(?:[0-9a-f]{2}(?: [0-9a-f]{2})*)?"
    alternatives: list[str] = []
    for start, end, call in [
        *_call_args(expr, "__print_flags"),
        *_call_args(expr, "__print_symbolic"),
    ]:
        names = [lit for entry in call[1:] if entry.startswith("{") for lit in _literals(entry)]
        if expr.startswith("__print_flags", start):
            delim = re.escape(_literals(call[1])[0])
            token = "|".join(
                [*(re.escape(n) for n in sorted(names, key=len, reverse=True)), _HEX_NUM]
            )
            alternatives.append(f"(?:(?:{token})(?:{delim}(?:{token}))*)?")
        else:
            alternatives += [re.escape(n) for n in names] + [_HEX_NUM]
        expr = expr[:start] + " " * (end - start) + expr[end:]
    array = re.fullmatch(r"\s*(\w+)\[.*\]\s*", expr)
    if array and array[1] in arrays:
        alternatives += [re.escape(a) for a in arrays[array[1]]]
    alternatives += [re.escape(lit) for lit in _literals(expr)]
    if not alternatives:
        return ".*?"  # a string the fmt does not spell out
    ordered = sorted(set(alternatives), key=len, reverse=True)
    return "(?:" + "|".join(ordered) + ")"


def _decode(raw: str, conv: str) -> int | str:
    if conv.endswith(("d", "i", "u")):
        return int(raw.strip())
    if conv.endswith(("x", "X")):
        return int(raw, 16)
    if conv.endswith("p"):
        return 0 if raw.startswith("(") else int(raw, 16)
    return raw


# -- print fmt -> text -----------------------------------------------------------------
#
# The inverse of the regex above: a print fmt evaluated on a record's fields, as the
# kernel's `trace_seq_printf` does when `trace_pipe` prints an event (include/trace/
# trace_events.h, `trace_raw_output_*`): C expressions over `REC->field` (ternaries,
# comparisons, arithmetic), `__print_symbolic`, `__print_flags` (kernel/trace/
# trace_output.c, `trace_print_symbols_seq` and `trace_print_flags_seq`: a value no entry
# names as ``0x%lx``) and `__print_hex` (`trace_print_hex_seq`: ``%02x`` bytes joined by
# spaces).  A statement expression (``({ … })``) or a name the format file leaves
# unresolved (an enum such as ``VDSO_CLOCKMODE_TSC``) is not evaluated: `render` raises
# `RenderError`, and the caller prints the fields as they are.

Value = int | str | bytes
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<str>\"(?:[^\"\\]|\\.)*\")|(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*"
    r"|REC->(?P<rec>\w+)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>&&|\|\||<<|>>|<=|>=|==|!=|[-+*/%<>&|^!~?:(),{}]))"
)
_PRECEDENCE = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10,
    "%": 10,
}  # fmt: skip
_PRINT_FUNCS = ("__print_symbolic", "__print_flags", "__print_hex")
# Enum constants a print fmt names and its format file leaves unresolved: `enum
# vdso_clock_mode` (include/vdso/clocksource.h: NONE, then x86's VDSO_ARCH_CLOCKMODES,
# TSC first), in `kvm_update_master_clock`.
ENUM_CONSTANTS = {"VDSO_CLOCKMODE_NONE": 0, "VDSO_CLOCKMODE_TSC": 1}


class RenderError(ValueError):
    """A print fmt argument this evaluator does not take (the caller falls back)."""


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if m is None or m.end() == pos:
            raise RenderError(f"cannot read {expr[pos : pos + 20]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m[kind]))
        pos = m.end()
    return out


class _Expr:
    """A recursive-descent evaluator of one C argument expression (precedence climbing)."""

    def __init__(self, expr: str, values: dict[str, Value]) -> None:
        self.tokens = _tokens(expr)
        self.at = 0
        self.values = values

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, op: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if op is not None and token != ("op", op):
            raise RenderError(f"expected {op!r}, found {token[1]!r}")
        self.at += 1
        return token

    def whole(self) -> Value:
        value = self.ternary()
        if self.peek()[0] != "end":
            raise RenderError(f"unexpected {self.peek()[1]!r}")
        return value

    def ternary(self) -> Value:
        cond = self.binary(1)
        if self.peek() != ("op", "?"):
            return cond
        self.take("?")
        yes = self.ternary()
        self.take(":")
        no = self.ternary()
        return yes if cond else no

    def binary(self, level: int) -> Value:
        left = self.unary()
        while True:
            kind, op = self.peek()
            prec = _PRECEDENCE.get(op, 0) if kind == "op" else 0
            if prec < level:
                return left
            self.take()
            right = self.binary(prec + 1)
            left = _apply(op, _int(left), _int(right))

    def unary(self) -> Value:
        kind, tok = self.peek()
        if kind == "op" and tok in "-!~+":
            self.take()
            value = _int(self.unary())
            return {"-": -value, "!": int(not value), "~": ~value, "+": value}[tok]
        return self.primary()

    def primary(self) -> Value:
        kind, tok = self.take()
        if kind == "num":
            return int(tok, 0)
        if kind == "rec":
            if tok not in self.values:
                raise RenderError(f"no field {tok!r}")
            return self.values[tok]
        if kind == "str":
            text = _unescape(tok[1:-1])
            while self.peek()[0] == "str":
                text += _unescape(self.take()[1][1:-1])
            return text
        if kind == "name" and tok in _PRINT_FUNCS:
            return self.call(tok)
        if kind == "name" and tok in ENUM_CONSTANTS:
            return ENUM_CONSTANTS[tok]
        if (kind, tok) == ("op", "("):
            value = self.ternary()
            self.take(")")
            return value
        raise RenderError(f"cannot evaluate {tok!r}")

    def call(self, func: str) -> Value:
        self.take("(")
        value = self.ternary()
        if func == "__print_hex":
            self.take(",")
            size = _int(self.ternary())
            self.take(")")
            if not isinstance(value, bytes):
                raise RenderError("__print_hex of a number")
            return " ".join(f"{b:02x}" for b in value[:size])
        delim = ""
        if func == "__print_flags":
            self.take(",")
            text = self.ternary()
            delim = text if isinstance(text, str) else ""
        table: list[tuple[int, str]] = []
        while self.peek() == ("op", ","):
            self.take(",")
            self.take("{")
            mask = _int(self.ternary())
            self.take(",")
            label = self.ternary()
            self.take("}")
            table.append((mask, str(label)))
        self.take(")")
        number = _int(value)
        if func == "__print_symbolic":
            return next((label for mask, label in table if mask == number), f"0x{number:x}")
        names = []
        for mask, label in table:
            if mask and number & mask == mask:
                names.append(label)
                number &= ~mask
        if number:
            names.append(f"0x{number:x}")
        return delim.join(names)


def _int(value: Value) -> int:
    if isinstance(value, bool | int):
        return int(value)
    raise RenderError(f"{value!r} is not a number")


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%") and b == 0:
        raise RenderError("division by zero")
    table: dict[str, Callable[[int, int], int]] = {
        "||": lambda x, y: int(bool(x or y)), "&&": lambda x, y: int(bool(x and y)),
        "|": lambda x, y: x | y, "^": lambda x, y: x ^ y, "&": lambda x, y: x & y,
        "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y),
        "<": lambda x, y: int(x < y), "<=": lambda x, y: int(x <= y),
        ">": lambda x, y: int(x > y), ">=": lambda x, y: int(x >= y),
        "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y,
        "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
        "/": lambda x, y: int(x / y), "%": lambda x, y: x - y * int(x / y),
    }  # fmt: skip
    return table[op](a, b)


def _convert(m: re.Match[str], value: Value, sizes: int) -> str:
    """One ``%…`` conversion of `value` as lib/vsprintf.c prints it."""
    conv, flags, width = m["conv"], m["flags"], m["width"]
    if conv == "s":
        text = value if isinstance(value, str) else str(value)
        return f"%{flags}{width}s" % text
    if conv == "c":
        return chr(_int(value)) if _int(value) else ""
    number = _int(value)
    bits = 8 * sizes
    if conv in "uxX" and number < 0:
        number &= (1 << bits) - 1
    if conv == "p":
        return "(null)" if number == 0 else f"{number:016x}"
    if conv == "x" and "#" in flags and number == 0:
        return "0x0".rjust(int(width or 0))
    return f"%{flags}{width}{'d' if conv in 'iu' else conv}" % number


def _arg_bytes(m: re.Match[str]) -> int:
    """The C width of a conversion: ``ll`` 8 bytes, ``l`` and ``z`` 8 (x86-64), else 4."""
    length = m[0][len(m["flags"]) + len(m["width"]) + 1 : -1].lstrip(".0123456789")
    return {"ll": 8, "l": 8, "z": 8, "L": 8, "h": 2, "hh": 1}.get(length, 4)


def render_print_fmt(fmt: KernelFormat, values: dict[str, Value]) -> str:
    """The text the kernel prints for an event of this format with these field values
    (`RenderError` when an argument is beyond this evaluator: see above)."""
    out, pos, index = [], 0, 0
    for m in _CONV_RE.finditer(fmt.fmt):
        out.append(fmt.fmt[pos : m.start()])
        pos = m.end()
        if m["conv"] == "%":
            out.append("%")
            continue
        if index >= len(fmt.args):
            raise RenderError(f"{fmt.name}: fewer arguments than conversions")
        arg = fmt.args[index]
        index += 1
        if arg.lstrip().startswith("({"):
            raise RenderError(f"{fmt.name}: a statement expression")
        out.append(_convert(m, _Expr(arg, values).whole(), _arg_bytes(m)))
    out.append(fmt.fmt[pos:])
    return "".join(out)
