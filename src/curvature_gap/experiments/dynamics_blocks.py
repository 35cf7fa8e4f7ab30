"""The Hessian blocks the training-dynamics figures follow (Figs. 5 and 7-11), and what is kept of them.

At every snapshot: the diagonal blocks of the transformer block's groups and of the head, and the two within-type
pairs (LN1–LN2, FFN1–FFN2), a few seconds per snapshot instead of the whole Hessian (the embedding and position
blocks need a pass through the whole network per column: Figs. 3 and 4 show them). Fig. 3's Hessian gives step 0.
"""
from __future__ import annotations

import numpy as np

from ..exact.linalg import sym_spectral_norm
from ..params import param_groups
from ..plotting import pooled_log_image

__all__ = ["TYPES", "trajectory_groups", "trajectory_pairs", "snapshot_record", "blocks_from_dense"]

# figure -> (block type, groups of block 0)
TYPES = {
    "fig7": ("queries", ("query",)),
    "fig8": ("keys", ("key",)),
    "fig9": ("values", ("value",)),
    "fig10": ("layernorm", ("ln1", "ln2")),
    "fig11": ("feedforward", ("ffn1", "ffn2")),
}


def trajectory_groups(model) -> list[str]:
    """Groups whose diagonal Hessian block is followed over training: block 0's groups and the head."""
    return [g.name for g in param_groups(model) if g.name.startswith("block0.") or g.name == "head"]


def trajectory_pairs(model) -> list[tuple[str, str]]:
    return [(g, g) for g in trajectory_groups(model)] + [("block0.ln1", "block0.ln2"), ("block0.ffn1", "block0.ffn2")]


def blocks_from_dense(H: np.ndarray, model) -> dict:
    """The trajectory's blocks cut out of a dense Hessian (Fig. 3's, for step 0)."""
    gs = {g.name: g for g in param_groups(model)}
    return {(a, b): H[gs[a].slice, gs[b].slice] for a, b in trajectory_pairs(model)}


def _type_block(blocks: dict, kinds) -> np.ndarray:
    names = [f"block0.{k}" for k in kinds]
    get = lambda a, b: blocks[(a, b)] if (a, b) in blocks else blocks[(b, a)].T  # noqa: E731
    return np.block([[np.asarray(get(a, b), dtype=np.float64) for b in names] for a in names])


def snapshot_record(blocks: dict, model, display: bool, eps: float, cells: int) -> dict:
    """Norms of the followed blocks (Frobenius and spectral of each diagonal block, Frobenius of the two
    within-type pairs, both norms of each type's block) and, when ``display``, each type's block as an
    image of log10(|H| + eps) (pooled to ``cells`` pixels a side; float16)."""
    diag = [np.asarray(blocks[(g, g)], dtype=np.float64) for g in trajectory_groups(model)]
    rec = dict(diag_fro=np.array([np.linalg.norm(B) for B in diag]),
               diag_spec=np.array([sym_spectral_norm(B) for B in diag]),
               pair_fro=np.array([np.linalg.norm(np.asarray(blocks[p], dtype=np.float64))
                                  for p in trajectory_pairs(model)[-2:]]))  # LN1–LN2, FFN1–FFN2
    for t, kinds in TYPES.values():
        B = _type_block(blocks, kinds)
        rec[f"fro_{t}"] = float(np.linalg.norm(B))
        rec[f"spec_{t}"] = sym_spectral_norm(B)
        if display:
            img, f = pooled_log_image(B, eps, cells)
            rec[f"img_{t}"] = img.astype(np.float16)
            rec[f"pool_{t}"] = f
    return rec
