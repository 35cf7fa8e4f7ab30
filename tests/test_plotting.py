"""curvature_gap.plotting: one style, page-width figures, legibility metadata, atomic files."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from curvature_gap import plotting as pl


def test_pooled_log_image_is_the_cell_mean_of_log10():
    H = np.arange(1, 37, dtype=float).reshape(6, 6)
    img, f = pl.pooled_log_image(H, eps=0.0, max_cells=3)
    assert f == 2 and img.shape == (3, 3)
    assert img[0, 0] == pytest.approx(np.log10([1, 2, 7, 8]).mean())
    img5, f5 = pl.pooled_log_image(H[:5, :5], eps=0.0, max_cells=3)  # ragged edge: nan-padded
    assert f5 == 2 and img5[2, 2] == pytest.approx(np.log10(H[4, 4]))
    full, f1 = pl.pooled_log_image(-H, eps=1.0, max_cells=10)
    assert f1 == 1 and full[0, 0] == pytest.approx(np.log10(2.0))


def test_png_carries_the_width_and_smallest_font():
    fig = pl.new_figure(5.0, 3.0)
    ax = fig.add_subplot()
    ax.set_xlabel("x", fontsize=7.5)
    ax.set_title("")
    assert fig.get_figwidth() == 5.0 and pl.min_font_size(fig) == 7.5
    import io

    text = Image.open(io.BytesIO(pl.png_bytes(fig))).text
    assert text["cg:width_in"] == "5.000" and text["cg:min_font_pt"] == "7.50"
    assert pl.min_font_size(pl.new_figure()) == float("inf")


def test_default_style_is_legible_at_page_width():
    fig = pl.new_figure()
    ax = fig.add_subplot()
    ax.plot([0, 1])
    ax.set_xlabel("step")
    ax.set_title("t")
    ax.legend(["a"])
    assert fig.get_figwidth() == pl.WIDTH and pl.min_font_size(fig) >= pl.MIN_FONT


def test_save_figure_writes_pdf_and_png_and_leaves_no_temporary(tmp_path):
    fig = pl.new_figure()
    fig.add_subplot().plot([1, 2])
    paths = pl.save_figure(fig, tmp_path / "out" / "fig_part")
    assert paths == [str(tmp_path / "out" / "fig_part.pdf"), str(tmp_path / "out" / "fig_part.png")]
    assert (tmp_path / "out" / "fig_part.pdf").read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fig_part.pdf", "fig_part.png"]


def test_labels():
    assert pl.short_label("block0.query") == "Q" and pl.short_label("block3.ffn1", n_blocks=8) == "FFN13"
    assert pl.short_label("head") == "head"
    assert pl.tensor_label("blocks.0.ln1.weight") == r"$\gamma_1$" and pl.tensor_label("embed.weight") == "embed.weight"
    fig = pl.new_figure()
    ax = fig.add_subplot()
    pl.group_axes(ax, [0, 2], [2, 5], ["a", "b"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"] and list(ax.get_xticks()) == [1.0, 3.5]
