"""contextembed: frozen pretrained encoders as layer-pooled features for scikit-learn and spaCy."""

from .distillation import distill
from .encoders import ElmoEncoder, Encoder, PieceEncoding, StaticVectors, load_encoder
from .errors import MissingDependencyError, ModelNotFoundError
from .pooling import LayerPooling, ScalarMix, resolve_layers

__version__ = "0.1.0"

__all__ = [
    "ElmoEncoder",
    "Encoder",
    "LayerPooling",
    "MissingDependencyError",
    "ModelNotFoundError",
    "PieceEncoding",
    "ScalarMix",
    "StaticVectors",
    "__version__",
    "distill",
    "load_encoder",
    "resolve_layers",
]
