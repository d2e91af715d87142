"""Words/s and texts/s on a CUDA GPU: raw transformers against contextembed at each precision, and
sentence-transformers' ``encode()`` against ``TextEmbedder``, side by side in one process.

Word path: the features of benchmarks/throughput.py (last four layers concatenated, first piece per
word) on CoNLL-2003 dev sentences (or a synthetic fallback); raw transformers = AutoModel with
``output_hidden_states=True`` in length-sorted batches of 64, fp32, features copied back to the host
as a user's loop does. Text path: SST-2 training sentences (or the same fallback), one vector each.
Paths take turns ``--rounds`` times; each reports its best time. Reduced precisions report the
mean and lowest per-token cosine similarity to contextembed fp32.

The model is the bundled MiniLM-L6 (``minilm-l6``, the default) or any local Hugging Face directory
(``--model PATH``, such as a base-sized sentence-transformers one); every path loads the same
directory. ``--random-weights`` builds a model of the directory's configuration with random weights
and its tokenizer (speeds do not depend on the weights' values; cosines then describe the random
model, not the trained one).

    python benchmarks/gpu_throughput.py [--model PATH] [--random-weights] [--sentences 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import DEFAULT_MODEL, conll_sentences, model_directory, model_shape, synthetic_sentences  # noqa: E402
from throughput import raw_transformers  # noqa: E402

LAYERS = [-4, -3, -2, -1]
PRECISIONS = ["fp32", "fp16", "bf16", "auto"]
#: the device under test (``--device cpu``: a dry run of this script on a machine without a GPU)
DEVICE = "cuda"


def measured_directory(args) -> str:
    """The directory every path loads (a random-weights copy with ``--random-weights``)."""
    source = model_directory(args.model)
    if not args.random_weights:
        return source
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    out = tempfile.mkdtemp(prefix="random-weights-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)  # a model's worth of files: not left in /tmp
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.from_pretrained(source, local_files_only=True)).save_pretrained(out)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(out)
    return out


def contextembed_word_path(directory: str, precision: str):
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor

    encoder = load_encoder(directory, device=DEVICE, precision=precision)
    return FeatureExtractor(encoder, layers=LAYERS, combine="concat", subword_pooling="first").words, encoder


def sentence_transformers_text_path(directory: str):
    from sentence_transformers import SentenceTransformer

    # a plain transformers directory gets sentence-transformers' default: mean pooling over pieces
    model = SentenceTransformer(directory, device=DEVICE, local_files_only=True)
    return lambda texts: model.encode(texts, batch_size=64, convert_to_numpy=True)


def text_embedder_path(directory: str, precision: str):
    from contextembed.sklearn import TextEmbedder

    embedder = TextEmbedder(directory, device=DEVICE, precision=precision, cache=None)
    return lambda texts: embedder.fit(texts[:1]).transform(texts)


def word_inputs(args) -> list[list[str]]:
    if args.conll:
        from contextembed.io import read_conll

        return [tokens for tokens, _ in read_conll(args.conll)][: args.sentences]
    return conll_sentences("dev", args.sentences) or synthetic_sentences(args.sentences)


def timed(run, inputs) -> tuple[float, object]:
    import torch

    synchronize = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    synchronize()
    start = time.perf_counter()
    result = run(inputs)
    synchronize()
    return time.perf_counter() - start, result


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def race(paths: dict, inputs, rounds: int) -> tuple[dict, dict]:
    """Best seconds of each path over ``rounds`` turns (after one warm-up each), and its last result."""
    best, results = {}, {}
    for run in paths.values():
        run(inputs[:64])
    for _ in range(rounds):
        for name, run in paths.items():
            seconds, results[name] = timed(run, inputs)
            best[name] = min(best.get(name, float("inf")), seconds)
    return best, results


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH",
                        help=f"the model every path loads: {DEFAULT_MODEL} (default) or a local Hugging Face directory")
    parser.add_argument("--random-weights", action="store_true", help="random weights of the model's configuration")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conll", help="a CoNLL-2003 file (default: ../shared's dev)")
    parser.add_argument("--texts", help="a label<TAB>sentence file (default: ../shared's SST-2 train)")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    directory = measured_directory(args)
    sentences = word_inputs(args)
    n_words = sum(map(len, sentences))
    report = {"gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE, "torch": torch.__version__,
              "model": args.model, "model_shape": dict(zip(("layers", "width"), model_shape(directory))),
              "random_weights": args.random_weights, "sentences": len(sentences), "words": n_words}

    paths, encoders = {"raw": raw_transformers(directory=directory, device=DEVICE)}, {}
    for precision in PRECISIONS:
        paths[precision], encoders[precision] = contextembed_word_path(directory, precision)
    best, results = race(paths, sentences, args.rounds)
    reference = np.concatenate(results["fp32"])
    words = {}
    for name, seconds in best.items():
        row = {"words_per_s": round(n_words / seconds), "x_raw": round(best["raw"] / seconds, 2)}
        features = np.concatenate(results[name]).astype(np.float32)
        assert features.shape == reference.shape, f"{name}: one row per word"
        similarity = cosines(reference, features)
        row.update(mean_cosine=round(float(similarity.mean()), 5), min_cosine=round(float(similarity.min()), 4))
        if name in encoders:
            row["resolved"] = encoders[name].precision
        words[name] = row
    report["word_path"] = words

    texts = [" ".join(s) for s in sentences]
    if args.texts:
        from contextembed.sklearn.datasets import read_labelled_text

        texts = read_labelled_text(args.texts, limit=args.sentences)[0]
    text_paths = {"sentence-transformers": sentence_transformers_text_path(directory)}
    for precision in ("fp32", "auto"):
        text_paths[f"TextEmbedder {precision}"] = text_embedder_path(directory, precision)
    best, results = race(text_paths, texts, args.rounds)
    base = best["sentence-transformers"]
    report["text_path"] = {
        name: {"texts_per_s": round(len(texts) / seconds), "x_sentence_transformers": round(base / seconds, 2),
               "mean_cosine_to_st": round(float(cosines(results["sentence-transformers"], results[name]).mean()), 5)}
        for name, seconds in best.items()
    }
    if DEVICE == "cuda":
        report["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
