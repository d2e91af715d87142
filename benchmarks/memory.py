"""Peak memory as the corpus grows: `contextembed embed`, and a tagger fitted on the feature store.

Each run is a fresh process, so its peak RSS is its own.

    python benchmarks/memory.py [--spec glove-6b-50d] [--words 500000]

`contextembed embed` at N and 2N words: the output is written through a memory map / zip stream, so
only the chunk in flight is in memory. Prints peak RSS for both and their ratio (target: about
1.0), plus the output sizes with float32 and float16 (float16 halves it).

    python benchmarks/memory.py --tagger-model PATH [--budget 1GiB] [--sizes 4000 0] [--precision fp32]

A `BiLSTMCRFTagger` over `TokenEmbedder(PATH, layers="all", combine="scalar_mix",
cache_dtype="float16")` fitted on the first N CoNLL-2003 training sentences (0: all 14,041) and
scored on dev, twice per size with the same seed: with the memory budget `--budget` (the feature
store keeps what does not fit on disk and the tagger reads it a batch at a time) and with a budget
large enough to keep every row in memory (`--in-memory-budget`). Prints, per run, peak RSS, the
fit's and the scoring's seconds, the dev F1 and the epochs, then the ratios: the issue's targets are
peak RSS <= 3 GB on the full set at base size, the same F1 (within 0.1) and at most 1.3x the
in-memory run's time.
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


#: one tagger fit in a fresh process: argv = model, train sentences (0: all), budget, precision, cache dtype
TAGGER_RUN = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[6])
from common import peak_rss_mb
import contextembed
from contextembed.sklearn import BiLSTMCRFTagger, TokenEmbedder
from contextembed.sklearn.datasets import read_conll
model, limit, budget, precision, cache_dtype, _, data = sys.argv[1:8]
contextembed.set_memory_budget(budget)
train = read_conll(data + "/train.txt", limit=int(limit) or None)
dev = read_conll(data + "/dev.txt")
embedder = TokenEmbedder(model, layers="all", combine="scalar_mix", precision=precision, cache_dtype=cache_dtype)
tagger = BiLSTMCRFTagger(embedder, random_state=0)
start = time.perf_counter()
tagger.fit(*train)
fitted = time.perf_counter()
f1 = tagger.score(*dev)
print(json.dumps({"train": len(train[0]), "words": sum(map(len, train[0])), "fit_s": fitted - start,
                  "score_s": time.perf_counter() - fitted, "f1": f1, "epochs": tagger.n_epochs_,
                  "best_epoch": tagger.best_epoch_, "peak_mb": peak_rss_mb()}))
"""


def run_tagger(model: str, limit: int, budget: str, precision: str, cache_dtype: str, data: Path) -> dict:
    """One fresh process fitting and scoring the tagger (:data:`TAGGER_RUN`)."""
    import json

    command = [sys.executable, "-c", TAGGER_RUN, model, str(limit), budget, precision, cache_dtype,
               str(Path(__file__).resolve().parent), str(data)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode:
        raise SystemExit(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


def tagger_main(args) -> None:
    data = ROOT.parent / "shared" / "data" / "conll2003"
    if not (data / "train.txt").exists():
        print(f"skipped: {data} is not present")
        return
    print(f"BiLSTMCRFTagger over TokenEmbedder({args.tagger_model}, layers='all', combine='scalar_mix', "
          f"cache_dtype={args.cache_dtype!r}), precision={args.precision}, random_state=0", flush=True)
    for size in args.sizes:
        runs = {}
        for name, budget in (("store", args.budget), ("in memory", args.in_memory_budget)):
            runs[name] = run = run_tagger(args.tagger_model, size, budget, args.precision, args.cache_dtype, data)
            print(f"{run['train']:6d} sentences ({run['words']:,} words)  {name:9s} budget {budget:>6s}  "
                  f"peak RSS {run['peak_mb'] / 1024:6.2f} GiB  fit {run['fit_s']:7.1f} s  score {run['score_s']:6.1f} s  "
                  f"dev F1 {100 * run['f1']:.2f}  epochs {run['epochs']} (best {run['best_epoch']})", flush=True)
        store, memory = runs["store"], runs["in memory"]
        print(f"  store / in memory: fit time {store['fit_s'] / memory['fit_s']:.2f}x, peak RSS "
              f"{store['peak_mb'] / memory['peak_mb']:.2f}x, dev F1 {100 * (store['f1'] - memory['f1']):+.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="glove-6b-50d")
    parser.add_argument("--words", type=int, default=500_000, help="the smaller corpus; the larger is twice this")
    parser.add_argument("--extra", nargs="*", default=[], help="more `embed` options, e.g. --layers=-1")
    parser.add_argument("--tagger-model", default=None, metavar="PATH",
                        help="instead: a BiLSTM-CRF tagger fitted on this model's features (see the docstring)")
    parser.add_argument("--budget", default="1GiB", help="the store's memory budget (contextembed.set_memory_budget)")
    parser.add_argument("--in-memory-budget", default="16GiB", help="a budget that keeps every row in memory")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 0], help="training sentences (0: all)")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--cache-dtype", default="float16", choices=["float16", "float32"])
    args = parser.parse_args()
    if args.tagger_model:
        tagger_main(args)
        return
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
