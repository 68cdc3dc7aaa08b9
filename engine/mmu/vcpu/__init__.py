"""The vCPU around a fault: its VM exits and entries (vmx.py, 6.18 vmx.c/svm.c), the
instruction emulator and the MMIO buses it writes to (emulate.py, x86.c), its MMIO info
cache (mmio_info.py, `vcpu->arch.mmio_gfn`) and its last-used memslot
(vcpu_memslot.py, `vcpu->last_used_slot`)."""
