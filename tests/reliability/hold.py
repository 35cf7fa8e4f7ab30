"""Deterministic kill points for the kill tests: a worker process stops itself at a named point and says so.

A kill test SIGKILLs its worker when the worker prints ``HOLD <what>`` on stdout, not after a timer: the worker
has then reached exactly that point (a given optimiser step; a given file written to its temporary name but
not yet synced and renamed into place) and waits there to be killed, so every run of the test kills at the
same point. :func:`kill_at_hold` is the test's side.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

PREFIX = "HOLD "
WAIT_S = 600  # a worker nobody kills exits on its own after this long (status 3), never lingers


def hold(what: str) -> None:
    """Announce ``what`` on stdout and wait to be killed."""
    print(PREFIX + what, flush=True)
    time.sleep(WAIT_S)
    os._exit(3)


def hold_after_step(n: int) -> None:
    """Hold right after the ``n``-th optimiser step of this process (before the training loop checkpoints it)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    count = 0

    def post(optimizer, args, kwargs):
        nonlocal count
        count += 1
        if count == n:
            hold(f"after optimiser step {n}")

    register_optimizer_step_post_hook(post)


@contextlib.contextmanager
def holding_in_fsync(what: str, when: bool = True):
    """Within the block, the first ``os.fsync`` holds (:func:`hold`): ``curvature_gap.io.atomic_write_bytes``
    syncs its temporary file before renaming it into place, so a write inside the block stops with the bytes in
    the temporary file and the target not yet replaced."""
    if not when:
        yield
        return
    real = os.fsync

    def fsync(fd):
        hold(what)

    os.fsync = fsync
    try:
        yield
    finally:
        os.fsync = real


def hold_while_writing(match, what: str | None = None) -> None:
    """Hold in the ``os.fsync`` of a temporary file whose target path satisfies ``match(path)``.

    ``curvature_gap.io.atomic_write_bytes`` writes ``path`` to ``tempfile.mkstemp(dir=path.parent,
    prefix=f".{path.name}.")``, syncs it, then renames it into place: the hold stops it with the bytes in the
    temporary file and ``path`` not yet replaced. Only ``tempfile.mkstemp`` and ``os.fsync`` are wrapped, nothing
    of the package, so the code hashes of the results are those of an unpatched run."""
    import tempfile

    real_mkstemp, real_fsync, targets = tempfile.mkstemp, os.fsync, {}

    def mkstemp(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        prefix = kwargs.get("prefix") or ""
        if kwargs.get("dir") and prefix.startswith(".") and prefix.endswith("."):
            targets[fd] = Path(kwargs["dir"]) / prefix[1:-1]
        return fd, name

    def fsync(fd):
        target = targets.pop(fd, None)
        if target is not None and match(target):
            hold(what or f"writing {target}")
        real_fsync(fd)

    tempfile.mkstemp, os.fsync = mkstemp, fsync


def kill_at_hold(cmd: list[str], env: dict, stderr_path, timeout_s: float = 600) -> tuple[str, str]:
    """Start ``cmd``, SIGKILL it when it prints its ``HOLD`` line; returns (what it held at, its stdout so far).

    Fails (AssertionError) when the worker ends without holding. ``timeout_s`` only bounds a hung worker."""
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    watchdog = threading.Timer(timeout_s, proc.kill)
    watchdog.start()
    lines, held = [], None
    try:
        for line in proc.stdout:
            if line.startswith(PREFIX):
                held = line[len(PREFIX):].strip()
                proc.send_signal(signal.SIGKILL)
                break
            lines.append(line)
        proc.stdout.close()
        rc = proc.wait()
    finally:
        watchdog.cancel()
    out = "".join(lines)
    assert held is not None, (f"the worker ended (exit status {rc}) without reaching its hold point\n"
                              + out[-2000:] + open(stderr_path).read()[-2000:])
    assert rc == -signal.SIGKILL, f"the worker ended with status {rc}, not by the kill"
    return held, out
