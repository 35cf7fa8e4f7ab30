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
from . import _unpack, resolve_method
from ..params import groups_of
from ._vit import ViTSecondOrder
from .hvp import HessianOperator

__all__ = ["BlockSpectrum", "Spectra", "top_eigenvalues"]


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
        spectra = [*self.blocks.values(), *([self.overall] if self.overall is not None else [])]
        return [dict(block=b.name, size=b.size, lambda_max=b.lambda_max, lambda_min=b.lambda_min,
                     spectral_norm=b.spectral_norm, iters=b.iters) for b in spectra]


def top_eigenvalues(model: nn.Module, data, groups: list[str] | None = None, iters: int = 30,
                    loss="cross_entropy", overall: bool = True, dtype=None, seed: int = 0,
                    method: str = "auto", vmap_chunk: int | None = 8, micro_batch: int | None = None) -> Spectra:
    """λ_max, λ_min and ‖·‖₂ of each diagonal block H_gg (and of H if ``overall``) by Lanczos.

    ``data`` is ``(images, labels)`` or a dataset with ``.images``/``.labels`` (one batch, on its device). ``groups``
    defaults to every parameter group (``param_groups`` names). ``iters`` Lanczos steps per block (capped at the block
    size, where the result is exact to rounding). Hessian-vector products run in ``dtype`` (default: the model's).
    ``method="vit"`` (auto for the project's ViT with cross-entropy) uses the hand-written products of :mod:`._vit` (a
    block product stops its backward pass at the block); ``"functorch"`` uses ``vmap(jvp(grad))`` for any model, with
    ``vmap_chunk`` blocks per vectorised product and ``micro_batch`` samples per pass.
    """
    images, labels = _unpack(data)
    all_groups = {g.name: g for g in groups_of(model)}
    names = list(groups) if groups is not None else list(all_groups)
    for n in names:
        if n not in all_groups:
            raise KeyError(f"unknown parameter group {n!r}; groups: {list(all_groups)}")
    calls = [0]  # Hessian-vector products (batched ones count once)
    if resolve_method(model, loss, method) == "vit":
        block_matvec, matvec_all, P = _vit_products(model, images, labels, names, dtype, micro_batch, calls)
    else:
        block_matvec, matvec_all, P = _generic_products(model, images, labels, names, all_groups, loss, dtype,
                                                         micro_batch, vmap_chunk, calls)
    sizes = [all_groups[n].size for n in names]
    blocks = {n: _spectrum(n, size, r)
              for n, size, r in zip(names, sizes, lanczos(block_matvec, sizes, iters, images.device, seed))}
    whole = _spectrum("overall", P, lanczos(matvec_all, [P], iters, images.device, seed)[0]) if overall else None
    return Spectra(blocks, whole, calls[0])


def _spectrum(name: str, size: int, ritz: torch.Tensor) -> BlockSpectrum:
    """The :class:`BlockSpectrum` of ascending Ritz values."""
    return BlockSpectrum(name, size, ritz[-1].item(), ritz[0].item(), len(ritz), ritz.tolist())


def _generic_products(model, images, labels, names, all_groups, loss, dtype, micro_batch, vmap_chunk, calls):
    """(block products, whole-Hessian products, P) by :meth:`HessianOperator.matmat`: each block's tangent supported
    on that block and its output restricted to it, ``vmap_chunk`` blocks per vectorised product."""
    op = HessianOperator(model, (images, labels), loss=loss, dtype=dtype, micro_batch=micro_batch)
    full, P = op.matmat, op.shape[0]
    slices = [all_groups[n].slice for n in names]

    def block_matvec(indices: list[int], vs: list[torch.Tensor]) -> list[torch.Tensor]:
        outs = []
        chunk = vmap_chunk or len(vs)
        for s in range(0, len(vs), chunk):
            part = list(zip(indices[s:s + chunk], vs[s:s + chunk]))
            V = torch.zeros(len(part), P, dtype=torch.float64, device=images.device)
            for r, (i, v) in enumerate(part):
                V[r, slices[i]] = v
            HV = full(V)
            calls[0] += 1
            outs.extend(HV[r, slices[i]] for r, (i, _) in enumerate(part))
        return outs

    def matvec_all(indices, vs):
        calls[0] += 1
        return list(full(torch.stack(vs)))

    return block_matvec, matvec_all, P


def _vit_products(model, images, labels, names, dtype, sample_chunk, calls):
    """(block products, whole-Hessian products, P) by the engine's passes over the ViT's program (a block
    product stops its backward pass at the block)."""
    so = ViTSecondOrder(model, images, labels, dtype)
    all_names = [g.name for g in so.groups]

    def block_matvec(indices, vs):
        calls[0] += len(vs)
        return [so.columns(so.group_tangent(names[i], v.to(so.dtype)[None]), [names[i]], sample_chunk)[names[i]][0]
                for i, v in zip(indices, vs)]

    def matvec_all(indices, vs):
        calls[0] += 1
        v = vs[0].to(so.dtype)[None]
        tan = {k: t for g in so.groups for k, t in so.group_tangent(g.name, v[:, g.slice]).items()}
        res = so.columns(tan, all_names, sample_chunk)
        return [torch.cat([res[n][0] for n in all_names])]

    return block_matvec, matvec_all, so.groups[-1].stop
