"""Words/s, peak memory and fidelity of every execution path, measured side by side in one run.

Same inputs and the same model for all (CoNLL-2003 dev sentences from ../shared, or a synthetic
fallback; ``--model``: the bundled MiniLM-L6 ``minilm-l6`` by default, or any local Hugging Face
directory such as a base-sized sentence-transformers one, which every path below loads, peers
included), features = last four layers concatenated, first piece per word:

- raw transformers fp32: AutoModel with ``output_hidden_states=True``, length-sorted batches of 64,
  fast tokenizer with ``is_split_into_words`` (what a user writes by hand);
- contextembed fp32, bf16, int8 (a scale per token, ``contextembed._runtime.quantization``) and
  ``precision="auto"``, each at the device's default ``batch_tokens`` or at ``PATH@N`` (``fp32@8192``:
  ``batch_tokens=8192``, the default before it depended on the device); ``BACKEND:PRECISION`` runs
  another backend (``openvino:fp32``, ``openvino:int8``, ``auto:auto``: ``backend="auto"``);
- ``distilled``: the static encoder ``contextembed distill`` made (``--distilled DIR``), its own
  vectors as features (no cosine to fp32: another feature space; the probe F1 compares);
- flair's TransformerWordEmbeddings (first subtoken, layers -1..-4 concatenated) when flair is
  importable (e.g. run with a side environment's python: ``--flair-python /path/to/python``).

The text path (``--text-paths``): one vector per SST-2 training sentence from sentence-transformers'
``encode()`` (fp32) and from ``TextEmbedder()``'s defaults in fp32 and ``precision="auto"``,
uncached, as texts/s, with their mean cosine to sentence-transformers fp32 and a 5-fold logistic
regression accuracy on the labels; ``text-BACKEND:PRECISION`` (``text-openvino:int8``) on another backend.
sentence-transformers' own ONNX and OpenVINO backends (``st-onnx``, ``st-openvino``, its default
inference precision; ``st-openvino-f32``; ``st-openvino-int8``, its static int8 export calibrated on 300
SST-2 sentences after the measured ones, the fastest CPU path it documents) need optimum, whose pins do not admit this project's
transformers: give the python of a side environment with ``--peer-python`` (``pip install
"sentence-transformers[onnx,openvino]"`` in a fresh venv); the texts and the model directory go to it
as files, and its OpenVINO telemetry is declined as in contextembed.

Each path runs in its own process (so its peak RSS is its own); with ``--rounds N`` the paths take
turns N times and each reports its best speed (this host's speed drifts by up to a third between
processes minutes apart). Reduced-precision paths also report
the mean cosine similarity of their features to contextembed fp32 and the change of NER dev F1 of a
small probe (logistic regression on the token features; ``--probe-train`` sentences).

    python benchmarks/throughput.py [--sentences 2000] [--rounds 2] [--paths raw fp32 bf16 int8 auto fp32@8192]
    python benchmarks/throughput.py --paths --text-paths st text-fp32 text-auto   # the text path only
    python benchmarks/throughput.py --model ~/.cache/contextembed/models/all-mpnet-base-v2   # at base size
    python benchmarks/throughput.py --paths raw fp32 auto openvino:fp32 openvino:int8 auto:auto \
        --text-paths st st-onnx st-openvino st-openvino-int8 text-auto text-openvino:int8 \
        --peer-python /tmp/peervenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    DEFAULT_MODEL, conll_sentences, conll_tagged, describe_model, model_directory, model_label, peak_rss_mb,
    synthetic_sentences,
)

LAYERS = [-4, -3, -2, -1]


def inputs(n: int) -> tuple[list[list[str]], str]:
    sentences = conll_sentences("dev", n)
    if sentences is None:
        return synthetic_sentences(n), "synthetic (../shared absent)"
    return sentences, "CoNLL-2003 dev"


# -- workers: each runs in its own process ---------------------------------------------------------


def raw_transformers(directory: str, batch_size=64, device="cpu"):
    """Returns per-sentence ``(words, 4 * width)`` first-piece features computed by hand (the model in
    ``directory``, on ``device``; features copied back to the host as a user's loop does)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModel.from_pretrained(directory, local_files_only=True).eval().to(device)

    def run(batch_sentences):
        order = sorted(range(len(batch_sentences)), key=lambda i: len(batch_sentences[i]))
        outputs = [None] * len(batch_sentences)
        with torch.inference_mode():
            for begin in range(0, len(order), batch_size):
                index = order[begin : begin + batch_size]
                batch = tokenizer([batch_sentences[i] for i in index], is_split_into_words=True, padding=True,
                                  truncation=True, return_tensors="pt")
                hidden = model(**batch.to(device), output_hidden_states=True).hidden_states
                last_four = torch.cat(hidden[-4:], dim=-1).cpu()
                for row, i in enumerate(index):
                    word_ids = batch.word_ids(row)
                    first = [word_ids.index(w) for w in range(len(batch_sentences[i]))]
                    outputs[i] = last_four[row, first].numpy()
        return outputs

    return run


def contextembed_path(path: str, model: str, distilled: str | None = None):
    """``fp32``, ``bf16``, ``int8``, ``auto``, optionally ``@N`` for ``batch_tokens=N`` (``int8@8192``),
    of ``model`` (a bundled name or a directory); ``distilled``: the static encoder at ``--distilled``."""
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor

    if path == "distilled":
        if not distilled:
            raise SystemExit("the distilled path needs --distilled DIR (made by `contextembed distill`)")
        return FeatureExtractor(load_encoder(distilled)).words
    backend, precision, options = parse_path(path)
    encoder = load_encoder(model, device="cpu", precision=precision, backend=backend, **options)
    extractor = FeatureExtractor(encoder, layers=LAYERS, combine="concat", subword_pooling="first")
    return extractor.words


def parse_path(path: str) -> tuple[str, str, dict]:
    """``[BACKEND:]PRECISION[@N]`` -> ``(backend, precision, {"batch_tokens": N})``."""
    path, _, batch_tokens = path.partition("@")
    backend, _, precision = path.rpartition(":")
    return backend or "torch", precision, {"batch_tokens": int(batch_tokens)} if batch_tokens else {}


def flair_path(directory: str):
    from flair.data import Sentence
    from flair.embeddings import TransformerWordEmbeddings

    embeddings = TransformerWordEmbeddings(directory, layers="-4,-3,-2,-1",
                                           subtoken_pooling="first", layer_mean=False, allow_long_sentences=True)

    def run(batch_sentences):
        flair_sentences = [Sentence(list(s)) for s in batch_sentences]
        for begin in range(0, len(flair_sentences), 64):
            embeddings.embed(flair_sentences[begin : begin + 64])
        return [np.stack([t.embedding.cpu().numpy() for t in s]) for s in flair_sentences]

    return run


# -- the text path: one vector per SST-2 sentence ----------------------------------------------------

#: text paths: sentence-transformers' encode() against TextEmbedder's default at two precisions
TEXT_PATHS = ("st", "text-fp32", "text-auto")
#: sentence-transformers' own backends, run by --peer-python
PEER_PATHS = ("st-onnx", "st-openvino", "st-openvino-f32", "st-openvino-int8")
#: SST-2 sentences that calibrate st-openvino-int8 (taken after the measured ones; NNCF's default count)
PEER_CALIBRATION = 300


def is_text_path(path: str) -> bool:
    return path in TEXT_PATHS or path in PEER_PATHS or path.startswith("text-")


def text_inputs(n: int, extra: int = 0) -> tuple[list[str], str, list[int] | None]:
    """``n`` texts (and ``extra`` more after them), their source and their labels (None: synthetic)."""
    from contextembed.sklearn.datasets import read_labelled_text

    path = ROOT.parent / "shared" / "data" / "sst2" / "train.tsv"
    if not path.exists():
        return [" ".join(s) for s in synthetic_sentences(n + extra)], "synthetic (../shared absent)", None
    texts, labels = read_labelled_text(path, limit=n + extra)
    return texts, "SST-2 train", labels


def sentence_transformers_path(directory: str):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(directory, device="cpu", local_files_only=True)
    return lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True)


def text_embedder_path(path: str, model: str):
    from contextembed.sklearn import TextEmbedder

    backend, precision, _ = parse_path(path)
    options = {"backend": backend} if backend != "torch" else {}
    embedder = TextEmbedder(model, precision=precision, cache=None, **options)
    return lambda texts: embedder.fit(texts[:1]).transform(texts)


def peer_path(path: str, model_dir: str, calibration: list[str], cache: str):
    """sentence-transformers with its ONNX or OpenVINO backend (in the peer environment);
    ``st-openvino-int8``: its static int8 export (``export_static_quantized_openvino_model``, NNCF,
    300 calibration sentences), made once per run in ``cache``."""
    try:  # OpenVINO's telemetry declined before anything imports it, as contextembed does
        from openvino_telemetry.utils import opt_in_checker

        opt_in_checker.OptInChecker.check = lambda *a, **k: opt_in_checker.ConsentCheckResult.DECLINED
    except ImportError:
        pass
    from sentence_transformers import SentenceTransformer

    backend = "onnx" if path == "st-onnx" else "openvino"
    kwargs = {"model_kwargs": {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}} if path.endswith("-f32") else {}
    if path == "st-openvino-int8":
        model_dir = static_int8_peer(model_dir, calibration, Path(cache) / "st-openvino-int8")
        kwargs = {"model_kwargs": {"file_name": "openvino/openvino_model_qint8_quantized.xml"}}
    model = SentenceTransformer(model_dir, device="cpu", backend=backend, **kwargs)
    return lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True)


def text_worker(args) -> None:
    if args.worker in PEER_PATHS:  # the peer environment has no contextembed: texts and model as files
        texts = Path(args.texts_file).read_text(encoding="utf-8").split("\n")
        calibration = Path(args.texts_file + ".calibration").read_text(encoding="utf-8").split("\n")
        run = peer_path(args.worker, args.model_dir, calibration, str(Path(args.texts_file).parent))
    else:
        texts = text_inputs(args.sentences)[0]
        run = (sentence_transformers_path(args.model_dir) if args.worker == "st"
               else text_embedder_path(args.worker[len("text-"):], args.model))
    run(texts[:64])  # warm-up
    elapsed = float("inf")
    for _ in range(2):  # best of two passes, as the word paths (the first pays each new shape once)
        start = time.perf_counter()
        features = run(texts)
        elapsed = min(elapsed, time.perf_counter() - start)
    assert len(features) == len(texts), "one row per text"
    if args.out != os.devnull:
        np.save(args.out, np.asarray(features, dtype=np.float32))
    print(json.dumps({"model": args.model, "texts_per_s": len(texts) / elapsed, "peak_rss_mb": peak_rss_mb()}))


def measured_rows(results: dict, rate: str, base_path: str, width: int):
    """``(path, result, rate / the base path's rate)`` of each path that ran; the others are
    reported as unavailable."""
    base = results.get(base_path, {}).get(rate)
    for path, result in results.items():
        if "error" in result:
            print(f"{path:{width}s} unavailable: {result['error']}")
            continue
        yield path, result, result[rate] / base if base else float("nan")


def compare_text_paths(args) -> None:
    texts, source, labels = text_inputs(args.sentences, extra=PEER_CALIBRATION)
    texts, calibration, labels = texts[: args.sentences], texts[args.sentences :], labels and labels[: args.sentences]
    print(f"\ntext path, {model_label(args.model)}: {len(texts)} texts ({source}), one vector each")
    features = {}
    with tempfile.TemporaryDirectory() as tmp:
        if any(path in PEER_PATHS for path in args.text_paths):
            args.texts_file = str(Path(tmp) / "texts.txt")
            Path(args.texts_file).write_text("\n".join(texts), encoding="utf-8")
            Path(args.texts_file + ".calibration").write_text("\n".join(calibration), encoding="utf-8")

        def run(path: str, first: bool) -> dict:
            python = args.peer_python if path in PEER_PATHS else sys.executable
            out = Path(tmp) / f"{path}.npy"
            result = run_worker(path, args, out if first else Path(os.devnull), python)
            if first and out.exists():
                features[path] = np.load(out)
            return result

        results = best_of_rounds(args.text_paths, args.rounds, "texts_per_s", run)
    print(f"{'path':18s} {'texts/s':>9s} {'x ST fp32':>10s} {'peak RSS':>9s} {'cos(ST)':>8s} {'min cos':>8s} {'probe acc':>9s}")
    for path, result, ratio in measured_rows(results, "texts_per_s", "st", 18):
        quality = text_quality(features.get(path), features.get("st"), labels)
        print(f"{path:18s} {result['texts_per_s']:9.0f} {ratio:10.2f} {result['peak_rss_mb']:8.0f}M {quality}")
    print("targets: text-fp32 >= 1.0x sentence-transformers encode() fp32; text-auto >= 1.0x the fastest st-* backend "
          "(issue 30: >= 1.0x st-openvino-int8)")
    print("cos(ST): mean cosine to sentence-transformers fp32 (TextEmbedder's default pools all layers, ST the last: "
          "compare TextEmbedder paths with each other); probe acc: 5-fold logistic regression on the features")


def text_quality(features, reference, labels) -> str:
    """Mean and lowest cosine to ``reference`` and a 5-fold probe accuracy (%), as a table cell."""
    if features is None:
        return f"{'-':>8s} {'-':>8s} {'-':>9s}"
    cos = "       -       -"
    if reference is not None and reference.shape == features.shape:
        similarity = (features * reference).sum(1) / np.maximum(
            np.linalg.norm(features, axis=1) * np.linalg.norm(reference, axis=1), 1e-12)
        cos = f"{similarity.mean():8.5f} {similarity.min():8.4f}"
    accuracy = "        -"
    if labels:
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import cross_val_score

        scores = cross_val_score(LogisticRegression(max_iter=1000), features, labels, cv=5)
        accuracy = f"{100 * scores.mean():9.2f}"
    return f"{cos} {accuracy}"


def static_int8_peer(model_dir: str, calibration: list[str], target: Path) -> str:
    """A copy of ``model_dir`` with sentence-transformers' static int8 OpenVINO export in it. Its
    calibration text comes from the Hub (GLUE SST-2) by default: here ``datasets.load_dataset``
    returns the local SST-2 sentences instead, and the peer's own code does the rest (shuffle, 300
    samples, tokenize, NNCF)."""
    import shutil

    import datasets
    from optimum.intel import OVQuantizationConfig
    from sentence_transformers import SentenceTransformer, export_static_quantized_openvino_model

    if (target / "openvino" / "openvino_model_qint8_quantized.xml").exists():
        return str(target)
    shutil.copytree(model_dir, target)  # the peer writes beside the model: never into the installed package
    datasets.load_dataset = lambda *args, **kwargs: datasets.Dataset.from_dict({"sentence": calibration})
    model = SentenceTransformer(str(target), device="cpu", backend="openvino")
    export_static_quantized_openvino_model(model, OVQuantizationConfig(num_samples=len(calibration)), str(target))
    return str(target)


def worker(args) -> None:
    if is_text_path(args.worker):
        return text_worker(args)
    sentences, _ = inputs(args.sentences)
    path = args.worker
    peer = {"raw": raw_transformers, "flair": flair_path}.get(path)
    run = peer(args.model_dir) if peer else contextembed_path(path, args.model, args.distilled)
    run(sentences[:64])  # warm-up
    elapsed, first, passes, features = fast_path_time(run, sentences)
    n_words = sum(map(len, sentences))
    assert sum(len(f) for f in features) == n_words, "one row per word"
    np.save(args.out, np.concatenate(features).astype(np.float32))
    probe = None
    if args.probe_train and path != "flair":
        probe = probe_f1(run, args.probe_train)
    print(json.dumps({"model": args.model, "words_per_s": n_words / elapsed, "first_words_per_s": n_words / first,
                      "passes": passes, "peak_rss_mb": peak_rss_mb(), "probe_f1": probe}))


def fast_path_time(run, inputs) -> tuple[float, float, int, object]:
    """Seconds of the best and of the first ``run(inputs)``, how many runs, and the result. Every path
    runs at least twice, best run kept: the first pass pays what a path does once per shape or word
    (OpenVINO's kernels for each new input shape, a distilled table's piece lookups of unseen
    words), which a long job pays once. A path done in well under a second (static vectors) is
    timed again until two seconds have passed, since one short run measures page faults and timer
    noise more than the path."""
    best, first, total, runs = float("inf"), None, 0.0, 0
    while total < 2.0:
        start = time.perf_counter()
        result = run(inputs)
        elapsed = time.perf_counter() - start
        first = elapsed if first is None else first
        best, total, runs = min(best, elapsed), total + elapsed, runs + 1
        if elapsed > 0.5 and runs >= 2:
            break
    return best, first, runs, result


def probe_f1(run, n_train: int):
    """NER dev F1 of logistic regression on single token features (train sentences from CoNLL train)."""
    from seqeval.metrics import f1_score
    from sklearn.linear_model import LogisticRegression

    train, dev = conll_tagged("train", n_train), conll_tagged("dev", 1000)
    if train is None:
        return None
    X = np.concatenate(run(train[0]))
    y = [t for tags in train[1] for t in tags]
    classifier = LogisticRegression(max_iter=300, C=0.5).fit(X, y)
    predicted = classifier.predict(np.concatenate(run(dev[0])))
    lengths = np.cumsum([len(t) for t in dev[1]])[:-1]
    return 100 * f1_score(dev[1], [list(p) for p in np.split(predicted, lengths)])


# -- orchestration -----------------------------------------------------------------------------------


def best_of_rounds(paths: list[str], rounds: int, rate: str, run) -> dict:
    """``run(path, first_round)`` for every path, the paths taking turns for ``rounds`` rounds (so a
    host whose speed drifts slows all of them alike); each path's best ``rate``, everything else
    (memory, features, probe) from its first round."""
    results: dict = {}
    for round_ in range(rounds):
        for path in paths:
            result = run(path, round_ == 0)
            if round_ == 0:
                results[path] = result
            elif "error" not in results[path] and "error" not in result:
                results[path][rate] = max(results[path][rate], result[rate])
    return results


def run_worker(path: str, args, out: Path, python: str, probe: bool = True) -> dict:
    command = [python, str(Path(__file__).resolve()), "--worker", path, "--sentences", str(args.sentences),
               "--out", str(out), "--probe-train", str(args.probe_train if probe else 0),
               "--model", args.model, "--model-dir", args.model_dir]
    if args.distilled:
        command += ["--distilled", args.distilled]
    if getattr(args, "texts_file", None) and path in PEER_PATHS:
        command += ["--texts-file", args.texts_file]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode:
        return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean cosine between matching rows, per layer block (``a`` and ``b``: ``(words, len(LAYERS) * width)``)."""
    width = a.shape[1] // len(LAYERS)
    a, b = a.reshape(-1, width), b.reshape(-1, width)
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH",
                        help=f"the model every path loads, peers included: {DEFAULT_MODEL} (default) or a local "
                             "Hugging Face directory")
    parser.add_argument("--paths", nargs="*", default=["raw", "fp32", "bf16", "int8", "auto", "flair"],
                        help="word-feature paths (none: only the text paths)")
    parser.add_argument("--probe-train", type=int, default=1000, help="0 disables the NER probe")
    parser.add_argument("--flair-python", default=sys.executable, help="python of an environment with flair")
    parser.add_argument("--text-paths", nargs="*", default=list(TEXT_PATHS),
                        help=f"text paths compared on SST-2 sentences (none: skip): {', '.join(TEXT_PATHS + PEER_PATHS)} "
                             "or text-BACKEND:PRECISION")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="python of an environment with sentence-transformers[onnx,openvino] (the st-* paths)")
    parser.add_argument("--texts-file", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)  # --model's directory, resolved once by the driver
    parser.add_argument("--distilled", help="a static encoder made by `contextembed distill` (path 'distilled')")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every path this many times, taking turns; report each one's best speed")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    args.paths = [] if args.paths in (["none"], None) else args.paths
    args.text_paths = [] if args.text_paths in (["none"], None) else args.text_paths
    unknown = [path for path in args.text_paths if not is_text_path(path)]
    if unknown:
        parser.error(f"unknown text paths {unknown}: use {', '.join(TEXT_PATHS + PEER_PATHS)} or text-BACKEND:PRECISION")
    if args.worker:
        return worker(args)
    args.model_dir = model_directory(args.model)
    sentences, source = inputs(args.sentences)
    n_words = sum(map(len, sentences))
    import torch

    print(f"model: {describe_model(args.model, args.model_dir)}")
    print(f"inputs: {len(sentences)} sentences, {n_words} words ({source}); {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    features = {}
    with tempfile.TemporaryDirectory() as tmp:
        def run(path: str, first: bool) -> dict:
            out = Path(tmp) / f"{path}.npy"  # later rounds write it again, unread
            result = run_worker(path, args, out, args.flair_python if path == "flair" else sys.executable, probe=first)
            if first and out.exists():
                features[path] = np.load(out)
            return result

        results = best_of_rounds(args.paths, args.rounds, "words_per_s", run)
    if args.paths:
        print(f"word path, {model_label(args.model)}: last four layers concatenated, first piece per word")
        print_word_rows(results, features)
    if args.text_paths:
        compare_text_paths(args)


def print_word_rows(results: dict, features: dict) -> None:
    print(f"{'path':14s} {'words/s':>9s} {'x raw fp32':>10s} {'peak RSS':>9s} {'cos(fp32)':>9s} {'probe F1':>8s} {'dF1':>6s}")
    for path, result, ratio in measured_rows(results, "words_per_s", "raw", 14):
        comparable = "fp32" in features and path in features and features[path].shape == features["fp32"].shape
        cos = cosine(features[path], features["fp32"]) if comparable else float("nan")
        f1, f1_ref = result.get("probe_f1"), results.get("fp32", {}).get("probe_f1")
        delta = f"{f1 - f1_ref:+6.2f}" if f1 is not None and f1_ref is not None else "     -"
        f1_text = f"{f1:8.2f}" if f1 is not None else "       -"
        print(f"{path:14s} {result['words_per_s']:9.0f} {ratio:10.2f} {result['peak_rss_mb']:8.0f}M {cos:9.5f} {f1_text} {delta}")
    for path, result in results.items():
        first = result.get("first_words_per_s")
        if result.get("passes", 1) > 1 and first < 0.9 * result["words_per_s"]:
            print(f"{path}: first pass {first:,.0f} words/s (best of the repeated passes above)")
    print("targets: fp32 >= 0.95x raw; best reduced precision >= 2.5x raw with cos >= 0.99 and F1 loss <= 0.5")


if __name__ == "__main__":
    main()
