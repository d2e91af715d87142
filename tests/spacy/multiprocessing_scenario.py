"""One order of ``nlp.pipe(n_process=2)`` runs, as a script for ``test_multiprocessing.py``.

    python multiprocessing_scenario.py ORDER OUT_DIR NAME=PIPELINE_DIR [NAME=PIPELINE_DIR ...]

ORDER is ``cold`` (``n_process=2`` before anything ran in this process), ``call`` (one
``nlp(text)`` per pipeline first) or ``pipe1`` (an ``n_process=1`` pass per pipeline first).
``OUT_DIR/NAME.npz`` receives ``doc.tensor`` of the ``n_process=2`` and ``n_process=1`` passes,
the entities and, per doc, the process and the torch thread count that made it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import spacy
import torch
import transformers.models.bert.modeling_bert  # noqa: F401  (imported once for the workers; runs no op)
from spacy.language import Language

import contextembed.spacy  # noqa: F401  (registers the factory)

TEXTS = [
    f"{name} met {org} officials in {city} on day {i} " + "and talked about the weather " * (i % 4)
    for i, (name, org, city) in enumerate(
        [("Peter Blackburn", "EU", "Brussels"), ("Anna Schmidt", "UN", "Geneva"), ("John Smith", "NATO", "Washington")] * 10
    )
]
BATCH_SIZE = 4  # several batches per worker; the same batches in both passes
ORDERS = ("cold", "call", "pipe1")


@Language.component("record_process")
def record_process(doc):
    doc.user_data["pid"] = os.getpid()
    doc.user_data["threads"] = torch.get_num_threads()
    return doc


def main(order: str, out_dir: str, *pipelines: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"ORDER must be one of {ORDERS}, got {order!r}")
    nlps = {}
    for item in pipelines:
        name, path = item.split("=", 1)
        nlps[name] = spacy.load(path)
        nlps[name].add_pipe("record_process")
    single = {}
    for name, nlp in nlps.items():
        if order == "call":
            nlp(TEXTS[0])
        elif order == "pipe1":
            single[name] = list(nlp.pipe(TEXTS, n_process=1, batch_size=BATCH_SIZE))
    multi = {name: list(nlp.pipe(TEXTS, n_process=2, batch_size=BATCH_SIZE)) for name, nlp in nlps.items()}
    for name, nlp in nlps.items():
        if name not in single:
            single[name] = list(nlp.pipe(TEXTS, n_process=1, batch_size=BATCH_SIZE))
        _save(Path(out_dir) / f"{name}.npz", multi[name], single[name])


def _save(path: Path, multi: list, single: list) -> None:
    passes = {"multi": multi, "single": single}
    arrays = {f"{kind}_{i}": doc.tensor for kind, docs in passes.items() for i, doc in enumerate(docs)}
    meta = {
        kind: {"ents": [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in docs],
               "pids": [doc.user_data["pid"] for doc in docs],
               "threads": [doc.user_data["threads"] for doc in docs]}
        for kind, docs in passes.items()
    }
    meta["parent"] = {"pid": os.getpid(), "threads": torch.get_num_threads()}
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hang (tests/_scenario.py)
    main(*sys.argv[1:])
