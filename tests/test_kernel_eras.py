"""One statement of the kernel the model follows (`MODEL_KERNEL`, 6.18), and every older
behaviour offered named by its era: no approximate or doubled version labels in the
code, the help that says which kernel, and each era option documented (docs/kvm.md
§12)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

from mmuscope.engine.mmu.params import MODEL_KERNEL, TdpMmuParams
from mmuscope.engine.mmu.spte import SpteConfig

from tests.cli_run import MMUSCOPE

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("engine", "tui") for p in (ROOT / d).rglob("*.py"))
# "≈6.10": a version the code is said to follow only approximately; allowed only for a
# historical fact marked UNVERIFIED (docs/kvm.md "What is less certain")
APPROXIMATE = re.compile(r"≈\s*v?\d+(\.(\d+|x))?")
DOUBLED = re.compile(r"\b\d\.\d+/\d\.\d+\b")  # "6.17/6.18": which one?
FOLLOWED = re.compile(r"torvalds/linux\S*\s+(?:\(?(?:v|commit\s+)?)([0-9a-f.≈]+)")


def test_no_stray_version_labels_in_the_code() -> None:
    stray = []
    for path in SOURCES:
        text = path.read_text()
        name = path.relative_to(ROOT)
        for m in APPROXIMATE.finditer(text):
            if "UNVERIFIED" not in text[m.start() : m.end() + 80]:
                stray.append(f"{name}: {m.group()!r}")
        stray += [f"{name}: {m.group()!r}" for m in DOUBLED.finditer(text)]
        for m in FOLLOWED.finditer(text):
            if m.group(1) != MODEL_KERNEL:
                stray.append(f"{name}: torvalds/linux {m.group(1)!r}, not {MODEL_KERNEL}")
    assert not stray, "\n".join(stray)


def test_simulate_help_names_the_kernel_the_model_follows() -> None:
    out = subprocess.run(
        [MMUSCOPE, "simulate", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert f"the {MODEL_KERNEL}\nkernel prints it (the kernel the model follows" in out
    assert "today" not in out and "current" not in out


def era_fields() -> list[tuple[str, str, tuple[str, ...]]]:
    """(class.field, default, the values the option takes) of every era option."""
    from mmuscope.engine.mmu import params, spte

    values = {
        "huge_recovery_era": params.HUGE_RECOVERY_ERAS,
        "spurious_era": params.SPURIOUS_ERAS,
        "tdp_mmu_pages_era": params.TDP_MMU_PAGES_ERAS,
        "nx_recovery_era": params.NX_RECOVERY_ERAS,
        "ad_masks_era": spte.AD_MASKS_ERAS,
        "nonpresent_era": tuple(spte.NONPRESENT_ERAS),
    }
    out = []
    for cls in (TdpMmuParams, SpteConfig):
        for f in dataclasses.fields(cls):
            if f.name.endswith("_era"):
                out.append((f"{cls.__name__}.{f.name}", str(f.default), values[f.name]))
    return out


def test_each_era_option_defaults_to_6_18_and_is_documented() -> None:
    doc = (ROOT / "docs" / "kvm.md").read_text()
    section = doc[doc.index("## 12. Kernel eras") : doc.index("## What is less certain")]
    fields = era_fields()
    assert len(fields) == 6
    for name, default, values in fields:
        (row,) = [line for line in section.splitlines() if f"`{name}`" in line]
        assert not default.startswith("before-"), name  # the default is 6.18's behaviour
        assert float(default) <= float(MODEL_KERNEL)
        assert set(values) == {default, f"before-{default}"}, name
        for value in values:
            assert f'`"{value}"`' in row, (name, value)


def huge_leaves_made(kernel: str) -> tuple[int, int]:
    """(2M leaves made, 2M leaves a fault set) in `simulate --mmu tdp --workload dirty`,
    whose slot stops logging dirty pages at access 800."""
    out = subprocess.run(
        [MMUSCOPE, "simulate", "--mmu", "tdp", "--workload", "dirty", "--accesses", "1000",
         "--kernel", kernel],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    changed = re.findall(
        r"spte_changed: +as id \d+ gfn \w+ level 2 old_spte \w+ new_spte (\w+)", out
    )
    made = sum(1 for new in changed if int(new, 16) & (1 << 11 | 1 << 7) == 1 << 11 | 1 << 7)
    return made, len(re.findall(r"kvm_mmu_set_spte: .* level 2 ", out))


def test_simulate_kernel_6_12_zaps_where_6_18_recovers_huge_pages_in_place() -> None:
    """`--kernel 6.12`: dirty logging off zaps (`kvm_tdp_mmu_zap_collapsible_sptes`) and
    every 2M leaf comes back through a fault; 6.18 (`kvm_mmu_recover_huge_pages`) makes
    2M leaves in place, with no fault and no `kvm_mmu_set_spte`."""
    made, by_faults = huge_leaves_made("6.12")
    assert made == by_faults > 0
    made, by_faults = huge_leaves_made(MODEL_KERNEL)
    assert made > by_faults > 0


def test_a_kernel_is_in_the_era_of_each_change_it_has() -> None:
    from mmuscope.engine.mmu.params import kernel_eras, kernel_params
    from mmuscope.engine.mmu.spte import SPTE_CONFIGS, kernel_spte_config

    assert kernel_eras("6.14") == {
        "huge_recovery_era": "6.13",
        "spurious_era": "6.13",
        "tdp_mmu_pages_era": "before-6.15",
        "nx_recovery_era": "before-6.18",
    }
    assert kernel_params(MODEL_KERNEL) == TdpMmuParams()  # the defaults are 6.18's
    assert kernel_spte_config(SPTE_CONFIGS["ept"], MODEL_KERNEL) == SPTE_CONFIGS["ept"]
    old = kernel_spte_config(SPTE_CONFIGS["ept-no-ad"], "6.12")
    assert old.ad_masks_era == "before-6.13" and old.shadow_accessed_mask == 0
    assert kernel_params("6.12", TdpMmuParams(prove_mmu=True)).prove_mmu
