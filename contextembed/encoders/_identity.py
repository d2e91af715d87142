"""Which model a spec names, and a fingerprint of its files: what binds a fitted adapter to its model.

A fitted scikit-learn estimator or a trained spaCy pipeline is only valid with the encoder it was
fitted on. :func:`identify` resolves a spec the way :func:`~contextembed.load_encoder` does (a
bundled package, a local path made absolute, a hub id's snapshot in the local cache) and hashes the
model's files; :func:`locate` finds those same files again later, in another process or working
directory, and refuses a model whose files differ.

The fingerprint covers every regular file of a model directory, in subdirectories too (config,
weights, tokenizer, vocabulary, options, a distilled table's ``subwords/``), by relative name and
content, in a stable order; it leaves out documentation (``README*``, ``*.md``, ``LICENSE*``),
hidden files (``.git*``, temporaries) and provenance records, or it is the file itself for a
vectors file. Links are followed (a hub snapshot is links to blobs), each real directory once.
File hashes are remembered per ``(path, size, modification time, inode)`` within the process
(:func:`contextembed._runtime.provenance.file_hash`), so a model is read once.

Identities recorded before subdirectories were covered (``scheme`` 1: the top-level files only)
are still compared by that rule, so estimators and pipelines saved then keep loading.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Literal

from ..errors import ModelMismatchError, ModelNotFoundError
from .._runtime.provenance import PROVENANCE_FILE, file_hash, tree_hash

IdentityKind = Literal["named", "path", "hub"]
_SKIPPED = ("readme", "license", ".git")
#: the current fingerprint rule (see the module docstring)
SCHEME = 2


@dataclass(frozen=True)
class ModelIdentity:
    """The model a spec resolved to when an adapter was fitted.

    Attributes
    ----------
    spec : str
        What the user passed (``"minilm-l6"``, ``"models/bert"``, ``"org/name"``).
    kind : {"named", "path", "hub"}
        A bundled model package, a local path, or a hub id from the local cache.
    location : str
        Absolute path of the model's files when fitted.
    fingerprint : str
        Hash of the model's files (see the module docstring).
    scheme : int
        The fingerprint rule it was computed with (1: top-level files only, recorded by older
        versions; 2: every file).
    """

    spec: str
    kind: IdentityKind
    location: str
    fingerprint: str
    scheme: int = SCHEME

    def describe(self) -> str:
        what = {"named": "the bundled model", "path": "the model at", "hub": "the cached hub model"}[self.kind]
        where = self.spec if self.kind == "named" else self.location if self.kind == "path" else f"{self.spec} ({self.location})"
        return f"{what} {where} (fingerprint {self.fingerprint[:12]})"

    def as_dict(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "location": self.location, "fingerprint": self.fingerprint,
                "scheme": self.scheme}

    @classmethod
    def from_dict(cls, data: dict) -> "ModelIdentity":
        scheme = data.get("scheme", 1)
        if scheme not in (1, SCHEME):
            raise ModelMismatchError(f"the recorded model identity uses fingerprint scheme {scheme!r}; this "
                                     f"contextembed knows 1 and {SCHEME}: upgrade contextembed")
        return cls(str(data["spec"]), data["kind"], str(data["location"]), str(data["fingerprint"]), scheme)

    def matches(self, location: str) -> bool:
        """Whether the files at ``location`` are this model's (by the rule it was recorded with)."""
        return fingerprint(location, scheme=self.scheme) == self.fingerprint


def identify(spec) -> ModelIdentity:
    """Resolve ``spec`` like :func:`contextembed.load_encoder` and fingerprint its files.

    Raises
    ------
    ModelNotFoundError
        When the spec names nothing local.
    """
    from ._loading import NAMED_MODELS, cached_snapshot, load_encoder, named_model_files

    text = os.fspath(spec)
    if text in NAMED_MODELS:
        if importlib.util.find_spec(NAMED_MODELS[text].package) is None:
            load_encoder(text)  # raises the ModelNotFoundError with the install line
        location = named_model_files(text)
        return ModelIdentity(text, "named", location, fingerprint(location))
    if os.path.exists(text):
        location = os.path.abspath(text)
        return ModelIdentity(text, "path", location, fingerprint(location))
    snapshot = cached_snapshot(text)
    if snapshot is None:
        load_encoder(text)  # raises the ModelNotFoundError that says why
    return ModelIdentity(text, "hub", snapshot, fingerprint(snapshot))


def locate(identity: ModelIdentity) -> str:
    """The spec to load ``identity``'s model from here: its files must still be the same.

    A local path is looked for where it was when fitted (absolute), then at the spec as given
    (relative to the current directory), so a project moved as a whole keeps working.

    Raises
    ------
    ModelMismatchError
        A model is there but its files differ from those the adapter was fitted with.
    ModelNotFoundError
        No model is there any more.
    """
    if identity.kind == "named":
        current = identify(identity.spec)
        _check_same(identity, current.location, fingerprint(current.location, scheme=identity.scheme))
        return identity.spec
    if identity.kind == "hub":
        from ._loading import cached_snapshot

        snapshot = cached_snapshot(identity.spec)
        if snapshot is None:
            raise ModelNotFoundError(
                f"{identity.describe()} is not in the local Hugging Face cache any more; copy the cache "
                "(HF_HOME) here"
            )
        _check_same(identity, snapshot, fingerprint(snapshot, scheme=identity.scheme))
        return identity.spec
    candidates = list(dict.fromkeys([identity.location, os.path.abspath(identity.spec)]))
    found = [path for path in candidates if os.path.exists(path)]
    for path in found:
        if identity.matches(path):
            return path
    if found:
        _check_same(identity, found[0], fingerprint(found[0], scheme=identity.scheme))
    raise ModelNotFoundError(
        f"{identity.describe()} does not exist any more (looked for {' and '.join(candidates)}); copy the "
        "model back to that path, or refit with set_params(encoder=<new path>), or save with embed_weights=True"
    )


def _check_same(identity: ModelIdentity, location: str, found: str) -> None:
    if found != identity.fingerprint:
        raise ModelMismatchError(
            f"this was fitted with {identity.describe()}, but the model now at {location} has other files "
            f"(fingerprint {found[:12]}): its weights, config or tokenizer changed. Its features would not "
            "be the ones the fitted parts expect; restore the original model, or fit again on this one"
        )


def fingerprint(location: str, *, scheme: int = SCHEME) -> str:
    """Hash of a model file, or of the files of a model directory (see the module docstring)."""
    location = os.path.realpath(location)
    digest = hashlib.blake2b(digest_size=16)
    if os.path.isfile(location):
        digest.update(file_hash(location).encode())
        return digest.hexdigest()
    if scheme == 1:
        return _top_level_fingerprint(location)
    return tree_hash(location, skip=_not_model_file)


def _not_model_file(relative: str) -> bool:
    """Documentation, hidden files and provenance records, at any depth, are not the model."""
    name = relative.rsplit("/", 1)[-1].lower()
    return name.startswith(_SKIPPED) or name.startswith(".") or name.endswith(".md") or name == PROVENANCE_FILE


def _top_level_fingerprint(location: str) -> str:
    """Scheme 1: the regular files at the top of the directory only (identities recorded before)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(os.listdir(location)):
        path = os.path.join(location, name)
        if name.lower().startswith(_SKIPPED) or name.lower().endswith(".md") or not os.path.isfile(path):
            continue
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + file_hash(path).encode())
    return digest.hexdigest()


__all__ = ["SCHEME", "ModelIdentity", "fingerprint", "identify", "locate"]
