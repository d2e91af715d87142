"""What a corpus run does, file by file: its jobs (one input, one output), and whether an existing
output is complete.

Below :mod:`contextembed.corpus` (which runs the jobs) and the engines that run them elsewhere
(:mod:`contextembed.engines.ray`): both import this module, and it imports neither.

Inputs
------
A directory and a glob are searched by one walker (:func:`walk`), with one rule:

- a directory gives every file below it whose extension is an input format (``.txt``, ``.conll``,
  ``.conllu``, ``.jsonl``, ``.json``); a glob gives the files it matches (``**`` crosses
  directories), its relative names starting after the directories before its first wildcard
  (``data/*/x.txt`` -> ``data``);
- hidden names (``.git``, ``.a.npz.1f2e.partial``) are neither searched nor inputs, except where a
  glob's part itself starts with ``.``; provenance records of outputs (``*.npy.provenance.json``)
  and the output directory (when it lies below the searched one) are never inputs;
- links to files and to directories are followed. Each real directory is searched once, under
  its name with the fewest links (then the first in name order), so a link loop ends and a linked
  directory is not searched twice; each real file is one input, under its name with the fewest
  links. Other names of a file or directory already found are left out with one warning naming
  them. A link whose target does not exist, named as an input, is an error;
- a glob's parts after its first wildcard cannot hold ``..`` (an input's relative name, and so its
  output, could lead outside OUTPUT): put the ``..`` before the first wildcard.

So ``DIR`` and the glob ``'DIR/**/*.txt'`` find the same ``.txt`` inputs under the same names. A
missing directory, or a glob's missing directory, is "does not exist"; a glob that matches nothing
says so.

Outputs
-------
Each input file gives one output with the same relative name and the extension of
``output_format`` (``a/b.txt`` -> ``OUTPUT/a/b.npz``), laid out as for a single file
(:func:`contextembed.io.embed_file`): :func:`plan`.

Complete outputs
----------------
Every output is written under a temporary name and renamed when complete, and records its
provenance (:mod:`contextembed.io._records`: the input's content hash, the model's fingerprint,
every option that changes the features, the output's own content hash). An existing output is kept
only after :func:`check_complete` finds that record equal to the one this run would write and the
file holding what it recorded; anything else (the input edited, another model or option, an output
with no record, from an older contextembed, or edited, cut or with its ``.npy`` record deleted) is a
:class:`~contextembed.errors.ProvenanceError` (or ``FileFormatError``) naming the output, the field
and the fix: ``overwrite=True`` (``--overwrite``) redoes every output.
"""

from __future__ import annotations

import fnmatch
import heapq
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, Optional, get_args

from ._pipeline import expected_record, record_for
from ._records import RECORD_SUFFIX, check_reusable
from .readers import INPUT_EXTENSIONS
from .._inputs.options import check_choice

OutputFormat = Literal["npz", "npy"]
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)
_GLOB_CHARACTERS = frozenset("*?[")
#: a path's names relative to the searched directory (``("news", "a.txt")``)
Names = tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """One input file and the output it gives."""

    input: str
    output: str


def is_corpus(path: str) -> bool:
    """Whether ``path`` names several inputs: a directory, or a glob pattern that is not a file."""
    path = os.fspath(path)
    return os.path.isdir(path) or (not os.path.exists(path) and bool(_GLOB_CHARACTERS & set(path)))


# -- finding inputs -----------------------------------------------------------------------------


def find_inputs(pattern: str, *, exclude: frozenset = frozenset()) -> tuple[str, list[str]]:
    """The input files ``pattern`` (a directory or a glob) names, sorted, and the root their relative
    names start from (see the module docstring for the rule).

    Parameters
    ----------
    exclude : set of str
        Real paths of directories below the root not to search (the output directory).

    Raises
    ------
    FileNotFoundError
        If the directory (or the glob's directory) does not exist, nothing matches, or a link named
        as an input leads nowhere.
    ValueError
        If a glob holds ``..`` after its first wildcard, or ``pattern`` is a plain file.
    """
    pattern = os.fspath(pattern)
    if os.path.isdir(pattern):
        root, keep, enter = pattern, _is_input_name, _is_visible
    else:
        root, parts = _split_glob(pattern)
        keep, enter = partial(_matches, pattern=parts), partial(_may_contain, pattern=parts)
    found, aliases = walk(root, keep=lambda names: keep(names) and not names[-1].endswith(RECORD_SUFFIX),
                          enter=enter, exclude=exclude)
    if aliases:
        shown = ", ".join(aliases[:3]) + (f" and {len(aliases) - 3} more" if len(aliases) > 3 else "")
        warnings.warn(f"{len(aliases)} path(s) below {root} are other names (through links) of files or directories "
                      f"already found: {shown}; each file is one input, named by its path with the fewest links",
                      stacklevel=2)
    if not found:
        if os.path.isdir(pattern):
            raise FileNotFoundError(f"no input files in {pattern!r} (a directory is searched for "
                                    f"{', '.join(INPUT_EXTENSIONS)}, hidden names left out)")
        raise FileNotFoundError(f"no input files match the glob {pattern!r} (searched below {root})")
    return root, found


def walk(root: str, *, keep: Callable[[Names], bool], enter: Callable[[Names], bool],
         exclude: frozenset = frozenset()) -> tuple[list[str], list[str]]:
    """The files below ``root`` whose relative names ``keep`` accepts, each real file once, sorted;
    and the paths left out as other names of files or directories found (see the module docstring).

    Directories are searched fewest links first, then in name order, each real one once (so a link
    loop ends); ``enter(names)`` says whether to search one, ``exclude`` holds real paths never
    searched below ``root``.
    """
    queue: list[tuple[int, Names, str]] = [(0, (), root)]  # (links crossed, relative names, path)
    searched: set[str] = set()
    files: dict[str, tuple[int, Names, str]] = {}
    aliases: list[str] = []
    while queue:
        links, parts, folder = heapq.heappop(queue)
        real = os.path.realpath(folder)
        if real in searched:
            aliases.append(folder)
            continue
        searched.add(real)
        if parts and real in exclude:
            continue
        for name in sorted(os.listdir(folder)):
            path, names = os.path.join(folder, name), parts + (name,)
            found = (links + os.path.islink(path), names, path)
            if os.path.isdir(path):
                if enter(names):
                    heapq.heappush(queue, found)
            elif keep(names):
                _check_file(path)
                first = files.setdefault(os.path.realpath(path), found)
                if first is not found:
                    files[os.path.realpath(path)] = min(first, found)
                    aliases.append(max(first, found)[2])
    return sorted(path for _, _, path in files.values()), sorted(aliases)


def _check_file(path: str) -> None:
    """An input named by the walk must be a regular file (or a link to one)."""
    if os.path.isfile(path):
        return
    if os.path.islink(path):
        raise FileNotFoundError(f"input {path} is a link to {os.readlink(path)!r}, which does not exist (or the links "
                                "loop); remove the link or restore its target")
    raise ValueError(f"input {path} is not a regular file (a FIFO, socket or device?); move it out of the corpus")


def _split_glob(pattern: str) -> tuple[str, Names]:
    """The directory of ``pattern`` before its first wildcard and the parts after it, checked."""
    parts = pattern.split(os.sep)
    first = next((i for i, part in enumerate(parts) if _GLOB_CHARACTERS & set(part)), None)
    if first is None:
        if os.path.exists(pattern):
            raise ValueError(f"input {pattern!r} is a file; several inputs are a directory or a glob")
        raise FileNotFoundError(f"input {pattern!r} does not exist")
    root = os.sep.join(parts[:first]) or (os.sep if pattern.startswith(os.sep) else ".")
    rest = tuple(part for part in parts[first:] if part not in ("", "."))
    if ".." in rest:
        raise ValueError(
            f"glob {pattern!r} holds '..' after its first wildcard: the inputs' names below {root} name the outputs, "
            "so they could lead outside OUTPUT; put every '..' before the first wildcard (data/../x/*.txt)")
    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise FileNotFoundError(f"glob {pattern!r}: its directory {root!r} {what}")
    return root, rest


def _is_visible(names: Names) -> bool:
    return not names[-1].startswith(".")


def _is_input_name(names: Names) -> bool:
    return _is_visible(names) and os.path.splitext(names[-1])[1].lower() in INPUT_EXTENSIONS


def _part_matches(name: str, part: str) -> bool:
    """One name against one glob part; hidden names only against a part that starts with ``.``."""
    return (part.startswith(".") or not name.startswith(".")) and fnmatch.fnmatch(name, part)


def _matches(names: Names, pattern: Names) -> bool:
    """Whether a file's relative names match the glob parts (``**``: zero or more visible names)."""
    if not pattern:
        return not names
    if pattern[0] == "**":
        return _matches(names, pattern[1:]) or (
            bool(names) and _is_visible(names[:1]) and _matches(names[1:], pattern))
    return bool(names) and _part_matches(names[0], pattern[0]) and _matches(names[1:], pattern[1:])


def _may_contain(names: Names, pattern: Names) -> bool:
    """Whether a file below the directory ``names`` could match the glob parts."""
    if not names:
        return bool(pattern)
    if not pattern:
        return False
    if pattern[0] == "**":
        return _may_contain(names, pattern[1:]) or (_is_visible(names[:1]) and _may_contain(names[1:], pattern))
    return _part_matches(names[0], pattern[0]) and _may_contain(names[1:], pattern[1:])


def plan(pattern: str, output_dir: str, output_format: OutputFormat = "npz") -> list[Job]:
    """One :class:`Job` per input file, its output under ``output_dir`` with the same relative name.

    Raises
    ------
    ValueError
        If two inputs would share an output (``a.txt`` and ``a.jsonl``), or for an ``output_format``
        that is not one of :data:`OUTPUT_FORMATS`.
    """
    check_choice("output_format", output_format, OutputFormat)
    exclude = frozenset([os.path.realpath(output_dir)]) if os.path.isdir(output_dir) else frozenset()
    root, inputs = find_inputs(pattern, exclude=exclude)
    jobs, seen = [], {}
    for path in inputs:
        relative = os.path.relpath(path, root)
        if os.path.isabs(relative) or relative.split(os.sep)[0] == os.pardir:  # the walk never gives one
            raise ValueError(f"input {path} is not below {root}: its output would not be below {output_dir}")
        output = os.path.join(output_dir, os.path.splitext(relative)[0] + "." + output_format)
        if output in seen:
            raise ValueError(f"inputs {seen[output]} and {path} would both be written to {output}; rename one")
        seen[output] = path
        jobs.append(Job(path, output))
    return jobs


# -- resuming -----------------------------------------------------------------------------------


def check_complete(job: Job, *, encoder, spec: Optional[str] = None, settings=None, **options) -> None:
    """Check an existing output before skipping it: it records what ``embed_file`` would write now.

    Parameters
    ----------
    job : Job
    encoder : Encoder
        The loaded encoder that would write the output (its resolved precision, device and layers
        are part of the record).
    spec : str, optional
        What it was loaded from (default: ``encoder.spec``).
    settings : EmbedSettings, optional
        What the output is made with, built already (:class:`~contextembed.io._settings.EmbedSettings`,
        what an engine's actor holds); given, neither ``spec`` nor ``options`` may be.
    **options
        Keyword arguments of :func:`contextembed.io.embed_file`, with its defaults.

    Raises
    ------
    ProvenanceError
        If the output records another input content, model or option, no record, or holds other
        content than it recorded; the message names the output, the field and ``--overwrite``.
    FileFormatError
        If it is not an output at all (damaged, truncated).
    TypeError
        If ``settings`` comes with ``spec`` or ``options``.
    """
    if settings is None:
        expected = expected_record(spec or encoder.spec, job.input, job.output, encoder=encoder, **options)
    else:
        given = (["spec"] if spec is not None else []) + sorted(options)
        if given:
            raise TypeError(f"check_complete got settings and {', '.join(given)}; pass the settings alone (they "
                            "hold the spec and every option)")
        expected = record_for(settings, job.input, job.output, encoder=encoder)
    check_reusable(job.output, expected, input_path=job.input)


__all__ = ["OUTPUT_FORMATS", "Job", "OutputFormat", "check_complete", "find_inputs", "is_corpus", "plan", "walk"]
