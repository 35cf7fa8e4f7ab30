"""CPU allocator setting for tangent-batched passes.

PyTorch's CPU tensors come from glibc ``malloc``. Blocks above the mmap threshold (128 KiB at start,
adapting upwards) are returned to the kernel on ``free`` and page-faulted back on the next
allocation, and the heap top is trimmed back to the kernel too. A Hessian pass allocates and frees
hundreds of 1–5 MB tangent tensors, so on a 2-core machine a large share of the time went to page
faults. :func:`keep_freed_memory` raises the mmap threshold to its maximum (32 MiB) and disables
trimming, so freed blocks are reused. It changes only *when* memory goes back to the kernel, never
any value; peak memory is unchanged. It is process-wide and idempotent, and it does nothing where glibc's
``mallopt`` is unavailable.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_done = False


def keep_freed_memory() -> bool:
    """Tune glibc malloc for many same-sized multi-MB allocations; True if applied (or already)."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024))
    ok &= bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    ok &= bool(mallopt(_M_TOP_PAD, 64 * 1024 * 1024))
    _done = ok
    return ok
