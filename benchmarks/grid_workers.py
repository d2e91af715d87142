"""A grid search's workers share what any process of the job encoded (the feature store).

``GridSearchCV`` over ``layers`` of a ``TokenEmbedder`` + ``SequenceTagger`` on CoNLL-2003 training
sentences, with ``n_jobs=1`` and ``n_jobs=2`` (loky workers), each in a fresh process, timed from the
start of ``fit`` to its end; the encoder runs once per distinct sentence either way: workers write
their rows through to the job's session directory and read the others' (docs/sklearn.md). Prints
both times, their ratio, and how many rows files the session held (one per encoded block: the same
with both settings when nothing was encoded twice).

    python benchmarks/grid_workers.py [--model PATH] [--sentences 600] [--precision fp32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import DEFAULT_MODEL  # noqa: E402

RUN = """
import glob, json, os, sys, time
from sklearn.model_selection import GridSearchCV, KFold
from contextembed._runtime import store as _store
from contextembed.sklearn import SequenceTagger, TokenEmbedder
from contextembed.sklearn.datasets import read_conll
model, n, precision, n_jobs, data = sys.argv[1:6]
sentences, tags = read_conll(data + "/train.txt", limit=int(n))
search = GridSearchCV(SequenceTagger(TokenEmbedder(model, precision=precision, combine="concat")),
                      {"embedder__layers": [-1, -2, [-4, -3, -2, -1]]}, cv=KFold(3), n_jobs=int(n_jobs))
start = time.perf_counter()
search.fit(sentences, tags)
seconds = time.perf_counter() - start
files = glob.glob(os.path.join(_store._SESSION_PATH, "*", "*.rows"))
print(json.dumps({"seconds": seconds, "rows_files": len(files), "best": search.best_params_["embedder__layers"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH")
    parser.add_argument("--sentences", type=int, default=600)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    data = ROOT.parent / "shared" / "data" / "conll2003"
    if not (data / "train.txt").exists():
        print(f"skipped: {data} is not present")
        return
    results = {}
    for n_jobs in (1, 2):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("CONTEXTEMBED_STORE_SESSION", None)  # each run a job of its own
        done = subprocess.run([sys.executable, "-c", RUN, args.model, str(args.sentences), args.precision,
                               str(n_jobs), str(data)], capture_output=True, text=True, env=env, cwd=ROOT)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        results[n_jobs] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"n_jobs={n_jobs}: {results[n_jobs]['seconds']:.1f} s, {results[n_jobs]['rows_files']} rows files "
              f"(best layers {results[n_jobs]['best']})", flush=True)
    print(f"n_jobs=2 / n_jobs=1: {results[2]['seconds'] / results[1]['seconds']:.2f}x the time "
          f"({args.model}, {args.sentences} sentences, 3 candidates x 3 folds + refit)")


if __name__ == "__main__":
    main()
