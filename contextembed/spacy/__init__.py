"""spaCy adapters: the ``contextembed`` component and the ``contextembed.Listener.v1`` layer.

Importing this module registers the factory and the architectures; installed packages also
expose them through the ``spacy_factories``, ``spacy_architectures`` and ``spacy_misc`` entry
points, so ``spacy train`` finds them without an import.
"""

from .architectures import encoder_v1, encoder_v2, listener_v1
from ._component import ContextEmbedder, make_contextembed
from ._doc_features import DocFeatures
from ._hooks import install_hooks
from ._listener import ContextListener
from ._loader import EncoderLoader

__all__ = [
    "ContextEmbedder",
    "ContextListener",
    "DocFeatures",
    "EncoderLoader",
    "encoder_v1",
    "encoder_v2",
    "install_hooks",
    "listener_v1",
    "make_contextembed",
]
