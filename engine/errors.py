"""`KvmError`: a refused ioctl, carrying the kernel's errno (an `OSError`)."""

from __future__ import annotations

import errno as _errno
import os


class KvmError(OSError):
    """KVM refused the request; ``.errno`` is the positive errno the ioctl returned negated.

    ``str(err)`` reads like the kernel's answer as userspace sees it, for example
    ``KVM_SET_USER_MEMORY_REGION: EEXIST (File exists): slot 3 overlaps slot 1``.
    """

    def __init__(self, err: int, reason: str, ioctl: str = "KVM_SET_USER_MEMORY_REGION") -> None:
        super().__init__(err, os.strerror(err))
        self.reason = reason
        self.ioctl = ioctl

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno or 0, str(self.errno))

    def __str__(self) -> str:
        return f"{self.ioctl}: {self.errno_name} ({self.strerror}): {self.reason}"


class AuditError(AssertionError):
    """An engine structure broke one of its invariants (like KVM's old mmu audit code)."""
