"""Feature-based NER in spaCy: frozen contextual features vs spaCy's own HashEmbedCNN tok2vec.

1. converts CoNLL-2003 (``train.txt`` and ``dev.txt`` in ``--data DIR``, else
   ``$CONTEXTEMBED_DATA/conll2003``, else ``../shared/data/conll2003`` beside the repository;
   ``--help`` says where to get it) with spaCy's own CoNLL NER converter into ``OUT/data``;
2. runs ``spacy train`` on each config of this directory:
   ``contextual_concat.cfg`` (listener, concat of the last four layers),
   ``contextual_scalar_mix.cfg`` (listener, trainable scalar mix of all layers),
   ``hashembed_cnn.cfg`` (spaCy's HashEmbedCNN, for comparison);
3. evaluates ``model-best`` of each on the dev set and prints the entity F1 table.

Where to get CoNLL-2003 (never downloaded here): ``docs/data.md``.

Small mode (CI): ``python examples/spacy_ner/run.py --small``. Full benchmark:
``python examples/spacy_ner/run.py --out out/spacy_ner_full``. The same training runs from the
shell once the data is converted (step 1 alone: ``--convert-only``; the installed package
registers the component through entry points; otherwise add ``--code contextembed/spacy/__init__.py``)::

    python examples/spacy_ner/run.py --convert-only --out out/spacy_ner
    python -m spacy train examples/spacy_ner/contextual_concat.cfg --output out/ner \\
        --paths.train out/spacy_ner/data/train.spacy --paths.dev out/spacy_ner/data/dev.spacy
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parents[1]))  # examples.corpora; an installed contextembed still comes first

from examples.corpora import CONLL_SOURCE, conll_dir, epilog  # noqa: E402

CONFIGS = ("contextual_concat", "contextual_scalar_mix", "hashembed_cnn")
#: the document line spaCy's CoNLL NER converter splits at
DOCUMENT_LINE = "-DOCSTART- -X- O O"


@dataclass
class RunSettings:
    """What to train on and for how long."""

    train_sentences: int = 0  # 0: all
    dev_sentences: int = 0
    max_steps: int = 2000
    max_epochs: int = 0
    eval_frequency: int = 200
    encoder: str = "minilm-l6"
    cache_mb: int = 4000
    use_gpu: int = -1
    seed: int = 0  # spaCy's system.seed


SMALL = RunSettings(train_sentences=500, dev_sentences=300, max_steps=300, eval_frequency=100)


def conll_blocks(path: Path, n_sentences: int = 0) -> str:
    """The file's first ``n_sentences`` sentences (all if 0), ``-DOCSTART-`` markers kept."""
    blocks = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    kept, count = [], 0
    for block in blocks:
        is_sentence = not block.strip().startswith("-DOCSTART-")
        if is_sentence and n_sentences and count == n_sentences:
            break
        kept.append(block.strip("\n"))
        count += is_sentence
    return "\n\n".join(kept) + "\n"


def convert(source: Path, target: Path, n_sentences: int = 0, documents: bool = True) -> int:
    """Convert CoNLL-2003 (IOB1) to a ``.spacy`` DocBin with spaCy's own converter; return #docs.

    ``documents``: one Doc per document of the file (its ``-DOCSTART-`` lines; the listener then
    sees each sentence in the text around it, up to the encoder's windows), else one Doc per
    sentence (no context beyond the sentence).
    """
    from spacy.tokens import DocBin
    from spacy.training.converters import conll_ner_to_docs

    blocks = conll_blocks(source, n_sentences).split("\n\n")
    if documents and not any(b.startswith("-DOCSTART-") for b in blocks):
        raise ValueError(f"{source}: no -DOCSTART- lines to take documents from; pass documents=False")
    # the converter splits documents at this exact line only (and otherwise puts n_sents per Doc)
    blocks = [DOCUMENT_LINE if b.startswith("-DOCSTART-") else b for b in blocks if documents or
              not b.startswith("-DOCSTART-")]
    docs = list(conll_ner_to_docs("\n\n".join(blocks).strip("\n") + "\n", n_sents=1, no_print=True))
    target.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=False).to_disk(target)
    return len(docs)


def train_and_evaluate(config: str, out: Path, data: Path, settings: RunSettings) -> dict:
    """``spacy train`` one config, then score ``model-best`` on dev; return the scores."""
    from spacy.cli.evaluate import evaluate
    from spacy.cli.train import train

    overrides = {
        "paths.train": str(data / "train.spacy"),
        "paths.dev": str(data / "dev.spacy"),
        "training.max_steps": settings.max_steps,
        "training.max_epochs": settings.max_epochs,
        "training.eval_frequency": settings.eval_frequency,
        "system.seed": settings.seed,
    }
    if config.startswith("contextual"):
        overrides.update({"paths.encoder": settings.encoder, "paths.cache_mb": settings.cache_mb})
    model_dir = out / config
    train(HERE / f"{config}.cfg", model_dir, use_gpu=settings.use_gpu, overrides=overrides)
    scores = evaluate(str(model_dir / "model-best"), data / "dev.spacy", use_gpu=settings.use_gpu, silent=True)
    return {key: scores[key] for key in ("ents_p", "ents_r", "ents_f")}


def convert_data(out: Path, settings: RunSettings, conll: Optional[Path] = None) -> Path:
    """Step 1: ``OUT/data/train.spacy`` and ``dev.spacy`` from CoNLL-2003 in ``conll`` (default:
    :func:`examples.corpora.conll_dir`); return ``OUT/data``."""
    conll = conll_dir() if conll is None else conll
    data = out / "data"
    n_train = convert(conll / "train.txt", data / "train.spacy", settings.train_sentences)
    n_dev = convert(conll / "dev.txt", data / "dev.spacy", settings.dev_sentences)
    print(f"converted {n_train} train / {n_dev} dev docs (one per document) to {data}")
    return data


def run(out: Path, settings: RunSettings, configs=CONFIGS, conll: Optional[Path] = None) -> dict[str, dict]:
    """Convert the data, train every config, write ``results.json`` and return the scores."""
    data = convert_data(out, settings, conll)
    results = {config: train_and_evaluate(config, out, data, settings) for config in configs}
    (out / "results.json").write_text(json.dumps({"settings": settings.__dict__, "dev": results}, indent=2))
    return results


def print_table(results: dict[str, dict]) -> None:
    print(f"\n{'config':<24}{'dev P':>8}{'dev R':>8}{'dev F1':>8}")
    for config, scores in results.items():
        print(f"{config:<24}{100 * scores['ents_p']:>8.1f}{100 * scores['ents_r']:>8.1f}{100 * scores['ents_f']:>8.1f}")


def parse_args(argv=None) -> tuple[argparse.Namespace, RunSettings]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=epilog("conll2003", CONLL_SOURCE, sample=False),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/spacy_ner"))
    parser.add_argument("--data", type=Path, default=None,
                        help="directory with CoNLL-2003 train.txt and dev.txt (default: see below)")
    parser.add_argument("--small", action="store_true", help="a small subset, for CI")
    parser.add_argument("--convert-only", action="store_true",
                        help="only write OUT/data/train.spacy and dev.spacy (for running `spacy train` yourself)")
    parser.add_argument("--train-sentences", type=int, help="first N training sentences (0: all)")
    parser.add_argument("--dev-sentences", type=int, help="first N dev sentences (0: all)")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-epochs", type=int)
    parser.add_argument("--eval-frequency", type=int)
    parser.add_argument("--encoder", help="name or path for contextembed.load_encoder")
    parser.add_argument("--cache-mb", type=int)
    parser.add_argument("--use-gpu", type=int, help="GPU id, -1 for CPU")
    parser.add_argument("--seed", type=int, help="spaCy's system.seed")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    args = parser.parse_args(argv)
    settings = RunSettings(**(SMALL.__dict__ if args.small else {}))
    for name in settings.__dict__:
        value = getattr(args, name)
        if value is not None:
            setattr(settings, name, value)
    return args, settings


def main(argv=None) -> int:
    args, settings = parse_args(argv)
    args.data = conll_dir() if args.data is None else args.data
    if not (args.data / "train.txt").exists():
        print(f"error: CoNLL-2003 (train.txt, dev.txt) is not in {args.data}; pass --data DIR or set "
              f"CONTEXTEMBED_DATA\n\n{CONLL_SOURCE}", file=sys.stderr)
        return 2
    if args.convert_only:
        convert_data(args.out, settings, args.data)
        return 0
    try:
        import contextembed.spacy  # noqa: F401  (registers the component when not installed)
    except ImportError:  # running from a source checkout
        sys.path.insert(0, str(HERE.parents[1]))
        import contextembed.spacy  # noqa: F401

    print_table(run(args.out, settings, args.configs, args.data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
