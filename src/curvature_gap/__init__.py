"""Reproducible companion to *Closing the Curvature Gap* (Petrov et al., arXiv:2510.16927)."""
import warnings

# curvlinops imports linear_operator, which decorates functions with torch.jit.script at import time;
# torch 2.14 warns about that on every import. The notice is about a dependency's import, not about
# anything this package computes, so it is silenced here, by its exact text, and nowhere else.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
# tqdm.auto (the progress bars) warns in a Jupyter kernel without ipywidgets, on first import; the package's modules
# import it, so the notice is silenced here, before any of them, by its exact text (pages show no progress bars).
warnings.filterwarnings("ignore", message=r"IProgress not found")

from .config import MODEL_CONFIGS, ModelConfig, Recipe, recipe_for
from .model import ViT, build_model
from .params import ParamGroup, param_groups
from .hessian.layers import layer_hessian, layer_hvp
from .hessian.models import model_hessian, model_hvp

__version__ = "0.1.0"
__all__ = [
    "MODEL_CONFIGS", "ModelConfig", "Recipe", "recipe_for",
    "ViT", "build_model", "param_groups", "ParamGroup", "layer_hessian", "layer_hvp", "model_hessian", "model_hvp",
    "__version__",
]
