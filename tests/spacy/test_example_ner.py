"""``examples/spacy_ner``: conversion with spaCy's converter, and each config trains with ``spacy train``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spacy_ner" / "run.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("spacy_ner_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def iob1_entities(block_text: str) -> int:
    """Count entities in CoNLL-2003 IOB1 tags with a plain loop (the reference)."""
    count, previous = 0, "O"
    for line in block_text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            previous = "O"
            continue
        tag = parts[-1]
        if tag != "O" and (tag.startswith("B-") or previous == "O" or previous[2:] != tag[2:]):
            count += 1
        previous = tag
    return count


@pytest.mark.parametrize("documents", [True, False])
def test_convert_keeps_every_sentence_and_entity(example, conll_dev, tmp_path, documents):
    import spacy
    from spacy.tokens import DocBin

    text = example.conll_blocks(conll_dev, 45)
    n_sentences = sum(1 for b in text.split("\n\n") if b.strip() and not b.startswith("-DOCSTART-"))
    assert n_sentences == 45
    n_docs = example.convert(conll_dev, tmp_path / "dev.spacy", 45, documents=documents)
    docs = list(DocBin().from_disk(tmp_path / "dev.spacy").get_docs(spacy.blank("en").vocab))
    assert len(docs) == n_docs
    n_documents = sum(1 for b in text.split("\n\n") if b.startswith("-DOCSTART-"))
    assert n_docs == (n_documents if documents else n_sentences)
    assert 1 < n_documents < n_sentences
    n_tokens = sum(1 for line in text.splitlines() if line.split() and not line.startswith("-DOCSTART-"))
    assert sum(len(doc) for doc in docs) == n_tokens
    assert sum(len(doc.ents) for doc in docs) == iob1_entities(text)


@pytest.fixture(scope="module")
def tiny_bert4_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT's tokenizer with 4 hidden layers (the configs pool the last four)."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny_bert4")
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (tiny_bert_dir / name).exists():
            shutil.copy(tiny_bert_dir / name, path / name)
    config = BertConfig.from_pretrained(tiny_bert_dir, num_hidden_layers=4)
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(path)
    return path


@pytest.mark.slow
def test_every_config_trains(example, conll_dev, tiny_bert4_dir, tmp_path):
    tiny_bert_dir = tiny_bert4_dir
    data = tmp_path / "data"
    example.convert(conll_dev, data / "train.spacy", 40)
    example.convert(conll_dev, data / "dev.spacy", 20)
    settings = example.RunSettings(max_steps=4, eval_frequency=2, encoder=str(tiny_bert_dir), cache_mb=50)
    for config in example.CONFIGS:
        scores = example.train_and_evaluate(config, tmp_path, data, settings)
        assert set(scores) == {"ents_p", "ents_r", "ents_f"}
        assert 0.0 <= scores["ents_f"] <= 1.0
        saved = json.loads((tmp_path / config / "model-best" / "meta.json").read_text())
        assert saved["pipeline"][-1] == "ner"


@pytest.mark.slow
@pytest.mark.pretrained
def test_small_run_contextual_beats_hashembed(example, minilm, conll_dev, tmp_path):
    """The CI-sized run: frozen MiniLM features (+ word shape) beat spaCy's HashEmbedCNN."""
    results = example.run(tmp_path, example.SMALL, configs=("contextual_concat", "hashembed_cnn"))
    assert results["contextual_concat"]["ents_f"] > results["hashembed_cnn"]["ents_f"]
    assert results["contextual_concat"]["ents_f"] > 0.4


def test_missing_data_is_an_error_naming_the_flag(example, tmp_path, capsys):
    assert example.main(["--data", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "pass --data DIR" in capsys.readouterr().err


def test_convert_takes_either_docstart_line_and_refuses_a_file_without(example, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n\n"
                      "-DOCSTART- -X- O O\n\nHi UH O O\n", encoding="utf-8")
    assert example.convert(source, tmp_path / "docs.spacy") == 2
    assert example.convert(source, tmp_path / "sentences.spacy", documents=False) == 3
    source.write_text("EU NNP B-NP B-ORG\n", encoding="utf-8")
    with pytest.raises(ValueError, match="in.txt: no -DOCSTART- lines"):
        example.convert(source, tmp_path / "none.spacy")


def test_without_conll_the_example_says_where_to_get_it(example, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONTEXTEMBED_DATA", str(tmp_path))
    assert example.main(["--convert-only", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"CoNLL-2003 (train.txt, dev.txt) is not in {tmp_path / 'conll2003'}" in err
    assert "pass --data DIR or set CONTEXTEMBED_DATA" in err and "clips.uantwerpen.be/conll2003" in err
    assert not (tmp_path / "out").exists()
