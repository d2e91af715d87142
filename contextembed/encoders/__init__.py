"""Plain-torch encoders behind one interface (static vectors, ELMo-style biLM, transformers)."""

from .._runtime.devices import auto_cpu_precision, cpu_bf16_speedup
from ._base import Encoder, PieceEncoding, check_sentences
from ._elmo import BiLMEncoderModule, ElmoEncoder, elmo_options, save_bilm, sentence_char_ids
from ._loading import NAMED_MODELS, load_encoder, register_directory_format, tune
from .transformer._runtime_choice import Runtime, choose_runtime
from ._static.vectors import StaticVectors
from ._static.tables import TableStorage
from ._static.files import write_word2vec

__all__ = [
    "BiLMEncoderModule",
    "ElmoEncoder",
    "Encoder",
    "NAMED_MODELS",
    "PieceEncoding",
    "Runtime",
    "StaticVectors",
    "TableStorage",
    "auto_cpu_precision",
    "check_sentences",
    "choose_runtime",
    "cpu_bf16_speedup",
    "elmo_options",
    "load_encoder",
    "tune",
    "register_directory_format",
    "save_bilm",
    "sentence_char_ids",
    "write_word2vec",
]
