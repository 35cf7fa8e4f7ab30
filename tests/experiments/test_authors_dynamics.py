"""Figs. 5 and 7-11 on the authors' model (curvature_gap.experiments.authors_dynamics)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from curvature_gap.config import ConfigError
from curvature_gap.experiments import authors_dynamics
from curvature_gap.hessian import hessian
from curvature_gap.model import authors_hessian_order, authors_indices, authors_parameter_names, build_model, param_slices


def _model():
    return build_model("authors_mnist", seed=0, d_model=8, d_k=8, d_ff=16, image_size=8, patch_size=4).double()


def test_the_lists_are_the_authors_names_in_their_flattening():
    m = _model()
    order, layout = authors_hessian_order(m)
    starts = dict(zip([g for g, _ in layout], np.cumsum([0] + [n for _, n in layout])[:-1]))
    q = authors_indices(m, authors_dynamics.LISTS["queries"][0])
    assert q == order[starts["block0.query"]:starts["block0.query"] + len(q)]
    # their Linear weight is (out, in) = the transpose of ours: entry (o, i) of theirs is ours (i, o)
    sl = param_slices(m)["blocks.0.query"]
    d = m.cfg.d_model
    assert q[1] == sl.start + d and len(q) == d * m.cfg.d_k
    ln = authors_indices(m, authors_dynamics.LISTS["layernorm"][0])
    assert authors_indices(m, authors_dynamics.LISTS["feedforward"][0]) == ln[-2 * d:], (
        "their FeedForward list is LN2's gamma, beta")
    names = authors_parameter_names(m.cfg)
    assert all(n in names for lst, _ in authors_dynamics.LISTS.values() for n in lst)
    with pytest.raises(ConfigError, match="not a parameter of the authors' model: nope; theirs are: embeddings"):
        authors_indices(m, ["nope"])


def test_a_lists_hessian_is_the_cut_of_the_whole_one_and_matches_autograd():
    """The Hessian over one list alone (what their notebook asks curvlinops for) equals the principal
    sub-matrix of the whole exact Hessian, against reverse-over-reverse autograd in float64."""
    m = _model()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 1, 8, 8, generator=g, dtype=torch.float64), torch.tensor([1, 4, 7])
    H = hessian(m, (x, y)).numpy()
    ix = authors_indices(m, authors_dynamics.LISTS["keys"][0])
    p = dict(m.named_parameters())["blocks.0.key"]
    base = p.detach().clone()

    def ce(wt):  # their flattening: W_K as their (out, in) matrix, row-major
        logits = torch.func.functional_call(m, {"blocks.0.key": wt.reshape(base.T.shape).T}, (x,))
        return torch.nn.functional.cross_entropy(logits, y)

    ref = torch.autograd.functional.hessian(ce, base.T.reshape(-1).clone()).numpy()  # double backward
    assert np.max(np.abs(H[np.ix_(ix, ix)] - ref)) <= 1e-10 * max(1.0, np.max(np.abs(ref)))


class _Res:
    def __init__(self, arrays, meta):
        self.arrays, self.meta = arrays, meta
        self.config = {"profile": "paper"}
        self.json_path = "x.json"


def _fake(keys_values=1.0, others=0.1, bad_step=None):
    steps = np.array([0, 200, 400])
    a = {"steps": steps}
    for g in authors_dynamics.LISTS:
        v = keys_values if g in ("keys", "values") else others
        for k in ("param", "spec"):
            a[f"{k}_{g}"] = np.full(3, v)
    if bad_step is not None:
        a["spec_queries"][bad_step] = 0.9  # within a factor 2 of Keys/Values: not "much smaller"
    meta = {"lists": {g: {"label": lab} for g, (_, lab) in authors_dynamics.LISTS.items()}}
    return _Res(a, meta)


def test_the_claim_rule_reads_every_step_and_both_panels():
    assert authors_dynamics.keys_values_authors(_fake()).verdict == "reproduced"
    row = authors_dynamics.keys_values_authors(_fake(bad_step=1))
    assert row.verdict == "partly reproduced" and row.value == pytest.approx(5 / 6)
    assert not row.details["theirs"]["hessians/step 200"]["holds"] and row.details["theirs"]["parameters/step 200"]["holds"]
    assert authors_dynamics.keys_values_authors(_fake(others=2.0)).verdict == "not reproduced"
    assert authors_dynamics.keys_values_authors(None).verdict == "not run"


@pytest.mark.slow
def test_a_lists_hessian_from_its_groups_blocks_is_the_dense_hessians_principal_submatrix():
    """list_hessian assembles the blocks of the groups holding a list (one group, two, or the closed-form FFN pair)
    and cuts the list out: equal to the dense Hessian's sub-matrix in float64."""
    import numpy as np
    import torch

    from curvature_gap.experiments.authors_dynamics import LISTS, list_hessian
    from curvature_gap.hessian import hessian
    from curvature_gap.model import authors_indices, build_model

    model = build_model("authors_mnist", seed=3).double().eval()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(3, 1, 28, 28, generator=g, dtype=torch.float64), torch.tensor([1, 4, 7]))
    H = hessian(model, batch).numpy()
    for name in ("queries", "layernorm", "ffn_weights"):
        ix = authors_indices(model, LISTS[name][0])
        np.testing.assert_allclose(list_hessian(model, batch, ix), H[np.ix_(ix, ix)], rtol=0, atol=1e-12 * np.abs(H).max())


def test_each_list_gets_the_batch_of_its_section_as_their_notebook_draws_it():
    """Their notebook calls next(iter(loader)) in each of five sections: section i gets pass i's first batch."""
    from curvature_gap.experiments.authors_dynamics import LISTS, PLOTTED, SECTION_PASS

    assert [SECTION_PASS[g] for g in PLOTTED] == [0, 1, 2, 3, 4]
    assert set(LISTS) - set(SECTION_PASS) == {"ffn_weights"}


def test_the_fig5_verdict_is_a_count_over_runs_when_there_are_several():
    """Each run's readings decide its own verdict; several runs give "reproduced" only when every run does."""
    from types import SimpleNamespace

    import numpy as np

    from curvature_gap.experiments.authors_dynamics import LISTS, PLOTTED, keys_values_authors

    def lines(top):  # keys and values at `top`, every other list at 1
        return {g: np.full(2, top if g in ("keys", "values") else 1.0) for g in PLOTTED}

    arrays = {"steps": np.array([0, 1000])}
    for g, v in lines(3.0).items():  # the run of the recipe's seed: holds in every reading
        arrays[f"param_{g}"] = arrays[f"spec_{g}"] = v
    arrays["param_ffn_weights"] = arrays["spec_ffn_weights"] = np.full(2, 1.0)
    good, bad = lines(3.0), lines(0.5)
    for g in PLOTTED:
        arrays[f"runs_param_{g}"] = arrays[f"runs_spec_{g}"] = np.stack([good[g], bad[g]])
    meta = {"lists": {g: {"label": lab} for g, (_, lab) in LISTS.items()}, "run_seed": 37, "run_seeds": [0, 1]}
    res = SimpleNamespace(arrays=arrays, meta=meta, config={"profile": "paper"}, json_path="x.json")
    row = keys_values_authors(res)
    assert row.verdict == "partly reproduced" and row.value == 2 / 3
    assert "Over 3 runs (seeds 37, 0, 1" in row.note and "2/3 runs" in row.note
    meta["run_seeds"] = []
    assert keys_values_authors(res).verdict == "reproduced"
