"""What a pretraining run keeps in OUT besides the model, and the checks before it writes there.

* ``pretrain_config.json``: the resolved configuration (written when the command line asks).
* ``log.jsonl``: one JSON record per line (training statistics, held-out statistics).
* ``held_out.json``: the summary of a neural run.
* ``checkpoints/step-XXXXXXXX.pt``: model, optimizer and scaler state and the run's provenance record
  (corpus hash, settings, model shape and vocabulary), for ``resume``; ``checkpoints/tokenizer/``
  the vocabulary they were trained with (MLM).
* ``contextembed_provenance.json``: the model's provenance record (what made it), which also lists
  the model's files in OUT.

The model is written as a set: saved into a fresh hidden directory in OUT, then moved into place
while the files of the model OUT held before (those its record lists) are removed, and the record
written last (:func:`publish_model`). ``overwrite`` removes the earlier run's log and checkpoints at
the start, and its model when the new one is in place; a file in OUT that no run recorded is never
deleted (OUT is refused instead). While the files move in, OUT holds ``MOVING_IN`` (the names
going and coming), which :func:`contextembed.load_encoder` refuses and the next run's model
replaces. So a model loaded from OUT is always exactly the last one written there, whole, even
after a run killed while it moved the files.

Every file is replaced atomically (:mod:`contextembed._runtime.files`): an interrupted write leaves the
previous version and no temporary file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional, Union

import torch

from .._runtime import json_io as _json, provenance
from ..errors import ProvenanceError
from .._runtime.files import MOVING_IN, PARTIAL_SUFFIX, atomic_file

#: files a run writes besides the model; ``overwrite`` removes them so that runs never mix
RUN_FILES = ("log.jsonl", "held_out.json", "checkpoints")
#: where MLM keeps the vocabulary its checkpoints were trained with (inside ``checkpoints``, a run file)
TOKENIZER_DIR = "checkpoints/tokenizer"
#: the resolved configuration; does not make OUT count as "holding files"
CONFIG_FILE = "pretrain_config.json"
#: the model's provenance record in OUT (its ``files`` are the model's files)
MODEL_RECORD = provenance.PROVENANCE_FILE
#: the kind of artifact the model's record names
MODEL_ARTIFACT = "pretrained model"
#: where a staged model is written before it is moved into OUT (hidden, ends like every temporary)
_STAGING_PREFIX = ".model."


# -- output directory ---------------------------------------------------------------------------


def prepare_output_dir(out: Union[str, os.PathLike], *, overwrite: bool = False, resume: bool = False) -> Path:
    """Check OUT and create it.

    OUT may not hold files (other than ``pretrain_config.json``) unless ``overwrite`` or ``resume``
    is given. ``overwrite`` removes an earlier run's log and checkpoints; its model (the files its
    record lists) stays loadable until the new model replaces it as a whole (:func:`publish_model`),
    so nothing of it survives next to the new model, and a run that fails leaves it whole.

    Raises
    ------
    FileExistsError
        If OUT is a file; if it holds files and neither ``overwrite`` nor ``resume`` is set; or, with
        ``overwrite``, if it holds files that no earlier run recorded writing (they are not removed).
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"OUT {str(path)!r} is a file; pass a directory to write the model into")
    held = sorted(p.name for p in path.iterdir() if p.name != CONFIG_FILE) if path.is_dir() else []
    if held and not (overwrite or resume):
        raise FileExistsError(
            f"OUT {str(path)!r} already holds files ({_shown(held)}); pass --overwrite (overwrite=True) to replace "
            "them, --resume to continue from its last checkpoint, or choose another directory"
        )
    if held and overwrite and not resume:
        _remove_earlier_run(path, held)
    elif held:
        model_files(path)  # a damaged record is refused now, not after training
    path.mkdir(parents=True, exist_ok=True)
    return path


def _remove_earlier_run(out: Path, held: list[str]) -> None:
    """Remove an earlier run's log and checkpoints from OUT; refuse (removing nothing) if OUT holds
    files no run recorded. The earlier model stays until the new one replaces it (:func:`publish_model`)."""
    model = {MODEL_RECORD, MOVING_IN, *model_files(out)}
    foreign = [name for name in held if name not in model and name not in RUN_FILES and not _is_staging(name)]
    if foreign:
        raise FileExistsError(
            f"OUT {str(out)!r} holds files that no earlier `contextembed pretrain` run recorded writing "
            f"({_shown(foreign)}); --overwrite replaces only an earlier run's model, log and checkpoints (those "
            f"its {MODEL_RECORD} lists), so that nothing of another model is left beside the new one. Move or "
            "delete those files, or choose another directory"
        )
    for name in held:
        if name not in model:
            _remove(out / name)


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def _is_staging(name: str) -> bool:
    """A model staged by a run that was killed before it could clean up."""
    return name.startswith(_STAGING_PREFIX) and name.endswith(PARTIAL_SUFFIX)


# -- the model ----------------------------------------------------------------------------------


def model_files(out: Union[str, os.PathLike]) -> list[str]:
    """The names of the model's files in OUT, as its record lists them (``[]``: OUT holds no record).

    Raises
    ------
    ProvenanceError
        If the record is damaged, not a model's record, or lists a name that is not a plain file name
        of OUT (``..``, a path, a run file).
    """
    found = provenance.read(Path(out, MODEL_RECORD), artifact=f"model record {Path(out, MODEL_RECORD)}")
    names = [] if found is None else found.get("files") if found.get("artifact") == MODEL_ARTIFACT else None
    _check_names(Path(out, MODEL_RECORD), names, "the record of a model written by `contextembed pretrain`")
    return names + [name for name in _moving_in(Path(out)) if name not in names]


def _moving_in(out: Path) -> list[str]:
    """The names :func:`publish_model` was removing and moving in when its run was stopped (``[]``:
    none was). They are the model's files as much as the record's: the next model replaces them."""
    path = out / MOVING_IN
    if not os.path.lexists(path):
        return []
    try:
        found = _json.read(path, max_bytes=provenance.MAX_RECORD_BYTES, max_depth=provenance.MAX_RECORD_DEPTH)
    except (OSError, ValueError) as error:
        raise ProvenanceError(f"{path} cannot be read ({error}); delete it and the model files beside it, or "
                              "choose another directory", artifact=str(path), field="files") from None
    lists = [found.get("earlier", []), found.get("files", [])] if isinstance(found, dict) else [None]
    for names in lists:  # each a list: a string would be taken apart into one-letter names
        _check_names(path, names, "a list of model files written by `contextembed pretrain`")
    return list(dict.fromkeys(name for names in lists for name in names))


def _check_names(path: Path, names, what: str) -> None:
    if not isinstance(names, list) or not all(_plain_name(name) for name in names):
        raise ProvenanceError(
            f"{path} is not {what} (its 'files' are {names!r}); delete it and the model files it describes, or "
            "choose another directory", artifact=str(path), field="files")


def _plain_name(name) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and os.sep not in name
            and name not in (*RUN_FILES, CONFIG_FILE, MODEL_RECORD) and not name.startswith("."))


def publish_model(out: Path, save, record: dict) -> list[str]:
    """Write the model into OUT as a fresh set: ``save(folder)`` into a hidden folder in OUT, then
    the earlier model's files removed, the new ones moved in, and ``record`` (with the new ``files``)
    written last.

    Returns
    -------
    list of str
        The model's file names.
    """
    staging = Path(out, f"{_STAGING_PREFIX}{os.urandom(4).hex()}{PARTIAL_SUFFIX}")
    staging.mkdir()
    try:
        save(staging)
        names = sorted(os.listdir(staging))
        clash = [name for name in names if not _plain_name(name)]
        if clash:
            raise RuntimeError(f"the model's files {clash} are not plain file names beside OUT's run files "
                               "(hidden, or the name of a run file or record); this is a bug in the method's save()")
        earlier = model_files(out)
        write_json(out / MOVING_IN, {"earlier": earlier, "files": names})  # OUT is no model until it goes
        for name in earlier:
            if name not in names:
                _remove(out / name)
        for name in names:
            if (out / name).is_dir() and not (out / name).is_symlink():
                shutil.rmtree(out / name)
            os.replace(staging / name, out / name)
        provenance.write(out / MODEL_RECORD, {**record, "files": names})
        os.unlink(out / MOVING_IN)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return names


def write_json(path: Union[str, os.PathLike], record, *, default=None) -> None:
    """Write ``record`` as indented JSON, atomically: an interruption leaves the previous ``path``."""
    with atomic_file(path, what="file") as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, default=default)
            handle.write("\n")


def write_config(out: Path, record: dict) -> None:
    """Write the resolved configuration to ``OUT/pretrain_config.json`` (paths as strings)."""
    write_json(out / CONFIG_FILE, record, default=str)


@contextmanager
def config_kept_on_failure(out: Path, *, enabled: bool) -> Iterator[None]:
    """Put OUT's previous ``pretrain_config.json`` back (or remove the new one, if there was none) when
    the block fails before a new checkpoint.

    The configuration describes the checkpoints in OUT, so a resumed run refused as incompatible
    (or stopped by any other error before it saved) must leave the one they were made with.
    """
    path = out / CONFIG_FILE
    previous = path.read_bytes() if enabled and path.is_file() else None
    checkpoint = latest_checkpoint(out)
    try:
        yield
    except BaseException:
        if enabled and latest_checkpoint(out) == checkpoint:
            if previous is not None:
                with atomic_file(path, what="configuration") as temporary:
                    Path(temporary).write_bytes(previous)
            elif path.is_file():  # the checkpoints' run wrote none: the refused run's must not stay
                path.unlink()
        raise


class RunLog:
    """Appends JSON records to ``log.jsonl``, one per line (a no-op where ``enabled`` is false:
    processes other than the main one)."""

    def __init__(self, path: Path, *, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled

    def write(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


# -- checkpoints --------------------------------------------------------------------------------


def latest_checkpoint(out: Union[str, os.PathLike]) -> Optional[Path]:
    """The newest ``checkpoints/step-*.pt`` in OUT, or ``None``."""
    found = sorted(Path(out, "checkpoints").glob("step-*.pt"))
    return found[-1] if found else None


def resolve_resume(out: Path, resume: Union[bool, str, os.PathLike, None]) -> Optional[Path]:
    """``True`` -> OUT's latest checkpoint; a path -> that checkpoint file; falsy -> ``None``."""
    if not resume:
        return None
    if resume is True:
        found = latest_checkpoint(out)
        if found is None:
            raise FileNotFoundError(
                f"resume was asked for but {out / 'checkpoints'} holds no step-*.pt checkpoint; "
                "drop --resume to start a new run"
            )
        return found
    path = Path(resume)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return path


def save_checkpoint(out: Path, step: int, state: dict, keep: int) -> Path:
    """Write ``checkpoints/step-XXXXXXXX.pt`` atomically and keep only the ``keep`` newest.

    Only checkpoints of earlier steps are pruned; the one just written always stays.
    """
    directory = out / "checkpoints"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"step-{step:08d}.pt"
    with atomic_file(target, what="checkpoint") as temporary:  # hidden name: not matched by step-*.pt
        torch.save(state, temporary)
    earlier = [path for path in sorted(directory.glob("step-*.pt")) if path.name < target.name]
    for old in earlier[: max(0, len(earlier) - (keep - 1))]:
        old.unlink()
    return target


def check_no_newer_checkpoints(out: Path, step: int, resume: Path) -> None:
    """Refuse to resume at ``step`` while OUT holds checkpoints of later steps (of the run being
    abandoned): a later ``--resume`` would pick them up, and pruning would drop the new ones.

    Raises
    ------
    FileExistsError
        Naming the later checkpoints, which contextembed does not delete unasked.
    """
    current = f"step-{step:08d}.pt"
    newer = [path for path in sorted((out / "checkpoints").glob("step-*.pt")) if path.name > current]
    if newer:
        names = ", ".join(path.name for path in newer)
        raise FileExistsError(
            f"resuming from {resume} (step {step}), but {out / 'checkpoints'} also holds later checkpoints "
            f"({names}) of the run being abandoned; move or delete them first, or resume from the latest"
        )


#: what a checkpoint holds besides its provenance record
CHECKPOINT_KEYS = ("step", "model", "optimizer", "scaler")


def load_checkpoint(path: Path, record: dict) -> dict:
    """Read a checkpoint and check that it belongs to this run: its provenance record (corpus hash,
    settings, model shape and vocabulary) must equal ``record``.

    Raises
    ------
    ProvenanceError
        If the checkpoint's record differs from ``record`` (naming the first differing field), or it
        has none (made by an older contextembed).
    ValueError
        If the checkpoint cannot be read or lacks its state.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(
            f"checkpoint {str(path)!r} cannot be read ({error}); it is not a contextembed checkpoint"
        ) from None
    if not isinstance(state, dict) or not all(key in state for key in CHECKPOINT_KEYS):
        raise ValueError(f"checkpoint {str(path)!r} is not a contextembed pretraining checkpoint")
    provenance.check(state.get("provenance"), record, artifact=f"checkpoint {path}", fix=(
        "resume with the corpus and settings it was made with (OUT/pretrain_config.json lists them), or start a "
        "new run with --overwrite (overwrite=True) instead of --resume"))
    return state
