"""Hand-forked workers calling ``encoder.encode`` after the parent used it, as a script for
``test_forking.py``.

    python fork_scenario.py ENCODER_DIR OUT.npz

Runs with ``TOKENIZERS_PARALLELISM=true`` set before anything is imported, so that the parent
uses the tokenizer's Rust thread pool too. The parent encodes first; then a
``torch.utils.data.DataLoader(num_workers=2)`` with forked workers, a forked
``multiprocessing.Pool(2)`` (default child threads), and another one after
``set_child_threads(None)`` (workers keep the parent's two threads) encode two sentences per task
(a batch, so that the tokenizer would use its thread pool). Writes every worker's vectors and
thread count next to the parent's vectors.
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "true"

import faulthandler  # noqa: E402
import multiprocessing  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from contextembed._runtime import forking  # noqa: E402
from contextembed import load_encoder

SENTENCES = [f"sentence {i} about Peter Blackburn and the EU officials in Brussels".split()[: 3 + i] for i in range(8)]
ENCODER = None  # set in the parent before forking; the workers inherit it


PAIRS = range(len(SENTENCES) // 2)


def encode_pair(k: int):
    """Sentences ``2k`` and ``2k + 1``: ``(tokens, layers, width)`` each, and torch's threads."""
    first, second = ENCODER.encode(SENTENCES[2 * k : 2 * k + 2])
    return first, second, torch.get_num_threads()


class SentencePairs(Dataset):
    def __len__(self) -> int:
        return len(PAIRS)

    def __getitem__(self, k: int):
        return encode_pair(k)


def main(encoder_dir: str, out: str) -> None:
    global ENCODER
    # bf16 (not "auto", which differs across machines): padded to 16 positions, a sentence's vectors do not
    # depend on the batch it is in, so workers encoding two sentences match the parent encoding eight exactly
    ENCODER = load_encoder(encoder_dir, device="cpu", precision="bf16")
    results = {"parent": ENCODER.encode(SENTENCES)}
    loader = DataLoader(SentencePairs(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    results["dataloader"] = [(first.numpy(), second.numpy(), threads) for first, second, threads in loader]
    fork = multiprocessing.get_context("fork")
    with fork.Pool(2) as pool:
        results["pool"] = pool.map(encode_pair, PAIRS, chunksize=1)
    forking.set_child_threads(None)
    with fork.Pool(2) as pool:
        results["pool_parent_threads"] = pool.map(encode_pair, PAIRS, chunksize=1)
    arrays = {f"parent_{i}": vectors for i, vectors in enumerate(results.pop("parent"))}
    for name, items in results.items():
        vectors = [array for first, second, _ in items for array in (first, second)]
        arrays.update({f"{name}_{i}": array for i, array in enumerate(vectors)})
        arrays[f"{name}_threads"] = np.array([threads for _, _, threads in items])
    arrays["parent_threads"] = np.array([torch.get_num_threads()])
    np.savez(out, **arrays)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hang (tests/_scenario.py)
    main(*sys.argv[1:])
