"""What a scenario step promises the screen shows, and captions that carry the model's numbers.

A step's `expect` entries are comparisons over the values the screen reports after the
step (its *probe*: counters, event totals, states; `tui/scenario_probe.py` builds it):

    "events.mark_mmio_spte == 1"              a kvm_stat total (0 when never seen)
    "vtlb.hits > prev.vtlb.hits"              `prev.` is the step before (the setup for step 1)
    "records_per_s < s3.records_per_s"        `sN.` is step N's value (1-based, earlier steps)
    "cost.wbtree.worst >= 4 * cost.wbtree.miss"

Names are dotted; `+ - * / %`, numbers, quoted strings, `and`, `or`, `not` and chained
comparisons are allowed, nothing else (no calls, no subscripts).  A caption can carry the
same values: `{cost.wbtree.miss:.1f}` formats a value with a format spec, and
`{order(s3.records_per_s, records_per_s, 8818.00, 11002.50)}` says whether the model's
two numbers come in the thread's order ("the thread's order") or not ("the reverse of the
thread's order"), and `{near(model_ratio, thread_ratio)}` whether a ratio is within a
factor 1.5 of the thread's, so that a caption never claims an agreement the model does not
show.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Value = float | int | str | bool
Probe = Mapping[str, Value]

COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}
STEP_REF = re.compile(r"^s(\d+)$")
FIELD = re.compile(r"\{([^{}]+)\}")


class CheckError(ValueError):
    """An expression that is not in the small language, or names a value nobody reports."""


def order(model_a: float, model_b: float, thread_a: float, thread_b: float) -> str:
    """Whether the model's pair comes in the same order as the thread's pair."""
    if (model_a > model_b) == (thread_a > thread_b) and model_a != model_b:
        return "the thread's order"
    if model_a == model_b:
        return "a tie, where the thread has an order"
    return "the reverse of the thread's order"


def near(model: float, thread: float) -> str:
    """Whether a model's ratio is within a factor of 1.5 of the thread's."""
    if thread > 0 and model > 0 and 1 / 1.5 <= model / thread <= 1.5:
        return "close to the thread's"
    return "far from the thread's"


FUNCTIONS: dict[str, Callable[..., Value]] = {"order": order, "near": near}


def parse(expr: str, *, calls: bool = False) -> ast.expr:
    """The expression's tree, refused when it uses anything outside the language."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError as err:
        raise CheckError(f"{expr!r}: not an expression ({err.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not calls or not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise CheckError(f"{expr!r}: only {', '.join(FUNCTIONS)} may be called")
            continue
        allowed = (
            ast.Compare, ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Name, ast.Attribute,
            ast.Constant, ast.Load, ast.And, ast.Or, ast.Not, ast.USub,
            *COMPARE, *ARITH,
        )  # fmt: skip
        if not isinstance(node, allowed):
            raise CheckError(f"{expr!r}: {type(node).__name__} is not allowed")
    return tree


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names, None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class Values:
    """The probes of a scenario run so far: step 1's first; `current` is the last."""

    def __init__(self, before: Probe, steps: Sequence[Probe]) -> None:
        self.before = before
        self.steps = list(steps)

    @property
    def current(self) -> Probe:
        return self.steps[-1] if self.steps else self.before

    def lookup(self, name: str) -> Value:
        head, _, rest = name.partition(".")
        probe = self.current
        if head == "prev" and rest:
            probe = self.steps[-2] if len(self.steps) >= 2 else self.before
            name = rest
        elif (ref := STEP_REF.match(head)) and rest:
            number = int(ref[1])
            if not 1 <= number <= len(self.steps):
                raise CheckError(f"{name}: step {number} has not run yet")
            probe, name = self.steps[number - 1], rest
        if name in probe:
            return probe[name]
        if name.startswith("events."):
            return 0  # kvm_stat shows no row for an event that never fired
        raise CheckError(f"{name}: the screen reports no such value")


def evaluate(expr: str | ast.expr, values: Values) -> Value:
    tree = parse(expr, calls=True) if isinstance(expr, str) else expr
    result: Value = _eval(tree, values)
    return result


def _eval(node: ast.expr, values: Values) -> Any:
    name = dotted(node)
    if name is not None:
        return values.lookup(name)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        return (not operand) if isinstance(node.op, ast.Not) else -operand
    if isinstance(node, ast.BinOp):
        return ARITH[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if isinstance(node, ast.BoolOp):
        results = (_eval(v, values) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, values)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return FUNCTIONS[node.func.id](*(_eval(a, values) for a in node.args))
    raise CheckError(f"cannot evaluate {ast.dump(node)}")  # pragma: no cover - parse() refused it


def failures(expects: Sequence[str], values: Values) -> list[str]:
    """The expectations that do not hold, each with the values it compared."""
    failed = []
    for expr in expects:
        if not evaluate(expr, values):
            nodes = ast.walk(parse(expr, calls=True))
            names = sorted({n for node in nodes if (n := dotted(node))})
            found = ((n, _safe(values, n)) for n in names)
            shown = ", ".join(f"{n}={v}" for n, v in found if v != "?")
            failed.append(f"{expr}  ({shown})")
    return failed


def _safe(values: Values, name: str) -> str:
    try:
        return repr(values.lookup(name))
    except CheckError:
        return "?"


def caption_fields(caption: str) -> list[tuple[str, str]]:
    """The `{expr:spec}` fields of a caption, as (expr, spec)."""
    fields = []
    for body in FIELD.findall(caption):
        expr, spec = _split_spec(body)
        parse(expr, calls=True)
        fields.append((expr, spec))
    return fields


def render(caption: str, values: Values) -> str:
    """The caption with each `{expr:spec}` replaced by its value."""

    def one(match: re.Match[str]) -> str:
        expr, spec = _split_spec(match[1])
        return format(evaluate(expr, values), spec)

    return FIELD.sub(one, caption)


def shown_pattern(pattern: str, values: Values | None = None) -> re.Pattern[str]:
    """A step's `shows` entry as the regular expression the drawn screen must match, its
    `{expr:spec}` fields filled with the values the caption has, taken literally (without
    `values`, each field matches any run of non-spaces: the file's own check).  Braces
    are the fields', so a count is written `+` or spelt out, never `{2}`."""

    def one(match: re.Match[str]) -> str:
        if values is None:
            return r"\S+"
        expr, spec = _split_spec(match[1])
        return re.escape(format(evaluate(expr, values), spec))

    try:
        return re.compile(FIELD.sub(one, pattern))
    except re.error as err:
        raise CheckError(f"{pattern!r} is not a regular expression: {err}") from None


def unshown(patterns: Sequence[str], values: Values, screen: str) -> list[str]:
    """The `shows` entries the screen's text does not match; the screen's runs of spaces
    and line ends count as one space, as the entries write them."""
    text = " ".join(screen.split())
    return [p for p in patterns if not shown_pattern(p, values).search(text)]


def _split_spec(body: str) -> tuple[str, str]:
    """`a.b:.1f` -> (`a.b`, `.1f`); a colon inside parentheses or quotes is not a spec."""
    depth, quote = 0, ""
    for index, char in enumerate(body):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == ":" and depth == 0:
            return body[:index].strip(), body[index + 1 :]
    return body.strip(), ""
