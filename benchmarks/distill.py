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

``--versus-model2vec`` runs the comparison with model2vec's distillation instead (issue 41): the
same teacher (MiniLM-L6, fp32), our vocabulary and corpus modes with each option (PCA width, SIF
weighting, storage precision, clustering with and without exact columns) beside model2vec 0.10's
``distill`` (SIF, PCA 256 and 384, float32) and its float16 and int8 copies, each scored in one run on

- SST-2 held out: ``TextEmbedder`` (ours) or ``StaticModel.encode`` (model2vec), unit-normalised
  mean vectors, ``LogisticRegression`` on the first 3,000 lines of train.tsv, scored on all the
  other lines (64,349), and texts/s of that pass;
- the NER probe above (each word's vector alone; model2vec's by ``encode`` of the word), for every
  row, the most telling first, until ``--ner-until HH:MM`` (UTC);
- size on disk, load time (best of 3, in a warm process) and time to distill; a second table puts
  ours beside model2vec's at each width and precision.

Our corpus is CoNLL-2003 train plus the 3,000 SST-2 fitting lines (no scored line). model2vec runs
in a side environment (``--peer-python``, default ../venv-m2v/bin/python: ``python -m venv
/work/venv-m2v && /work/venv-m2v/bin/pip install "torch==2.13.0" "model2vec[distill]"
scikit-learn``; it upgrades transformers); without it its rows are skipped. The teacher passes
(ours and model2vec's) are cached in ``--cache`` (default /tmp/contextembed_distill41), so a
second run re-scores without encoding again; their recorded times are reported.

    python benchmarks/distill.py --versus-model2vec [--peer-python PY] [--cache DIR] [--ner-until HH:MM]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
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
import contextembed  # noqa: E402
from contextembed.sklearn import SequenceTagger, TextEmbedder, TokenEmbedder  # noqa: E402
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
    parser.add_argument("--versus-model2vec", action="store_true", help="compare with model2vec's distillation")
    parser.add_argument("--peer-python", default=str(ROOT.parent / "venv-m2v" / "bin" / "python"),
                        help="python of the side environment with model2vec[distill]")
    parser.add_argument("--ner", action=argparse.BooleanOptionalAction, default=True,
                        help="with --versus-model2vec: the NER probe of every row, NER_ROWS first (minutes each)")
    parser.add_argument("--ner-until", default=None, metavar="HH:MM",
                        help="with --versus-model2vec: start no NER probe after this UTC time")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "contextembed_distill41"),
                        help="where the teacher passes are kept between runs")
    args = parser.parse_args(argv)
    if args.versus_model2vec:
        return versus_model2vec(args)
    if not SST2.exists() or not (CONLL / "train.txt").exists():
        print(f"skipped: {SST2} or {CONLL} is not present")
        return 0
    contextembed.set_memory_budget(8 << 30)
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



# -- issue 41: beside model2vec ------------------------------------------------------------------

M2V_WORKER = Path(__file__).resolve().parent / "_model2vec_worker.py"
#: vocabulary clusters of the small-table rows (model2vec's vocabulary_quantization alike)
CLUSTERS = (1024, 4096, 8192)
#: (clusters, exact columns) of the rows that keep the widest columns beside the clusters
EXACT_COLUMNS = ((1024, 32), (4096, 32), (4096, 64))


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def cached_reduction(cache: Path, name: str, make) -> tuple[object, float]:
    """``make()`` (a teacher pass) and its seconds, kept in ``cache/name.pkl`` between runs."""
    path = cache / f"{name}.pkl"
    if path.exists():
        with open(path, "rb") as handle:
            return pickle.load(handle)
    start = time.perf_counter()
    reduction = make()
    result = (reduction, time.perf_counter() - start)
    with open(path.with_suffix(".tmp"), "wb") as handle:
        pickle.dump(result, handle)
    os.replace(path.with_suffix(".tmp"), path)
    return result


def our_students(reductions: dict, corpus_counts: dict) -> dict:
    """``{name: (StaticVectors, storage, seconds of refine, source)}``: every option on the two passes."""
    from contextembed.pretraining._distillation import refine
    from contextembed.encoders._static.tables import TableStorage

    plans = [
        ("vocabulary, no PCA, no weighting (before)", "vocabulary", None, "none", None),
        ("vocabulary, PCA 256", "vocabulary", 256, "none", None),
        ("vocabulary, SIF (Zipf rank)", "vocabulary", None, "sif", None),
        ("vocabulary, PCA 256 + SIF (Zipf rank)", "vocabulary", 256, "sif", None),
        ("vocabulary, PCA 384 (centred) + SIF (Zipf rank)", "vocabulary", 384, "sif", None),
        ("vocabulary, PCA 128 + SIF (Zipf rank)", "vocabulary", 128, "sif", None),
        ("vocabulary, PCA 64 + SIF (Zipf rank)", "vocabulary", 64, "sif", None),
        ("vocabulary, PCA 256 + SIF (corpus word counts)", "vocabulary", 256, "sif", corpus_counts),
        ("corpus, no PCA, no weighting (before)", "corpus", None, "none", None),
        ("corpus, SIF (corpus counts)", "corpus", None, "sif", None),
        ("corpus, PCA 256", "corpus", 256, "none", None),
        ("corpus, PCA 256 + SIF (corpus counts)", "corpus", 256, "sif", None),
        ("corpus, PCA 384 (centred) + SIF (corpus counts)", "corpus", 384, "sif", None),
    ]
    students = {}
    for name, source, dim, weighting, frequencies in plans:
        reduction = reductions[source]
        start = time.perf_counter()
        vectors, pieces, _, _ = refine(reduction, dim=dim, weighting=weighting, frequencies=frequencies)
        student = StaticVectors(reduction.words, vectors, lowercase=False, oov="mean", subwords=pieces)
        students[name] = (student, TableStorage(), time.perf_counter() - start, source)
    precisions = [("float16", TableStorage("float16")), ("int8 per vector", TableStorage("int8")),
                  ("int8 per dimension", TableStorage("int8", "dimension"))]
    clustered = [(f"{k} clusters, int8", TableStorage("int8", clusters=k)) for k in CLUSTERS] + [
        (f"{k} clusters + {m} exact columns, int8", TableStorage("int8", clusters=k, exact_columns=m))
        for k, m in EXACT_COLUMNS]
    small = {"vocabulary, PCA 384 (centred) + SIF (Zipf rank)": precisions + clustered,
             "vocabulary, PCA 256 + SIF (Zipf rank)": precisions,
             "vocabulary, PCA 128 + SIF (Zipf rank)": [("int8 per dimension", TableStorage("int8", "dimension"))],
             "vocabulary, PCA 64 + SIF (Zipf rank)": [("int8 per dimension", TableStorage("int8", "dimension"))],
             "corpus, no PCA, no weighting (before)": [
                 ("float16", TableStorage("float16")), ("int8 per dimension", TableStorage("int8", "dimension")),
                 ("4096 clusters, int8", TableStorage("int8", clusters=4096)),
                 ("4096 clusters + 32 exact columns, int8", TableStorage("int8", clusters=4096, exact_columns=32))]}
    for base, storages in small.items():
        student, _, seconds, source = students[base]
        for label, storage in storages:
            students[f"{base}, {label}"] = (student, storage, seconds, source)
    return students


def score_features(fit, score, labels) -> float:
    fit_labels, score_labels = labels
    classifier = LogisticRegression(max_iter=2000).fit(fit, fit_labels)
    return float(classifier.score(score, score_labels))


def ner_probe(encoder_spec, ner) -> float:
    (train_x, train_y), dev = ner
    tagger = SequenceTagger(TokenEmbedder(encoder_spec), window=0, shape_features=False,
                            classifier=LogisticRegression(max_iter=1000)).fit(train_x, train_y)
    return 100 * tagger.score(*dev)


def score_ours(path: Path, texts, labels) -> dict:
    loads = []
    for _ in range(3):
        start = time.perf_counter()
        load_encoder(path)
        loads.append(time.perf_counter() - start)
    embedder = TextEmbedder(str(path), cache=None).fit(texts[0][:256])
    fit = embedder.transform(texts[0])
    embedder.transform(texts[1][:256])  # warm-up
    start = time.perf_counter()
    scored = embedder.transform(texts[1])
    texts_per_s = len(texts[1]) / (time.perf_counter() - start)
    return {"accuracy": score_features(fit, scored, labels), "texts_per_s": texts_per_s,
            "bytes": folder_bytes(path), "load_s": min(loads)}


#: the rows whose NER probe is run first (each takes minutes on 2 cores), in this order
NER_ROWS = ("vocabulary, PCA 384 (centred) + SIF (Zipf rank)", "model2vec distill (PCA 256, SIF, float16)",
            "vocabulary, PCA 384 (centred) + SIF (Zipf rank), int8 per dimension", "model2vec, PCA 256, int8",
            "vocabulary, PCA 256 + SIF (Zipf rank), int8 per dimension",
            "vocabulary, PCA 384 (centred) + SIF (Zipf rank), 4096 clusters + 32 exact columns, int8",
            "vocabulary, PCA 384 (centred) + SIF (Zipf rank), 4096 clusters, int8",
            "corpus, no PCA, no weighting (before)", "vocabulary, no PCA, no weighting (before)")


def run_peer(python: str, *args) -> dict:
    done = subprocess.run([python, str(M2V_WORKER), *map(str, args)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "model2vec worker failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: model2vec's rows: (PCA width, precision) -> name; float16 at 256 is its default output
M2V_NAMES = {(256, "float16"): "model2vec distill (PCA 256, SIF, float16)",
             (256, "float32"): "model2vec, PCA 256, float32", (256, "int8"): "model2vec, PCA 256, int8",
             (384, "float32"): "model2vec, PCA 384 (full), float32", (384, "float16"): "model2vec, PCA 384 (full), float16",
             (384, "int8"): "model2vec, PCA 384 (full), int8"}
#: ours beside them at the same width and precision: (PCA width, precision) -> our row
OUR_NAMES = {(width, precision): f"vocabulary, PCA {width}{' (centred)' if width == 384 else ''} + SIF (Zipf rank)"
             + {"float32": "", "float16": ", float16", "int8": ", int8 per dimension"}[precision]
             for width, precision in M2V_NAMES}


def model2vec_rows(args, cache: Path, texts, labels, ner, work: Path) -> dict:
    """model2vec's distill (PCA 256 and 384, SIF, float32) and its float16 and int8 copies, scored as ours."""
    from throughput import minilm_model_dir

    if not Path(args.peer_python).exists():
        print(f"model2vec skipped: no side environment at {args.peer_python} (see the docstring)")
        return {}
    models, seconds = {}, {}
    for width in (256, 384):
        base = cache / f"model2vec-pca{width}-float32"
        if not base.exists():
            run_peer(args.peer_python, "distill", minilm_model_dir(), base, "--pca-dims", width, "--quantize-to", "float32")
        seconds[width] = json.loads(Path(str(base) + ".json").read_text())["seconds"]
        models[M2V_NAMES[width, "float32"]] = (base, width)
        # (its vocabulary_quantization runs KMeans with 10 random starts: too slow for this run on 2 cores)
        for precision in ("float16", "int8"):
            target = work / f"model2vec-{width}-{precision}"
            run_peer(args.peer_python, "variant", base, target, "--quantize-to", precision)
            models[M2V_NAMES[width, precision]] = (target, width)
    (work / "texts.txt").write_text("\n".join(texts[0] + texts[1]), encoding="utf-8")
    (train_x, _), (dev_x, _) = ner
    words = sorted({w for s in list(train_x) + list(dev_x) for w in s})
    (work / "words.txt").write_text("\n".join(words), encoding="utf-8")
    rows = {}
    for name, (path, width) in models.items():
        result = run_peer(args.peer_python, "score", path, work / "texts.txt", work / "words.txt", work / "f.npz")
        features = np.load(work / "f.npz")
        fit, scored = features["texts"][: len(texts[0])], features["texts"][len(texts[0]):]
        # every probe word as model2vec encodes it alone, as a table the probe looks up
        StaticVectors(words, features["words"], lowercase=False).save(work / f"{path.name}-words")
        rows[name] = {"accuracy": score_features(fit, scored, labels), "texts_per_s": result["texts_per_s"],
                      "bytes": folder_bytes(path), "load_s": result["load_s"], "distill_s": seconds[width],
                      "probe_path": work / f"{path.name}-words"}
        print(name, rows[name], flush=True)
    return {name: rows[name] for name in sorted(rows, key=lambda name: name != M2V_NAMES[256, "float16"])}


def ner_probes(rows: dict, ner, until) -> None:
    """The NER probe of every row, those of :data:`NER_ROWS` first, until the UTC time ``until``
    (``"HH:MM"``; ``None``: every row)."""
    import datetime

    order = [name for name in NER_ROWS if name in rows] + [name for name in rows if name not in NER_ROWS]
    for name in order:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M")
        if until is not None and now >= until:
            print(f"NER probes stopped at {now} UTC (--ner-until {until}): {len(order) - order.index(name)} rows "
                  "without one", flush=True)
            return
        rows[name]["ner"] = ner_probe(str(rows[name]["probe_path"]), ner)
        print(f"NER probe F1 of {name}: {rows[name]['ner']:.2f}", flush=True)


def versus_model2vec(args) -> int:
    from collections import Counter

    from contextembed.pretraining._distillation import middle_layers, reduce_teacher

    if not SST2.exists() or not (CONLL / "train.txt").exists():
        print(f"skipped: {SST2} or {CONLL} is not present")
        return 0
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    all_texts, all_labels = read_labelled_text(SST2)
    all_labels = np.asarray(all_labels)
    texts = (list(all_texts[:SST_TRAIN]), list(all_texts[SST_TRAIN:]))
    labels = (all_labels[:SST_TRAIN], all_labels[SST_TRAIN:])
    train_sentences = read_conll(CONLL / "train.txt")
    ner = ((train_sentences[0][:NER_TRAIN], train_sentences[1][:NER_TRAIN]), read_conll(CONLL / "dev.txt"))
    split = get_tokenizer("auto")
    corpus = list(train_sentences[0]) + [split(t) for t in texts[0]]
    print(f"SST-2: fit on {len(texts[0])} lines, scored on {len(texts[1])}; corpus: {len(corpus)} sentences, "
          f"{sum(map(len, corpus))} words (CoNLL-2003 train + the SST-2 fitting lines); teacher minilm-l6 fp32; "
          f"{os.cpu_count()} CPUs", flush=True)
    teacher = load_encoder("minilm-l6", precision="fp32")
    extractor = FeatureExtractor(teacher, layers=middle_layers(teacher.n_layers), combine="mean",
                                 subword_pooling="mean")
    reductions, pass_seconds = {}, {}
    for source, sentences in (("vocabulary", None), ("corpus", corpus)):
        reductions[source], pass_seconds[source] = cached_reduction(
            cache, source, lambda: reduce_teacher(teacher, extractor, sentences, case="keep", min_count=1, pieces=True))
        print(f"{source} pass: {pass_seconds[source]:.0f} s", flush=True)
    corpus_counts = dict(Counter(w for s in corpus for w in s))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="distill41_") as folder:
        work = Path(folder)
        for name, (student, storage, seconds, source) in our_students(reductions, corpus_counts).items():
            path = work / f"ours{len(rows)}"
            start = time.perf_counter()
            student.save(path, storage=storage)
            save_s = time.perf_counter() - start
            rows[name] = {**score_ours(path, texts, labels), "distill_s": pass_seconds[source] + seconds + save_s,
                          "probe_path": path}
            print(name, rows[name], flush=True)
        try:
            rows.update(model2vec_rows(args, cache, texts, labels, ner, work))
        except RuntimeError as error:
            print(f"model2vec failed: {error}")
        print_comparison(rows)
        print_sizes(rows)
        if args.ner:
            ner_probes(rows, ner, args.ner_until)
    print_comparison(rows)
    print_sizes(rows)
    return 0


def print_sizes(rows: dict) -> None:
    """Size on disk and load time of ours and model2vec's at the same width and precision."""
    print("\n| PCA width | precision | ours: size | model2vec: size | ours / model2vec | ours: load | model2vec: load |")
    print("|---|---|---|---|---|---|---|")
    for (width, precision), theirs in sorted(M2V_NAMES.items()):
        ours = rows.get(OUR_NAMES[width, precision])
        if ours is None or theirs not in rows:
            continue
        theirs = rows[theirs]
        print(f"| {width} | {precision} | {ours['bytes'] / 1e6:.2f} MB | {theirs['bytes'] / 1e6:.2f} MB "
              f"| {ours['bytes'] / theirs['bytes']:.2f} | {1000 * ours['load_s']:.0f} ms | {1000 * theirs['load_s']:.0f} ms |")


def print_comparison(rows: dict) -> None:
    reference = rows.get("model2vec distill (PCA 256, SIF, float16)")
    print("\n| distilled table | SST-2 acc | NER probe F1 | texts/s | x model2vec | size on disk | load | distill |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        ratio = f"{row['texts_per_s'] / reference['texts_per_s']:.2f}x" if reference else "-"
        ner = f"{row['ner']:.2f}" if "ner" in row else "-"
        print(f"| {name} | {row['accuracy']:.4f} | {ner} | {row['texts_per_s']:,.0f} | {ratio} "
              f"| {row['bytes'] / 1e6:.1f} MB | {1000 * row['load_s']:.0f} ms | {row['distill_s']:.0f} s |")


if __name__ == "__main__":
    raise SystemExit(main())
