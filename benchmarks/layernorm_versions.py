"""The LayerNorm question for the paper's Figs. 3-4: the Hessian the authors' pipeline computes through
PyTorch's fused LayerNorm, with each curvlinops release, against the exact one.

    python benchmarks/layernorm_versions.py --scratch /tmp/cl2 [--runs-dir runs] [--out PATH]
    python benchmarks/layernorm_versions.py --quick       # a ~400-parameter authors' ViT, 8 images: seconds

Model: ``build_model("authors_mnist")`` (the authors' ViT) at initialisation (seed 0) and at step 20,000
of the authors' recipe (``train.train`` of ``RECIPES[("authors_mnist", "paper")]``,
float32, CPU; trained once into ``--runs-dir`` when its snapshot is missing). Data: the first ``--batch``
images of the first batch of the authors' training loader (``train.LoaderOrder`` seeded 37, augmented by
``train.augment`` exactly as the trainer does at step 0). Parameters: the authors' list
(``AUTHORS_ORDER``: every weight matrix and LayerNorm gamma, beta, no biases, in their order, each matrix
flattened in their (out, in) layout); the biases stay fixed. Loss: cross-entropy, batch mean; float64.

Each Hessian is computed in its own subprocess with ``--threads`` threads, ``--jobs`` at a time (the
``seconds`` of a worker include the competition of the others and of the machine's load):

* ``exact``: the model with the hand-written LayerNorm (``fused_ln=False``), reverse-over-reverse autograd
  (``torch.autograd.grad`` of each entry of a gradient taken with ``create_graph``; no torch.func), plus
  central finite differences of the gradient on ``--fd-columns`` columns (one per block, seeded);
* ``curvlinops``: ``HessianLinearOperator(model, CrossEntropyLoss(), params, [(X, y)]) @ I`` through the
  fused ``torch.nn.functional.layer_norm`` (what ``nn.LayerNorm`` calls), with the installed curvlinops,
  and again in a process whose ``PYTHONPATH`` starts with each ``--scratch`` directory (another release
  installed there with ``pip install --no-deps --target DIR``). A release of the scipy interface (<= 2.x)
  is called as the authors' notebook calls it, ``op @ np.eye(P)``, with one change: ``op.dtype`` is set
  to float64 (2.x fixes it to float32 and would round the float64 result to float32 on the way out).

Each worker reads its curvlinops' version (package metadata), file, and whether ``curvlinops.hessian``
multiplies by torch.func (``jvp`` of ``jacrev``: forward-over-reverse) or by autograd double backward
(backpack's ``hessian_vector_product``: reverse-over-reverse), from the source it imported. Errors:
``max |dH| / max |H|`` and ``||dH||_F / ||H||_F`` overall, and per pair of parameter blocks
(``block_max_rel``: relative to the global max |H|; ``block_fro_rel``: relative to that block's own norm).
Readings of the paper's Figs. 3-4 (``largest``): the largest diagonal block by Frobenius norm, by largest
entry and by mean |entry|, among the eight weight matrices and among the theory's five (W_Q, W_K, W_V,
W_1, W_2), with each Hessian. Without ``--scratch`` the other release's rows are recorded as skipped.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _bench import ROOT, Run, add_switches, add_worker_switch, answer_worker, out_path, peak_mb, run_worker

NAME = "layernorm_versions"
QUICK_MODEL = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)
TRAINED_STEP = 20000
# the authors' list (their code/notebooks/hessian_visualization.ipynb, params_order), with our label
AUTHORS_ORDER = (
    ("embeddings.patch_embeddings.in_layer.weight", "W_E"),
    ("transformer_blocks.0.self_attention.to_query.weight", "W_Q"),
    ("transformer_blocks.0.self_attention.to_key.weight", "W_K"),
    ("transformer_blocks.0.self_attention.to_value.weight", "W_V"),
    ("transformer_blocks.0.self_attention.out_layer.weight", "W_O"),
    ("transformer_blocks.0.self_attention_norm.weight", "LN1 gamma"),
    ("transformer_blocks.0.self_attention_norm.bias", "LN1 beta"),
    ("transformer_blocks.0.feed_forward.in_layer.weight", "W_1"),
    ("transformer_blocks.0.feed_forward.out_layer.weight", "W_2"),
    ("transformer_blocks.0.feed_forward_norm.weight", "LN2 gamma"),
    ("transformer_blocks.0.feed_forward_norm.bias", "LN2 beta"),
    ("out_layer.weight", "head"),
)
WEIGHTS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_1", "W_2", "head")
THEORY = ("W_Q", "W_K", "W_V", "W_1", "W_2")
# curvlinops-for-pytorch on PyPI (https://pypi.org/pypi/curvlinops-for-pytorch/json, upload dates) and how
# curvlinops/hessian.py of each wheel multiplies by the Hessian (read from the wheels' sources)
RELEASES = (
    ("1.0.0", "2022-09-30"), ("1.1.0", "2023-02-19"), ("1.2.0", "2024-01-13"), ("2.0.0", "2024-08-15"),
    ("2.0.1", "2024-10-25"), ("3.0.0", "2025-10-16"), ("3.0.1", "2026-01-14"),
)
MODES = {
    "1.0.0": "autograd double backward (backpack hessian_vector_product), scipy LinearOperator",
    "1.1.0": "autograd double backward (backpack hessian_vector_product), scipy LinearOperator",
    "1.2.0": "autograd double backward (backpack hessian_vector_product), scipy LinearOperator",
    "2.0.0": "autograd double backward (backpack hessian_vector_product), scipy LinearOperator",
    "2.0.1": "autograd double backward (backpack hessian_vector_product), scipy LinearOperator",
    "3.0.0": "autograd double backward (backpack hessian_vector_product), PyTorch linear operator",
    "3.0.1": "torch.func: vmap of jvp over jacrev (forward-over-reverse), PyTorch linear operator",
}
AUTHORS_EVIDENCE = (
    "The authors' code/notebooks/hessian_visualization.ipynb imports HutchinsonSquaredFrobeniusNormEstimator "
    "(exported by curvlinops 2.0.0 and 2.0.1 only: absent from 1.2.0, renamed hutchinson_squared_fro in 3.x) "
    "and multiplies by np.eye(P).astype(op.dtype) (the scipy interface of <= 2.x), so it ran a 2.x release; "
    "2.0.1 was the current release from 2024-10-25 to 2025-10-16 (3.0.0, three days before the paper's "
    "first arXiv version). Their code/requirements.txt pins no curvlinops.")


# ----------------------------------------------------------------------------- model, data, parameters
def recipe():
    from curvature_gap.config import recipe_for

    return recipe_for("authors_mnist", "paper")


def first_batch(batch: int):
    """(images, labels, description): the first ``batch`` images of the first batch (128) the authors'
    recipe trains on (their DataLoader order seeded 37, the recipe's augmentation of step 0); seeded
    uniform images in [-1, 1] where MNIST is not on disk."""
    import torch

    from curvature_gap.data import check_mnist_files, data_dir
    from curvature_gap.train import LoaderOrder, _generator, augment, load_datasets, zero_pixel

    cfg = recipe()
    if check_mnist_files(data_dir(), verify_md5=False):
        g = torch.Generator().manual_seed(0)
        return (torch.rand(batch, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (batch,), generator=g),
                f"{batch} uniform images in [-1, 1] (MNIST not on disk), seed 0")
    ds = load_datasets(cfg)
    idx = LoaderOrder(len(ds.train), cfg.batch_size, cfg.seed).order(0)[:cfg.batch_size]
    x = augment(ds.train.images[idx], _generator(cfg.seed, 1_000_003, 0), cfg.crop_padding,
                       cfg.rotation_degrees, cfg.hflip, zero_pixel(*cfg.normalize))
    return (x[:batch].contiguous(), ds.train.labels[idx][:batch].clone(),
            f"the first {batch} of the first batch of the authors' loader (DataLoader order seed {cfg.seed}, "
            f"augmented as train's step 0: RandomCrop pad {cfg.crop_padding}, rotation "
            f"±{cfg.rotation_degrees:g}°), Normalize{tuple(cfg.normalize)}")


def trained_state(runs_dir: Path, log=print) -> tuple[dict, dict]:
    """The weights after step 20,000 of the authors' recipe (trained on the CPU into ``runs_dir`` when the
    snapshot is missing) and a description."""
    from curvature_gap.train import load_snapshot, run_dir, train

    cfg = recipe()
    d = run_dir(cfg, runs_dir)
    info = dict(run=str(d), config_hash=cfg.hash(), step=TRAINED_STEP)
    state = load_snapshot(d, TRAINED_STEP, cfg.hash())
    if state is None:
        log(f"training the authors' recipe to step {TRAINED_STEP} into {d}")
        t0 = time.perf_counter()
        train(cfg, d, device="cpu", max_steps=TRAINED_STEP, progress=False)
        info["train_seconds"] = round(time.perf_counter() - t0, 1)
        state = load_snapshot(d, TRAINED_STEP, cfg.hash())
    return state, info


def authors_params(model):
    """(tensors in the authors' order, labels, sizes, perm): ``perm`` maps the authors' flat layout to
    ours (their nn.Linear weights are (out, in), our block matrices (in, out)): H_theirs = H[perm][:, perm]."""
    import torch

    from curvature_gap.params import authors_parameter_names

    names = authors_parameter_names(model.cfg)
    own = dict(model.named_parameters())
    tensors, labels, sizes, perm, start = [], [], [], [], 0
    for theirs, label in AUTHORS_ORDER:
        ours, transposed = names[theirs]
        p = own[ours]
        idx = torch.arange(p.numel()).reshape(p.shape)
        perm.append(start + (idx.T if transposed else idx).reshape(-1))
        tensors.append(p)
        labels.append(label)
        sizes.append(p.numel())
        start += p.numel()
    return tensors, labels, sizes, torch.cat(perm)


def _model(spec: dict, fused: bool):
    import torch

    import curvature_gap as cg

    m = cg.build_model("authors_mnist", seed=0, fused_ln=fused, **spec["model"])
    m.load_state_dict(torch.load(spec["state"], weights_only=True))
    return m.double().eval()


# ----------------------------------------------------------------------------- the Hessians
def exact_hessian(model, X, y):
    """(P, P) float64 Hessian over the authors' parameters in their layout, by reverse-over-reverse
    autograd: one ``torch.autograd.grad`` of each gradient entry (a row), no torch.func."""
    import torch

    params, _, _, perm = authors_params(model)
    loss = torch.nn.functional.cross_entropy(model(X), y)
    g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, params, create_graph=True)])
    H = torch.empty(g.numel(), g.numel(), dtype=g.dtype)
    for i in range(g.numel()):
        row = torch.autograd.grad(g[i], params, retain_graph=True, allow_unused=True, materialize_grads=True)
        H[i] = torch.cat([t.reshape(-1) for t in row])
    return H[perm][:, perm]


def fd_columns(model, X, y, cols, h: float = 1e-5):
    """(P, len(cols)): central differences (g(θ + h e_j) − g(θ − h e_j)) / 2h of the gradient over the
    authors' parameters (their layout), one column per index in ``cols``."""
    import torch

    params, _, _, perm = authors_params(model)
    flat = [p.detach().reshape(-1) for p in params]  # views of the parameters

    def grad_at():
        loss = torch.nn.functional.cross_entropy(model(X), y)
        return torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, params)])[perm]

    sizes = torch.tensor([f.numel() for f in flat])
    bounds = torch.cumsum(sizes, 0)
    out = torch.empty(int(bounds[-1]), len(cols), dtype=torch.float64)
    for k, c in enumerate(cols):
        j = int(perm[c])  # our flat index of the authors' index c
        b = int(torch.searchsorted(bounds, j, right=True))
        off = j - (int(bounds[b - 1]) if b else 0)
        with torch.no_grad():
            flat[b][off] += h
        gp = grad_at()
        with torch.no_grad():
            flat[b][off] -= 2 * h
        gm = grad_at()
        with torch.no_grad():
            flat[b][off] += h
        out[:, k] = (gp - gm) / (2 * h)
    return out


def curvlinops_hessian(model, X, y, chunk: int = 64):
    """(P, P) float64 ``HessianLinearOperator @ I`` over the authors' parameters (their layout), with
    whatever curvlinops this process imports, through ``model``'s LayerNorm; and its API."""
    import numpy as np
    import scipy.sparse.linalg
    import torch
    from curvlinops import HessianLinearOperator

    params, _, _, perm = authors_params(model)
    op = HessianLinearOperator(model, torch.nn.CrossEntropyLoss(), params, [(X, y)], check_deterministic=False)
    P = op.shape[0]
    if isinstance(op, scipy.sparse.linalg.LinearOperator):  # <= 2.x: the authors' call, float64 throughout
        op.dtype = np.dtype(np.float64)
        H, api = torch.from_numpy(op @ np.eye(P)), "scipy: op @ np.eye(P), op.dtype = float64"
    else:
        H = torch.empty(P, P, dtype=torch.float64)
        eye = torch.eye(P, dtype=torch.float64)
        for s in range(0, P, chunk):
            H[:, s:s + chunk] = op @ eye[:, s:s + chunk]
        api = f"torch: op @ I in chunks of {chunk} columns"
    return H[perm][:, perm], api


def curvlinops_facts() -> dict:
    """Version, file and differentiation mode of the curvlinops this process imports, from its source."""
    import importlib.metadata
    import inspect

    import curvlinops
    import curvlinops.hessian as ch

    src = inspect.getsource(ch)
    if "jacrev" in src or "torch.func" in src:
        mode = "torch.func (forward-over-reverse: jvp of jacrev)"
    elif "hessian_vector_product" in src:
        mode = "autograd double backward (reverse-over-reverse: backpack hessian_vector_product)"
    else:
        mode = "unknown"
    return dict(curvlinops_version=importlib.metadata.version("curvlinops-for-pytorch"),
                curvlinops_file=str(Path(curvlinops.__file__).parent), torch_func=mode.startswith("torch.func"),
                autodiff=mode)


def _worker(spec: dict) -> dict:
    import warnings

    import numpy as np
    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(spec["threads"])
    batch = torch.load(spec["batch"], weights_only=True)
    X, y = batch["X"].double(), batch["y"]
    out = dict(base_mb=peak_mb())
    t0 = time.perf_counter()
    if spec["method"] == "exact":
        model = _model(spec, fused=False)
        H = exact_hessian(model, X, y)
        out["seconds"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        np.save(spec["fd_save"], fd_columns(model, X, y, spec["fd_cols"]).numpy())
        out.update(fd_seconds=time.perf_counter() - t1, autodiff="torch.autograd.grad of each gradient entry "
                   "(reverse-over-reverse), hand-written LayerNorm")
    else:
        H, api = curvlinops_hessian(_model(spec, fused=True), X, y)
        out.update(seconds=time.perf_counter() - t0, api=api, **curvlinops_facts())
    np.save(spec["save"], H.numpy())
    out.update(peak_mb=peak_mb(), status="ok")
    return out


# ----------------------------------------------------------------------------- comparisons
def block_stats(H, sizes, labels) -> dict:
    """Per diagonal block: Frobenius norm, largest |entry|, mean |entry|; and the largest block by each,
    among the weight matrices and among the theory's five."""
    import numpy as np

    edges = np.concatenate([[0], np.cumsum(sizes)])
    diag = {}
    for k, lab in enumerate(labels):
        B = np.abs(H[edges[k]:edges[k + 1], edges[k]:edges[k + 1]])
        diag[lab] = dict(fro=float(np.sqrt((B ** 2).sum())), max=float(B.max()), mean=float(B.mean()))
    largest = {}
    for among, keys in (("weights", WEIGHTS), ("theory", THEORY)):
        for stat in ("fro", "max", "mean"):
            order = sorted(keys, key=lambda lab: -diag[lab][stat])
            largest[f"{among}_{stat}"] = dict(largest=order[0], ranking=order)
    return dict(diagonal=diag, largest=largest)


def compare(H, E, sizes) -> dict:
    """Errors of H against the exact E: overall and per block pair."""
    import numpy as np

    D = H - E
    scale, fro = float(np.abs(E).max()), float(np.linalg.norm(E))
    edges = np.concatenate([[0], np.cumsum(sizes)])
    G = len(sizes)
    bmax, bfro = np.zeros((G, G)), np.zeros((G, G))
    for i in range(G):
        for j in range(G):
            d = D[edges[i]:edges[i + 1], edges[j]:edges[j + 1]]
            e = E[edges[i]:edges[i + 1], edges[j]:edges[j + 1]]
            bmax[i, j] = np.abs(d).max() / scale
            n = np.linalg.norm(e)
            bfro[i, j] = np.linalg.norm(d) / n if n > 0 else (0.0 if np.linalg.norm(d) == 0 else float("inf"))
    w = np.unravel_index(np.argmax(bmax), bmax.shape)
    return dict(max_rel_err=float(np.abs(D).max() / scale), fro_rel_err=float(np.linalg.norm(D) / fro),
                asymmetry=float(np.abs(H - H.T).max() / scale), worst_block=[int(w[0]), int(w[1])],
                block_max_rel=bmax.tolist(), block_fro_rel=bfro.tolist())


def fd_cols(sizes, seed: int = 1) -> list[int]:
    """One seeded column per block (the authors' layout)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    edges = np.concatenate([[0], np.cumsum(sizes)])
    return [int(rng.integers(edges[k], edges[k + 1])) for k in range(len(sizes))]


def run(args, log=print) -> tuple[list[dict], dict]:
    import numpy as np
    import torch

    import curvature_gap as cg

    model_over = QUICK_MODEL if args.quick else {}
    X, y, data = first_batch(args.batch)
    probe = cg.build_model("authors_mnist", seed=0, **model_over)
    _, labels, sizes, _ = authors_params(probe)
    cols = fd_cols(sizes)
    checkpoints = [("init", probe.state_dict(), dict(step=0, seed=0))]
    if not args.quick:
        state, info = trained_state(args.runs_dir, log)
        checkpoints.append((f"step_{TRAINED_STEP}", state, info))
    installed = curvlinops_facts()
    envs = [(None, installed["curvlinops_version"])] + [(s, None) for s in args.scratch]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.save(dict(X=X, y=y), tmp / "batch.pt")
        tasks = []  # (checkpoint, key, spec, scratch): every Hessian, run --jobs at a time
        for ck, state, _ in checkpoints:
            torch.save(state, tmp / f"{ck}.pt")
            common = dict(state=str(tmp / f"{ck}.pt"), batch=str(tmp / "batch.pt"), model=model_over,
                          threads=args.threads)
            tasks.append((ck, "exact", dict(common, method="exact", save=str(tmp / f"{ck}-exact.npy"),
                                            fd_save=str(tmp / f"{ck}-fd.npy"), fd_cols=cols), None))
            for e, scratch in enumerate([None, *args.scratch]):
                tasks.append((ck, e, dict(common, method="curvlinops", save=str(tmp / f"{ck}-{e}.npy")), scratch))

        def job(task):
            ck, key, spec, scratch = task
            log(f"[{ck}] start {'exact' if key == 'exact' else 'curvlinops ' + (scratch or 'installed')}")
            return run_worker(__file__, spec, scratch, error_chars=400)

        # the longest first: the scratch releases (one product per column), the installed one, the exact
        tasks = ([t for t in tasks if t[1] not in ("exact", 0)] + [t for t in tasks if t[1] == 0]
                 + [t for t in tasks if t[1] == "exact"])
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(job, tasks))
        done = {(t[0], t[1]): (t, r) for t, r in zip(tasks, results)}
        for ck, _, info in checkpoints:
            (_, _, spec, _), res = done[ck, "exact"]
            if res["status"] != "ok":
                rows.append(dict(checkpoint=ck, method="exact", **res))
                continue
            E, FD = np.load(spec["save"]), np.load(spec["fd_save"])
            fd_err = float(max(np.abs(FD[:, k] - E[:, c]).max() / np.abs(E[:, c]).max() for k, c in enumerate(cols)))
            ex = block_stats(E, sizes, labels)
            rows.append(dict(checkpoint=ck, checkpoint_info=info, method="exact", parameters=int(sum(sizes)),
                             seconds=res["seconds"], fd_seconds=res["fd_seconds"], peak_mb=res["peak_mb"],
                             autodiff=res["autodiff"], fd_columns=cols, fd_max_rel_err=fd_err,
                             asymmetry=float(np.abs(E - E.T).max() / np.abs(E).max()), status="ok", **ex))
            log(f"[{ck}] exact: {res['seconds']:.1f} s; finite differences on {len(cols)} columns: {fd_err:.1e}")
            for e, scratch in enumerate([None, *args.scratch]):
                (_, _, spec, _), res = done[ck, e]
                label = "installed" if scratch is None else f"scratch {scratch}"
                row = dict(checkpoint=ck, method="curvlinops", environment=label, **res)
                if res["status"] == "ok":
                    C = np.load(spec["save"])
                    st = block_stats(C, sizes, labels)
                    row.update(compare(C, E, sizes), **st,
                               fd_max_rel_err=float(max(np.abs(FD[:, k] - C[:, c]).max() / np.abs(E[:, c]).max()
                                                        for k, c in enumerate(cols))),
                               same_largest={k: v["largest"] == ex["largest"][k]["largest"]
                                             for k, v in st["largest"].items()},
                               same_ranking={k: v["ranking"] == ex["largest"][k]["ranking"]
                                             for k, v in st["largest"].items()})
                    log(f"[{ck}] curvlinops {res['curvlinops_version']} ({res['autodiff']}): {res['seconds']:.1f} s, "
                        f"max rel err {row['max_rel_err']:.2e}, Frobenius {row['fro_rel_err']:.2e}")
                rows.append(row)
            if not args.scratch:
                rows.append(dict(checkpoint=ck, method="curvlinops", environment="scratch (none)",
                                 status="skipped: no scratch environment with curvlinops 2.x (--scratch DIR not "
                                        "given; CI has none); nothing is computed or assumed for it"))
    settings = dict(model="authors_mnist" + (f" {model_over}" if model_over else ""), parameters=int(sum(sizes)),
                    blocks=labels, block_sizes=sizes, authors_order=[t for t, _ in AUTHORS_ORDER], batch=args.batch,
                    data=data, dtype="float64", threads=args.threads, jobs=args.jobs, fd_step=1e-5,
                    checkpoints=[ck for ck, _, _ in checkpoints], installed_curvlinops=installed,
                    scratch=list(args.scratch), releases=[dict(version=v, uploaded=d, hessian=MODES.get(v, "not read"))
                                                          for v, d in RELEASES],
                    authors_release=AUTHORS_EVIDENCE, weights=list(WEIGHTS), theory=list(THEORY))
    return rows, settings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_switches(ap)
    ap.add_argument("--batch", type=int, default=None, help="images (default 128, --quick 8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each worker process")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at a time (each Hessian is one)")
    ap.add_argument("--scratch", action="append", default=[],
                    help="a directory holding another curvlinops release (pip install --no-deps --target DIR), "
                         "put first on PYTHONPATH of its worker; repeatable")
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="where the trained model is cached")
    add_worker_switch(ap)
    args = ap.parse_args(argv)
    if answer_worker(args, _worker):
        return 0
    args.batch = args.batch or (8 if args.quick else 128)
    import torch

    torch.set_num_threads(args.threads)
    bench = Run(NAME, args.quick, argv)
    rows, settings = run(args)
    bench.write(out_path(NAME, args), rows, settings, threads=args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
