"""engine.mmu.spte: spte bit layout, MMIO spte caching and its generation (docs/kvm.md
§5).

The hex constants below are worked out by hand from the bit layout (arithmetic in the
comments), not printed by the code under test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.mmu.spte import (
    ACC_ALL,
    ACC_EXEC_MASK,
    ACC_USER_MASK,
    ACC_WRITE_MASK,
    FROZEN_SPTE,
    KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS,
    MMIO_SPTE_GEN_HIGH_MASK,
    MMIO_SPTE_GEN_LOW_MASK,
    MMIO_SPTE_GEN_MASK,
    PT_PRESENT_MASK,
    REMOVED_SPTE,
    SHADOW_NONPRESENT_VALUE,
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    VMX_EPT_MISCONFIG_WX_VALUE,
    VMX_EPT_RWX_MASK,
    MmioCachingDisabledError,
    RetPf,
    SpteConfig,
    check_mmio_spte,
    describe_spte,
    generation_mmio_spte_mask,
    get_mmio_spte_access,
    get_mmio_spte_generation,
    get_mmio_spte_gfn,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    make_mmio_spte,
    make_nonleaf_spte,
    make_spte,
    mmio_gen_wraps,
    spte_access_str,
    spte_to_pfn,
)

EPT = SPTE_CONFIGS["ept"]
EPT_L1TF = SPTE_CONFIGS["ept-l1tf"]
SHADOW = SPTE_CONFIGS["shadow"]
NO_CACHE_2011 = SPTE_CONFIGS["2011-no-mmio-cache"]


@st.composite
def host_configs(draw: st.DrawFn) -> SpteConfig:
    ept = draw(st.booleans())
    return SpteConfig(
        ept=ept,
        ad_bits=draw(st.booleans()) if ept else True,
        host_phys_bits=draw(st.integers(36, 51)),
        l1tf=draw(st.booleans()),
        ept_exec_only=draw(st.booleans()),
    )


@st.composite
def cfg_and_gfn(draw: st.DrawFn) -> tuple[SpteConfig, int]:
    cfg = draw(host_configs())
    return cfg, draw(st.integers(0, (1 << (cfg.host_phys_bits - 12)) - 1))


# -- constants --------------------------------------------------------------------------


def test_layout_constants() -> None:
    assert MMIO_SPTE_GEN_LOW_MASK == 0x7F8  # GENMASK(10, 3): 8 bits from bit 3
    assert MMIO_SPTE_GEN_HIGH_MASK == 0x7FF0_0000_0000_0000  # 0x7ff << 52: bits 52..62
    assert MMIO_SPTE_GEN_MASK == 0x7FFFF  # 19 bits
    assert SPTE_BASE_ADDR_MASK == 0x000F_FFFF_FFFF_F000  # bits 12..51
    assert SPTE_MMU_PRESENT_MASK == 0x800
    assert VMX_EPT_MISCONFIG_WX_VALUE == 0b110
    assert KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS == 1 << 63
    assert [m.value for m in RetPf] == list(range(7))
    assert RetPf.EMULATE == 2 and str(RetPf(4)) == "RET_PF_INVALID"
    assert [m.name for m in RetPf][3:] == ["WRITE_PROTECTED", "INVALID", "FIXED", "SPURIOUS"]


def test_derived_masks() -> None:
    assert (EPT.shadow_mmio_value, EPT.shadow_mmio_mask, EPT.shadow_mmio_access_mask) == (
        0b110,
        0x8000_0000_0000_0007,  # RWX | SUPPRESS_VE (6.10+, kvm_mmu_set_ept_masks)
        0,
    )
    # EPT: SUPPRESS_VE in shadow_present_mask; A/D masks bits 8 and 9 even without A/D
    # (6.13+), 0 without them before (the 2011 configs)
    assert EPT.shadow_present_mask == NO_CACHE_2011.shadow_present_mask == 1 << 63
    no_ad = SPTE_CONFIGS["ept-no-ad"]
    assert (no_ad.shadow_accessed_mask, no_ad.shadow_dirty_mask) == (0x100, 0x200)
    assert (NO_CACHE_2011.shadow_accessed_mask, NO_CACHE_2011.shadow_dirty_mask) == (0, 0)
    # legacy: BIT(51) | PRESENT = 0x0008_0000_0000_0001, access mask W|U = 0b110
    assert SHADOW.shadow_mmio_value == SHADOW.shadow_mmio_mask == 0x0008_0000_0000_0001
    assert SHADOW.shadow_mmio_access_mask == 0b110
    # L1TF, 46 PA bits: GENMASK(45, 41) = 0x1f << 41 = 0x3e00_0000_0000; lower gfn bits 12..40
    assert EPT_L1TF.shadow_nonpresent_or_rsvd_mask == 0x3E00_0000_0000
    assert EPT_L1TF.shadow_nonpresent_or_rsvd_lower_gfn_mask == 0x01FF_FFFF_F000
    assert EPT.shadow_nonpresent_or_rsvd_mask == 0
    # the kernel only applies the L1TF mask below 52 - 5 = 47 cache bits
    assert SpteConfig(l1tf=True, host_phys_bits=47).shadow_nonpresent_or_rsvd_mask == 0
    with pytest.raises(ValueError):
        SpteConfig(ept=False, ad_bits=False)


# -- present sptes ----------------------------------------------------------------------


def test_make_spte_legacy_hex() -> None:
    # 0x800 MMU-present | 0x400 MMU-writable | 0x200 host-writable = 0xe00
    # 0x40 D | 0x20 A | 0x4 U | 0x2 W | 0x1 P = 0x67; pfn 0x12345 << 12 = 0x1234_5000
    assert make_spte(SHADOW, 0x12345, ACC_ALL) == 0x1234_5E67
    nx = make_spte(SHADOW, 0x12345, ACC_WRITE_MASK | ACC_USER_MASK)
    assert nx == 0x8000_0000_1234_5E67  # no exec: NX, bit 63
    assert spte_access_str(SHADOW, nx) == "rw-u"
    # 2M leaf, pfn 0x12400 (512-aligned): + 0x80 PS -> 0xee7
    big = make_spte(SHADOW, 0x12400, ACC_ALL, 2)
    assert big == 0x1240_0EE7 and is_last_spte(big, 2) and spte_to_pfn(big) == 0x12400
    # read-only memslot: no host-writable 0x200, no W 0x2, no MMU-writable 0x400, no D 0x40
    ro = make_spte(SHADOW, 0x12345, ACC_ALL, writable=False)
    assert ro == 0x1234_5825 and spte_access_str(SHADOW, ro) == "r-xu"
    # prefetch with A/D bits: A (0x20) left clear
    assert make_spte(SHADOW, 0x12345, ACC_ALL, accessed=False) == 0x1234_5E47


def test_make_spte_ept_hex() -> None:
    # 0x800 present | 0x200 D | 0x100 A | 0x70 WB<<3 | IPAT | 0x4 X | 0x2 W | 0x1 R (user)
    # bits 57/58 host/MMU-writable = 0x0600_0000_0000_0000, SUPPRESS_VE bit 63
    spte = make_spte(EPT, 0x12345, ACC_ALL)
    assert spte == 0x8600_0000_1234_5B77
    assert spte_access_str(EPT, spte) == "rwxu"  # shadow_user_mask = R, so u prints
    assert not is_mmio_spte(EPT, spte) and is_shadow_present_pte(spte)
    # no A/D bits: AD-disabled marker bit 52, no A/D -> 0x8610_0000_1234_5877
    assert make_spte(NO_CACHE_2011, 0x12345, ACC_ALL) == 0x8610_0000_1234_5877
    # ... prefetched: R (bit 0) saved at 54, X (bit 2) at 56 = 0x0140..., RWX cleared
    tracked = make_spte(NO_CACHE_2011, 0x12345, ACC_ALL, accessed=False)
    assert tracked == 0x8750_0000_1234_5870
    # kvm_mmu_set_spte's r is `shadow_present_mask || P`: SUPPRESS_VE makes it always r
    assert spte_access_str(NO_CACHE_2011, tracked) == "r---"
    assert "access-tracked" in describe_spte(NO_CACHE_2011, tracked, 1)
    with pytest.raises(ValueError, match="writable without read"):
        make_spte(EPT, 0x12345, ACC_WRITE_MASK | ACC_EXEC_MASK)  # would be 0b110: MMIO


def test_make_nonleaf_spte_hex() -> None:
    # legacy: 0x800 | A 0x20 | U 4 | W 2 | P 1 = 0x827
    assert make_nonleaf_spte(SHADOW, 0x1_0000_1000) == 0x1_0000_1827
    # EPT exec-only with A/D: 0x800 | A 0x100 | X 4 | W 2 | R(user) 1 = 0x907, SUPPRESS_VE
    assert make_nonleaf_spte(EPT, 0x1_0000_1000) == 0x8000_0001_0000_1907
    # EPT without A/D: 0x807 plus the AD-disabled marker, bit 52
    assert make_nonleaf_spte(NO_CACHE_2011, 0x1_0000_1000) == 0x8010_0001_0000_1807
    assert not is_last_spte(make_nonleaf_spte(EPT, 0x1000), 2)


_EPT_SAFE_ACCESS = [a for a in range(8) if not (a & ACC_WRITE_MASK and not a & ACC_USER_MASK)]


@settings(max_examples=300)
@given(host_configs(), st.data())
def test_present_spte_never_looks_mmio(cfg: SpteConfig, data: st.DataObject) -> None:
    level = data.draw(st.integers(1, 3))
    align = 1 << (9 * (level - 1))
    pfn = data.draw(st.integers(0, (1 << (cfg.host_phys_bits - 12)) - 1)) & ~(align - 1)
    access = data.draw(st.sampled_from(_EPT_SAFE_ACCESS if cfg.ept else range(8)))
    flags = data.draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    spte = make_spte(cfg, pfn, access, level, writable=flags[0], accessed=flags[1], dirty=flags[2])
    assert is_shadow_present_pte(spte)
    assert not is_mmio_spte(cfg, spte)
    assert spte_to_pfn(spte) == pfn
    assert is_last_spte(spte, level)


# -- MMIO generation --------------------------------------------------------------------


def test_every_generation_round_trips_and_avoids_present_and_pfn_bits() -> None:
    seen = set()
    for gen in range(MMIO_SPTE_GEN_MASK + 1):
        bits = generation_mmio_spte_mask(gen)
        assert get_mmio_spte_generation(bits) == gen
        assert not bits & (SPTE_MMU_PRESENT_MASK | SPTE_BASE_ADDR_MASK | VMX_EPT_RWX_MASK)
        seen.add(bits)
    assert len(seen) == 1 << 19
    with pytest.raises(ValueError):
        generation_mmio_spte_mask(1 << 19)


def test_generation_mask_hex() -> None:
    assert generation_mmio_spte_mask(1) == 0x8  # gen bit 0 -> spte bit 3
    assert generation_mmio_spte_mask(0x100) == 1 << 52  # gen bit 8 -> spte bit 52
    # 0x12345: low byte 0x45 << 3 = 0x228; 0x123 (gen >> 8) << 52 = 0x1230_0000_0000_0000
    assert generation_mmio_spte_mask(0x12345) == 0x1230_0000_0000_0228
    assert generation_mmio_spte_mask(0x7FFFF) == 0x7FF0_0000_0000_07F8


# -- MMIO sptes -------------------------------------------------------------------------


def test_make_mmio_spte_hex() -> None:
    # EPT: gen 0x1230_0000_0000_0228 | 0b110 | gpa 0xfee0_0000 (access mask 0 drops ACC_ALL)
    spte = make_mmio_spte(EPT, 0xFEE00, ACC_ALL, 0x12345)
    assert spte == 0x1230_0000_FEE0_022E
    assert spte & 0b111 == 0b110  # W+X without R: EPT misconfiguration
    # legacy: | BIT(51) 0x0008_0000_0000_0000 | P 1 | access & (W|U) = 6
    assert make_mmio_spte(SHADOW, 0xFEE00, ACC_ALL, 0x12345) == 0x1238_0000_FEE0_022F
    # L1TF, 46 bits: gfn 0x2_0000_0123 -> gpa 0x2000_0012_3000 (bit 45 is in the mask);
    # | mask 0x3e00_0000_0000 | bit 45 << 5 = bit 50 (0x4_0000_0000_0000) | 0b110, gen 0
    l1tf = make_mmio_spte(EPT_L1TF, 0x2_0000_0123, 0, 0)
    assert l1tf == 0x0004_3E00_0012_3006
    assert get_mmio_spte_gfn(EPT_L1TF, l1tf) == 0x2_0000_0123
    # the PFN field now points at 0x3e00_0012_3000 >> 12, not at the gpa: the mitigation
    assert spte_to_pfn(l1tf) == 0x4_3E00_0012_3
    assert describe_spte(EPT, spte, 1) == "MMIO gfn 0xfee00 gen 0x12345 access 0x0"


@settings(max_examples=500)
@given(cfg_and_gfn(), st.integers(0, 7), st.integers(0, MMIO_SPTE_GEN_MASK))
def test_mmio_spte_round_trip(cg: tuple[SpteConfig, int], access: int, gen: int) -> None:
    cfg, gfn = cg
    spte = make_mmio_spte(cfg, gfn, access, gen)
    assert is_mmio_spte(cfg, spte)
    assert not is_shadow_present_pte(spte)
    assert get_mmio_spte_generation(spte) == gen
    assert get_mmio_spte_gfn(cfg, spte) == gfn
    assert get_mmio_spte_access(cfg, spte) == access & cfg.shadow_mmio_access_mask
    assert check_mmio_spte(cfg, spte, gen)
    if cfg.ept:
        assert spte & VMX_EPT_RWX_MASK == VMX_EPT_MISCONFIG_WX_VALUE
    else:  # a reserved PA bit with P set: the #PF has PFEC.RSVD
        assert spte & (1 << 51) and spte & PT_PRESENT_MASK and cfg.host_phys_bits <= 51


@given(cfg_and_gfn(), st.integers(0, (1 << 64) - 1))
def test_memslots_generation_is_masked_to_19_bits(cg: tuple[SpteConfig, int], gen: int) -> None:
    cfg, gfn = cg
    spte = make_mmio_spte(cfg, gfn, ACC_ALL, gen)
    assert get_mmio_spte_generation(spte) == gen & MMIO_SPTE_GEN_MASK


@given(cfg_and_gfn(), st.integers(0, MMIO_SPTE_GEN_MASK), st.integers(1, (1 << 19) - 1))
def test_check_mmio_spte_fails_after_update(
    cg: tuple[SpteConfig, int], gen: int, delta: int
) -> None:
    cfg, gfn = cg
    spte = make_mmio_spte(cfg, gfn, 0, gen)
    assert not check_mmio_spte(cfg, spte, gen + delta)
    assert not check_mmio_spte(cfg, spte, gen | KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS)
    # 2^19 updates later the 19 bits alias: the reason KVM zaps everything on wraparound.
    assert check_mmio_spte(cfg, spte, gen + (1 << 19))


def test_check_mmio_spte_in_progress() -> None:
    spte = make_mmio_spte(EPT, 0x100, 0, 6)
    assert check_mmio_spte(EPT, spte, 6)
    assert not check_mmio_spte(EPT, spte, 6 | KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS)
    assert not check_mmio_spte(EPT, make_spte(EPT, 0x100, ACC_ALL), 6)


@pytest.mark.parametrize("as_id", [0, 1])
def test_wraparound_every_2_pow_18_updates_with_two_address_spaces(as_id: int) -> None:
    gen, wraps = as_id, []  # kvm_create_vm(): generation = as_id; each update adds nr_as = 2
    for update in range(1, (1 << 19) + 1):
        gen += 2
        if mmio_gen_wraps(gen, 2):
            wraps.append(update)
    assert wraps == [1 << 18, 1 << 19]  # 262,144 and 524,288


def test_wraparound_single_address_space() -> None:
    assert mmio_gen_wraps(1 << 19, 1) and not mmio_gen_wraps(1 << 18, 1)
    assert not mmio_gen_wraps(1, 1) and mmio_gen_wraps(1, 2)
    with pytest.raises(ValueError):
        mmio_gen_wraps(0, 3)


# -- hosts without MMIO caching ---------------------------------------------------------


def test_52_bit_host_disables_legacy_caching_but_not_ept() -> None:
    cfg = SPTE_CONFIGS["shadow-52bit"]
    assert cfg.shadow_mmio_value == 0 and not cfg.mmio_caching_enabled
    with pytest.raises(MmioCachingDisabledError):
        make_mmio_spte(cfg, 0x1000, ACC_ALL, 0)
    assert not is_mmio_spte(cfg, 0)
    assert not is_mmio_spte(cfg, 0x0008_0000_FEE0_0001)
    assert SpteConfig(ept=True, host_phys_bits=52).mmio_caching_enabled


def test_2011_preset_never_makes_mmio_sptes() -> None:
    """Documented choice: make_mmio_spte raises MmioCachingDisabledError (never returns 0)."""
    assert not NO_CACHE_2011.mmio_caching_enabled
    with pytest.raises(MmioCachingDisabledError):
        make_mmio_spte(NO_CACHE_2011, 0xFEE00, ACC_ALL, 0)
    assert not is_mmio_spte(NO_CACHE_2011, 0x1230_0000_FEE0_022E)  # the EPT example above


def test_removed_spte_is_neither_present_nor_mmio() -> None:
    for cfg in SPTE_CONFIGS.values():
        assert not is_mmio_spte(cfg, REMOVED_SPTE)
        assert not is_shadow_present_pte(REMOVED_SPTE)
        assert describe_spte(cfg, REMOVED_SPTE, 1).startswith("frozen")
        assert describe_spte(cfg, FROZEN_SPTE, 1).startswith("frozen")
        assert not is_mmio_spte(cfg, FROZEN_SPTE) and not is_shadow_present_pte(FROZEN_SPTE)
        assert describe_spte(cfg, SHADOW_NONPRESENT_VALUE, 1) == "not present"


def test_out_of_range_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        make_mmio_spte(EPT, 1 << (46 - 12), 0, 0)  # gfn at MAXPHYADDR: kvm_mmu_max_gfn()
    with pytest.raises(ValueError):
        make_spte(EPT, 1 << 40, ACC_ALL)  # pfn bit 40 = spte bit 52: outside the PFN field
    with pytest.raises(ValueError):
        make_spte(EPT, 0x12345, ACC_ALL, 2)  # not 2M-aligned
    with pytest.raises(ValueError, match="MMIO"):
        make_spte(SHADOW, 1 << 39, ACC_ALL)  # spte bit 51 + P: the legacy MMIO pattern
    # a pfn above MAXPHYADDR but inside the field (an hva stand-in) is accepted
    assert spte_to_pfn(make_spte(EPT, 0x7F00_0000_0, ACC_ALL)) == 0x7F00_0000_0


def test_describe_spte() -> None:
    assert describe_spte(EPT, 0, 1) == "not present"
    assert describe_spte(EPT, make_spte(EPT, 0x12345, ACC_ALL), 1) == (
        "L1 leaf pfn 0x12345 (rwxu) 4K A D"
    )
    assert describe_spte(SHADOW, make_spte(SHADOW, 0x12400, ACC_ALL, 2, dirty=False), 2) == (
        "L2 leaf pfn 0x12400 (rwxu) 2M A"
    )
    assert describe_spte(EPT, make_nonleaf_spte(EPT, 0x5000), 3) == "L3 table -> pfn 0x5 (rwxu)"
