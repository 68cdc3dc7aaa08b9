"""Scenario files: every one loads, names its thread, screen and preset, and a broken file
is refused with a message naming the file and the field.  Quotes and section references
are checked against the repository's own docs/threads.md and docs/kvm.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mmuscope.engine.layouts import PRESETS
from mmuscope.engine.scenarios import (
    SCREENS,
    ScenarioError,
    list_scenarios,
    load_scenario,
    parse_scenario,
)
from mmuscope.engine.scenarios.checks import (
    CheckError,
    Values,
    evaluate,
    failures,
    render,
    unshown,
)
from mmuscope.engine.threads import THREADS

MECHANISMS = {
    "memslot-search",
    "mmio-caching",
    "vtlb",
    "rmap-fork-storm",
    "fast-zap",
    "fast-zap-today",
    "mmio-generation-wrap",
    "pv-tlb-flush",
    "power-keys",
}
DOCS = Path(__file__).resolve().parents[1] / "docs"
THREADS_DOC = DOCS / "threads.md"
REFERENCE = DOCS / "kvm.md"


def test_every_scenario_loads_with_captions() -> None:
    scenarios = list_scenarios()
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names))
    assert set(names) >= MECHANISMS
    for s in scenarios:
        assert s.screen in SCREENS and s.layout in PRESETS
        assert s.steps and all(len(step.caption) > 40 for step in s.steps)
        assert load_scenario(s.name) == s


def thread_sections() -> dict[str, str]:
    """Each thread's section of docs/threads.md (from its `## ` heading to the next),
    flattened, by thread id."""
    text = THREADS_DOC.read_text(encoding="utf-8")
    sections = {}
    for t in THREADS.values():
        start = text.index(f"\n## {t.title}\n")
        end = text.find("\n## ", start + 1)
        sections[t.id] = flat(text[start : end if end >= 0 else len(text)])
    return sections


def test_each_thread_has_its_section_and_each_scenario_names_one() -> None:
    assert set(thread_sections()) == set(THREADS)
    assert {s.thread for s in list_scenarios() if s.thread} <= set(THREADS)


def test_a_scenario_no_thread_discusses_is_labelled_the_models_own() -> None:
    """fast_page_fault is in none of the five threads (the fast-zap thread of 2013 never
    names it): its scenario cites the kernel function, not a thread."""
    text = "\n".join(thread_sections().values())
    s = load_scenario("fast-page-fault")
    assert (
        "fast_page_fault" not in text
        and s.thread == ""
        and not any(src.thread for step in s.steps for src in step.sources)
    )
    own = "the model's own demonstration of the kernel's fast_page_fault(), 6.18 mmu.c"
    assert s.follows == own
    assert s.follows_short == "kernel's fast_page_fault()"
    assert all(t.thread or t.kernel for t in list_scenarios())


def test_actions_until_replays_setup_and_earlier_steps() -> None:
    s = load_scenario("vtlb")
    assert s.actions_until(0) == [*s.setup, *s.steps[0].actions]
    assert s.actions_until(1)[-len(s.steps[1].actions) :] == list(s.steps[1].actions)


GOOD = {
    "title": "t",
    "thread": "memslot-search",
    "screen": "mmu",
    "layout": "pc-4g",
    "steps": [{"caption": "look here", "actions": ["next_exit"]}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"screen": "tlbx"}, "screen 'tlbx' is not one of"),
        ({"layout": "pc-5g"}, "layout 'pc-5g' is not a preset"),
        ({"thread": "000"}, "thread '000' is not one of memslot-search, pv-flush"),
        ({"title": ""}, "title must be a non-empty str"),
        ({"steps": []}, "at least one"),
        ({"steps": [{"caption": "x", "actions": ["rm -rf /"]}]}, "is not an action name"),
        ({"steps": [{"caption": "x", "keys": []}]}, "may have only actions, caption"),
        ({"settings": {"speed": "fast"}}, "settings.speed"),
        ({"colour": "red"}, "unknown keys colour"),
        ({"seed": 1}, "unknown keys seed"),
        ({"size": "60x20"}, "size must be COLUMNSxROWS, at least 80x24"),
        ({"kernel": "fast_page_fault(), 6.18 mmu.c"}, "a thread or kernel code, not both"),
        ({"thread": None}, "thread must be a non-empty str"),
        ({"steps": [{"caption": "x", "shows": ["unsync~)"]}]}, "is not a regular expression"),
        ({"steps": [{"caption": "x", "shows": ["{a.b +}"]}]}, "step 1"),
    ],
)
def test_a_broken_scenario_says_what_is_wrong(change: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario("x", {**GOOD, **change}, where="x.toml")


def test_shows_are_regular_expressions_with_the_captions_values_taken_literally() -> None:
    values = Values({}, [{"n": 7, "pages": 1.5, "name": "a+b"}])
    screen = "│ pages used   7 / 100 │\n│ mean 1.50 │ a+b (x) │"
    assert (
        unshown(["pages used +{n} / ", r"mean {pages:.2f}", r"{name} \(x\)"], values, screen) == []
    )
    assert unshown(["pages used +{n}0", "{name}c"], values, screen) == [
        "pages used +{n}0",
        "{name}c",
    ]
    assert parse_scenario("x", GOOD).size == (80, 24)
    assert parse_scenario("x", {**GOOD, "size": "120x40"}).fits(200, 60)
    assert not parse_scenario("x", {**GOOD, "size": "120x40"}).fits(120, 39)


def test_unknown_name_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no scenario 'nope'; choose from"):
        load_scenario("nope")
    bad = tmp_path / "01-bad.toml"
    bad.write_text("title = \n")
    with pytest.raises(ScenarioError, match=r"01-bad\.toml: not TOML"):
        load_scenario(bad)
    assert parse_scenario("x", GOOD).steps[0].actions == ("next_exit",)


def flat(text: str) -> str:
    """Words with single spaces, and mail quoting (`> ` at a line's start) left out."""
    lines = (re.sub(r"^(\s*>)+", "", line) for line in text.splitlines())
    return " ".join(" ".join(lines).split())


def test_every_quoted_passage_is_in_the_thread_it_names() -> None:
    """A source's quote is in its thread's section of docs/threads.md, word for word; a
    caption's double-quoted words are in one of the threads its step cites (screen labels
    are single-quoted)."""
    threads = thread_sections()
    for s in list_scenarios():
        for number, step in enumerate(s.steps, 1):
            where = f"{s.name} step {number}"
            cited = [threads[src.thread] for src in step.sources if src.thread]
            for src in step.sources:
                if src.thread:
                    assert src.quote in threads[src.thread], f"{where}: {src.quote!r}"
            quoted = [src.quote for src in step.sources if src.ref and src.quote]
            for quote in step.quotes():
                assert any(flat(quote) in text for text in cited + quoted), (
                    f"{where}: {quote!r} is in no thread (or quoted reference) the step cites"
                )


def test_every_reference_names_a_section_that_exists() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))
    for s in list_scenarios():
        for number, step in enumerate(s.steps, 1):
            for src in step.sources:
                if src.ref:
                    assert src.ref.lstrip("§") in sections, f"{s.name} step {number}: {src.ref}"
                    if src.quote:
                        assert src.quote in flat(text), f"{s.name} step {number}: {src.quote!r}"


def test_every_step_cites_its_sources() -> None:
    for s in (s for s in list_scenarios() if s.name in MECHANISMS):
        for number, step in enumerate(s.steps, 1):
            assert step.sources, f"{s.name} step {number} cites nothing"
            if step.quotes():
                assert any(src.quote for src in step.sources), f"{s.name} step {number}"


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ([{"thread": "fast-zap"}], "thread 'fast-zap' needs a quote"),
        ([{"thread": "003", "quote": "x"}], "thread '003' is not one of memslot-search"),
        ([{"ref": "5.2"}], "is not a section of docs/kvm.md"),
        ([{"ref": "§5.2", "thread": "fast-zap", "quote": "x"}], "not both"),
        ([{"page": "x"}], "thread, ref and quote only"),
    ],
)
def test_a_bad_source_is_refused(sources: list[dict[str, str]], message: str) -> None:
    step = {"caption": "look here", "sources": sources}
    with pytest.raises(ScenarioError, match=message):
        parse_scenario("x", {**GOOD, "steps": [step]}, where="x.toml")


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"expect": ["__import__('os')"]}, "only order, near may be called"),
        ({"expect": ["a[0] == 1"]}, "Subscript is not allowed"),
        ({"expect": ["a =="]}, "not an expression"),
        ({"caption": "x {open('f')} y"}, "only order, near may be called"),
    ],
)
def test_a_bad_check_is_refused(step: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario("x", {**GOOD, "steps": [{"caption": "look", **step}]}, where="x.toml")


def test_checks_compare_steps_and_fill_captions() -> None:
    values = Values({"n": 0}, [{"n": 3, "events.x": 2}, {"n": 5, "gen": 16}])
    assert evaluate("n > prev.n and s1.n == 3", values)
    assert evaluate("events.never == 0 and gen % 2 == 0", values)  # no row: 0
    assert failures(["n == prev.n"], values) == ["n == prev.n  (n=5, prev.n=3)"]
    assert (
        render("{n / s1.n:.2f} {order(n, s1.n, 1, 2)}", values)
        == "1.67 the reverse of the thread's order"
    )
    assert (
        render("{near(2.0, 2.5)}, {near(9.0, 2.0)}", values)
        == "close to the thread's, far from the thread's"
    )
    with pytest.raises(CheckError, match="no such value"):
        evaluate("nope > 1", values)
    with pytest.raises(CheckError, match="step 3 has not run yet"):
        evaluate("s3.n > 1", values)


def test_the_readme_lesson_plan_names_every_classroom_scenario() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Scenarios") :]
    plan = readme[readme.index("**The scenarios are the lesson plan.**") :]
    for s in list_scenarios():
        if s.name in MECHANISMS:
            assert f"| `{s.name}` | {THREADS[s.thread].label} |" in table, s.name
    numbered = re.findall(r"^(\d)\. ", plan[: plan.index("Each step's caption")], re.MULTILINE)
    assert numbered == [str(n) for n in range(1, len(MECHANISMS) + 1)]
