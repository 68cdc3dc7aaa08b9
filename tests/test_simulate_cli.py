"""`mmuscope simulate`: through the installed entry point (trace-cmd text, --jsonl, bad
options), each printed line the tracepoint template's, and the round trip: the printed
run replayed by the replay model gives the simulation's live pages and sptes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.replay.model import SMM_KEY
from mmuscope.engine.trace.lines import TRACE_CMD, format_line, parse_line, parse_trace
from mmuscope.tui.simulate_cli import SimulateOptions, make_session, run

from tests.cli_run import here
from tests.tdp_replay import assert_shown_sptes_are_live, replay_audited

MMUSCOPE = str(Path(sys.executable).with_name("mmuscope"))


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MMUSCOPE, "simulate", *args], capture_output=True, text=True, timeout=120
    )


def test_prints_trace_cmd_report_text_that_replay_reads() -> None:
    done = simulate("--mmu", "tdp", "--workload", "kernbench", "--accesses", "300")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "cpus=2"
    first = parse_line(lines[1])
    assert first is not None and first.name == "kvm_mmu_get_page" and first.cpu == 0
    assert "kvm_mmu_get_page:     sp gen 0 gfn 0 l4 8-byte q0 direct wux nxe ad root 0" in lines[1]
    names = Counter(event.name for event in parse_trace(done.stdout)[0])
    assert names["kvm_page_fault"] == names["kvm_mmu_spte_requested"] > 0
    assert names["kvm_tdp_mmu_spte_changed"] > names["kvm_mmu_set_spte"]


def test_jsonl_is_what_replay_jsonl_makes_of_the_text(tmp_path: Path) -> None:
    args = ("--mmu", "tdp", "--workload", "churn", "--accesses", "120", "--zap", "fast",
            "--at", "60")  # fmt: skip
    text = simulate(*args)
    jsonl = simulate(*args, "--jsonl")
    assert text.returncode == jsonl.returncode == 0
    trace = tmp_path / "sim.txt"
    trace.write_text(text.stdout)
    replayed = subprocess.run(
        [MMUSCOPE, "replay", str(trace), "--jsonl"], capture_output=True, text=True, timeout=120
    )
    ours = [json.loads(line) for line in jsonl.stdout.splitlines()]
    theirs = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert len(ours) == len(theirs) > 0
    assert ours == theirs


@pytest.mark.parametrize(
    "args",
    [
        ("--mmu", "tdp", "--workload", "fork"),
        ("--mmu", "direct", "--workload", "kernbench", "--zap", "roots", "--at", "1"),
        ("--mmu", "tdp", "--workload", "kernbench", "--zap", "fast"),
        ("--mmu", "tdp", "--workload", "netperf", "--accesses", "5", "--at", "9", "--zap", "slow"),
        ("--mmu", "ept", "--workload", "kernbench"),
        ("--mmu", "tdp", "--workload", "kernbench", "--accesses", "-3"),
        ("--mmu", "direct", "--workload", "kernbench", "--race-rate", "0.1"),
        ("--mmu", "tdp", "--workload", "kernbench", "--race-rate", "2"),
        ("--mmu", "tdp", "--workload", "kernbench", "--smi-every", "100"),  # pc-4g: no SMRAM
        ("--mmu", "tdp"),
        ("--mmu", "tdp", "--workload", "kernbench", "--paused"),  # the explorer's option
        ("--mmu", "tdp", "--workload", "kernbench", "extra"),
        ("--mmu", "tdp", "--workload", "kernbench", "--accesses", "ten"),
        ("--mmu", "shadow", "--workload", "fork", "--pml", "on"),  # no PML without EPT
        ("--mmu", "direct", "--workload", "migrate", "--pml", "maybe"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    """Through the entry point, `main(argv)`, in this process (tests/cli_run.py `here`);
    the test after this one runs three of them as the console script."""
    done = here("simulate", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--mmu", "tdp", "--workload", "fork"),  # the command's own check
        ("--mmu", "tdp", "--workload", "kernbench", "--accesses", "ten"),  # argparse's
        ("--mmu", "direct", "--workload", "migrate", "--pml", "maybe"),  # argparse's choices
    ],
)  # fmt: skip
def test_bad_options_exit_the_console_script_with_2(args: tuple[str, ...]) -> None:
    done = simulate(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("mmuscope simulate: error: "), done.stderr


@pytest.mark.parametrize(
    "options",
    [
        SimulateOptions("tdp", "dirty", 450, 2, "fast", 420, race_rate=0.2),
        SimulateOptions("tdp", "netperf", 300, 1, "roots", 150),
        SimulateOptions("tdp", "kernbench", 900, 3, "roots", 500),
        SimulateOptions("tdp", "dirty", 900, 2, "fast", 420, layout="q35-16g", smi_every=150),
        SimulateOptions("direct", "churn", 300, 1, "slow", 100),
        SimulateOptions("shadow", "fork", 200, 1),
    ],
)
def test_each_printed_line_is_the_tracepoint_templates(options: SimulateOptions) -> None:
    """What `simulate` prints (`LinePrinter.listen`: the session's names and fields, not
    Events) is each event's `format_line`, the same events an Event listener gets."""
    session = make_session(options)
    events: list[Event] = []
    session.subscribe(events.append)
    run(session, options, io.StringIO())
    printer_only = make_session(options)  # no Event listener: the MMU hands the printer fields
    out = io.StringIO()
    printed = run(printer_only, options, out)
    lines = out.getvalue().splitlines()[1:]  # after cpus=N
    assert printed == len(lines) == len(events) > 100
    for line, event in zip(lines, events, strict=True):
        assert line == format_line(event, TRACE_CMD)


@pytest.mark.parametrize(
    "options",
    [
        SimulateOptions("tdp", "dirty", 450, 1, "fast", 430),
        SimulateOptions("tdp", "churn", 600, 4, "roots", 300),
        SimulateOptions("tdp", "kernbench", 600, 5, "slow", 400),
        # lost races: page tables made for a lost link are freed untraced (tdp_mmu_free_sp),
        # frozen sptes while huge pages collapse, tables waiting for RCU
        SimulateOptions("tdp", "kernbench", 500, 1, race_rate=0.4),
        SimulateOptions("tdp", "dirty", 850, 2, "fast", 420, race_rate=0.3),
        SimulateOptions("tdp", "churn", 400, 3, "roots", 200, race_rate=0.5),
        # SMM: the last vCPU's root and pages in address space 1, printed alike
        SimulateOptions("tdp", "kernbench", 600, 1, layout="q35-16g", smi_every=200),
        SimulateOptions(
            "tdp", "kernbench", 700, 2, "fast", 450, layout="q35-16g", race_rate=0.3, smi_every=120
        ),
    ],
)
def test_round_trip_gives_the_simulations_live_pages(options: SimulateOptions) -> None:
    session = make_session(options)
    out = io.StringIO()
    run(session, options, out)
    model = replay_audited(out.getvalue())
    replayed = Counter(
        (p.gfn, p.level, int(SMM_KEY in p.key[2])) for p in model.pages.values()
        for _ in range(p.copies)
    )  # fmt: skip
    mmu = session.mmu
    live = Counter((sp.gfn, sp.role.level, sp.role.smm) for sp in mmu.pages.pages())  # type: ignore[attr-defined]
    assert replayed == live and model.unknown_zaps == 0
    assert_shown_sptes_are_live(model, mmu.pages.pages())  # type: ignore[attr-defined]


# the MMU packages each --mmu must not import: the TDP MMU (tdp_mmu.c) shares no code
# with mmu.c's shadow pages; the direct and shadow MMUs share mmu.c (rmaps, prefetch)
OTHER_MMUS = {
    "tdp": ("mmuscope.engine.mmu.direct", "mmuscope.engine.mmu.shadow"),
    "direct": ("mmuscope.engine.mmu.tdp",),
    "shadow": ("mmuscope.engine.mmu.tdp",),
}


@pytest.mark.parametrize("mmu", OTHER_MMUS)
def test_simulate_imports_only_the_chosen_mmu_and_no_tui(mmu: str) -> None:
    """`simulate --mmu X` starts without Textual, Rich, the app, the other MMUs or the
    dataset libraries (pyarrow and DuckDB: `--parquet` and `query` only)."""
    others = OTHER_MMUS[mmu]
    code = (
        "import sys, io, contextlib\n"
        "from mmuscope.tui.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    main(['simulate', '--mmu', {mmu!r}, '--workload', 'kernbench', '--accesses', '50'])\n"
        "bad = [m for m in sys.modules"
        " if m.split('.')[0] in ('textual', 'rich', 'pyarrow', 'duckdb')"
        f" or m.startswith({others!r}) or m == 'mmuscope.tui.app']\n"
        "print(bad)\n"
        "sys.exit(1 if bad or 'kvm_mmu_get_page' not in out.getvalue() else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_help_names_every_workload_layout_and_working_examples(tmp_path: Path) -> None:
    """`simulate --help` lists what each --mmu takes, and its examples run as printed."""
    from mmuscope.engine.layouts import PRESETS
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession
    from mmuscope.engine.mmu.tdp.session import TdpSession
    from mmuscope.tui.simulate_cli import HELP_EXAMPLES, HELP_WORKLOADS

    from tests.test_cli_help import examples, run_example

    assert {
        "tdp, direct": TdpSession.workloads,
        "shadow": ShadowSession.workloads,
    } == HELP_WORKLOADS
    assert MmuSession.workloads == TdpSession.workloads
    shown = simulate("--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split()).replace("- ", "-")  # argparse wraps after a "-"
    for names in (*HELP_WORKLOADS.values(), PRESETS):
        assert ", ".join(names) in text
    assert "q35-16g" in text and "tdp_mmu=N" in text and HELP_EXAMPLES in shown.stdout
    # every example as printed (tests/test_cli_help.py leaves simulate's to this test),
    # as a user pastes them, pipelines too; `replay tdp.txt` opens the app
    commands = examples(shown.stdout)
    assert sum(c.startswith("mmuscope simulate") for c in commands) == 3 == len(commands) - 1
    done = [run_example(command, tmp_path) for command in commands]
    assert (tmp_path / "tdp.txt").read_text().startswith("cpus=")
    assert "needs a terminal" in done[1].stderr  # the replay screen, not in a pipe
    assert json.loads(done[2].stdout)["by_event"]["kvm_mmu_zap_all_fast"] == 1
    jsonl = [json.loads(line) for line in done[3].stdout.splitlines()]
    assert jsonl[0]["event"] == "kvm_mmu_get_page" and len(jsonl) > 1000
