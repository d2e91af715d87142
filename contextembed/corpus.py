"""Embedding a corpus of files: one output per input, resumable, on this process or on Ray.

``contextembed embed SPEC INPUT OUTPUT`` with a directory or a (quoted) glob as INPUT calls
:func:`embed_corpus`. Each input file gives one output with the same relative name and the
extension of ``output_format`` (``a/b.txt`` -> ``OUTPUT/a/b.npz``), laid out as for a single file
(:func:`contextembed.io.embed_file`). So any scheduler can shard a corpus by files, and a job that
stopped can be run again.

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

Resume
------
Every output is written under a temporary name and renamed when complete, and records its
provenance (:mod:`contextembed.io`: the input's content hash, the model's fingerprint, every option
that changes the features, the output's own content hash). An existing output is kept only after
:func:`check_complete` finds that record equal to the one this run would write and the file
holding what it recorded; anything else (the input edited, another model or option, an output
with no record, from an older contextembed, or edited, cut or with its ``.npy`` record deleted) is a
:class:`~contextembed.errors.ProvenanceError` (or ``FileFormatError``) naming the output, the field
and the fix: ``overwrite=True`` (``--overwrite``) redoes every output.

The record holds the precision the encoder actually runs and its device type, which only the
loaded encoder knows (``precision="auto"`` is chosen by measuring), and the layer indexes it
resolves. So when outputs exist, the encoder is loaded *before* deciding what to skip, and every
existing output is checked before any is written: a rerun with nothing left to do still loads the
model once. With ``engine="ray"`` the check runs in the actor that would write the output, with
the encoder it loaded there (the driver may have another device): every job goes to the actors,
which check and skip an existing output or embed a missing one
(:class:`contextembed.engines.ray.FileActor`); a file is the unit of work and of retry.
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

from .io import INPUT_EXTENSIONS, RECORD_SUFFIX, check_input, check_reusable, expected_record

OutputFormat = Literal["npz", "npy"]
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)
Engine = Literal["local", "ray"]
ENGINES: tuple[str, ...] = get_args(Engine)
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
        If two inputs would share an output (``a.txt`` and ``a.jsonl``).
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
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


def check_complete(job: Job, *, encoder, spec: Optional[str] = None, **options) -> None:
    """Check an existing output before skipping it: it records what ``embed_file`` would write now.

    Parameters
    ----------
    job : Job
    encoder : Encoder
        The loaded encoder that would write the output (its resolved precision, device and layers
        are part of the record).
    spec : str, optional
        What it was loaded from (default: ``encoder.spec``).
    **options
        Keyword arguments of :func:`contextembed.io.embed_file`, with its defaults.

    Raises
    ------
    ProvenanceError
        If the output records another input content, model or option, no record, or holds other
        content than it recorded; the message names the output, the field and ``--overwrite``.
    FileFormatError
        If it is not an output at all (damaged, truncated).
    """
    expected = expected_record(spec or encoder.spec, job.input, job.output, encoder=encoder, **options)
    check_reusable(job.output, expected, input_path=job.input)


def embed_corpus(
    spec: str,
    pattern: str,
    output_dir: str,
    *,
    output_format: OutputFormat = "npz",
    engine: Engine = "local",
    address: Optional[str] = None,
    connect_timeout: Optional[float] = None,
    concurrency: Optional[int] = None,
    num_gpus: Optional[float] = None,
    overwrite: bool = False,
    show_progress: bool = True,
    **options,
) -> dict:
    """Embed every input file ``pattern`` names into ``output_dir`` (see the module docstring).

    Parameters
    ----------
    spec : str
        The encoder, as for :func:`contextembed.load_encoder`.
    pattern : str
        A directory or a glob of input files.
    output_dir : str
        Created if missing (its parent must exist).
    engine : {"local", "ray"}
        ``"local"``: one encoder, files one after another in this process. ``"ray"``: Ray actors
        (``concurrency`` of them, ``num_gpus`` each) on the cluster at ``address``, or on a Ray
        instance started here.
    connect_timeout : float, optional
        ``engine="ray"``: seconds ``address`` has to answer (default 30, at most 600), else a
        :class:`~contextembed.errors.ClusterConnectionError` naming it
        (:func:`contextembed.engines.ray.check_address`).
    overwrite : bool
        Redo every output; otherwise an existing output is checked (:func:`check_complete`) and kept.
    **options
        Keyword arguments of :func:`contextembed.io.embed_file` (``input_format``, ``tokenizer``,
        ``layers``, ``combine``, ``subword_pooling``, ``level``, ``text_pooling``, ``dtype``,
        ``device``, ``precision``, ``chunk_sentences``).

    Returns
    -------
    dict
        ``files``, ``embedded``, ``skipped`` (counts) and ``outputs`` (paths, in input order).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {', '.join(map(repr, ENGINES))}")
    if engine == "ray" and connect_timeout is not None:
        from .engines.ray import check_connect_timeout

        check_connect_timeout(connect_timeout)
    _check_output_dir(pattern, output_dir)
    jobs = plan(pattern, output_dir, output_format)
    for job in jobs:
        check_input(job.input, options.get("input_format"))
    existing = set() if overwrite else {job for job in jobs if os.path.exists(job.output)}
    for job in jobs:
        if job not in existing:
            os.makedirs(os.path.dirname(os.path.abspath(job.output)), exist_ok=True)
    run = _run_local if engine == "local" else _run_ray
    skipped = run(spec, jobs, existing, overwrite=overwrite, show_progress=show_progress, address=address,
                  connect_timeout=connect_timeout, concurrency=concurrency, num_gpus=num_gpus, **options)
    return {"files": len(jobs), "embedded": len(jobs) - skipped, "skipped": skipped,
            "outputs": [job.output for job in jobs]}


def _check_output_dir(pattern: str, output_dir: str) -> None:
    parent = os.path.dirname(os.path.abspath(output_dir))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"cannot write outputs into {output_dir}: its parent directory {parent} does not exist")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"output {output_dir} is a file; with a directory or glob of inputs, OUTPUT is a directory")
    if not os.path.exists(output_dir) and os.fspath(output_dir).endswith((".npy", ".npz")):
        what = "is a directory" if os.path.isdir(pattern) else "is a glob"
        raise ValueError(
            f"input {pattern} {what}, so OUTPUT is a directory that gets one output per input file; {output_dir} "
            "looks like a file name: pass a directory (or a single input file)"
        )


def _run_local(spec: str, jobs: list[Job], existing: set, *, overwrite: bool, show_progress: bool, address,
               connect_timeout, concurrency, num_gpus, **options) -> int:
    """Check every existing output with the loaded encoder, then embed the others; the number kept."""
    from .encoders import load_encoder
    from .io import embed_file

    if address is not None or connect_timeout is not None or concurrency is not None or num_gpus is not None:
        raise ValueError("address, connect_timeout, concurrency and num_gpus apply to engine='ray' only")
    encoder = load_encoder(spec, device=options.get("device", "auto"), precision=options.get("precision", "auto"))
    for job in jobs:
        if job in existing:
            check_complete(job, encoder=encoder, spec=spec, **options)
    for job in jobs:
        if job not in existing:
            embed_file(spec, job.input, job.output, encoder=encoder, overwrite=overwrite,
                       show_progress=show_progress, **options)
    return len(existing)


def _run_ray(spec: str, jobs: list[Job], existing: set, *, overwrite: bool, show_progress: bool, address,
             connect_timeout, concurrency, num_gpus, **options) -> int:
    """Every job to the actors, which check and keep an existing output or embed; the number kept."""
    from .engines import ray as ray_engine

    spec = os.path.abspath(spec) if os.path.exists(spec) else spec  # workers may start elsewhere
    timeout = ray_engine.CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    with ray_engine.connected(address, timeout) as ray:
        workers = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
        payload = [{"spec": spec, "input": os.path.abspath(job.input), "output": os.path.abspath(job.output),
                    "overwrite": overwrite, **options} for job in jobs]
        summaries = ray_engine.embed_files(payload, concurrency=workers, num_gpus=num_gpus)
    return sum(1 for summary in summaries if summary.get("skipped"))


__all__ = ["ENGINES", "OUTPUT_FORMATS", "Job", "check_complete", "embed_corpus", "find_inputs", "is_corpus", "plan",
           "walk"]
