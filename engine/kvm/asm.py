"""Guest code, assembled with iced-x86 (a maintained x86 encoder/decoder), never as
hand-written opcode bytes.

A slice of a guest program is straight-line code of *sweeps* — a loop that loads from,
stores to, or loads then stores back to `count` addresses `stride` bytes apart, a byte
(`%bl`) or a quadword (`%rbx`) at a time — ending with a store of `%bl` to the MMIO
doorbell, where the VMM takes over (a CPL-3 guest cannot `hlt`, docs/kvm.md §11.3).
`memory_instructions()` finds the loads and stores in assembled code (the model emulates
them as the kernel does: their rip and bytes are `kvm_emulate_insn`'s); `decode()` turns
instruction bytes (e.g. `kvm_emulate_insn`'s) back into text.
"""

from __future__ import annotations

from dataclasses import dataclass

from iced_x86 import (
    BlockEncoder,
    Code,
    Decoder,
    Formatter,
    FormatterSyntax,
    Instruction,
    MemoryOperand,
    OpKind,
    Register,
)

READ, WRITE, RMW = "read", "write", "rmw"
KINDS = (READ, WRITE, RMW)
WIDTHS = (1, 8)  # bytes an access moves: mov %bl or mov %rbx
LABEL_BASE = 1 << 60  # pseudo addresses naming loop heads for the block encoder


@dataclass(frozen=True, slots=True)
class Sweep:
    """`count` accesses of one kind and `width` bytes at `gva`, `gva + stride`, ..."""

    gva: int
    count: int
    kind: str = WRITE
    stride: int = 4096
    width: int = 1

    def __post_init__(self) -> None:
        if (
            self.kind not in KINDS
            or self.count < 1
            or not 0 < self.stride < 1 << 31
            or self.width not in WIDTHS
        ):
            raise ValueError(f"bad sweep {self}")

    def addresses(self) -> range:
        return range(self.gva, self.gva + self.count * self.stride, self.stride)


def _sweep(sweep: Sweep, label: int) -> list[Instruction]:
    at_rax = MemoryOperand(Register.RAX)
    if sweep.width == 8:
        load, store, rbx = Code.MOV_R64_RM64, Code.MOV_RM64_R64, Register.RBX
    else:
        load, store, rbx = Code.MOV_R8_RM8, Code.MOV_RM8_R8, Register.BL
    head: list[Instruction] = []
    if sweep.kind in (READ, RMW):
        head.append(Instruction.create_reg_mem(load, rbx, at_rax))
    if sweep.kind in (WRITE, RMW):
        head.append(Instruction.create_mem_reg(store, at_rax, rbx))
    head[0].ip = label
    return [
        Instruction.create_reg_u64(Code.MOV_R64_IMM64, Register.RAX, sweep.gva),
        Instruction.create_reg_u32(Code.MOV_R32_IMM32, Register.ECX, sweep.count),
        *head,
        Instruction.create_reg_i32(Code.ADD_RM64_IMM32, Register.RAX, sweep.stride),
        Instruction.create_reg(Code.DEC_RM32, Register.ECX),
        Instruction.create_branch(Code.JNE_REL32_64, label),
    ]


def assemble_slice(
    sweeps: tuple[Sweep, ...], doorbell_gva: int, rip: int, load_cr3: int | None = None
) -> bytes:
    """The code of one slice, to be placed at guest address `rip`; with `load_cr3`, it
    first loads CR3 with that value (`mov %rax,%cr3`: code for CPL 0)."""
    instructions: list[Instruction] = []
    if load_cr3 is not None:
        instructions += [
            Instruction.create_reg_u64(Code.MOV_R64_IMM64, Register.RAX, load_cr3),
            Instruction.create_reg_reg(Code.MOV_CR_R64, Register.CR3, Register.RAX),
        ]
    for i, sweep in enumerate(sweeps):
        instructions += _sweep(sweep, LABEL_BASE + i)
    instructions += [
        Instruction.create_reg_u64(Code.MOV_R64_IMM64, Register.RAX, doorbell_gva),
        Instruction.create_mem_reg(Code.MOV_RM8_R8, MemoryOperand(Register.RAX), Register.BL),
    ]
    encoder = BlockEncoder(64)
    encoder.add_many(instructions)
    return bytes(encoder.encode(rip))


def memory_instructions(code: bytes, rip: int) -> list[tuple[int, bytes]]:
    """(rip, bytes) of each instruction of `code` (placed at `rip`) that reads or writes
    memory, in order."""
    return instructions(code, rip, memory_only=True)


def instructions(code: bytes, rip: int, memory_only: bool = False) -> list[tuple[int, bytes]]:
    """(rip, bytes) of each instruction of `code` (placed at `rip`), in order: all, or
    only those that read or write memory."""
    found: list[tuple[int, bytes]] = []
    for instruction in Decoder(64, code, ip=rip):
        if instruction.code == Code.INVALID:
            break
        ops = range(instruction.op_count)
        if not memory_only or any(instruction.op_kind(i) == OpKind.MEMORY for i in ops):
            start = instruction.ip - rip
            found.append((instruction.ip, code[start : start + instruction.len]))
    return found


def loads_cr3(insn: bytes) -> bool:
    """Whether the instruction `insn` is a `mov` to CR3."""
    found = next(iter(Decoder(64, insn)), None)
    return (
        found is not None and found.code == Code.MOV_CR_R64 and found.op0_register == Register.CR3
    )


def decode(code: bytes, rip: int = 0, limit: int = 1) -> list[str]:
    """The first `limit` instructions of `code` in AT&T syntax (as the kernel's
    `kvm_emulate_insn` readers and objdump print them)."""
    formatter = Formatter(FormatterSyntax.GAS)
    out: list[str] = []
    for instruction in Decoder(64, code, ip=rip):
        if instruction.code == Code.INVALID:
            break
        out.append(formatter.format(instruction))
        if len(out) >= limit:
            break
    return out


def decode_emulated(insn: str, rip: int = 0) -> str:
    """`kvm_emulate_insn`'s bytes as printed (``8a 18``) as one instruction, or the bytes
    themselves when they do not decode."""
    try:
        code = bytes.fromhex(insn.replace(" ", ""))
    except ValueError:
        return insn
    found = decode(code, rip)
    return found[0] if found else insn
