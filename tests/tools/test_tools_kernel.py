"""The book's kernels run quietly (tools.book.build.book_kernel_manager): no "Kernel is running over TCP without
encryption" once per page, and whatever a kernel does write to its own log stops the build with it; the ``python3``
kernel is registered for this interpreter when it is missing or starts another (tools.book.build.ensure_kernel)."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import nbformat
import pytest

from tools.book import build


def _notebook(path, source: str):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


def test_a_quiet_kernel_runs_encrypted_and_says_nothing(tmp_path):
    src = _notebook(tmp_path / "quiet.ipynb", "print(1 + 1)")
    build.execute_notebook(src, tmp_path / "out.ipynb", {}, tmp_path)
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert out.cells[0].outputs[0]["text"] == "2\n"
    assert not (tmp_path / "out.kernel.log").exists(), "the kernel's log is removed once read"
    assert build.book_kernel_manager()().transport_encryption == "required"


def test_a_kernel_that_logs_a_warning_stops_the_build_with_it(tmp_path):
    src = _notebook(tmp_path / "loud.ipynb", "get_ipython().kernel.log.warning('something new')")
    with pytest.raises(build.BookError, match=r"wrote to its log:\n  \[IPKernelApp\] WARNING \| something new"):
        build.execute_notebook(src, tmp_path / "out.ipynb", {}, tmp_path)


def test_a_finished_kernel_is_shut_down_without_an_interrupt(monkeypatch):
    """jupyter_client interrupts before every shutdown; a kernel busy with its last message then logs
    "KeyboardInterrupt caught in kernel", which would stop the build for nothing."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    sent = []

    async def interrupt(self):
        sent.append(self.shutting_down)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    km = build.book_kernel_manager()()
    asyncio.run(km._async_interrupt_kernel())
    km.shutting_down = True
    asyncio.run(km._async_interrupt_kernel())
    assert sent == [False], "an interrupt while running is passed on; at shutdown none is sent"


@pytest.mark.parametrize("specs, registers", [({}, True), ({"python3": [sys.executable]}, False),
                                              ({"python3": ["{python}"]}, False),
                                              ({"python3": ["/another/env/bin/python"]}, True),
                                              ({"python3": ["no-such-python-here"]}, True),
                                              ({"other": [sys.executable]}, True)])
def test_the_kernel_is_registered_when_missing_or_for_another_interpreter(monkeypatch, specs, registers):
    class Specs:  # a KernelSpecManager that holds ``specs`` (name -> argv)
        def find_kernel_specs(self):
            return {name: f"/kernels/{name}" for name in specs}

        def get_kernel_spec(self, name):
            return SimpleNamespace(argv=specs[name])

    ran = []
    monkeypatch.setattr(build, "KernelSpecManager", Specs)
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    build.ensure_kernel(log=lambda *a: None)
    assert bool(ran) == registers
    if registers:
        assert ran == [[sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3",
                        "--display-name", "Python 3 (curvature-gap)"]]
