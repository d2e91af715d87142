"""CoNLL-2003 as a pretraining corpus (shared by the pretrain_* benchmarks).

The corpus is the training split's words: one sentence per line, a blank line at every
``-DOCSTART-`` (document boundary). It is written to a temporary directory, never into the repo.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003"


def conll_path(split: str) -> Optional[Path]:
    path = SHARED / f"{split}.txt"
    return path if path.exists() else None


def require(split: str) -> Path:
    """The CoNLL split's path; exits cleanly (status 0, a message) when ../shared is absent."""
    path = conll_path(split)
    if path is None:
        print(f"skipped: {SHARED / (split + '.txt')} is not present")
        sys.exit(0)
    return path


def write_corpus(conll: Path, target: Path) -> Path:
    """Write ``conll``'s words as a pretraining corpus; returns ``target``."""
    lines: list[str] = []
    sentence: list[str] = []
    with open(conll, encoding="utf-8") as handle:
        for raw in handle:
            fields = raw.split()
            if fields and fields[0] == "-DOCSTART-":
                if lines and lines[-1] != "":
                    lines.append("")
            elif fields:
                sentence.append(fields[0])
            elif sentence:
                lines.append(" ".join(sentence))
                sentence = []
    if sentence:
        lines.append(" ".join(sentence))
    target.write_text("\n".join(lines).strip("\n") + "\n", encoding="utf-8")
    return target
