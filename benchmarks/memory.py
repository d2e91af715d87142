"""Peak memory of `contextembed embed` at two corpus sizes: it must not grow with the corpus.

Each size runs in a fresh process (`python -m contextembed embed ...`), so its peak RSS is its own.
The output is written through a memory map / zip stream, so only the chunk in flight is in memory.

    python benchmarks/memory.py [--spec glove-6b-50d] [--words 500000]

Prints peak RSS for N and 2N words and their ratio (target: about 1.0), plus the output sizes with
float32 and float16 (float16 halves it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import synthetic_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(path: Path, n_words: int) -> int:
    sentences, total = [], 0
    for sentence in synthetic_sentences(n_words // 10 + 10, seed=1):
        if total >= n_words:
            break
        sentences.append(" ".join(sentence))
        total += len(sentence)
    path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return total


def run_embed(spec: str, corpus: Path, output: Path, extra: list[str]) -> float:
    """Peak RSS (MiB) of one `contextembed embed` process."""
    command = [sys.executable, "-c",
               "import resource, sys; from contextembed.cli import main; code = main(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr); sys.exit(code)",
               "embed", spec, str(corpus), str(output), "--quiet", *extra]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode:
        raise SystemExit(result.stderr)
    return float(result.stderr.strip().splitlines()[-1])


def run_text_embedder(spec: str, corpus: Path) -> float:
    """Peak RSS (MiB) of one process running ``TextEmbedder(spec).fit(...).transform(corpus lines)``."""
    code = (
        "import resource, sys\n"
        "from contextembed.sklearn import TextEmbedder\n"
        "texts = open(sys.argv[1], encoding='utf-8').read().splitlines()\n"
        "out = TextEmbedder(sys.argv[2], layers='all', combine='concat', cache=None).fit(texts[:10]).transform(texts)\n"
        "assert out.shape[0] == len(texts)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(corpus), spec], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode:
        raise SystemExit(result.stderr)
    return float(result.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="glove-6b-50d")
    parser.add_argument("--words", type=int, default=500_000, help="the smaller corpus; the larger is twice this")
    parser.add_argument("--extra", nargs="*", default=[], help="more `embed` options, e.g. --layers=-1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows, text_peaks = [], []
        for n in (args.words, 2 * args.words):
            corpus = tmp / f"corpus_{n}.txt"
            words = write_corpus(corpus, n)
            for dtype in ("float32", "float16"):
                output = tmp / f"out_{n}_{dtype}.npz"
                peak = run_embed(args.spec, corpus, output, ["--dtype", dtype, *args.extra])
                rows.append((words, dtype, peak, output.stat().st_size / 2**20))
                output.unlink()
            text_peaks.append((words, run_text_embedder(args.spec, corpus)))
    print(f"encoder {args.spec}")
    for words, dtype, peak, size in rows:
        print(f"{words:9d} words  {dtype:8s} peak RSS {peak:8.0f} MiB   output {size:8.1f} MiB")
    small, large = rows[0][2], rows[2][2]
    print(f"peak RSS ratio 2N/N (float32): {large / small:.3f}  (flat memory: ~1.0; output grew 2x)")
    print(f"output ratio float16/float32: {rows[1][3] / rows[0][3]:.3f}")
    for words, peak in text_peaks:
        print(f"TextEmbedder.transform {words:9d} words  peak RSS {peak:8.0f} MiB")
    print(f"TextEmbedder peak RSS ratio 2N/N: {text_peaks[1][1] / text_peaks[0][1]:.3f}")


if __name__ == "__main__":
    main()
