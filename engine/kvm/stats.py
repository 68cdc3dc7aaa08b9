"""The binary statistics of a VM or vCPU fd: `KVM_GET_STATS_FD` (virt/kvm/binary_stats.c,
Documentation/virt/kvm/api.rst).  The header names the descriptors; each descriptor
gives a statistic's name, type (cumulative, instant, peak), size in u64s and offset in
the data block.  `StatsFd.read()` reads the data block again with one `pread`, so a
VMM can sample the counters (kvm_stat's source) before and after every slice.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from .uapi import KVM_STATS_TYPE_MASK, KVM_STATS_TYPE_PEAK, STATS_DESC, STATS_HEADER


@dataclass(frozen=True, slots=True)
class StatDesc:
    name: str
    kind: int  # KVM_STATS_TYPE_*
    size: int  # number of u64 values (1 but for histograms)
    offset: int  # byte offset in the data block

    @property
    def peak(self) -> bool:
        return self.kind == KVM_STATS_TYPE_PEAK


class StatsFd:
    """An open stats fd; `close()` it (or use it as a context manager)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        header = os.pread(fd, STATS_HEADER.size, 0)
        _flags, name_size, num_desc, id_off, desc_off, data_off = STATS_HEADER.unpack(header)
        self.id = os.pread(fd, name_size, id_off).split(b"\0", 1)[0].decode()
        step = STATS_DESC.size + name_size
        raw = os.pread(fd, step * num_desc, desc_off)
        descs = []
        for i in range(num_desc):
            flags, _exp, size, offset, _bucket = STATS_DESC.unpack_from(raw, i * step)
            name = raw[i * step + STATS_DESC.size : (i + 1) * step].split(b"\0", 1)[0]
            descs.append(StatDesc(name.decode(), flags & KVM_STATS_TYPE_MASK, size, offset))
        self.descs = tuple(descs)
        self.data_offset = data_off
        self.data_size = max((d.offset + 8 * d.size for d in descs), default=0)

    def read(self) -> dict[str, int]:
        """Every single-valued statistic by name (histograms summed)."""
        data = os.pread(self.fd, self.data_size, self.data_offset)
        out: dict[str, int] = {}
        for d in self.descs:
            values = struct.unpack_from(f"<{d.size}Q", data, d.offset)
            out[d.name] = sum(values)
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> StatsFd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stats_delta(
    before: dict[str, int], after: dict[str, int], peaks: frozenset[str] = frozenset()
) -> dict[str, int]:
    """after - before for counters; the value after for peaks (max_mmu_rmap_size, ...)
    and instants (pages_4k is a level: its delta is what the run added)."""
    return {
        name: value if name in peaks else value - before.get(name, 0)
        for name, value in after.items()
    }
