"""What a pretraining run keeps in OUT besides the model, and the checks before it writes there.

* ``pretrain_config.json``: the resolved configuration (written when the command line asks).
* ``log.jsonl``: one JSON record per line (training statistics, held-out statistics).
* ``held_out.json``: the summary of a neural run.
* ``checkpoints/step-XXXXXXXX.pt``: model, optimizer, scheduler and scaler state, for ``resume``.

Every file is replaced atomically (:mod:`contextembed._files`): an interrupted write leaves the
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

from .._files import atomic_file

#: files a run writes besides the model; ``overwrite`` removes them so that runs never mix
RUN_FILES = ("log.jsonl", "held_out.json", "checkpoints")
#: the resolved configuration; does not make OUT count as "holding files"
CONFIG_FILE = "pretrain_config.json"


# -- output directory ---------------------------------------------------------------------------


def prepare_output_dir(out: Union[str, os.PathLike], *, overwrite: bool = False, resume: bool = False) -> Path:
    """Check OUT and create it.

    OUT may not hold files (other than ``pretrain_config.json``) unless ``overwrite`` (which removes a
    previous run's log and checkpoints) or ``resume`` is given.

    Raises
    ------
    FileExistsError
        If OUT is a file, or holds files and neither ``overwrite`` nor ``resume`` is set.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"OUT {str(path)!r} is a file; pass a directory to write the model into")
    held = sorted(p.name for p in path.iterdir() if p.name != CONFIG_FILE) if path.is_dir() else []
    if held and not (overwrite or resume):
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise FileExistsError(
            f"OUT {str(path)!r} already holds files ({shown}); pass --overwrite (overwrite=True) to replace "
            "them, --resume to continue from its last checkpoint, or choose another directory"
        )
    if overwrite and not resume:
        for name in RUN_FILES:
            target = path / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    """Put OUT's previous ``pretrain_config.json`` back when the block fails before a new checkpoint.

    The configuration describes the checkpoints in OUT, so a resumed run refused as incompatible
    (or stopped by any other error before it saved) must leave the one they were made with.
    """
    path = out / CONFIG_FILE
    previous = path.read_bytes() if enabled and path.is_file() else None
    checkpoint = latest_checkpoint(out)
    try:
        yield
    except BaseException:
        if previous is not None and latest_checkpoint(out) == checkpoint:
            with atomic_file(path, what="configuration") as temporary:
                Path(temporary).write_bytes(previous)
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


def load_checkpoint(path: Path, fingerprint: dict) -> dict:
    """Read a checkpoint and check that it belongs to this run.

    Raises
    ------
    ValueError
        If the checkpoint cannot be read or its fingerprint differs from ``fingerprint``.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(
            f"checkpoint {str(path)!r} cannot be read ({error}); it is not a contextembed checkpoint"
        ) from None
    if not isinstance(state, dict) or "fingerprint" not in state:
        raise ValueError(f"checkpoint {str(path)!r} is not a contextembed pretraining checkpoint")
    differences = _differences(state["fingerprint"], fingerprint)
    if differences:
        raise ValueError(
            f"checkpoint {str(path)!r} is incompatible with this run: {'; '.join(differences)}. Resume with "
            "the settings it was made with, or start a new run with --overwrite"
        )
    return state


def _differences(saved: dict, current: dict) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [
        f"{key}: checkpoint has {saved.get(key)!r}, this run has {current.get(key)!r}"
        for key in keys
        if saved.get(key) != current.get(key)
    ]
