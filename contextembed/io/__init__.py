"""Reading token files strictly and streaming features to ``.npy`` / ``.npz`` with bounded memory.

The public names are imported from here; each is defined in the module of its job:

- :mod:`contextembed.io.readers`: the input formats (plain text, CoNLL, CoNLL-U, JSONL) and their
  documents, read strictly: every error names the file and the line;
- :mod:`contextembed.io.writer`: :class:`ArrayWriter`, an array streamed block by block to a file
  that appears under its name only once complete;
- ``contextembed.io._pipeline``: :func:`embed_file`, a file of sentences to a file of features;
- ``contextembed.io._settings``: ``EmbedSettings``, what an output is made with (its options and
  encoder), built and checked once where the keywords come in;
- ``contextembed.io._records``: the provenance record every output carries and the checks before
  an output is reused (:func:`check_output`, :func:`read_output_shape`).
"""

from ._pipeline import embed_file
from ._records import check_output, read_output_shape
from .readers import INPUT_FORMATS, check_input, guess_format, read_conll, read_documents, read_sentences
from .writer import ArrayWriter

# the other names contextembed.io held when it was one module, importable from here as before
from ..extraction import LEVELS, Level  # noqa: F401
from ..pooling._layers import OutputDtype  # noqa: F401
from ..tokenizers import TOKENIZERS, Tokenizer, get_tokenizer, spacy_tokenizer  # noqa: F401
from ._pipeline import LEVEL_OPTIONS, OUTPUT_DTYPES, TEXT_OPTIONS, expected_record  # noqa: F401
from ._records import (  # noqa: F401
    OUTPUT_ARTIFACT, RECORD_ENTRY, RECORD_SUFFIX, check_reusable, output_fields, read_output_record, record_file,
)
from .readers import (  # noqa: F401
    DOC_SEPS, DOCSTART, INPUT_EXTENSIONS, NEW_DOCUMENT, ConllSentence, DocSep, InputFormat, check_input_format,
    whitespace_tokenizer,
)
from .writer import OUTPUT_EXTENSIONS, OVERWRITE_FLAG  # noqa: F401

__all__ = ["INPUT_FORMATS", "ArrayWriter", "check_input", "check_output", "embed_file", "guess_format", "read_conll",
           "read_documents", "read_output_shape", "read_sentences"]
