"""What the host's KVM is: kernel release, the KVM modules loaded, which MMU guests get,
and the capabilities `KVM_CHECK_EXTENSION` reports.

The MMU kind is read, never assumed (docs/kvm.md §11.3: kvm-pvm runs the shadow MMU
with `tdp_mmu=N`; an Intel/AMD host with EPT/NPT runs the TDP MMU):
`/sys/module/kvm/parameters/tdp_mmu`, `.../mmio_caching`, and the vendor module's
`ept`/`npt` (kvm_intel/kvm_amd).  TDP is on when the vendor module has EPT/NPT on; with
no such module (kvm_pvm) guests are shadow-paged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SYS_MODULE = Path("/sys/module")
VENDOR_TDP = {"kvm_intel": "ept", "kvm_amd": "npt"}


def _param(root: Path, module: str, name: str) -> str | None:
    try:
        return (root / module / "parameters" / name).read_text().strip()
    except OSError:
        return None


def _yes(value: str | None) -> bool:
    return value is not None and value.upper() in ("Y", "1")


@dataclass(frozen=True, slots=True)
class HostMmu:
    """The host's MMU configuration as guests see it."""

    modules: tuple[str, ...]  # kvm and its vendor module(s): kvm_intel, kvm_amd, kvm_pvm
    tdp: bool  # EPT/NPT in use
    tdp_mmu: bool  # the TDP MMU (tdp_mmu=Y and tdp)
    mmio_caching: bool
    params: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``"tdp"`` or ``"shadow"`` (the `mmu` field of `kvm --summary`,
        docs/architecture.md §6.3)."""
        return "tdp" if self.tdp else "shadow"

    @property
    def vendor(self) -> str:
        vendors = [m for m in self.modules if m != "kvm"]
        return vendors[0] if vendors else "kvm"

    def describe(self) -> str:
        mmu = "TDP MMU" if self.tdp_mmu else ("legacy TDP" if self.tdp else "shadow MMU")
        cache = "MMIO caching on" if self.mmio_caching else "MMIO caching off"
        return f"{self.vendor} · {mmu} · {cache}"


def read_host_mmu(root: Path = SYS_MODULE) -> HostMmu:
    modules = tuple(m for m in ("kvm", "kvm_intel", "kvm_amd", "kvm_pvm") if (root / m).is_dir())
    params: dict[str, str] = {}
    for module in modules:
        directory = root / module / "parameters"
        for name in ("tdp_mmu", "mmio_caching", "nx_huge_pages", "eager_page_split", "ept",
                     "npt"):  # fmt: skip
            value = _param(root, module, name) if directory.is_dir() else None
            if value is not None:
                params[f"{module}.{name}"] = value
    tdp = any(_yes(_param(root, m, p)) for m, p in VENDOR_TDP.items() if m in modules)
    return HostMmu(
        modules,
        tdp,
        tdp and _yes(params.get("kvm.tdp_mmu")),
        _yes(params.get("kvm.mmio_caching")),
        params,
    )


def kernel_release() -> str:
    return os.uname().release


def host_phys_bits(cpuinfo: Path = Path("/proc/cpuinfo")) -> int | None:
    """`address sizes: N bits physical` (None when unknown)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("address sizes"):
                return int(line.split(":", 1)[1].split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None
