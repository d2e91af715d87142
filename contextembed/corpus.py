"""Embedding a corpus of files: one output per input, resumable, on this process or on Ray.

``contextembed embed SPEC INPUT OUTPUT`` with a directory or a (quoted) glob as INPUT calls
:func:`embed_corpus`. Which files are inputs, where their outputs go and when an existing output is
complete is :mod:`contextembed.io._jobs` (one job per file); this module runs the jobs. So any
scheduler can shard a corpus by files, and a job that stopped can be run again.

Engines
-------
``engine`` names the runner of the jobs in :data:`RUNNERS`: ``"local"`` (:func:`run_local`, this
process) or ``"ray"`` (:func:`contextembed.engines.ray.run_corpus_jobs`, Ray actors). An engine
outside this module is listed by its module path and imported only when it is chosen; it imports
:mod:`contextembed.io._jobs`, never this module, so the imports run one way. A runner is called as
``runner(spec, jobs, existing, overwrite=..., done=..., **engine_options, **options)``: ``existing``
are the jobs whose output exists, ``done(summary)`` is called once per file finished (the summary of
:func:`contextembed.io.embed_file`, or ``{"output": ..., "skipped": True}`` for an output kept), and
it returns the number of outputs kept.

Resume
------
An existing output is kept only after :func:`contextembed.io._jobs.check_complete` finds its provenance
record equal to the one this run would write; anything else is an error naming the output, the
field and ``--overwrite``. The record holds the precision the encoder actually runs and its device
type, which only the loaded encoder knows (``precision="auto"`` is chosen by measuring), and the
layer indexes it resolves. So when outputs exist, the encoder is loaded *before* deciding what to
skip, and every existing output is checked before any is written: a rerun with nothing left to do
still loads the model once. With ``engine="ray"`` the check runs in the actor that would write the
output, with the encoder it loaded there (the driver may have another device): every job goes to
the actors, which check and skip an existing output or embed a missing one
(:class:`contextembed.engines.ray.FileActor`); a file is the unit of work and of retry.

Progress
--------
One bar for the whole run (tqdm, on stderr; none with ``show_progress=False``, ``--quiet``): the
files done of all, the sentences embedded and the outputs kept, in place of one bar per file. A run
interrupted (Ctrl-C; SIGINT or SIGTERM in the command) says how many outputs are complete and how
to resume: the same command again, which checks and keeps them and embeds the others.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Literal, Optional, Union, get_args

from ._runtime import terminal
from ._inputs.bounds import CONNECT_TIMEOUT, check_setting
from .io._pipeline import embed_file
from .io._settings import EmbedSettings
from .io.readers import check_input
from .io._jobs import OUTPUT_FORMATS, Job, OutputFormat, check_complete, find_inputs, is_corpus, plan, walk  # noqa: F401
from ._inputs.options import check_choice

Engine = Literal["local", "ray"]
ENGINES: tuple[str, ...] = get_args(Engine)
#: options of the engines that run elsewhere: an error with ``engine="local"``
ENGINE_OPTIONS = ("address", "connect_timeout", "concurrency", "num_gpus")
#: what runs the jobs: ``runner(spec, jobs, existing, *, overwrite, done, **options) -> outputs kept``
Runner = Callable[..., int]


def run_local(spec: str, jobs: list[Job], existing: set, *, overwrite: bool, done: Callable[[dict], None],
              address=None, connect_timeout=None, concurrency=None, num_gpus=None, **options) -> int:
    """The ``"local"`` engine: check every existing output with the loaded encoder, then embed the
    others in this process, one file after another; the number of outputs kept."""
    from .encoders import load_encoder

    if address is not None or connect_timeout is not None or concurrency is not None or num_gpus is not None:
        raise ValueError("address, connect_timeout, concurrency and num_gpus apply to engine='ray' only")
    encoder = load_encoder(spec, device=options.get("device", "auto"), precision=options.get("precision", "auto"),
                           backend=options.get("backend", "torch"))
    for job in jobs:
        if job in existing:
            check_complete(job, encoder=encoder, spec=spec, **options)
            done({"output": job.output, "skipped": True})
    for job in jobs:
        if job not in existing:
            done(embed_file(spec, job.input, job.output, encoder=encoder, overwrite=overwrite, show_progress=False,
                            **options))
    return len(existing)


#: the runner of each engine: a function, or ``"module:function"`` imported when the engine is chosen
RUNNERS: dict[str, Union[Runner, str]] = {
    "local": run_local,
    "ray": "contextembed.engines.ray:run_corpus_jobs",
}


def runner(engine: Engine) -> Runner:
    """The function that runs the jobs of ``engine`` (its module imported now if it is listed by path)."""
    found = RUNNERS[check_choice("engine", engine, Engine)]
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = getattr(importlib.import_module(module), name)
    return found


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
        Redo every output; otherwise an existing output is checked (its provenance record must be
        the one this run would write) and kept.
    show_progress : bool
        One bar over the files (tqdm, on stderr), with the sentences embedded and the outputs kept.
    **options
        Keyword arguments of :func:`contextembed.io.embed_file` (``input_format``, ``tokenizer``,
        ``layers``, ``combine``, ``subword_pooling``, ``level``, ``text_pooling``, ``dtype``,
        ``device``, ``precision``, ``backend``, ``chunk_sentences``), all checked first, before any
        output directory is made (:class:`~contextembed.io._settings.EmbedSettings`).

    Returns
    -------
    dict
        ``files``, ``embedded``, ``skipped`` (counts), ``backend`` and ``precision`` the embedded
        files ran on (``None`` when none was embedded) and ``outputs`` (paths, in input order).

    Raises
    ------
    KeyboardInterrupt
        Passed on after printing to stderr how many outputs are complete and how to resume.
    """
    run = runner(engine)
    if connect_timeout is not None:
        check_setting("connect_timeout", connect_timeout, CONNECT_TIMEOUT)
    settings = EmbedSettings.from_keywords(spec, **options)  # every option checked once, before any work
    _check_output_dir(pattern, output_dir)
    jobs = plan(pattern, output_dir, output_format)
    for job in jobs:
        check_input(job.input, settings.input_format)
    existing = set() if overwrite else {job for job in jobs if os.path.exists(job.output)}
    for job in jobs:
        if job not in existing:
            os.makedirs(os.path.dirname(os.path.abspath(job.output)), exist_ok=True)
    adopted = adopt_recorded(jobs, existing, options)
    if adopted and show_progress:
        print(f"contextembed: resuming with {', '.join(f'{k}={v!r}' for k, v in adopted.items() if k != 'from')} "
              f"as recorded in {adopted['from']} (in place of 'auto')", file=terminal.stderr(), flush=True)
    options = {**options, **{k: v for k, v in adopted.items() if k != "from"}}
    engine_options = {"address": address, "connect_timeout": connect_timeout, "concurrency": concurrency,
                      "num_gpus": num_gpus}
    ran: dict[str, set] = {"backend": set(), "precision": set()}

    def done(summary: dict) -> None:
        for name, values in ran.items():
            if name in summary:
                values.add(summary[name])
        progress.file_done(summary)

    with CorpusProgress(len(jobs), show_progress, overwrite=overwrite) as progress:
        skipped = run(spec, jobs, existing, overwrite=overwrite, done=done, **engine_options, **options)
    # what the embedded files ran on (after "auto"; none when every output was kept)
    shown = {name: sorted(values)[0] if len(values) == 1 else sorted(values) or None for name, values in ran.items()}
    return {"files": len(jobs), "embedded": len(jobs) - skipped, "skipped": skipped, **shown,
            **({"adopted": adopted} if adopted else {}), "outputs": [job.output for job in jobs]}


#: the options whose ``"auto"`` a resumed run replaces by what its existing outputs recorded
ADOPTED = {"backend": "torch", "precision": "auto"}


def adopt_recorded(jobs: list[Job], existing: set, options: dict) -> dict:
    """What a run resumed with ``backend="auto"`` or ``precision="auto"`` takes from the outputs it
    continues: the backend and precision the first readable existing output recorded, where they can
    run here (``{}`` if none applies), and ``from``: that output. So the remaining files are made
    as the existing ones were, whatever ``auto`` would choose in this process."""
    from ._runtime.backends import BACKEND_NAMES
    from ._runtime.devices import PRECISION_NAMES
    from .encoders.transformer import _engine as engine
    from .errors import ProvenanceError
    from .io._records import read_output_record

    asked = [name for name, default in ADOPTED.items() if options.get(name, default) == "auto"]
    for job in (job for job in jobs if job in existing) if asked else ():
        try:
            found = read_output_record(job.output)
        except (ProvenanceError, OSError):
            continue  # check_complete names what is wrong with it
        if not found:
            continue
        adopted = {name: found.get(name) for name in asked
                   if found.get(name) in (BACKEND_NAMES if name == "backend" else PRECISION_NAMES)
                   and found.get(name) != "auto"}
        if adopted.get("backend") == "openvino" and not engine.available(_device(options)):
            adopted.pop("backend")  # runs here only where the engine does: check_complete names the difference
            adopted.pop("precision", None)
        return {**adopted, "from": job.output} if adopted else {}
    return {}


def _device(options: dict):
    from ._runtime.devices import resolve_device

    return resolve_device(options.get("device", "auto"))


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


# -- progress -------------------------------------------------------------------------------------


class CorpusProgress:
    """The bar of a corpus run: files done of all, sentences embedded, outputs kept (tqdm, on
    stderr: :func:`contextembed._runtime.terminal.stderr`).

    A context manager; :meth:`file_done` is the runners' ``done`` callback. Leaving the block on a
    ``KeyboardInterrupt`` prints :meth:`resume_hint` to stderr (bar or not).

    Parameters
    ----------
    files : int
        The jobs of the run.
    show : bool
        Draw the bar (the counts are kept either way).
    overwrite : bool
        Whether the run redoes every output (the hint then says to rerun without it).
    """

    def __init__(self, files: int, show: bool, *, overwrite: bool = False) -> None:
        self.files, self.done, self.kept, self.sentences = files, 0, 0, 0
        self.overwrite = overwrite
        self._bar = terminal.progress_bar(files, unit="file", desc="files", show=show)

    def file_done(self, summary: dict) -> None:
        """Count one file finished: ``summary`` is ``embed_file``'s, or ``{"skipped": True, ...}``."""
        self.done += 1
        if summary.get("skipped"):
            self.kept += 1
        else:
            self.sentences += int(summary.get("sentences", 0))
        kept = f", {self.kept:,} kept" if self.kept else ""
        self._bar.set_postfix_str(f"{self.sentences:,} sentences{kept}", refresh=False)
        self._bar.update()

    def resume_hint(self) -> str:
        """What a stopped run prints: the outputs complete, and how to go on from them."""
        again = ("the same command again without --overwrite (embed_corpus with overwrite=False)" if self.overwrite
                 else "the same command again (or embed_corpus with the same arguments)")
        return (f"contextembed: stopped with at least {self.done} of {self.files} outputs complete; to resume, run "
                f"{again}: complete outputs are checked and kept, the others embedded")

    def __enter__(self) -> "CorpusProgress":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._bar.close()
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            print(self.resume_hint(), file=terminal.stderr(), flush=True)


__all__ = ["ENGINES", "OUTPUT_FORMATS", "RUNNERS", "CorpusProgress", "Job", "check_complete", "embed_corpus",
           "find_inputs", "is_corpus", "plan", "run_local", "runner", "walk"]
