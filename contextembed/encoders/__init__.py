"""Plain-torch encoders behind one interface (static vectors, ELMo-style biLM, transformers)."""

from .base import Encoder, PieceEncoding, check_sentences
from .elmo import ElmoEncoder
from .loading import NAMED_MODELS, load_encoder, register_directory_format, tune
from .static import StaticVectors
from .table_storage import TableStorage
from .vector_files import write_word2vec

__all__ = [
    "ElmoEncoder",
    "Encoder",
    "NAMED_MODELS",
    "PieceEncoding",
    "StaticVectors",
    "TableStorage",
    "check_sentences",
    "load_encoder",
    "tune",
    "register_directory_format",
    "write_word2vec",
]
