"""ELMo-style encoder: character CNN + biLSTM, AllenNLP's original weight format, stateless.

* :class:`ElmoEncoder` -- the frozen encoder behind the common interface
  (``load_encoder("path/to/dir")`` for a directory with ``options.json`` + ``weights.hdf5``).
* :class:`BiLMEncoderModule` -- the trainable torch module (used by ``contextembed pretrain bilm``).
* :func:`elmo_options` -- options dicts for the released sizes; :func:`load_bilm` / :func:`save_bilm`
  read and write the original layout.
"""

from .characters import BOS_IDS, EOS_IDS, MAX_CHARACTERS, sentence_char_ids, word_char_ids
from .encoder import OPTIONS_FILE, WEIGHTS_FILE, ElmoEncoder, is_elmo_directory, load_bilm, save_bilm
from .modules import BiLMEncoderModule, BiLMStates, CharCNNTokenEmbedder, ProjectedLSTM, run_lstms
from .options import SIZE_PRESETS, ElmoFormatError, check_options, elmo_options, read_options
from .weights import expected_shapes, load_weights, save_weights

__all__ = [
    "BOS_IDS",
    "BiLMEncoderModule",
    "BiLMStates",
    "CharCNNTokenEmbedder",
    "EOS_IDS",
    "ElmoEncoder",
    "ElmoFormatError",
    "MAX_CHARACTERS",
    "OPTIONS_FILE",
    "ProjectedLSTM",
    "SIZE_PRESETS",
    "WEIGHTS_FILE",
    "check_options",
    "elmo_options",
    "expected_shapes",
    "is_elmo_directory",
    "load_bilm",
    "load_weights",
    "read_options",
    "run_lstms",
    "save_bilm",
    "save_weights",
    "sentence_char_ids",
    "word_char_ids",
]
