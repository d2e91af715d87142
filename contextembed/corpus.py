"""Embedding a corpus of files: one output per input, resumable, on this process or on Ray.

``contextembed embed SPEC INPUT OUTPUT`` with a directory or a (quoted) glob as INPUT calls
:func:`embed_corpus`. Each input file gives one output with the same relative name and the
extension of ``output_format`` (``a/b.txt`` -> ``OUTPUT/a/b.npz``), laid out as for a single file
(:func:`contextembed.io.embed_file`). So any scheduler can shard a corpus by files, and a job that
stopped can be run again:

- every output is written under a temporary name and renamed when complete, so an output that
  exists is complete by construction; it is skipped after a check that it opens and holds the
  number of rows its input gives (a mismatch, e.g. an input edited since, is an error naming the
  file: ``overwrite=True`` redoes it);
- ``overwrite=True`` (``--overwrite``) redoes every output.

``engine="ray"`` runs the same jobs on Ray actors (:func:`contextembed.engines.ray.embed_files`),
each loading the encoder once; a file is the unit of work and of retry.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Literal, Optional, get_args

from .io import INPUT_EXTENSIONS, OVERWRITE_FLAG, check_input, read_output_shape, read_sentences
from .tokenizers import get_tokenizer

OutputFormat = Literal["npz", "npy"]
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)
Engine = Literal["local", "ray"]
ENGINES: tuple[str, ...] = get_args(Engine)
_GLOB_CHARACTERS = frozenset("*?[")


@dataclass(frozen=True)
class Job:
    """One input file and the output it gives."""

    input: str
    output: str


def is_corpus(path: str) -> bool:
    """Whether ``path`` names several inputs: a directory, or a glob pattern that is not a file."""
    path = os.fspath(path)
    return os.path.isdir(path) or (not os.path.exists(path) and bool(_GLOB_CHARACTERS & set(path)))


def find_inputs(pattern: str) -> tuple[str, list[str]]:
    """The input files ``pattern`` names, sorted, and the root their relative names start from.

    A directory gives every file below it whose extension is an input format (``.txt``,
    ``.conll``, ``.conllu``, ``.jsonl``, ``.json``); a glob gives the files it matches (``**``
    crosses directories), rooted at the directory part before the first wildcard.

    Raises
    ------
    FileNotFoundError
        If nothing matches.
    """
    pattern = os.fspath(pattern)
    if os.path.isdir(pattern):
        root = pattern
        found = [os.path.join(folder, name) for folder, _, names in os.walk(pattern) for name in names
                 if os.path.splitext(name)[1].lower() in INPUT_EXTENSIONS and not name.startswith(".")]
    else:
        root = _glob_root(pattern)
        found = [path for path in glob.glob(pattern, recursive=True) if os.path.isfile(path)]
    if not found:
        kinds = ", ".join(INPUT_EXTENSIONS)
        raise FileNotFoundError(f"no input files in {pattern!r}" + (f" (a directory is searched for {kinds})"
                                                                     if os.path.isdir(pattern) else ""))
    return root, sorted(found)


def _glob_root(pattern: str) -> str:
    """The directories of ``pattern`` before its first wildcard (``data/*/x.txt`` -> ``data``)."""
    parts = pattern.split(os.sep)
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARACTERS & set(part))
    return os.sep.join(parts[:first]) or (os.sep if pattern.startswith(os.sep) else ".")


def plan(pattern: str, output_dir: str, output_format: OutputFormat = "npz") -> list[Job]:
    """One :class:`Job` per input file, its output under ``output_dir`` with the same relative name.

    Raises
    ------
    ValueError
        If two inputs would share an output (``a.txt`` and ``a.jsonl``), or an output path is an input.
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    root, inputs = find_inputs(pattern)
    jobs, seen = [], {}
    for path in inputs:
        relative = os.path.relpath(path, root)
        output = os.path.join(output_dir, os.path.splitext(relative)[0] + "." + output_format)
        if output in seen:
            raise ValueError(f"inputs {seen[output]} and {path} would both be written to {output}; rename one")
        seen[output] = path
        jobs.append(Job(path, output))
    return jobs


def expected_rows(job: Job, *, input_format: Optional[str], tokenizer: str, level: str) -> int:
    """Rows the output of ``job`` holds: tokens (word level) or sentences (text level)."""
    split = get_tokenizer(tokenizer)
    lengths = [len(s) for s in read_sentences(job.input, input_format, split)]
    return sum(lengths) if level == "word" else len(lengths)


def check_complete(job: Job, *, input_format: Optional[str], tokenizer: str, level: str) -> None:
    """Check an existing output before skipping it: it opens and has the rows its input gives.

    Raises
    ------
    ValueError
        If the output cannot be read as ``contextembed embed`` output or holds another number of rows.
    """
    rows, _ = read_output_shape(job.output)
    expected = expected_rows(job, input_format=input_format, tokenizer=tokenizer, level=level)
    if rows != expected:
        raise ValueError(
            f"output {job.output} exists but holds {rows} rows where its input {job.input} gives {expected} "
            f"({level} level); was the input changed since? Pass {OVERWRITE_FLAG} to redo it"
        )


def embed_corpus(
    spec: str,
    pattern: str,
    output_dir: str,
    *,
    output_format: OutputFormat = "npz",
    engine: Engine = "local",
    address: Optional[str] = None,
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
    jobs = plan(pattern, output_dir, output_format)
    todo = _pending(jobs, overwrite, options)
    for job in todo:
        check_input(job.input, options.get("input_format"))
        os.makedirs(os.path.dirname(os.path.abspath(job.output)), exist_ok=True)
    if todo:
        run = _run_local if engine == "local" else _run_ray
        run(spec, todo, overwrite=overwrite, show_progress=show_progress, address=address,
            concurrency=concurrency, num_gpus=num_gpus, **options)
    return {"files": len(jobs), "embedded": len(todo), "skipped": len(jobs) - len(todo),
            "outputs": [job.output for job in jobs]}


def _pending(jobs: list[Job], overwrite: bool, options: dict) -> list[Job]:
    """The jobs to run: all with ``overwrite``, else those whose output does not exist (checked)."""
    if overwrite:
        return list(jobs)
    check = {"input_format": options.get("input_format"), "tokenizer": options.get("tokenizer", "whitespace"),
             "level": options.get("level", "word")}
    todo = []
    for job in jobs:
        if os.path.exists(job.output):
            check_complete(job, **check)
        else:
            todo.append(job)
    return todo


def _run_local(spec: str, jobs: list[Job], *, overwrite: bool, show_progress: bool, address, concurrency,
               num_gpus, **options) -> None:
    from .encoders import load_encoder
    from .io import embed_file

    if address is not None or concurrency is not None or num_gpus is not None:
        raise ValueError("address, concurrency and num_gpus apply to engine='ray' only")
    encoder = load_encoder(spec, device=options.get("device", "auto"), precision=options.get("precision", "auto"))
    for job in jobs:
        embed_file(spec, job.input, job.output, encoder=encoder, overwrite=overwrite, show_progress=show_progress,
                   **options)


def _run_ray(spec: str, jobs: list[Job], *, overwrite: bool, show_progress: bool, address, concurrency, num_gpus,
             **options) -> None:
    from .engines import ray as ray_engine

    spec = os.path.abspath(spec) if os.path.exists(spec) else spec  # workers may start elsewhere
    with ray_engine.connected(address) as ray:
        workers = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
        payload = [{"spec": spec, "input": os.path.abspath(job.input), "output": os.path.abspath(job.output),
                    "overwrite": overwrite, **options} for job in jobs]
        ray_engine.embed_files(payload, concurrency=workers, num_gpus=num_gpus)


__all__ = ["ENGINES", "OUTPUT_FORMATS", "Job", "check_complete", "embed_corpus", "expected_rows", "find_inputs",
           "is_corpus", "plan"]
