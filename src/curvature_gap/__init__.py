"""Reproducible companion to *Closing the Curvature Gap* (Petrov et al., arXiv:2510.16927)."""
import warnings

# Notices about dependencies' imports, silenced by their exact text before any module imports them: torch warns
# about linear_operator's torch.jit.script (imported by curvlinops); tqdm.auto about a kernel without ipywidgets.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
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
