"""Time to first features: fresh processes, each timed from its start to its first 12 vectors.

Every path runs in a new interpreter (``python -c`` or the ``contextembed`` command), the paths
alternating round after round so that all see the same load, and the median of the rounds is
compared with sentence-transformers' import + load + ``encode()`` of the same 12 texts in the
same run (the issue's bar: within 1.3x). The machine is *tuned* first (``contextembed tune``, into
a tuning directory of this run's own, so the user's records are neither read nor changed) and one
round of each ``auto`` path is also timed *untuned* (an empty tuning directory: what a first run
on a new machine costs).

    python benchmarks/startup.py                 # 3 rounds
    python benchmarks/startup.py --rounds 5
    python benchmarks/startup.py --model ~/.cache/contextembed/models/all-mpnet-base-v2   # at base size

``--model`` (default: the bundled ``minilm-l6``) is what every path loads: ``TextEmbedder(MODEL)``,
``load_encoder(MODEL)``, ``contextembed embed|info|tune MODEL`` and sentence-transformers' anchor
(the model's directory); each checks it got 12 vectors of the model's width (its ``config.json``).

Disk caches are warmed by one untimed run of every path first. Name the CPU class with the figures
(``grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from common import DEFAULT_MODEL, describe_model, model_directory, model_label, model_shape  # noqa: E402

TEXTS = ["The quick brown fox jumps over the lazy dog.", "EU rejects German call to boycott British lamb.",
         "Peter Blackburn", "A masterful film, full of warmth and wit.", "It is a mess from start to finish.",
         "Shares rose 3.5 percent on Tuesday.", "Officials met in Brussels.", "What a wonderful day!",
         "The market fell sharply after the report.", "Nothing happens, and it happens slowly.",
         "He said the talks would resume next week.", "An unaffable but brilliant performance."]


def _python(code: str, model: str, width: int) -> list[str]:
    """``python -c code`` with ``TEXTS``, ``MODEL`` (the spec) and ``WIDTH`` (its hidden width) defined."""
    return [sys.executable, "-c", f"TEXTS = {TEXTS!r}\nMODEL = {model!r}\nWIDTH = {width}\n{code}"]


def _text_embedder(options: str) -> str:
    """``TextEmbedder(MODEL, options)``'s 12 vectors, checked to be as wide as the model."""
    return ("from contextembed.sklearn import TextEmbedder\n"
            f"assert TextEmbedder(MODEL{options}).fit(TEXTS).transform(TEXTS).shape == (12, WIDTH)")


def paths(sample: str, model: str, directory: str) -> dict[str, tuple[list[str], bool]]:
    """Each path's command and whether its start-up depends on tuning (then it is also timed once
    untuned): ``model`` as given, sentence-transformers on its ``directory``. A command prints nothing
    we need; its exit status says it worked. The names show the call as a user writes it (the default
    model's rows keep the names they were first reported under)."""
    width = model_shape(directory)[1]
    label = model_label(model)
    shown = "" if model == DEFAULT_MODEL else repr(label)  # TextEmbedder()'s own default is this model
    comma = ", " if shown else ""
    st = (f"from sentence_transformers import SentenceTransformer\n"
          f"m = SentenceTransformer({directory!r}, device='cpu', local_files_only=True)\n"
          "assert m.encode(TEXTS).shape == (12, WIDTH)")
    cli = [sys.executable, "-m", "contextembed.cli"]
    return {
        "sentence-transformers": (_python(st, model, width), False),
        "import contextembed, contextembed.sklearn": (
            _python("import contextembed, contextembed.sklearn", model, width), False),
        f"TextEmbedder({shown}{comma}precision='fp32')": (
            _python(_text_embedder(", precision='fp32'"), model, width), False),
        f"TextEmbedder({shown})": (_python(_text_embedder(""), model, width), True),
        f"TextEmbedder({shown}{comma}backend='auto')": (
            _python(_text_embedder(", backend='auto'"), model, width), True),
        f"load_encoder({label!r}).encode": (_python(
            "from contextembed import load_encoder\n"
            "features = load_encoder(MODEL).encode([t.split() for t in TEXTS])\n"
            "assert len(features) == 12 and features[0].shape[-1] == WIDTH", model, width), True),
        f"contextembed embed {label} sample.txt": (
            [*cli, "embed", model, sample, "{out}", "--quiet", "--overwrite"], False),
        f"contextembed info {label}": ([*cli, "info", model], True),
    }


def run_once(command: list[str], env: dict, out: str) -> float:
    command = [part.replace("{out}", out) for part in command]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH",
                        help=f"the model every path loads: {DEFAULT_MODEL} (default) or a local Hugging Face directory")
    args = parser.parse_args()
    directory = model_directory(args.model)
    print(f"model: {describe_model(args.model, directory)}")
    work = Path(tempfile.mkdtemp(prefix="contextembed-startup-"))
    sample = work / "sample.txt"
    sample.write_text("\n".join(" ".join(t.split()) for t in TEXTS) + "\n", encoding="utf-8")
    tuned = {**os.environ, "CONTEXTEMBED_TUNING_DIR": str(work / "tuning"),
             "CONTEXTEMBED_ENGINE_CACHE": str(work / "engines"), "PYTHONPATH": str(REPO)}
    tuned.pop("CONTEXTEMBED_AUTO_CPU_PRECISION", None)
    declared = paths(str(sample), args.model, directory)
    commands = {name: command for name, (command, _) in declared.items()}
    out = str(work / "features.npz")

    untuned = {}
    for name in (name for name, (_, auto) in declared.items() if auto):  # a first run on a new machine:
        env = {**tuned, "CONTEXTEMBED_TUNING_DIR": tempfile.mkdtemp(dir=work),  # empty tuning directories
               "CONTEXTEMBED_ENGINE_CACHE": tempfile.mkdtemp(dir=work)}
        untuned[name] = run_once(commands[name], env, out)
    start = time.perf_counter()
    tune = subprocess.run([sys.executable, "-m", "contextembed.cli", "tune", args.model, "--quiet"], env=tuned,
                          capture_output=True, text=True, timeout=1800)
    if tune.returncode != 0:
        raise RuntimeError(tune.stderr[-3000:])
    print(f"contextembed tune {model_label(args.model)} ({time.perf_counter() - start:.0f} s):",
          json.dumps(json.loads(tune.stdout)["chosen"]))
    for command in commands.values():  # warm disk caches
        run_once(command, tuned, out)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            times[name].append(run_once(command, tuned, out))
    peer = statistics.median(times["sentence-transformers"])
    print(f"\nfresh process, {len(TEXTS)} texts, warm disk caches, median of {args.rounds} | seconds | x "
          "sentence-transformers | untuned (first run), seconds")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        first = f"{untuned[name]:.1f}" if name in untuned else ""
        print(f"| {name} | {median:.1f} | {median / peer:.2f} | {first} |")


if __name__ == "__main__":
    main()
