"""Extreme eigenvalues and spectral norms of Hessian blocks by Lanczos on Hessian-vector products.

For a parameter group g, the diagonal block ``H_gg`` (|g| × |g|) is the principal submatrix of the
loss Hessian; its spectral norm is ``‖H_gg‖₂ = max(|λ_max(H_gg)|, |λ_min(H_gg)|)``. A block product
is ``H_gg v = P_g H P_gᵀ v`` with ``P_g`` selecting the group: the tangent lives on g only and only
g's gradient is differentiated (forward-over-reverse ``jvp(grad)``). All groups run their Lanczos
recurrences together: one ``vmap`` over the groups' tangents per step (``vmap_chunk`` groups at a
time), so a GPU sees one batched Hessian-vector product per Lanczos step instead of one per group.

Lanczos (``k`` steps, full reorthogonalisation, float64 recurrence) builds ``T_k = Q_kᵀ H Q_k``; its
extreme eigenvalues (Ritz values) converge from inside to the extreme eigenvalues of the block, so
``λ_max`` is a lower bound and ``λ_min`` an upper bound that tighten with ``k``. With ``k ≥ |g|``
they are exact (to rounding). Works for any model size (never forms a dense block), CPU or GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..exact.linalg import lanczos
from . import resolve_method
from ..params import groups_of
from ._vit import ViTSecondOrder
from .hvp import HessianOperator

__all__ = ["BlockSpectrum", "Spectra", "top_eigenvalues", "block_hvp"]


@dataclass
class BlockSpectrum:
    """Extreme Ritz values of one block after ``iters`` Lanczos steps."""

    name: str
    size: int
    lambda_max: float
    lambda_min: float
    iters: int
    ritz: list[float] = field(default_factory=list)

    @property
    def spectral_norm(self) -> float:
        return max(abs(self.lambda_max), abs(self.lambda_min))


@dataclass
class Spectra:
    """Per-group diagonal-block spectra and (optionally) the whole Hessian's."""

    blocks: dict[str, BlockSpectrum]
    overall: BlockSpectrum | None
    hvp_calls: int

    def table(self) -> list[dict]:
        rows = [dict(block=b.name, size=b.size, lambda_max=b.lambda_max, lambda_min=b.lambda_min,
                     spectral_norm=b.spectral_norm, iters=b.iters) for b in self.blocks.values()]
        if self.overall is not None:
            o = self.overall
            rows.append(dict(block="overall", size=o.size, lambda_max=o.lambda_max, lambda_min=o.lambda_min,
                             spectral_norm=o.spectral_norm, iters=o.iters))
        return rows


def _unpack(data):
    if hasattr(data, "images") and hasattr(data, "labels"):
        return data.images, data.labels
    return data


def block_hvp(model: nn.Module, images, labels, group_names: list[str] | None, loss="cross_entropy", dtype=None,
              micro_batch: int | None = None):
    """Function V (m, |S|) -> (H_SS Vᵀ)ᵀ for the parameter set S = union of ``group_names`` (None: all), and |S|:
    :meth:`HessianOperator.matmat` (``micro_batch`` splits the batch)."""
    op = HessianOperator(model, (images, labels), loss=loss, dtype=dtype, micro_batch=micro_batch,
                         groups=group_names)
    return op.matmat, op.shape[0]


def top_eigenvalues(model: nn.Module, data, groups: list[str] | None = None, iters: int = 30,
                    loss="cross_entropy", overall: bool = True, dtype=None, seed: int = 0,
                    method: str = "auto", vmap_chunk: int | None = 8, micro_batch: int | None = None) -> Spectra:
    """λ_max, λ_min and ‖·‖₂ of each diagonal block H_gg (and of H if ``overall``) by Lanczos.

    ``data`` is ``(images, labels)`` or a dataset with ``.images``/``.labels`` (one batch, on its
    device). ``groups`` defaults to every parameter group (``param_groups`` names). ``iters`` Lanczos
    steps per block (capped at the block size, where the result is exact to rounding).
    Hessian-vector products run in ``dtype`` (default: the model's). ``method="vit"`` (auto for the
    project's ViT with cross-entropy) uses the hand-written products of :mod:`._vit` (a block product
    stops its backward pass at the block); ``"functorch"`` uses ``vmap(jvp(grad))`` for any model,
    with ``vmap_chunk`` blocks per vectorised product and ``micro_batch`` samples per pass.
    """
    images, labels = _unpack(data)
    all_groups = {g.name: g for g in groups_of(model)}
    names = list(groups) if groups is not None else list(all_groups)
    for n in names:
        if n not in all_groups:
            raise KeyError(f"unknown parameter group {n!r}; groups: {list(all_groups)}")
    device = images.device
    if resolve_method(model, loss, method) == "vit":
        return _top_eigenvalues_vit(model, images, labels, names, iters, overall, dtype, seed, micro_batch)
    full, P = block_hvp(model, images, labels, None, loss, dtype, micro_batch)
    slices = [all_groups[n].slice for n in names]
    calls = 0

    def block_matvec(indices: list[int], vs: list[torch.Tensor]) -> list[torch.Tensor]:
        # one tangent per block, supported on that block; each output restricted to its block
        nonlocal calls
        outs = []
        chunk = vmap_chunk or len(vs)
        for s in range(0, len(vs), chunk):
            part = list(zip(indices[s:s + chunk], vs[s:s + chunk]))
            V = torch.zeros(len(part), P, dtype=torch.float64, device=device)
            for r, (i, v) in enumerate(part):
                V[r, slices[i]] = v
            HV = full(V)
            calls += 1
            outs.extend(HV[r, slices[i]] for r, (i, _) in enumerate(part))
        return outs

    results: dict[str, BlockSpectrum] = {}
    if names:
        ritz = lanczos(block_matvec, [all_groups[n].size for n in names], iters, device, seed)
        for n, r in zip(names, ritz):
            results[n] = BlockSpectrum(n, all_groups[n].size, r[-1].item(), r[0].item(), len(r), r.tolist())
    overall_res = None
    if overall:
        def matvec_all(indices, vs):
            nonlocal calls
            calls += 1
            return list(full(torch.stack(vs)))

        (r,) = lanczos(matvec_all, [P], iters, device, seed)
        overall_res = BlockSpectrum("overall", P, r[-1].item(), r[0].item(), len(r), r.tolist())
    return Spectra(results, overall_res, calls)


def _top_eigenvalues_vit(model, images, labels, names, iters, overall, dtype, seed, sample_chunk) -> Spectra:
    so = ViTSecondOrder(model, images, labels, dtype)
    sizes = {g.name: g.size for g in so.groups}
    calls = 0

    def block_matvec(indices, vs):
        nonlocal calls
        out = []
        for i, v in zip(indices, vs):
            n = names[i]
            calls += 1
            out.append(so.columns(so.group_tangent(n, v.to(so.dtype)[None]), [n], sample_chunk)[n][0])
        return out

    results: dict[str, BlockSpectrum] = {}
    if names:
        ritz = lanczos(block_matvec, [sizes[n] for n in names], iters, so.device, seed)
        for n, r in zip(names, ritz):
            results[n] = BlockSpectrum(n, sizes[n], r[-1].item(), r[0].item(), len(r), r.tolist())
    overall_res = None
    if overall:
        all_names = [g.name for g in so.groups]
        P = so.groups[-1].stop

        def matvec_all(indices, vs):
            nonlocal calls
            calls += 1
            v = vs[0].to(so.dtype)[None]
            tan = {}
            for g in so.groups:
                tan.update(so.group_tangent(g.name, v[:, g.slice]))
            res = so.columns(tan, all_names, sample_chunk)
            return [torch.cat([res[n][0] for n in all_names])]

        (r,) = lanczos(matvec_all, [P], iters, so.device, seed)
        overall_res = BlockSpectrum("overall", P, r[-1].item(), r[0].item(), len(r), r.tolist())
    return Spectra(results, overall_res, calls)
