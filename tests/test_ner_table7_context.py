"""benchmarks/ner_table7.py --context: the options that pick what is measured, on a tiny corpus."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TRAIN = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
is VBZ B-VP O
rainy JJ B-ADJP O
"""


@pytest.fixture
def table7(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("ner_table7_under_test", ROOT / "benchmarks" / "ner_table7.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("train.txt", "dev.txt"):
        (tmp_path / name).write_text(TRAIN, encoding="utf-8")
    monkeypatch.setattr(module, "DATA", tmp_path)
    # the process-wide memory budget is the other tests' too: what it is set to is recorded, not set
    module.cache_bounds = []
    monkeypatch.setattr(module.contextembed, "set_memory_budget", module.cache_bounds.append)
    return module


def test_context_rows_of_another_transformer(table7, tiny_bert_dir, tmp_path):
    out = tmp_path / "rows.jsonl"
    assert table7.main(["--context", "0", "4", "--context-rows", "last hidden", "--taggers", "lr",
                        "--transformer", str(tiny_bert_dir), "--out", str(out), "--cache-gb", "0.01"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["name"] for row in rows] == ["last hidden, context 0", "last hidden, context 4"]
    assert {row["encoder"] for row in rows} == {str(tiny_bert_dir)}  # the whole spec: not taken for MiniLM's rows
    assert all(0.0 <= row["f1"] <= 1.0 and row["train_sentences"] == 3 for row in rows)
    assert table7.cache_bounds == [int(0.01 * (1 << 30))]


def test_transformer_must_be_a_transformer(table7, tiny_elmo_dir, capsys):
    with pytest.raises(SystemExit) as stopped:
        table7.main(["--context", "4", "--taggers", "lr", "--transformer", str(tiny_elmo_dir)])
    assert stopped.value.code == 2
    assert (f"--transformer {tiny_elmo_dir} is not a transformer (family: elmo): only a transformer takes context"
            in capsys.readouterr().err)


@pytest.mark.parametrize("argv, message", [
    (["--transformer", "somewhere"], "--transformer applies to --context runs only"),
    (["--stack", "glove-6b-50d", "--taggers", "bilstm_crf"], "--stack and --char-dim apply to --context runs"),
    (["--context", "0", "--char-dim", "30", "--taggers", "lr"], "--stack and --char-dim apply to --context runs"),
])
def test_options_outside_their_runs_are_refused(table7, argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        table7.main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
