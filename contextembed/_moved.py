"""The module paths contextembed had before its private modules were named so still import.

The first releases named every module without a leading underscore, so pickles, skops files and
code written against them refer to paths such as ``contextembed.sklearn.text.TextEmbedder``. Those
modules are private now (``contextembed.sklearn._text``): the reference site lists the public ones,
and the package tree shows the architecture. Importing an old path gives the very module the new
path names (one module object, so classes unpickled either way are the same classes), with a
``DeprecationWarning`` that names the public package to import from instead.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module path -> the private module it became (a package's submodules follow their package); the
#: root's private modules of 0.1 moved again, into the private packages ``_runtime`` and ``_inputs``, and
#: what the transformer family alone uses into its package, ``contextembed.encoders.transformer``, and the
#: static vectors' modules into theirs, ``contextembed.encoders._static``
MOVED: dict[str, str] = {
    "contextembed._alignment": "contextembed._inputs.alignment",
    "contextembed._backends": "contextembed._runtime.backends",
    "contextembed._bounds": "contextembed._inputs.bounds",
    "contextembed._devices": "contextembed._runtime.devices",
    "contextembed._distillation": "contextembed.pretraining._distillation",
    "contextembed._documents": "contextembed._inputs.documents",
    "contextembed._file_facts": "contextembed._runtime.file_facts",
    "contextembed._files": "contextembed._runtime.files",
    "contextembed._forking": "contextembed._runtime.forking",
    "contextembed._jobs": "contextembed.io._jobs",
    "contextembed._json": "contextembed._runtime.json_io",
    "contextembed._options": "contextembed._inputs.options",
    "contextembed._pages": "contextembed._runtime.pages",
    "contextembed._precisions": "contextembed._runtime.precisions",
    "contextembed._provenance": "contextembed._runtime.provenance",
    "contextembed._quantization": "contextembed._runtime.quantization",
    "contextembed._sentences": "contextembed._inputs.sentences",
    "contextembed._sif": "contextembed.pretraining._sif",
    "contextembed._signal_stack": "contextembed._runtime.signal_stack",
    "contextembed._store": "contextembed._runtime.store",
    "contextembed._streams": "contextembed._runtime.streams",
    "contextembed._terminal": "contextembed._runtime.terminal",
    "contextembed.alignment": "contextembed._inputs.alignment",
    "contextembed.backends": "contextembed._runtime.backends",
    "contextembed.bounds": "contextembed._inputs.bounds",
    "contextembed.devices": "contextembed._runtime.devices",
    "contextembed.distillation": "contextembed.pretraining._distillation",
    "contextembed.documents": "contextembed._inputs.documents",
    "contextembed.encoders._engine": "contextembed.encoders.transformer._engine",
    "contextembed.encoders._host_copies": "contextembed.encoders.transformer._host_copies",
    "contextembed.encoders._pruning": "contextembed.encoders.transformer._pruning",
    "contextembed.encoders._sentence_config": "contextembed.encoders.transformer._sentence_config",
    "contextembed.encoders._static_directory": "contextembed.encoders._static.directory",
    "contextembed.encoders._subwords": "contextembed.encoders._static.subwords",
    "contextembed.encoders._table_storage": "contextembed.encoders._static.tables",
    "contextembed.encoders._unpadded": "contextembed.encoders.transformer._unpadded",
    "contextembed.encoders._vector_files": "contextembed.encoders._static.files",
    "contextembed.encoders.base": "contextembed.encoders._base",
    "contextembed.encoders.elmo": "contextembed.encoders._elmo",
    "contextembed.encoders.engine": "contextembed.encoders.transformer._engine",
    "contextembed.encoders.hf_files": "contextembed.encoders._hf_files",
    "contextembed.encoders.identity": "contextembed.encoders._identity",
    "contextembed.encoders.loading": "contextembed.encoders._loading",
    "contextembed.encoders.static": "contextembed.encoders._static.vectors",
    "contextembed.encoders.static_directory": "contextembed.encoders._static.directory",
    "contextembed.encoders.subwords": "contextembed.encoders._static.subwords",
    "contextembed.encoders.table_storage": "contextembed.encoders._static.tables",
    "contextembed.encoders.unpadded": "contextembed.encoders.transformer._unpadded",
    "contextembed.encoders.vector_files": "contextembed.encoders._static.files",
    "contextembed.engines.arrow": "contextembed.engines._arrow",
    "contextembed.engines.batch": "contextembed.engines._batch",
    "contextembed.forking": "contextembed._runtime.forking",
    "contextembed.heads.bilstm_crf": "contextembed.heads._bilstm_crf",
    "contextembed.heads.crf": "contextembed.heads._crf",
    "contextembed.jobs": "contextembed.io._jobs",
    "contextembed.options": "contextembed._inputs.options",
    "contextembed.pooling.layers": "contextembed.pooling._layers",
    "contextembed.pooling.subword": "contextembed.pooling._subword",
    "contextembed.pooling.text": "contextembed.pooling._text",
    "contextembed.precisions": "contextembed._runtime.precisions",
    "contextembed.pretraining.bilm": "contextembed.pretraining._bilm",
    "contextembed.pretraining.cli": "contextembed.pretraining._cli",
    "contextembed.pretraining.corpus": "contextembed.pretraining._corpus",
    "contextembed.pretraining.distributed": "contextembed.pretraining._distributed",
    "contextembed.pretraining.masking": "contextembed.pretraining._masking",
    "contextembed.pretraining.mlm": "contextembed.pretraining._mlm",
    "contextembed.pretraining.outline": "contextembed.pretraining._outline",
    "contextembed.pretraining.run_files": "contextembed.pretraining._run_files",
    "contextembed.pretraining.seeds": "contextembed.pretraining._seeds",
    "contextembed.pretraining.static": "contextembed.pretraining._static",
    "contextembed.pretraining.training": "contextembed.pretraining._training",
    "contextembed.provenance": "contextembed._runtime.provenance",
    "contextembed.quantization": "contextembed._runtime.quantization",
    "contextembed.sentences": "contextembed._inputs.sentences",
    "contextembed.sklearn.neural_tagger": "contextembed.sklearn._neural_tagger",
    "contextembed.sklearn.pairs": "contextembed.sklearn._pairs",
    "contextembed.sklearn.persistence": "contextembed.sklearn._persistence",
    "contextembed.sklearn.scoring": "contextembed.sklearn._scoring",
    "contextembed.sklearn.tagger": "contextembed.sklearn._tagger",
    "contextembed.sklearn.tagger_features": "contextembed.sklearn._tagger_features",
    "contextembed.sklearn.text": "contextembed.sklearn._text",
    "contextembed.sklearn.token": "contextembed.sklearn._token",
    "contextembed.spacy.combine_layers": "contextembed.spacy._combine_layers",
    "contextembed.spacy.component": "contextembed.spacy._component",
    "contextembed.spacy.doc_features": "contextembed.spacy._doc_features",
    "contextembed.spacy.encoder_layer": "contextembed.spacy._encoder_layer",
    "contextembed.spacy.hooks": "contextembed.spacy._hooks",
    "contextembed.spacy.listener": "contextembed.spacy._listener",
    "contextembed.spacy.loader": "contextembed.spacy._loader",
    "contextembed.spacy.scalar_mix": "contextembed.spacy._scalar_mix",
    "contextembed.spacy.upstream": "contextembed.spacy._upstream",
    "contextembed.streams": "contextembed._runtime.streams",
    "contextembed.terminal": "contextembed._runtime.terminal",
}


def moved_to(name: str) -> str | None:
    """The current path of the module an old path ``name`` named, or None if it did not move."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        new = MOVED.get(".".join(parts[:cut]))
        if new is not None:
            return ".".join([new, *parts[cut:]])
    return None


def _public_home(new: str) -> str:
    """The public package above a private module: where its public names are exported."""
    parts = new.split(".")
    first_private = next(index for index, part in enumerate(parts) if part.startswith("_"))
    return ".".join(parts[:first_private])


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as the module its new path names."""

    def __init__(self, old: str, new: str):
        self._old = old
        self._new = new
        self._own_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self._new)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # the import system gave the module the old path's spec; it keeps its own
        module.__spec__ = self._own_spec
        warnings.warn(
            f"{self._old} is now the private module {self._new}; import its public names from "
            f"{_public_home(self._new)} (the old path keeps working for saved files)",
            DeprecationWarning,
            stacklevel=2,
        )


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths before the path finder would load a second copy of the file.

    Only an old path whose new module exists is found: any other name under a moved package is
    left to the other finders, which fail as Python does, naming the path that was imported.
    """

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("contextembed."):
            return None
        new = moved_to(fullname)
        if new is None or not _exists(new):
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname, new))


def _exists(name: str) -> bool:
    """Whether the module ``name`` exists (found, not run; its parent packages are imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is no package; a module without a spec
        return False


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
