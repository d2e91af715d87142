"""contextembed: frozen pretrained encoders as layer-pooled features for scikit-learn and spaCy."""

import logging

from . import _moved

# old module paths (saved pickles and skops files name them) import as the private modules they became
_moved.install()

from ._runtime.forking import set_child_threads
from ._runtime.store import memory_budget, set_memory_budget
from .encoders import ElmoEncoder, Encoder, PieceEncoding, StaticVectors, load_encoder
from .errors import MemoryBudgetError, MissingDependencyError, ModelNotFoundError
from .pooling import LayerPooling, ScalarMix, resolve_layers

__version__ = "0.1.0"

# the library logs to "contextembed" and its module loggers and adds no handler of its own:
# logging.basicConfig(level=logging.INFO) shows them
logging.getLogger(__name__).addHandler(logging.NullHandler())


def __getattr__(name: str):
    """``distill`` is imported when first asked for: it lives with the pretraining runs, whose
    imports ``import contextembed`` does not pay for."""
    if name == "distill":
        from .pretraining._distillation import distill

        return distill
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ElmoEncoder",
    "Encoder",
    "LayerPooling",
    "MemoryBudgetError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "PieceEncoding",
    "ScalarMix",
    "StaticVectors",
    "__version__",
    "distill",
    "load_encoder",
    "memory_budget",
    "resolve_layers",
    "set_child_threads",
    "set_memory_budget",
]
