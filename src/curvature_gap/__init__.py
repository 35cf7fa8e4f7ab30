"""Reproducible companion to *Closing the Curvature Gap* (Petrov et al., arXiv:2510.16927)."""
from .config import MODEL_CONFIGS, ModelConfig, TrainConfig, train_config
from .model import ViT, build_model, param_groups, ParamGroup

__version__ = "0.1.0"
__all__ = [
    "MODEL_CONFIGS", "ModelConfig", "TrainConfig", "train_config",
    "ViT", "build_model", "param_groups", "ParamGroup", "__version__",
]
