"""Scenario files: every one loads, names its seed, screen and preset, and a broken file
is refused with a message naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.layouts import PRESETS
from engine.scenarios import (
    SCREENS,
    ScenarioError,
    list_scenarios,
    load_scenario,
    parse_scenario,
)

MECHANISMS = {
    "memslot-search",
    "mmio-caching",
    "vtlb",
    "rmap-fork-storm",
    "fast-zap",
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
        ({"steps": [{"caption": "x", "keys": []}]}, "caption and actions only"),
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
