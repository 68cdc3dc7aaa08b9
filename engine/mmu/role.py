"""`union kvm_mmu_page_role`: what a shadow page shadows, packed in one u32 `word`.

docs/kvm.md §4.2 (arch/x86/include/asm/kvm_host.h).  Two shadow pages for the same gfn
are the same page only if their role words are equal, so the role is half of the key of
the page hash (the gfn is the other half).  Bit order, low to high: `level:4`,
`has_4_byte_gpte:1`, `quadrant:2`, `direct:1`, `access:3`, `invalid:1`, `efer_nx:1`,
`cr0_wp:1`, `smep_andnot_wp:1`, `smap_andnot_wp:1`, `ad_disabled:1`, `guest_mode:1`,
`passthrough:1`, `is_mirror:1` (bit 19, 6.18: the TDX mirror page tables of the TDP MMU),
4 unused bits, `smm:8` (the top byte, so `kvm_memslots_for_spte_role` can shift it out).
Before `is_mirror` (6.14: Isaku Yamahata, "KVM: x86/mmu: Add an is_mirror member for union
kvm_mmu_page_role", the TDX mirror page tables in the "KVM changes for Linux 6.14" pull)
bit 19 was unused: 5 unused bits; the word is the same for every page the model makes,
which never mirrors.
The `kvm_mmu_get_page` tracepoint prints the access bits through `access_str[]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ACCESS_STR = ("---", "--x", "w--", "w-x", "-u-", "-ux", "wu-", "wux")
ACC_EXEC_MASK, ACC_WRITE_MASK, ACC_USER_MASK = 1, 2, 4
ACC_ALL = ACC_EXEC_MASK | ACC_WRITE_MASK | ACC_USER_MASK

PG_LEVEL_4K, PG_LEVEL_2M, PG_LEVEL_1G = 1, 2, 3
PT64_ROOT_4LEVEL, PT64_ROOT_5LEVEL = 4, 5

# (field, first bit, width) in the order of the C bitfield.
_LAYOUT: tuple[tuple[str, int, int], ...] = (
    ("level", 0, 4),
    ("has_4_byte_gpte", 4, 1),
    ("quadrant", 5, 2),
    ("direct", 7, 1),
    ("access", 8, 3),
    ("invalid", 11, 1),
    ("efer_nx", 12, 1),
    ("cr0_wp", 13, 1),
    ("smep_andnot_wp", 14, 1),
    ("smap_andnot_wp", 15, 1),
    ("ad_disabled", 16, 1),
    ("guest_mode", 17, 1),
    ("passthrough", 18, 1),
    ("is_mirror", 19, 1),
    ("smm", 24, 8),
)


@dataclass(frozen=True, slots=True)
class KvmMmuPageRole:
    """`union kvm_mmu_page_role` (kvm_host.h): the bitfields `_LAYOUT` places in `word`
    (frozen and hashable: the pages' role keys).  `word`, the u32 the kernel compares
    (`role.word`), is made once, with the role."""

    level: int = PG_LEVEL_4K
    has_4_byte_gpte: int = 0
    quadrant: int = 0
    direct: int = 0
    access: int = ACC_ALL
    invalid: int = 0
    efer_nx: int = 1
    cr0_wp: int = 1
    smep_andnot_wp: int = 0
    smap_andnot_wp: int = 0
    ad_disabled: int = 0
    guest_mode: int = 0
    passthrough: int = 0
    is_mirror: int = 0
    smm: int = 0
    word: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        word = 0
        for name, shift, width in _LAYOUT:
            value = getattr(self, name)
            if not 0 <= value < 1 << width:
                raise ValueError(f"role.{name} = {value} does not fit in {width} bits")
            word |= value << shift
        object.__setattr__(self, "word", word)

    @classmethod
    def from_word(cls, word: int) -> KvmMmuPageRole:
        values = {name: (word >> shift) & ((1 << width) - 1) for name, shift, width in _LAYOUT}
        return cls(**values)

    @property
    def access_str(self) -> str:
        return ACCESS_STR[self.access]

    def child(self, access: int, direct: bool, quadrant: int = 0) -> KvmMmuPageRole:
        """The role of a page one level down (`kvm_mmu_child_role`): parent's role with
        `level - 1`, the given access and directness, `passthrough` cleared."""
        key = (self, access, direct, quadrant)
        child = _CHILDREN.get(key)
        if child is not None:  # a role is a value: the same parent, the same child
            return child
        if self.level <= PG_LEVEL_4K:
            raise ValueError("a 4K page has no child pages")
        child = _CHILDREN[key] = replace(
            self,
            level=self.level - 1,
            access=access,
            direct=int(direct),
            passthrough=0,
            quadrant=quadrant if self.has_4_byte_gpte else 0,
        )
        return child

    def invalidated(self) -> KvmMmuPageRole:
        return replace(self, invalid=1)


_CHILDREN: dict[tuple[KvmMmuPageRole, int, bool, int], KvmMmuPageRole] = {}  # `child`'s


def tdp_root_role(
    levels: int = PT64_ROOT_4LEVEL, smm: bool = False, ad_disabled: bool = False
) -> KvmMmuPageRole:
    """A direct (TDP/EPT) root, `kvm_calc_tdp_mmu_root_page_role()` (6.18 mmu.c): every
    access allowed; `ad_disabled = !kvm_ad_enabled` (EPT without A/D bits)."""
    return KvmMmuPageRole(
        level=levels, direct=1, access=ACC_ALL, smm=int(smm), ad_disabled=int(ad_disabled)
    )
