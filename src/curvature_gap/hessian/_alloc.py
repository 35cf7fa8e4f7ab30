"""CPU allocator setting for tangent-batched passes.

PyTorch's CPU tensors come from glibc ``malloc``. Blocks above the mmap threshold (128 KiB at start, adapting upwards)
are returned to the kernel on ``free`` and page-faulted back on the next allocation, and the heap top is trimmed back to
the kernel too. A Hessian pass allocates and frees hundreds of 1–5 MB tangent tensors, so on a 2-core machine a large
share of the time went to page faults. :func:`keep_freed_memory` raises the mmap threshold to its maximum (32 MiB) and
disables trimming, so freed blocks are reused. It changes only *when* memory goes back to the kernel, never any value;
peak memory is unchanged. It is process-wide and idempotent, and it does nothing where glibc's ``mallopt`` is
unavailable.
"""
from __future__ import annotations

import ctypes
import ctypes.util

# (mallopt parameter, value): M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB, M_TOP_PAD 64 MiB
_SETTINGS = ((-3, 32 * 1024 * 1024), (-1, 1 << 30), (-2, 64 * 1024 * 1024))
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
    _done = all([bool(mallopt(k, v)) for k, v in _SETTINGS])  # every setting tried
    return _done
