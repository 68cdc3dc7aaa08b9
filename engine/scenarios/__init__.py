"""Classroom scenarios: one data file per mechanism, each a guided walk through a thread.

A scenario (`data/<name>.toml`) names the thread it follows (docs/threads.md) or, for a
mechanism no thread discusses, the kernel code it demonstrates instead (`kernel =
"fast_page_fault(), 6.18 mmu.c"`: the model's own demonstration, so labelled), the screen
and guest it opens on, the settings, and steps.  Each step has a caption — what to look at
and why, citing the thread — and the actions that bring the screen to that point: the
names of the screen's own key actions (`next_exit`, `fast_zap`, `set_paging(1)`), so a
scenario does exactly what a user pressing keys would.  Stepping back replays the steps
before from a fresh screen: every screen is deterministic for its random seed.

    title = "..."
    thread = "memslot-search"            # a thread's id (engine/threads.py), or kernel =
    screen = "memslots"                  # memslots, mmu, rmaps, tlb, power
    layout = "assigned-devices"          # a preset (engine.layouts.PRESETS)
    size = "120x40"                      # optional: the smallest terminal it is drawn for
    [settings]                           # optional: lookup, workload, seed, speed
    setup = ["strategy(0)"]              # optional: actions before the first step
    [[steps]]
    caption = "... {cost.wbtree.miss:.1f} ..."  # fields: the screen's values, filled in
    actions = ["next_lookup", "run(200)"]
    sources = [{ thread = "memslot-search", quote = "..." }, { ref = "§5.2" }]
    expect = ["cost.wbtree.miss < cost.rbtree.miss"]   # checks.py: what the screen shows
    shows = ['linear: {slots}/{slots} visited', 'miss: no slot']  # drawn: regexes

In a caption, double quotes mark the thread's own words (a test finds each in the section
of docs/threads.md for a thread the step cites); screen labels are in single quotes.
Every claim carries its source: a thread's passage, or a section of docs/kvm.md (a `ref`
and a bare `§N.M` in a caption are always sections of docs/kvm.md).  `expect` says what
the screen must show after the step, and `shows` what a student sees there: regular
expressions matched against the drawn screen (pop-up notifications left out; runs of
spaces count as one), their `{...}` fields filled with the caption's values and taken
literally, so that a number the caption states is the number drawn.
`tests/test_scenario_steps.py` runs every scenario step by step and checks both.  Where
the model's number contradicts the thread's, the caption computes both and says so
(`order(...)`, `near(...)` in checks.py).
"""

from __future__ import annotations

from .scenario import (
    SCENARIO_DIR,
    SCREENS,
    Scenario,
    ScenarioError,
    ScenarioStep,
    Source,
    list_scenarios,
    load_scenario,
    parse_scenario,
)

__all__ = [
    "SCENARIO_DIR",
    "SCREENS",
    "Scenario",
    "ScenarioError",
    "ScenarioStep",
    "Source",
    "list_scenarios",
    "load_scenario",
    "parse_scenario",
]
