"""Memslot engine speed, as ratios against baselines measured in the same run.

    .venv/bin/python benchmarks/memslot_speed.py [--json]

1. Bare lookup on 512 slots (binary, rbtree, wbtree) against the floor for Python: a
   function doing `bisect` over the sorted base_gfns plus a bounds check.
2. A last_used_slot cache hit (`Vm.gfn_to_memslot`) against a function doing a dict lookup.
3. Creating 32764 slots one by one: the mean cost of one update at ~32k slots against
   the mean at 512 slots (rbtree only, as the kernel keeps it, and all five structures).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from bisect import bisect_right
from collections.abc import Callable

from mmuscope.engine import Vm
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.memslots.memslot import MemorySlot

UA = 0x7F00_0000_0000
REPEAT = 7


def best_ns(fn: Callable[[int], object], gfns: list[int]) -> float:
    """Best of REPEAT runs, nanoseconds per call."""
    best = float("inf")
    for _ in range(REPEAT):
        start = time.perf_counter_ns()
        for gfn in gfns:
            fn(gfn)
        best = min(best, (time.perf_counter_ns() - start) / len(gfns))
    return best


def gfn_stream(slots: list[MemorySlot], count: int, seed: int = 1) -> list[int]:
    """Half hits spread over the slots, half misses in the holes (MMIO)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        slot = rng.choice(slots)
        out.append(
            slot.base_gfn + rng.randrange(slot.npages)
            if rng.random() < 0.5
            else slot.end_gfn + rng.randrange(1, 64)
        )
    return out


def random_512() -> Vm:
    """512 slots of distinct random sizes: a wbtree with untied weights is a treap."""
    rng = random.Random(512)
    vm, gfn = Vm(), 0
    for sid in range(512):
        npages = rng.randrange(1, 4096) * 16 + sid  # distinct
        vm.set_user_memory_region(sid, 0, gfn << 12, npages << 12, UA + (gfn << 12))
        gfn += npages + rng.randrange(1, 256)
    return vm


def bisect_floor(slots: list[MemorySlot]) -> Callable[[int], object]:
    bases = [s.base_gfn for s in slots]
    ends = [s.end_gfn for s in slots]

    def lookup(gfn: int) -> object:
        i = bisect_right(bases, gfn) - 1
        if i >= 0 and gfn < ends[i]:
            return slots[i]
        return None

    return lookup


def bench_lookups(name: str, vm: Vm) -> list[dict[str, object]]:
    slots = vm.memslots()
    gfns = gfn_stream(slots, 20000)
    floor = best_ns(bisect_floor(slots), gfns)
    rows: list[dict[str, object]] = [{"layout": name, "what": "bisect floor", "ns": floor}]
    for strategy in ("binary", "rbtree", "wbtree"):
        structure = vm.memslot_set(0).structure(strategy)
        ns = best_ns(structure.search, gfns)
        rows.append({"layout": name, "what": strategy, "ns": ns, "ratio": ns / floor})
    return rows


def bench_cache_hit() -> list[dict[str, object]]:
    vm = build_vm(preset("pc-4g"))
    gfns = [0x100 + i for i in range(20000)]  # all in one RAM slot: warm cache
    vm.gfn_to_memslot(gfns[0])
    table = {g: g for g in gfns}

    def dict_lookup(gfn: int) -> object:
        return table.get(gfn)

    base = best_ns(dict_lookup, gfns)
    ns = best_ns(vm.gfn_to_memslot, gfns)
    return [
        {"what": "dict lookup", "ns": base},
        {"what": "last_used_slot hit", "ns": ns, "ratio": ns / base},
    ]


def bench_updates(track_all: bool) -> dict[str, object]:
    vm = Vm(track_all=track_all)
    per_update: list[int] = []
    for sid in range(32764):
        gpa = sid << 21
        start = time.perf_counter_ns()
        vm.set_user_memory_region(sid, 0, gpa, 1 << 21, UA + gpa)
        per_update.append(time.perf_counter_ns() - start)
    early = sorted(per_update[256:768])[256]  # medians of 512 updates around 512 slots
    late = sorted(per_update[-512:])[256]  # ... and at 32k slots
    return {
        "structures": "all five" if track_all else "rbtree only",
        "ns_at_512": early,
        "ns_at_32k": late,
        "ratio": late / early,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {
        "lookup_512": bench_lookups("assigned-devices", build_vm(preset("assigned-devices")))
        + bench_lookups("random-512", random_512()),
        "cache_hit": bench_cache_hit(),
        "update_32k": [bench_updates(False), bench_updates(True)],
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("bare lookup, 512 slots (ns per lookup; ratio to the bisect floor, goal <= 2.0)")
    for row in results["lookup_512"]:
        ratio = f"  x{row['ratio']:.2f}" if "ratio" in row else ""
        print(f"  {row['layout']:<17} {row['what']:<13} {row['ns']:8.1f}{ratio}")
    print("cache hit (ns per lookup; ratio to a dict lookup, goal <= 1.5)")
    for row in results["cache_hit"]:
        ratio = f"  x{row['ratio']:.2f}" if "ratio" in row else ""
        print(f"  {row['what']:<20} {row['ns']:8.1f}{ratio}")
    print("one update while creating 32764 slots (median ns; ratio 32k / 512, goal <= 2.0)")
    for row in results["update_32k"]:
        print(
            f"  {row['structures']:<12} at 512: {row['ns_at_512']:>8}  at 32k: "
            f"{row['ns_at_32k']:>8}  x{row['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
