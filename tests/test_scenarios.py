"""Scenario files: every one loads, names its seed, screen and preset, and a broken file
is refused with a message naming the file and the field."""

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
from mmuscope.engine.scenarios.checks import CheckError, Values, evaluate, failures, render

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
SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def test_every_scenario_loads_with_captions() -> None:
    scenarios = list_scenarios()
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names))
    assert set(names) >= MECHANISMS
    for s in scenarios:
        assert s.screen in SCREENS and s.layout in PRESETS
        assert s.steps and all(len(step.caption) > 40 for step in s.steps)
        assert load_scenario(s.name) == s


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed threads are not beside the project")
def test_each_scenario_names_a_seed_thread_that_exists() -> None:
    for s in list_scenarios():
        assert (SEEDS / s.seed).is_file(), s.seed


def test_actions_until_replays_setup_and_earlier_steps() -> None:
    s = load_scenario("vtlb")
    assert s.actions_until(0) == [*s.setup, *s.steps[0].actions]
    assert s.actions_until(1)[-len(s.steps[1].actions) :] == list(s.steps[1].actions)


GOOD = {
    "title": "t",
    "seed": "000_df0d32b1438c86b7.txt",
    "screen": "mmu",
    "layout": "pc-4g",
    "steps": [{"caption": "look here", "actions": ["next_exit"]}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"screen": "tlbx"}, "screen 'tlbx' is not one of"),
        ({"layout": "pc-5g"}, "layout 'pc-5g' is not a preset"),
        ({"seed": "999.txt"}, "not a seed thread"),
        ({"title": ""}, "title must be a non-empty str"),
        ({"steps": []}, "at least one"),
        ({"steps": [{"caption": "x", "actions": ["rm -rf /"]}]}, "is not an action name"),
        ({"steps": [{"caption": "x", "keys": []}]}, "may have only actions, caption"),
        ({"settings": {"speed": "fast"}}, "settings.speed"),
        ({"colour": "red"}, "unknown keys colour"),
    ],
)
def test_a_broken_scenario_says_what_is_wrong(change: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario("x", {**GOOD, **change}, where="x.toml")


def test_unknown_name_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no scenario 'nope'; choose from"):
        load_scenario("nope")
    bad = tmp_path / "01-bad.toml"
    bad.write_text("title = \n")
    with pytest.raises(ScenarioError, match=r"01-bad\.toml: not TOML"):
        load_scenario(bad)
    assert parse_scenario("x", GOOD).steps[0].actions == ("next_exit",)


REFERENCE = SEEDS.parent / "domain" / "kvm-reference.md"


def flat(text: str) -> str:
    """Words with single spaces, and mail quoting (`> ` at a line's start) left out."""
    lines = (re.sub(r"^(\s*>)+", "", line) for line in text.splitlines())
    return " ".join(" ".join(lines).split())


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed threads are not beside the project")
def test_every_quoted_passage_is_in_the_thread_it_names() -> None:
    """A source's quote is in its thread, word for word; a caption's double-quoted words
    are in one of the threads its step cites (screen labels are single-quoted)."""
    threads = {p.name: flat(p.read_text(encoding="utf-8")) for p in SEEDS.glob("*.txt")}
    for s in list_scenarios():
        for number, step in enumerate(s.steps, 1):
            where = f"{s.name} step {number}"
            cited = [threads[src.seed_file()] for src in step.sources if src.thread]
            for src in step.sources:
                if src.thread:
                    assert src.quote in threads[src.seed_file()], f"{where}: {src.quote!r}"
            quoted = [src.quote for src in step.sources if src.ref and src.quote]
            for quote in step.quotes():
                assert any(flat(quote) in text for text in cited + quoted), (
                    f"{where}: {quote!r} is in no thread (or quoted reference) the step cites"
                )


@pytest.mark.skipif(not REFERENCE.is_file(), reason="kvm-reference.md is not beside the project")
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
        ([{"thread": "000"}], "needs a seed and a quote"),
        ([{"thread": "999", "quote": "x"}], "needs a seed and a quote"),
        ([{"ref": "5.2"}], "is not a section"),
        ([{"ref": "§5.2", "thread": "000", "quote": "x"}], "not both"),
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
        == "1.67 the reverse of the seed's order"
    )
    assert (
        render("{near(2.0, 2.5)}, {near(9.0, 2.0)}", values)
        == "close to the seed's, far from the seed's"
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
            assert f"| `{s.name}` | {s.seed[:3]} |" in table, s.name
    numbered = re.findall(r"^(\d)\. ", plan[: plan.index("Each step's caption")], re.MULTILINE)
    assert numbered == [str(n) for n in range(1, len(MECHANISMS) + 1)]
