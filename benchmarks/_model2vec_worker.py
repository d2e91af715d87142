"""model2vec's side of benchmarks/distill.py, run by the python of a side environment.

model2vec's distillation upgrades transformers past this project's pins, so it lives in its own
venv (``python -m venv /work/venv-m2v && /work/venv-m2v/bin/pip install "torch==2.13.0"
"model2vec[distill]" scikit-learn``) and this script, which imports neither contextembed nor the
benchmark helpers, is run there as a subprocess. Its inputs and outputs are files:

    python _model2vec_worker.py distill MODEL_DIR OUT [--pca-dims 256] [--quantize-to float32]
                                                                            -> OUT, OUT.json {seconds}
    python _model2vec_worker.py variant SOURCE OUT --quantize-to int8 [--clusters K]   -> OUT, {seconds}
    python _model2vec_worker.py score MODEL TEXTS WORDS FEATURES.npz          -> prints {load_s, texts_per_s}

``score`` encodes every line of TEXTS (one text a line) and every line of WORDS (one word a line,
each encoded alone: the NER probe's word vectors) and saves both to FEATURES.npz.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a download: the teacher is a local directory
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402


def distill(args) -> dict:
    from model2vec.distill import distill as m2v_distill

    start = time.perf_counter()
    model = m2v_distill(model_name=args.model, pca_dims=args.pca_dims, device="cpu",
                        quantize_to=args.quantize_to or "float16")
    seconds = time.perf_counter() - start
    model.save_pretrained(args.out)
    result = {"seconds": seconds}
    with open(args.out + ".json", "w") as handle:
        json.dump(result, handle)
    return result


def variant(args) -> dict:
    from model2vec import StaticModel

    start = time.perf_counter()
    model = StaticModel.from_pretrained(args.model, quantize_to=args.quantize_to,
                                        vocabulary_quantization=args.clusters)
    seconds = time.perf_counter() - start
    model.save_pretrained(args.out)
    return {"seconds": seconds}


def score(args) -> dict:
    from model2vec import StaticModel

    load = []
    for _ in range(3):
        start = time.perf_counter()
        model = StaticModel.from_pretrained(args.model)
        load.append(time.perf_counter() - start)
    texts = open(args.texts, encoding="utf-8").read().split("\n")
    words = open(args.words, encoding="utf-8").read().split("\n")
    model.encode(texts[:256])  # warm-up
    start = time.perf_counter()
    text_vectors = model.encode(texts)
    seconds = time.perf_counter() - start
    np.savez(args.features, texts=np.asarray(text_vectors, dtype=np.float32),
             words=np.asarray(model.encode(words), dtype=np.float32))
    return {"load_s": min(load), "texts_per_s": len(texts) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["distill", "variant", "score"])
    parser.add_argument("model")
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--pca-dims", type=int, default=256)
    parser.add_argument("--quantize-to", default=None, help="distill: float16 (model2vec's default) unless given")
    parser.add_argument("--clusters", type=int, default=None)
    args = parser.parse_args()
    if args.task == "score":
        args.texts, args.words, args.features = args.paths
    else:
        (args.out,) = args.paths
    print(json.dumps({"distill": distill, "variant": variant, "score": score}[args.task](args)))


if __name__ == "__main__":
    main()
