"""Where the examples find CoNLL-2003 and SST-2, and where to get them. Not part of the library.

Each example takes ``--data``; without it, the directory named by ``CONTEXTEMBED_DATA`` (read
through :func:`contextembed.settings.data_directory`), which holds ``conll2003/train.txt``,
``conll2003/dev.txt`` and ``sst2/train.tsv``; without that, ``../shared/data`` beside the
repository. Where none holds the files, the examples that can say so on stderr and run on a tiny
built-in sample, whose scores mean nothing.
"""

from __future__ import annotations

from pathlib import Path

from contextembed import settings

ROOT = Path(__file__).resolve().parents[1]
#: the corpora beside the repository (the layout ``CONTEXTEMBED_DATA`` also has)
BESIDE_THE_REPOSITORY = ROOT.parent / "shared" / "data"

#: where to get CoNLL-2003 (each example's ``--help`` ends with it)
CONLL_SOURCE = """\
CoNLL-2003 (English NER): train.txt and dev.txt in the original column format (word POS chunk
NER, one token a line, -DOCSTART- lines between documents): the task's eng.train and eng.testa.
The annotations are at https://www.clips.uantwerpen.be/conll2003/ner/ and the
Reuters text they are built from comes, under its own licence, from NIST:
https://trec.nist.gov/data/reuters/reuters.html. Prepared copies name the dev file
valid.txt: rename it dev.txt."""

#: where to get SST-2
SST2_SOURCE = """\
SST-2 (binary sentiment): train.tsv from GLUE (https://gluebenchmark.com/tasks,
the SST-2 download): a "sentence<TAB>label" header and such lines, or
label<TAB>sentence lines (with or without a header)."""

#: how the data location is chosen (each example's ``--help`` says it)
LOCATION = """\
Data: --data, else $CONTEXTEMBED_DATA/{name} (a directory holding conll2003/
and sst2/), else ../shared/data/{name} beside the repository."""
#: what an example with a built-in sample does without the data
FALLBACK = """
Without the files the example runs on a tiny built-in sample and says so on
stderr: its scores mean nothing."""


def data_root() -> Path:
    """``CONTEXTEMBED_DATA`` if set (an existing directory, else a ``SettingError`` naming it), else
    ``../shared/data`` beside the repository."""
    return settings.data_directory() or BESIDE_THE_REPOSITORY


def conll_dir() -> Path:
    """The directory the examples read CoNLL-2003's ``train.txt`` and ``dev.txt`` from by default."""
    return data_root() / "conll2003"


def sst2_file() -> Path:
    """The file the examples read SST-2 from by default."""
    return data_root() / "sst2" / "train.tsv"


def epilog(name: str, source: str, sample: bool = True) -> str:
    """The end of an example's ``--help``: how the data is found (``name``: ``conll2003`` or
    ``sst2/train.tsv``), what happens without it (``sample``: a built-in sample is used) and where
    to get it."""
    return LOCATION.format(name=name) + (FALLBACK if sample else "") + "\n\n" + source
