"""Static vectors distilled from MiniLM vs the teacher and GloVe-50d: speed, SST-2, NER probe.

The teacher's layers are distilled once (``contextembed.distill``, every layer concatenated, the
default ``case="keep"`` and subword vectors) from a corpus of CoNLL-2003 train sentences and the
SST-2 training lines outside the held-out set, and once from the tokenizer's vocabulary alone
(model2vec-style); layer variants (which layers, how combined, PCA width) are cut from those
tables and their piece vectors, since averaging over occurrences commutes with the linear layer
combinations. Two ablations of the default (the two middle layers averaged): without the subword
vectors, and with ``case="fold"`` (a second corpus pass). Every encoder is scored the same way:

- words/s of word features on CoNLL-2003 dev (teacher: last four layers concatenated);
- SST-2: ``TextEmbedder`` (mean of word vectors, unit length) + ``LogisticRegression`` on the
  first 3,000 lines, scored on lines 15,001-20,000 (benchmarks/text_quality.py's fold 0);
- NER probe: ``SequenceTagger`` with plain ``LogisticRegression`` on one token vector (no window,
  no shape flags; the probe rows of benchmarks/ner_table7.py), first 4,000 CoNLL-2003 training
  sentences -> all of dev.

    python benchmarks/distill.py [--precision fp32] [--only NAME ...] [--dims 64 256]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from common import SHARED, conll_sentences  # noqa: E402
from contextembed import StaticVectors, distill, load_encoder  # noqa: E402
from contextembed.extraction import FeatureExtractor  # noqa: E402
from contextembed.sklearn import SequenceTagger, TextEmbedder, TokenEmbedder, set_cache_size  # noqa: E402
from contextembed.sklearn.datasets import read_conll, read_labelled_text  # noqa: E402
from contextembed.tokenizers import get_tokenizer  # noqa: E402

SST2 = SHARED / "sst2" / "train.tsv"
CONLL = SHARED / "conll2003"
HELD_OUT, SST_TRAIN, NER_TRAIN = (15000, 20000), 3000, 4000
WIDTH, N_LAYERS = 384, 7


def variants(table: StaticVectors, name: str) -> dict[str, StaticVectors]:
    """Layer choices cut from an all-layers-concatenated table and its piece vectors (layer k:
    columns k*384..)."""
    choices = {
        "middle two (default)": lambda layers: layers[:, 3:5].mean(axis=1),
        "mean of all layers": lambda layers: layers.mean(axis=1),
        "mean of last four": lambda layers: layers[:, -4:].mean(axis=1),
        "embedding layer": lambda layers: layers[:, 0],
        "last layer": lambda layers: layers[:, -1],
        "concat of last four": lambda layers: layers[:, -4:].reshape(len(layers), -1),
    }

    def cut(vectors, choice):
        return choice(vectors.reshape(len(vectors), N_LAYERS, WIDTH))

    return {f"{name}, {key}": StaticVectors(table.words, cut(table.table[:-1], choice), lowercase=table.lowercase,
                                            oov="mean", subwords=table.subwords.transformed(cut(table.subwords.vectors, choice)))
            for key, choice in choices.items()}


def pca(encoder: StaticVectors, dim: int) -> StaticVectors:
    """The table reduced by PCA, its piece vectors by the same projection (as ``distill(dim=...)``)."""
    from sklearn.decomposition import PCA

    projection = PCA(n_components=dim, random_state=0).fit(encoder.table[:-1])
    return StaticVectors(encoder.words, projection.transform(encoder.table[:-1]), lowercase=encoder.lowercase,
                         oov="mean", subwords=encoder.subwords.transformed(projection.transform(encoder.subwords.vectors)))


def words_per_s(encoder, layers, combine, sentences, repeats: int) -> tuple[float, float]:
    """Words/s of the first pass over ``sentences`` (after a 64-sentence warm-up) and of the best of
    ``repeats`` more (a distilled table caches the piece lookups of its unseen words)."""
    extractor = FeatureExtractor(encoder, layers=layers, combine=combine, subword_pooling="first")
    extractor.words(sentences[:64])
    times = []
    for _ in range(1 + repeats):
        start = time.perf_counter()
        extractor.words(sentences)
        times.append(time.perf_counter() - start)
    n_words = sum(map(len, sentences))
    return n_words / times[0], n_words / min(times[1:] or times)


def scores(spec, sst, ner, **embedder) -> tuple[float, float]:
    texts, labels = sst
    train, test = slice(0, SST_TRAIN), slice(*HELD_OUT)
    text_embedder = TextEmbedder(spec, **embedder.get("text", {}))
    classifier = LogisticRegression(max_iter=2000).fit(text_embedder.fit_transform(texts[train]), labels[train])
    accuracy = float(classifier.score(text_embedder.transform(texts[test]), labels[test]))
    (train_x, train_y), dev = ner
    tagger = SequenceTagger(TokenEmbedder(spec, **embedder.get("token", {})), window=0, shape_features=False,
                            classifier=LogisticRegression(max_iter=1000)).fit(train_x, train_y)
    return accuracy, 100 * tagger.score(*dev)


def wanted(only, name: str) -> bool:
    return not only or any(key in name for key in only)


def coverage(encoder: StaticVectors, sentences) -> str:
    """Share of the words found in the table, and with the subword vectors' fallback."""
    words = [w for s in sentences for w in s]
    missing = [w for w in words if encoder.is_oov(w)]
    text = f"{100 * (1 - len(missing) / len(words)):.1f}%"
    if getattr(encoder, "subwords", None) is not None:
        found = encoder.subwords.lookup(missing)[1].sum()
        text += f" ({100 * (1 - (len(missing) - found) / len(words)):.1f}% with pieces)"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="auto", help="the teacher's precision")
    parser.add_argument("--dims", nargs="*", type=int, default=[256], help="PCA widths of the concat variant")
    parser.add_argument("--only", nargs="*", default=None,
                        help="score only the students whose name holds one of these (e.g. 'mean of all')")
    args = parser.parse_args(argv)
    if not SST2.exists() or not (CONLL / "train.txt").exists():
        print(f"skipped: {SST2} or {CONLL} is not present")
        return 0
    set_cache_size(8 << 30)
    texts, labels = read_labelled_text(SST2)
    labels = np.asarray(labels)
    sst = (texts[: HELD_OUT[1]], labels[: HELD_OUT[1]])
    train_sentences = read_conll(CONLL / "train.txt")
    ner = ((train_sentences[0][:NER_TRAIN], train_sentences[1][:NER_TRAIN]), read_conll(CONLL / "dev.txt"))
    split = get_tokenizer("auto")
    held_out = set(range(*HELD_OUT))
    corpus = list(train_sentences[0]) + [split(t) for i, t in enumerate(texts) if i not in held_out]
    print(f"corpus: {len(corpus)} sentences, {sum(map(len, corpus))} words (CoNLL train + SST-2 train outside "
          f"lines {HELD_OUT[0] + 1}-{HELD_OUT[1]}); teacher minilm-l6 precision={args.precision}", flush=True)

    teacher = load_encoder("minilm-l6", precision=args.precision)
    dev_sentences = conll_sentences("dev")
    start = time.perf_counter()
    from_corpus = distill(teacher, corpus=corpus, layers="all", combine="concat")
    print(f"distilled from the corpus in {time.perf_counter() - start:.0f} s: {from_corpus.vocab_size} words",
          flush=True)
    start = time.perf_counter()
    from_vocabulary = distill(teacher, layers="all", combine="concat")
    print(f"distilled from the vocabulary in {time.perf_counter() - start:.0f} s: {from_vocabulary.vocab_size} words",
          flush=True)
    students = {**variants(from_corpus, "corpus"), **variants(from_vocabulary, "vocabulary")}
    default = students["corpus, middle two (default)"]
    students["corpus, middle two, no subwords"] = StaticVectors(default.words, default.table[:-1], oov="mean",
                                                                lowercase=default.lowercase)
    if wanted(args.only, "corpus, middle two, case fold"):
        start = time.perf_counter()
        students["corpus, middle two, case fold"] = distill(teacher, corpus=corpus, case="fold")
        print(f"distilled with case='fold' in {time.perf_counter() - start:.0f} s", flush=True)
    for dim in args.dims:
        students[f"corpus, middle two, PCA {dim}"] = pca(default, dim)

    students = {name: student for name, student in students.items() if wanted(args.only, name)}
    teacher_speed = words_per_s(teacher, [-4, -3, -2, -1], "concat", dev_sentences, repeats=0)[0]
    rows = []
    accuracy, f1 = scores("minilm-l6", sst, ner, token={"layers": [-4, -3, -2, -1], "combine": "concat"})
    rows.append(("teacher MiniLM-L6 (TextEmbedder default; concat last four)", teacher_speed, accuracy, f1, None))
    print(rows[-1], flush=True)
    glove = load_encoder("glove-6b-50d")
    accuracy, f1 = scores("glove-6b-50d", sst, ner)
    rows.append(("GloVe 6B 50d", words_per_s(glove, "all", "concat", dev_sentences, repeats=3), accuracy, f1,
                 coverage(glove, dev_sentences)))
    print(rows[-1], flush=True)
    with tempfile.TemporaryDirectory(prefix="distilled_") as folder:
        for name, student in students.items():
            path = Path(folder) / f"student{len(rows)}"
            student.save(path)
            accuracy, f1 = scores(str(path), sst, ner)
            rows.append((name, words_per_s(student, "all", "concat", dev_sentences, repeats=3), accuracy, f1,
                         coverage(student, dev_sentences)))
            print(rows[-1], flush=True)

    base_acc, base_f1 = rows[0][2], rows[0][3]
    print("\n| encoder | words/s, first pass | x teacher | words/s, repeated | x teacher | SST-2 acc | % teacher "
          "| NER probe F1 | % teacher | dev coverage |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, speed, accuracy, f1, cover in rows:
        first, repeated = speed if isinstance(speed, tuple) else (speed, speed)
        cover_text = "-" if cover is None else cover
        print(f"| {name} | {first:,.0f} | {first / teacher_speed:,.0f}x | {repeated:,.0f} | {repeated / teacher_speed:,.0f}x "
              f"| {accuracy:.4f} | {100 * accuracy / base_acc:.1f}% | {f1:.2f} | {100 * f1 / base_f1:.1f}% | {cover_text} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
