"""The kernel the model follows, and how a kernel version names an era (docs/kvm.md §12).

`MODEL_KERNEL` is 6.18; a behaviour a later kernel changed is offered beside it, named by
the kernel that changed it: "6.13" for 6.13 and later, "before-6.13" for the kernels
before (`era_in()`).  `KERNELS` are the versions `kernel_eras()` (params.py) and
`kernel_spte_config()` (spte.py) know.
"""

from __future__ import annotations

MODEL_KERNEL = "6.18"  # the kernel the model follows; older behaviour is offered by era
# from the oldest change the model offers to the kernel it follows
KERNELS = tuple(f"6.{minor}" for minor in range(10, 19))
assert KERNELS[-1] == MODEL_KERNEL


def era_in(kernel: str, changed_in: str) -> str:
    """The era `kernel` is in for a change made in `changed_in`: "6.13" for 6.13 and
    later, "before-6.13" for the kernels before."""
    older = tuple(map(int, kernel.split("."))) < tuple(map(int, changed_in.split(".")))
    return f"before-{changed_in}" if older else changed_in


def check_kernel(kernel: str) -> None:
    """ValueError for a version not in `KERNELS`."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r}: one of {', '.join(KERNELS)}")
