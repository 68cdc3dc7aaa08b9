"""KVM_SET_USER_MEMORY_REGION against the kernel: random call sequences applied to this
host's KVM and to `engine.Vm` configured as this host (its number of address spaces from
KVM_CAP_MULTI_ADDRESS_SPACE), the same errno for every call, 10,000 calls a run."""

from __future__ import annotations

import os

from mmuscope.engine import KvmError, Vm
from mmuscope.engine.kvm.memslot_fuzz import random_calls

from tests.kvm_host import needs_kvm

CALLS, PER_VM = 10_000, 2_500
KVM_CAP_MULTI_ADDRESS_SPACE = 118


def _errno(vm: object, call: tuple[int, int, int, int, int]) -> int:
    try:
        vm.set_user_memory_region(*call)  # type: ignore[attr-defined]
    except KvmError as err:
        return err.errno or -1
    return 0


@needs_kvm
def test_every_call_gets_the_kernels_errno() -> None:
    from mmuscope.engine.kvm.vmm import Kvm

    seed = int(os.environ.get("MMUSCOPE_FUZZ_SEED", "11"))
    outcomes: dict[int, int] = {}
    with Kvm() as kvm:
        spaces = max(1, kvm.check_extension(KVM_CAP_MULTI_ADDRESS_SPACE))
        for round_ in range(CALLS // PER_VM):
            with kvm.create_vm() as kernel:
                bases = tuple(kernel.alloc_memory(16 * 4096).address for _ in range(3))
                model = Vm(address_spaces=spaces, track_all=False)
                done: list[tuple[int, int, int, int, int]] = []
                for call in random_calls(seed * 1000 + round_, PER_VM, bases):
                    want, got = _errno(kernel, call), _errno(model, call)
                    done.append(call)
                    assert got == want, (
                        f"call {len(done)} of round {round_} (seed {seed}): kernel "
                        f"{os.strerror(want) if want else 'ok'}, engine "
                        f"{os.strerror(got) if got else 'ok'}; last calls {done[-5:]}"
                    )
                    outcomes[want] = outcomes.get(want, 0) + 1
                model.audit()
    assert sum(outcomes.values()) == CALLS
    assert outcomes.get(0, 0) > CALLS // 10  # real creates, deletes, moves happened
    assert {22, 17} <= set(outcomes)  # EINVAL and EEXIST both reached
