"""benchmarks/ner_table7.py: the options that pick what is measured (--context, --model and the
feature store's), on a tiny corpus."""

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


@pytest.mark.slow
def test_context_rows_of_another_transformer(table7, tiny_bert_dir, tmp_path):
    out = tmp_path / "rows.jsonl"
    assert table7.main(["--context", "0", "4", "--context-rows", "last hidden", "--taggers", "lr",
                        "--transformer", str(tiny_bert_dir), "--out", str(out), "--cache-gb", "0.01"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["name"] for row in rows] == ["last hidden, context 0", "last hidden, context 4"]
    assert {row["encoder"] for row in rows} == {str(tiny_bert_dir)}  # the whole spec: not taken for MiniLM's rows
    assert all(0.0 <= row["f1"] <= 1.0 and row["train_sentences"] == 3 for row in rows)
    assert table7.cache_bounds == [int(0.01 * (1 << 30))]


@pytest.mark.slow
def test_table_rows_of_another_model(table7, tiny_bert_dir, tmp_path):
    """--model picks the transformer of the Table 7 rows; every TokenEmbedder stores its rows under
    --cache-dir in --cache-dtype; each JSON line records the spec as given, the settings, the wall
    time and the peak memory so far, and a second run measures only what --out lacks."""
    out, store = tmp_path / "rows.jsonl", tmp_path / "store"
    rows_of = ["--model", str(tiny_bert_dir), "--taggers", "lr", "--rows", "last hidden", "vectors", "--out", str(out),
               "--cache-dir", str(store), "--cache-gb", "0.01"]
    argv = [*rows_of, "--cache-dtype", "float16", "--precision", "fp32"]
    assert table7.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(row["encoder"], row["name"]) for row in rows] == [("glove-6b-50d", "vectors"),  # the plan's order
                                                               (str(tiny_bert_dir), "last hidden")]
    for row in rows:
        assert row["tagger"] == "lr" and row["train_sentences"] == 3 and 0.0 <= row["f1"] <= 1.0
        assert (row["precision"], row["cache_dtype"]) == ("fp32", "float16")
        assert row["seconds"] > 0 and row["peak_rss_mb"] > 0
    assert any((store / "contextembed-cache").iterdir()), "the rows were encoded into the store under --cache-dir"
    assert table7.main(argv) == 0  # resumed: nothing left to measure
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert table7.main(rows_of) == 0  # the default precision and dtype: other rows
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4


def test_precision_reaches_the_transformer_only(table7, tiny_bert_dir, monkeypatch):
    """--precision reaches the transformer's TokenEmbedder only (static vectors have one);
    --cache-dir and --cache-dtype reach every one."""
    built = []
    original = table7.run_rows

    def spy(encoder, rows, *args, embedder_options=None, **kwargs):
        built.append((encoder, embedder_options))
        return original(encoder, rows, *args, embedder_options=embedder_options, **kwargs)

    monkeypatch.setattr(table7, "run_rows", spy)
    assert table7.main(["--model", str(tiny_bert_dir), "--taggers", "lr", "--rows", "embeddings", "vectors",
                        "--precision", "fp32", "--cache-gb", "0.01"]) == 0
    assert built == [("glove-6b-50d", {"cache": "memory", "cache_dtype": "float32"}),
                     (str(tiny_bert_dir), {"cache": "memory", "cache_dtype": "float32", "precision": "fp32"})]


def test_model_must_be_a_transformer(table7, tiny_elmo_dir, capsys):
    for option in ("--model", "--transformer"):  # --transformer: its older name, for --context runs
        with pytest.raises(SystemExit) as stopped:
            table7.main(["--context", "4", "--taggers", "lr", option, str(tiny_elmo_dir)])
        assert stopped.value.code == 2
        assert (f"--model {tiny_elmo_dir} is not a transformer (family: elmo): the Table 7 rows and document "
                "context take a transformer's layers" in capsys.readouterr().err)


@pytest.mark.parametrize("argv, message", [
    (["--model", "./somewhere"], "--model ./somewhere: './somewhere' does not exist"),
    (["--encoders", "minilm-l6", "--model", "./elsewhere"],
     "--encoders minilm-l6: the table's encoders are the --model transformer (./elsewhere) and glove-6b-50d"),
    (["--stack", "glove-6b-50d", "--taggers", "bilstm_crf"], "--stack and --char-dim apply to --context runs"),
    (["--context", "0", "--char-dim", "30", "--taggers", "lr"], "--stack and --char-dim apply to --context runs"),
])
def test_options_outside_their_runs_are_refused(table7, argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        table7.main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
