"""Fixtures shared by the test files of this directory, and which tests share one
pytest-xdist worker under `make test` (`-n 2 --dist=loadgroup`)."""

from __future__ import annotations

import signal
import sys

import pytest

# The Pilot and CLI helpers assert on what the app shows: let pytest explain their failures too.
pytest.register_assert_rewrite("tests.tui_pilot", "tests.cli_run")

# Modules whose tests must run in one worker, in their order: they share one expensive
# setup (a module- or process-scoped fixture is built once per worker) or one resource.
ONE_WORKER = {
    # one `mmuscope bench --json --quick` run (tests/test_bench.py quick_json_run): every
    # module that uses it (the `tables` fixture too), or another worker runs it again
    "test_bench.py": "bench-json",
    "test_bench_claims.py": "bench-json",
    "test_bench_bands.py": "bench-json",
    "test_bench_text.py": "bench-json",
    "test_bench_before_after.py": "bench-json",
    "test_costs.py": "bench-json",
    "test_tlbflush.py": "bench-json",
    "test_ppc.py": "bench-json",
    # one built wheel in one fresh venv; its last test takes files out of the install
    "test_install.py": "wheel",
    # a module-scoped fixture split over two workers is built twice: the query fleet
    # (three simulate runs, their Parquet, the replays: ~9 s CPU), every engine event
    "test_query_cli.py": "query-fleet",
    "test_model_events.py": "model-events",
    # the max layout's trees (tests/test_explorer.py tree(): ~3.5 s of CPU each to build),
    # cached per worker: split over two, the wbtree one was built twice
    "test_explorer.py": "max-tree",
}
# /dev/kvm guests and private tracefs instances: one at a time, so that no test sees
# another test's run (our_instances() reads every mmuscope instance on the machine)
ONE_WORKER_PREFIXES = {"test_kvm_": "kvm"}
ONE_WORKER["test_cli_trace_dat.py"] = "kvm"  # its private tracefs instance too


def pytest_configure(config: pytest.Config) -> None:
    # `make test &` from a script (no job control) starts with SIGINT ignored, which every
    # child inherits: the mmuscope the Ctrl+C tests interrupt would never see it. A handler
    # (unlike SIG_IGN) is reset to the default in a child, so the children get Ctrl+C again.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # registered here too, so that a run without pytest-xdist knows the mark
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one worker")


def _group(module: str) -> str | None:
    if module in ONE_WORKER:
        return ONE_WORKER[module]
    return next((g for p, g in ONE_WORKER_PREFIXES.items() if module.startswith(p)), None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Textual keeps the StylesCache of the last 1024 widgets drawn, with every line each
    drew, for the life of the process: `StylesCache.get_inner_outer` is an lru_cache on a
    method, whose keys hold `self` (Textual's issue 6665, open).  In a worker that is
    ~650,000 objects that every full collection walks (three Pilot-heavy test files: 74 s
    in the collector, 29 s with the cache let go after each test), and at the end a
    worker's exit took over 5 s, so that execnet interrupted it (SIGINT): the
    KeyboardInterrupt in hypothesis' gc callback, the "unraisable exception" warnings.
    Textual's internals, in the test process only: a release that renames them or drops
    the cache (the fix of that issue) leaves nothing to clear, and no test fails for it."""
    styles_cache = sys.modules.get("textual._styles_cache")
    get_inner_outer = getattr(getattr(styles_cache, "StylesCache", None), "get_inner_outer", None)
    cache_clear = getattr(get_inner_outer, "cache_clear", None)
    if cache_clear is not None:
        cache_clear()


@pytest.fixture(autouse=True)
def no_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Never read the real config (user themes) during a test."""
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
