"""The guest programs of `mmuscope kvm` on the engine alone: they build, assemble,
run on the shadow MMU model with every structure audited, and the host is read from
sysfs-like directories (no KVM needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mmuscope.engine.kvm.asm import Sweep, assemble_slice, decode
from mmuscope.engine.kvm.compare import MODEL_MISSING, KernelCounts, compare, host_config
from mmuscope.engine.kvm.host import read_host_mmu
from mmuscope.engine.kvm.model import run_on_model
from mmuscope.engine.kvm.program import MAX_PAGES, PROGRAMS, build_program

from tests.kvm_host import run_cli


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_program_runs_on_the_model_and_audits(name: str) -> None:
    program = build_program(name)
    run = run_on_model(program, host_config(False, 46))
    run.mmu.audit()
    run.vm.audit()
    assert run.mmio_exits >= len(program.slices)  # every slice ends at the doorbell
    assert run.created[(4, False)] >= 1


def test_fork_grows_each_shared_rmap_by_one_per_process() -> None:
    run = run_on_model(build_program("fork", 16, 5), host_config(False, 46))
    assert run.rmap_max == 5  # 6 processes map each data gfn: 5 already there at the last add
    assert run.created[(4, False)] == 6


def test_the_code_decodes_to_the_sweeps_it_was_assembled_from() -> None:
    code = assemble_slice((Sweep(0x1000000, 3, "rmw"),), 0x5FF000, 0x400000)
    text = decode(code, 0x400000, limit=9)
    assert text[:4] == ["movabs $0x1000000,%rax", "mov $3,%ecx", "mov (%rax),%bl",
                        "mov %bl,(%rax)"]  # fmt: skip
    assert text[-2:] == ["movabs $0x5FF000,%rax", "mov %bl,(%rax)"]


def test_bad_program_arguments() -> None:
    with pytest.raises(ValueError, match="unknown program"):
        build_program("boot")
    with pytest.raises(ValueError, match="--pages"):
        build_program("touch", 0)


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_program_builds_at_its_maximum_and_names_it_above(name: str) -> None:
    """The guest's RAM holds the tables N pages need (mmio, churn and dirty once ran out
    of it above 9216 and 8192 pages); one page more is refused, naming the maximum."""
    top = MAX_PAGES[name]
    program = build_program(name, top)
    assert program.pages == top and program.slices
    tables = len(program.tables.tables)
    assert tables + len(program.code) < program.ram_pages
    done = run_cli("kvm", name, "--pages", str(top + 1), "--summary")
    assert done.returncode == 2
    assert done.stderr == f"mmuscope: error: --pages {top + 1}: give 1 to {top}\n"


def test_children_only_for_fork() -> None:
    done = run_cli("kvm", "cr3", "--children", "3", "--summary")
    assert done.returncode == 2
    assert done.stderr == "mmuscope: error: --children goes with fork; cr3 has no child processes\n"
    assert build_program("fork", 4, 3).children == 3


def _sysfs(root: Path, params: dict[str, str]) -> Path:
    for key, value in params.items():
        module, name = key.split(".")
        (root / module / "parameters").mkdir(parents=True, exist_ok=True)
        (root / module / "parameters" / name).write_text(value + "\n")
    return root


def test_host_mmu_is_read_never_assumed(tmp_path: Path) -> None:
    pvm = read_host_mmu(_sysfs(tmp_path / "pvm", {"kvm.tdp_mmu": "N", "kvm.mmio_caching": "N",
                                                   "kvm_pvm.x": "0"}))  # fmt: skip
    assert (pvm.kind, pvm.tdp_mmu, pvm.mmio_caching, pvm.vendor) == ("shadow", False, False,
                                                                     "kvm_pvm")  # fmt: skip
    vmx = read_host_mmu(_sysfs(tmp_path / "vmx", {"kvm.tdp_mmu": "Y", "kvm.mmio_caching": "Y",
                                                   "kvm_intel.ept": "Y"}))  # fmt: skip
    assert (vmx.kind, vmx.tdp_mmu, vmx.mmio_caching) == ("tdp", True, True)


def test_a_difference_without_evidence_stays_unexplained() -> None:
    program = build_program("touch", 4)
    model = run_on_model(program, host_config(False, 46))
    kernel = KernelCounts()  # a kernel that recorded nothing
    rows = compare(program, kernel, {}, 0, model, MODEL_MISSING)
    assert {r.explained for r in rows if r.kernel != r.model} == {"unexplained"}


def test_a_difference_is_named_by_the_mechanism_the_kernel_showed() -> None:
    """Against a model without unsync pages (before 2.6.27), a kernel that unsynced a
    table has its differences named by that mechanism, not left unexplained."""
    program = build_program("ptwrite", 4)
    model = run_on_model(program, host_config(False, 46))
    kernel = KernelCounts()
    kernel.events["kvm_mmu_unsync_page"] = model.events["kvm_mmu_unsync_page"] + 1
    rows = compare(program, kernel, {}, 0, model, ("unsync",))
    named = {r.explained for r in rows if r.kernel != r.model}
    assert named and all(why is not None and why.startswith("unsync pages") for why in named)


def test_churn_prefetches_accessed_neighbours_and_dirty_logging_write_protects() -> None:
    from mmuscope.engine.kvm.model import ModelRunner

    program = build_program("churn", 16)
    runner = ModelRunner(program, host_config(False, 46))
    for sl in program.slices:
        before = (runner.run.events["kvm_mmu_set_spte"], runner.run.mmu.stat["pf_fixed"])
        runner.run_slice(sl)
        sptes = runner.run.events["kvm_mmu_set_spte"] - before[0]
        fixed = runner.run.mmu.stat["pf_fixed"] - before[1]
        if sl.label.startswith("log dirty"):  # every spte write-protected: 16 faults
            assert (sptes, fixed) == (16, 16)
        if sl.label.startswith("re-create"):  # A bits set: 2 faults, 7 neighbours each
            assert (sptes, fixed) == (16, 2)
        runner.run.mmu.audit()


def test_each_dirty_log_round_reports_the_pages_written_and_protects_them() -> None:
    from mmuscope.engine.kvm.model import ModelRunner

    program = build_program("dirty", 8)
    runner = ModelRunner(program, host_config(False, 46))
    runner.run_slice(program.slices[0])
    assert runner.dirty.get_dirty_log(1) == list(range(8))
    assert runner.dirty.get_dirty_log(1) == []  # cleared
    faults = runner.run.mmu.stat["pf_fixed"]
    runner.run_slice(program.slices[1])  # its own dirty log op finds nothing new
    assert runner.run.mmu.stat["pf_fixed"] - faults == 8  # every page faults again
