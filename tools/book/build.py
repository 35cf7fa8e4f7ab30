"""``make book``: execute every notebook with papermill into a staged copy of the book, write the generated
pages, and render it with Jupyter Book; any execution error or warning fails the build.

1. **rows** — the rows of ``curvature-gap verify`` the whole build renders: for the ``paper`` profile the
   published ones (``published/paper/verify.json``), used only when they were computed by the current
   code from the current published results (else the build stops with the command that refreshes them);
   for ``smoke`` a ``--quick`` run, cached under ``results/book/`` by the same key;
2. **stage** — ``_config.yml`` (with the repository URL and the links derived from it: ``repository.py``),
   ``_toc.yml``, ``book/`` and the static files into ``_build/stage/``;
3. **execute** — every notebook of the table of contents through papermill (``-p profile -p device``);
   the ``paper`` build renders published results and never computes (``CURVATURE_GAP_NO_COMPUTE``);
4. **tidy** — one parameters cell (the defaults overridden by the values used), so that the page's
   download runs as it was built; the page shows those values in one line, and no plumbing; no absolute
   path of the build machine is left in the notebook;
5. **generate** — the landing summary, every check, errata, notation and reproducibility tables, written
   into the staged pages in place of their ``{include}`` directives (so each page's source holds its text);
6. **render** — ``jupyter-book build -W -n --keep-going``: the HTML lands in ``_build/html``.
"""
from __future__ import annotations

import ast
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill as pm
import yaml
from jupyter_client.kernelspec import KernelSpecManager
from papermill.translators import PythonTranslator

from curvature_gap import checks
from curvature_gap.provenance import checkout_root
from curvature_gap.row import Row
from curvature_gap.config import DEVICES, PROFILES
from curvature_gap.experiments import UnusableResult
from curvature_gap.io import atomic_write_json
from curvature_gap.notebook import NO_COMPUTE_ENV, STATIC_ENV, VERIFY_ENV

from . import numbers, plain, repository, tables

__all__ = ["BookError", "project_root", "build", "toc_notebooks", "execute_notebook", "execute_all", "book_jobs", "tidy_notebook", "book_rows",
           "KERNEL", "book_kernel_manager", "kernel_log_lines", "fault_tests", "merged_parameters", "parameters_line", "parameter_names", "machine_paths",
           "relative_paths", "PARAMS_CLASS", "PAPERMILL_MACHINE_KEYS", "jupyter_book_executable"]

KERNEL = "python3"
CHECKED_TAG = "nbval-check-output"  # nbval compares these cells' outputs (pytest --nbval-lax)


class BookError(RuntimeError):
    """A step of the book build failed (the message says which, and why)."""


def project_root(start=None) -> Path:
    """The checkout root (:func:`curvature_gap.provenance.checkout_root`) from ``start``, else from this
    file; it must hold the book's ``_config.yml``."""
    for c in (start, Path(__file__).resolve().parent):
        d = checkout_root(c)
        if d is not None and (d / "_config.yml").is_file():
            return d
    raise BookError("cannot find the project root (a directory with pyproject.toml, src/curvature_gap and _config.yml)")


# ====================================================================== rows
def book_rows(profile: str, root: Path, log=print) -> tuple[Path, list[Row], str]:
    """(path of the rows' JSON, the rows, where they came from) for a build of ``profile``."""
    if profile == "paper":
        path = root / "published" / "paper" / "verify.json"
        try:
            return path, checks.published_rows(path), "published/paper/verify.json"
        except UnusableResult as exc:
            raise BookError(f"{exc}. The paper book renders the published rows, and they are stale at this "
                            "commit: a maintainer refreshes them with `make reproduce && make publish` (the "
                            "test suite fails until then); `make book PROFILE=smoke` builds the book meanwhile"
                            ) from exc
    path = root / "results" / "book" / "verify-quick.json"
    want = checks.rows_meta(True)
    if path.is_file():
        doc = json.loads(path.read_text())
        if doc.get("meta") == want:
            return path, [Row.from_json(d) for d in doc["rows"]], "curvature-gap verify --quick (cached)"
    log("[book] running curvature-gap verify --quick")
    t0 = time.perf_counter()
    rows = checks.run(quick=True)
    checks.write_rows(path, rows, want)
    log(f"[book] verify: {len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    return path, rows, "curvature-gap verify --quick"


# ====================================================================== notebooks
def toc_notebooks(root: Path) -> list[Path]:
    """The notebooks named in ``_toc.yml``, in book order (relative to the root). A missing file is an error."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc.get("parts", toc.get("chapters", [])))
    out = []
    for f in files:
        p = Path(f)
        if (root / p.with_suffix(".ipynb")).is_file():
            out.append(p.with_suffix(".ipynb"))
        elif not (root / p.with_suffix(".md")).is_file():
            raise BookError(f"_toc.yml names {f}, but neither {f}.ipynb nor {f}.md exists")
    return out


def kernel_runs_this_interpreter() -> bool:
    """Whether the ``python3`` kernel is registered and starts this interpreter (False when there is none)."""
    ksm = KernelSpecManager()
    if KERNEL not in ksm.find_kernel_specs():
        return False
    exe = ksm.get_kernel_spec(KERNEL).argv[0]
    if exe == "{python}":
        return True
    found = shutil.which(exe) if os.sep not in exe else exe
    return bool(found) and os.path.abspath(found) == os.path.abspath(sys.executable)


def ensure_kernel(log=print) -> None:
    """Make the ``python3`` kernel resolve to this interpreter (register it in this environment if not)."""
    if kernel_runs_this_interpreter():
        return
    log(f"[book] registering the {KERNEL} kernel for {sys.executable}")
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
                    "--display-name", "Python 3 (curvature-gap)"], check=True, capture_output=True)


def book_kernel_manager(stderr_path: Path | None = None):
    """The kernel manager the build runs notebooks with: CurveZMQ transport encryption provisioned by the
    manager (``transport_encryption="required"``: the kernelspec ipykernel writes declares it; without it every
    kernel warns "Kernel is running over TCP without encryption", once per page), and with ``stderr_path`` the
    kernel process's own stderr (its log, never a cell's output) written there, for the build to report; no
    interrupt at shutdown (jupyter_client sends one before every shutdown, and a kernel busy with its last
    message then logs a KeyboardInterrupt)."""
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415
    from traitlets import default  # noqa: PLC0415

    class BookKernelManager(AsyncKernelManager):
        @default("transport_encryption")
        def _encrypted(self):
            return "required"

        async def _async_interrupt_kernel(self):
            # jupyter_client interrupts a kernel before every shutdown, also one that has finished its notebook;
            # a kernel then busy with a last message logs "KeyboardInterrupt caught in kernel" (a race, seen once
            # in a build on fig04). A finished notebook has nothing to interrupt: no SIGINT at shutdown.
            if self.shutting_down:
                return None
            return await super()._async_interrupt_kernel()

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if stderr_path is not None:
                with open(stderr_path, "ab") as fh:  # the child keeps its own copy of the descriptor
                    kw["stderr"] = fh
                    return await super()._async_launch_kernel(kernel_cmd, **kw)
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return BookKernelManager


def kernel_log_lines(path: Path) -> list[str]:
    """The non-empty lines a kernel wrote to its own stderr (:func:`book_kernel_manager`)."""
    if not Path(path).is_file():
        return []
    return [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]


def execute_notebook(src: Path, dst: Path, parameters: dict, cwd: Path, timeout: int | None = None) -> float:
    """Execute ``src`` with papermill into ``dst`` as its download will run; returns the wall time.

    ``parameters`` are written into the notebook's own parameters cell first (:func:`merged_parameters`,
    no cell injected), and that notebook is executed with no parameter: what runs is exactly what the
    page's download holds, so every page's download has run to the end in its build. Raises
    :class:`BookError` on an execution error (the partly executed copy with the traceback stays at
    ``dst``) or when parameters are given to a notebook without a parameters cell."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(src, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if parameters and len(cells) != 1:
        raise BookError(f"{src} has {len(cells)} cells tagged `parameters`; one is needed to set {sorted(parameters)}")
    if parameters:
        cells[0].source = merged_parameters(cells[0].source, parameters)
    nbformat.write(nb, dst)
    t0 = time.perf_counter()
    log = dst.with_suffix(".kernel.log")
    log.unlink(missing_ok=True)
    try:
        pm.execute_notebook(str(dst), str(dst), parameters={}, kernel_name=KERNEL, cwd=str(cwd),
                            progress_bar=False, log_output=False, execution_timeout=timeout, report_mode=False,
                            kernel_manager_class=book_kernel_manager(log))
    except pm.PapermillExecutionError as exc:
        raise BookError(f"{src} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
                        f"(executed copy with the traceback: {dst})") from exc
    said = kernel_log_lines(log)
    log.unlink(missing_ok=True)
    if said:  # a quiet kernel says nothing: whatever it says is new, and worth a maintainer's look
        raise BookError(f"the kernel running {src} wrote to its log:\n  " + "\n  ".join(said[:20]))
    return time.perf_counter() - t0


def book_jobs() -> int:
    """How many notebooks the build executes at once: ``BOOK_JOBS`` (the Makefile's), else one per CPU, at most
    two (each kernel then runs on one BLAS thread: a paper-profile page reads results and draws, it computes
    little). Measured on 2 cores: the paper book's notebooks in about half the time of one at a time."""
    raw = os.environ.get("BOOK_JOBS", "")
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise BookError(f"BOOK_JOBS={raw!r}: give a whole number of notebooks to run at once, 1 or more")
        return int(raw)
    return max(1, min(2, os.cpu_count() or 1))


def _execute_one(job: tuple) -> float:
    """A worker of :func:`execute_all`: one notebook executed and tidied (its own kernel, one BLAS thread)."""
    src, dst, parameters, cwd, timeout = job
    seconds = execute_notebook(src, dst, parameters, cwd, timeout)
    tidy_notebook(dst, cwd)
    return seconds


def execute_all(notebooks: list[Path], root: Path, stage: Path, parameters: dict, timeout: int | None, jobs: int,
                log=print) -> dict[str, float]:
    """Execute and tidy every notebook of ``notebooks`` (paths relative to ``root``) into ``stage``, ``jobs`` at
    a time (worker processes; 1: in this process, in order); returns name -> seconds. The first failure stops
    the build: notebooks not yet started are cancelled and its :class:`BookError` is raised."""
    timings: dict[str, float] = {}
    said = " ".join(f"-p {k} {v}" for k, v in parameters.items())
    if jobs <= 1 or len(notebooks) <= 1:
        for nb in notebooks:
            log(f"[book] papermill {nb} {said}")
            timings[nb.name] = _execute_one((root / nb, stage / nb, parameters, root, timeout))
            log(f"[book]   done in {timings[nb.name]:.1f} s")
        return timings
    import concurrent.futures  # noqa: PLC0415
    import multiprocessing as mp  # noqa: PLC0415

    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the kernels inherit it: jobs kernels on jobs cores
    try:
        log(f"[book] executing {len(notebooks)} notebooks, {jobs} at a time (BOOK_JOBS)")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            running = {pool.submit(_execute_one, (root / nb, stage / nb, parameters, root, timeout)): nb
                       for nb in notebooks}
            for fut in concurrent.futures.as_completed(running):
                nb = running[fut]
                try:
                    timings[nb.name] = fut.result()
                except BaseException:
                    for other in running:
                        other.cancel()
                    raise
                log(f"[book] papermill {nb} {said}: done in {timings[nb.name]:.1f} s")
    finally:
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = old
    return {nb.name: timings[nb.name] for nb in notebooks}


PARAMS_CLASS = "cg-params"  # the page's one-line summary of the parameters of its build
# what papermill records of the machine that executed a notebook: never in a download
PAPERMILL_MACHINE_KEYS = ("input_path", "output_path", "cwd", "environment_variables")


def _assignments(source: str) -> list[ast.Assign]:
    """The top-level ``name = value`` statements of a cell."""
    return [n for n in ast.parse(source).body
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]


def parameter_names(source: str) -> list[str]:
    """The names a parameters cell assigns, in order."""
    return list(dict.fromkeys(n.targets[0].id for n in _assignments(source)))


def merged_parameters(source: str, values: dict) -> str:
    """A parameters cell's source with the values of ``values`` in place of its defaults (each line keeps its
    comment); a value the cell does not name is appended. What a download needs to run as it was built."""
    lines = source.splitlines()
    done = set()
    shared = {}  # line -> how many statements are on it (a statement sharing its line is not rewritten)
    for node in ast.parse(source).body:
        for ln in range(node.lineno, node.end_lineno + 1):
            shared[ln] = shared.get(ln, 0) + 1
    for node in reversed(_assignments(source)):  # from the bottom, so that earlier line numbers stay valid
        name = node.targets[0].id
        if name not in values or name in done:
            continue
        if any(shared[ln] > 1 for ln in range(node.lineno, node.end_lineno + 1)):
            continue  # set again below, after the cell's own lines
        done.add(name)
        tail = lines[node.end_lineno - 1][node.end_col_offset:]  # the comment, as aligned in the notebook
        comment = tail.rstrip() if tail.strip().startswith("#") else ""
        lines[node.lineno - 1:node.end_lineno] = [f"{name} = {PythonTranslator.translate(values[name])}{comment}"]
    lines += [f"{k} = {PythonTranslator.translate(v)}" for k, v in values.items() if k not in done]
    return "\n".join(lines)


def parameters_line(source: str) -> str:
    """The page's one-line summary of a (merged) parameters cell, as an HTML paragraph (``p.cg-params``,
    which ``make book-check`` looks for): ``profile = 'smoke' · seed = 0 · …``."""
    items = [f"<code>{html.escape(n.targets[0].id)} = {html.escape(ast.get_source_segment(source, n.value))}</code>"
             for n in _assignments(source)]
    return (f'<p class="{PARAMS_CLASS}"><strong>Parameters of this build:</strong> ' + " · ".join(items)
            + " (the download's parameters cell; papermill's <code>-p NAME VALUE</code> changes one)</p>")


def machine_paths(root: Path) -> tuple[list[str], list[str]]:
    """Absolute paths of the machine that builds the book, which no download may carry: (the checkout's,
    the others: the interpreter's prefix outside the checkout, the home directory)."""
    root = Path(root)
    mine = sorted({str(root), str(root.resolve())}, key=len, reverse=True)
    others = {sys.prefix, str(Path.home())} - {"", "/"}
    others = [p for p in others if not any(p == r or p.startswith(r + "/") for r in mine)]
    return mine, sorted(others, key=len, reverse=True)


def relative_paths(text: str, paths: tuple[list[str], list[str]]) -> str:
    """``text`` with the checkout's absolute path made relative (``/…/repo/x`` -> ``x``, the root itself ->
    ``.``) and the build machine's other paths elided (``…``)."""
    mine, others = paths
    for p in mine:
        text = text.replace(p + "/", "").replace(p, ".")
    for p in others:
        text = text.replace(p, "…")
    return text


def _strip_paths(value, paths):
    if isinstance(value, str):
        return relative_paths(value, paths)
    if isinstance(value, list):
        return [_strip_paths(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _strip_paths(v, paths) for k, v in value.items()}
    return value


def tidy_notebook(path: Path, root: Path | None = None) -> None:
    """What the reader sees of an executed notebook, and downloads:

    * **one parameters cell**, tagged ``parameters`` (papermill can set it again), holding the notebook's
      defaults overridden by the values the build injected, so that the download runs as it was built;
      papermill's injected cell is removed. The cell is hidden on the page, where a one-line summary of
      its values (:func:`parameters_line`) stands in its place;
    * the checked cells (tests for nbval) hidden;
    * no absolute path of the build machine: papermill's ``input_path``, ``output_path`` and environment
      leave the metadata, and the checkout's path in an output is made relative (:func:`relative_paths`)."""
    paths = machine_paths(root or project_root())
    nb = nbformat.read(path, as_version=4)
    injected = next((c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])), None)
    values = dict((nb.metadata.get("papermill") or {}).get("parameters") or {})
    if injected is not None and not values:  # papermill's record of them is missing: read its cell
        values = {n.targets[0].id: ast.literal_eval(n.value) for n in _assignments(injected.source)}
    cells = []
    for c in nb.cells:
        tags = c.metadata.get("tags", [])
        if c is injected:
            continue
        if "parameters" in tags and "parameters-used" not in tags:
            c.source = merged_parameters(c.source, values)
            c.metadata["tags"] = ["parameters", "parameters-used", "remove-cell"]
            cells.append(nbformat.v4.new_markdown_cell(parameters_line(c.source),
                                                       metadata={"tags": ["parameters-line"]}))
        elif CHECKED_TAG in tags:
            c.metadata["tags"] = sorted(set(tags) | {"remove-cell"})
        if c.cell_type == "code":
            c.outputs = [nbformat.from_dict(_strip_paths(o, paths)) for o in c.outputs]
        cells.append(c)
    nb.cells = cells
    for k in PAPERMILL_MACHINE_KEYS:
        (nb.metadata.get("papermill") or {}).pop(k, None)
    nbformat.write(nb, path)


# ====================================================================== generated pages
_INCLUDE = re.compile(r"```\{include\} _generated/([\w.]+)\n```\n?")


def fault_tests(root: Path) -> dict[str, list[str]]:
    """Fault id -> the tests that declare it (``@pytest.mark.fault("<id>")``), read from tests/."""
    out: dict[str, list[str]] = {}
    pat = re.compile(r"@pytest\.mark\.fault\(([^)]*)\)\s*\n(?:@[^\n]*\n)*\s*def (test_\w+)")
    for p in sorted((root / "tests").rglob("test_*.py")):
        for ids, name in pat.findall(p.read_text()):
            for fid in re.findall(r"[\"']([\w-]+)[\"']", ids):
                out.setdefault(fid, []).append(f"{p.relative_to(root / 'tests')}::{name}")
    return out


def generated_pages(rows: list[Row], profile: str, device: str, timings: dict, source: str, root: Path) -> dict:
    return {
        "summary.md": tables.landing_md(rows, profile),
        "claims.md": tables.claims_md(rows, getattr(numbers.numbers(root).get("headline_findings"), "text", None)),
        "all_checks.md": tables.all_checks_md(rows),
        "errata.md": tables.errata_md(rows),
        "notation.md": tables.notation_md(),
        "appB_rows.md": tables.rows_md([r for r in rows if r.result == "appB"], ids=[r.id for r in rows]) + "\n",
        "appB_verdict.md": tables.verdict_md(rows, "appB", profile),
        "unstated.md": tables.unstated_md(),
        "from_authors.md": tables.from_authors_md(),
        "profiles.md": tables.profiles_md(),
        "versions.md": tables.versions_md(root),
        "hardware.md": tables.hardware_md(device),
        "runtimes.md": tables.runtimes_md(timings, source),
        "published.md": tables.published_md(root, profile),
        "costs.md": tables.costs_md(root),
    }


def inline_generated(stage: Path, pages: dict) -> None:
    """Replace every ``{include} _generated/<name>`` of the staged pages by the generated text itself."""
    for p in (stage / "book").glob("*.md"):
        text = p.read_text()
        new = _INCLUDE.sub(lambda m: pages[m.group(1)] + "\n", text)
        missing = _INCLUDE.findall(new)
        if missing:
            raise BookError(f"{p.name} includes unknown generated pages {missing}")
        if new != text:
            p.write_text(new)


# ====================================================================== build
def _stage(root: Path, stage: Path, substitutions: dict) -> None:
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copy2(root / "_toc.yml", stage / "_toc.yml")
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    subs = dict(cfg.setdefault("parse", {}).get("myst_substitutions") or {})
    subs.update(substitutions)
    cfg["parse"]["myst_substitutions"] = subs
    repository.apply(cfg, root)  # the repository URL, the buttons it allows, the footer with the paper's links
    sph = (cfg.get("sphinx") or {}).get("config") or {}
    if sph.get("html_search_scorer"):  # Sphinx opens it from its working directory: the staged copy, by its path
        sph["html_search_scorer"] = str(stage / sph["html_search_scorer"])
    (stage / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    shutil.copytree(root / "book", stage / "book", ignore=shutil.ignore_patterns("__pycache__", "_static"))
    if (root / "book" / "_static").is_dir():
        shutil.copytree(root / "book" / "_static", stage / "_static")
    (stage / "notebooks").mkdir()


def jupyter_book_executable() -> str:
    """The ``jupyter-book`` of this environment (beside this interpreter), else the one on PATH; BookError without."""
    exe = Path(sys.executable).parent / "jupyter-book"
    found = str(exe) if exe.is_file() else shutil.which("jupyter-book")
    if not found:
        raise BookError("jupyter-book is not installed (pip install -e '.[dev]')")
    return found


def render(root: Path, stage: Path, log=print) -> tuple[int, list[str]]:
    """Run ``jupyter-book build -W -n --keep-going``; returns (exit status, warning lines)."""
    html = root / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    cmd = [jupyter_book_executable(), "build", str(stage), "--path-output", str(root), "--builder", "html", "-W", "-n",
           "--keep-going", "--all"]
    log("[book] " + " ".join(["jupyter-book"] + cmd[1:]))
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    (root / "_build" / "jupyter-book.log").write_text(out)
    warnings = [ln for ln in out.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", ln)]
    return proc.returncode, warnings


def build(profile: str = "paper", device: str = "cpu", only: list[str] | None = None, render_html: bool = True,
          timeout: int | None = None, log=print) -> dict:
    """The whole pipeline (see module doc); returns a report dict. Raises :class:`BookError` on the first failure."""
    if profile not in PROFILES:
        raise BookError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    if device not in DEVICES:
        raise BookError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")
    t_start = time.perf_counter()
    root = project_root()
    stage = root / "_build" / "stage"
    vpath, rows, source = book_rows(profile, root, log)
    subs = numbers.substitutions(root)  # the numbers the pages state, from their sources (tools/book/numbers.py)
    _stage(root, stage, {**subs, "profile": f"`{profile}`", "device": f"`{device}`"})
    ensure_kernel(log)
    static = stage / "_static"
    static.mkdir(parents=True, exist_ok=True)
    atomic_write_json(static / "verify.json", [r.to_json() for r in rows], indent=1)
    env = {VERIFY_ENV: str(static / "verify.json"), STATIC_ENV: str(static)}
    if profile == "paper":
        env[NO_COMPUTE_ENV] = "1"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    timings: dict[str, float] = {}
    try:
        notebooks = toc_notebooks(root)
        if only:
            notebooks = [n for n in notebooks if any(o in n.stem for o in only)]
        timings = execute_all(notebooks, root, stage, {"profile": profile, "device": device}, timeout,
                              book_jobs(), log)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    inline_generated(stage, generated_pages(rows, profile, device, timings, source, root))
    report = {"profile": profile, "device": device, "notebooks": timings, "rows": source, "warnings": [],
              "returncode": None}
    if render_html:
        if only:
            raise BookError("--only executes a subset; the book itself is rendered only from all notebooks")
        rc, warnings = render(root, stage, log)
        report.update(returncode=rc, warnings=warnings, html=str(root / "_build" / "html" / "index.html"))
        for w in warnings:
            log("  " + w)
        if rc != 0 or warnings:
            report["seconds"] = round(time.perf_counter() - t_start, 1)
            atomic_write_json(root / "_build" / "book-report.json", report)
            raise BookError(f"jupyter-book build failed (exit {rc}, {len(warnings)} warnings); see _build/jupyter-book.log")
        # what the download buttons serve reads as a notebook in plain Jupyter and Colab, and the launch buttons open
        # the same text (tools/book/plain.py)
        plain.plain_downloads(root / "_build" / "html", root, subs)
        plain.point_launch_buttons(root / "_build" / "html")
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    atomic_write_json(root / "_build" / "book-report.json", report)
    return report
