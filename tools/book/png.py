"""The legibility metadata a figure carries: the text chunks of its PNG, read with Pillow.

``curvature_gap.plotting.png_bytes`` writes ``cg:width_in`` (the figure's width in inches) and
``cg:min_font_pt`` (its smallest font) into every figure's PNG; the browser checks read them back to know
at what size a figure's text is drawn on the page."""
from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError

__all__ = ["png_text_chunks"]


def png_text_chunks(data: bytes) -> dict[str, str]:
    """The text chunks (``tEXt``, ``zTXt``, ``iTXt``) of a PNG as {keyword: text}; ValueError if ``data`` is
    not a PNG."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "PNG":
                raise ValueError(f"not a PNG (a {im.format} image)")
            im.load()  # text chunks after the image data are read only with it
            return {str(k): str(v) for k, v in (getattr(im, "text", None) or {}).items()}
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a PNG ({exc})") from exc
