"""A resumed ``contextembed embed DIR OUT`` never keeps an output that this run would not write.

Every output records its provenance (input content hash, model fingerprint, every option that
changes the features, its own content hash; ``.npz``: an entry, ``.npy``: a record beside it). A
rerun after the input, the model or an option changed, or over an output whose record is missing,
forged, or whose content was edited or cut, is refused naming the output, the field and
``--overwrite``; an unchanged rerun skips everything and touches nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import numpy as np
import pytest

from contextembed._runtime import provenance
from contextembed.cli import main
from contextembed.corpus import Job, embed_corpus
from contextembed.encoders import write_word2vec
from contextembed.errors import FileFormatError, ProvenanceError

WORDS = "the quick brown fox jumps over lazy dog".split()


def _vectors(path, width: int, seed: int = 0) -> str:
    write_word2vec(path, WORDS, np.random.default_rng(seed).normal(size=(len(WORDS), width)).astype(np.float32))
    return str(path)


@pytest.fixture
def setup(tmp_path):
    """8-wide vectors, a corpus of two files, and its outputs from a first run (``.npz``)."""
    vectors = _vectors(tmp_path / "v8.txt", 8)
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("the quick fox\nlazy dog\n", encoding="utf-8")
    (corpus / "sub" / "b.txt").write_text("over the dog\n", encoding="utf-8")
    out = tmp_path / "out"
    assert embed_corpus(vectors, str(corpus), str(out), show_progress=False)["embedded"] == 2
    return vectors, corpus, out


def _rerun(vectors, corpus, out, **options):
    return embed_corpus(vectors, str(corpus), str(out), show_progress=False, **options)


def _snapshot(folder) -> dict:
    return {path: (os.stat(path).st_mtime_ns, open(path, "rb").read())
            for path in sorted(str(p) for p in folder.rglob("*") if p.is_file())}


def test_an_unchanged_rerun_skips_everything_and_touches_nothing(setup):
    vectors, corpus, out = setup
    before = _snapshot(out)
    assert _rerun(vectors, corpus, out) == {"files": 2, "embedded": 0, "skipped": 2, "backend": None, "precision": None,
                                            "outputs": [str(out / "a.npz"), str(out / "sub" / "b.npz")]}
    assert _snapshot(out) == before


def test_an_input_edited_with_the_same_token_count_is_refused_then_redone(setup):
    vectors, corpus, out = setup
    old = np.load(out / "a.npz")["features"]
    (corpus / "a.txt").write_text("the brown fox\nlazy dog\n", encoding="utf-8")  # same tokens, same bytes
    os.utime(corpus / "a.txt", ns=(1, 1))  # even with the old size and an unusual mtime
    with pytest.raises(ProvenanceError, match=r"output .*a\.npz \(of input .*a\.txt\) was made with input='.*', but "
                       r"this run has input='.*' \(the input's text changed since\); pass --overwrite") as caught:
        _rerun(vectors, corpus, out)
    assert caught.value.field == "input" and caught.value.artifact.startswith(f"output {out / 'a.npz'}")
    assert _rerun(vectors, corpus, out, overwrite=True)["embedded"] == 2
    assert not np.array_equal(np.load(out / "a.npz")["features"][1], old[1])  # "brown", not "quick"


@pytest.mark.parametrize("options, field", [
    ({"spec": "v16"}, "model"),              # another model, twice as wide
    ({"spec": "v8-other"}, "model"),         # same width and words, other vectors
    ({"dtype": "float16"}, "dtype"),
    ({"level": "text"}, "level"),
    ({"tokenizer": "regex"}, "tokenizer"),
    ({"input_format": "conll"}, "input_format"),
    ({"subword_pooling": "first_last"}, "subword_pooling"),
], ids=lambda value: str(value))
def test_a_rerun_with_another_model_or_option_is_refused(setup, tmp_path, options, field):
    vectors, corpus, out = setup
    specs = {"v16": lambda: _vectors(tmp_path / "v16.txt", 16), "v8-other": lambda: _vectors(tmp_path / "o.txt", 8, 1)}
    spec = specs[options.pop("spec")]() if "spec" in options else vectors
    before = _snapshot(out)
    with pytest.raises(ProvenanceError, match=rf"a\.npz \(of input .*\) was made with {field}=.*pass --overwrite") \
            as caught:
        _rerun(spec, corpus, out, **options)
    assert caught.value.field == field
    assert _snapshot(out) == before  # refused before anything was written


@pytest.mark.parametrize("options, field", [
    ({"layers": -1}, "layers"),
    ({"combine": "mean"}, "combine"),
    ({"precision": "bf16"}, "precision"),
], ids=lambda value: str(value))
def test_a_transformer_rerun_with_other_layers_combine_or_precision_is_refused(tiny_bert_dir, tmp_path, options,
                                                                                field):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the quick fox\n", encoding="utf-8")
    base = {"precision": "fp32", "device": "cpu"}
    embed_corpus(str(tiny_bert_dir), str(corpus), str(tmp_path / "out"), show_progress=False, **base)
    assert _rerun(str(tiny_bert_dir), corpus, tmp_path / "out", **base)["skipped"] == 1
    with pytest.raises(ProvenanceError, match=rf"was made with {field}=") as caught:
        _rerun(str(tiny_bert_dir), corpus, tmp_path / "out", **{**base, **options})
    assert caught.value.field == field


def _rewrite_npz(path, **entries) -> None:
    """Write ``path`` again with ``entries`` (arrays, or ``None`` to leave one out), the others as they were."""
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays.update(entries)
    np.savez(path, **{name: array for name, array in arrays.items() if array is not None})


def test_an_output_without_a_record_is_refused_never_skipped(setup):
    vectors, corpus, out = setup
    _rewrite_npz(out / "a.npz", provenance=None)  # as an older contextembed wrote it
    with pytest.raises(ProvenanceError, match=r"a\.npz \(of input .*\) records no provenance .*pass --overwrite") \
            as caught:
        _rerun(vectors, corpus, out)
    assert caught.value.field is None


def test_a_record_copied_from_another_input_is_refused(setup):
    vectors, corpus, out = setup
    with np.load(out / "sub" / "b.npz") as other:
        _rewrite_npz(out / "a.npz", provenance=other["provenance"])
    with pytest.raises(ProvenanceError, match=r"a\.npz \(of input .*a\.txt\) was made with input=") as caught:
        _rerun(vectors, corpus, out)
    assert caught.value.field == "input"
    shutil.copyfile(out / "sub" / "b.npz", out / "a.npz")  # the whole output of another input
    with pytest.raises(ProvenanceError, match="was made with input="):
        _rerun(vectors, corpus, out)


def test_a_damaged_or_pickled_record_is_refused(setup):
    vectors, corpus, out = setup
    _rewrite_npz(out / "a.npz", provenance=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(ProvenanceError, match="a.npz .* has a damaged provenance record"):
        _rerun(vectors, corpus, out)
    with np.load(out / "sub" / "b.npz") as archive:
        arrays = dict(archive)
    np.savez(out / "a.npz", **{**arrays, "provenance": np.array([{"artifact": "embedding output"}], dtype=object)})
    with pytest.raises(ProvenanceError, match="damaged provenance record"):  # never unpickled
        _rerun(vectors, corpus, out)


def test_features_edited_after_writing_are_refused(setup):
    vectors, corpus, out = setup
    with np.load(out / "a.npz") as archive:
        features, lengths = archive["features"], archive["lengths"]
    edited = features.copy()
    edited[2, 0] += 1.0
    _rewrite_npz(out / "a.npz", features=edited)  # same shape, same record
    with pytest.raises(ProvenanceError, match=r"a\.npz .* holds other features than were written.*changed after it "
                       r"was written; pass --overwrite") as caught:
        _rerun(vectors, corpus, out)
    assert caught.value.field == "content"
    _rewrite_npz(out / "a.npz", features=features, lengths=lengths[::-1].copy())  # [3, 2] -> [2, 3]: same sum
    with pytest.raises(ProvenanceError, match="holds other 'lengths' than were written"):
        _rerun(vectors, corpus, out)
    _rewrite_npz(out / "a.npz", lengths=lengths)  # everything as written (by np.savez this time)
    assert _rerun(vectors, corpus, out)["skipped"] == 2


def test_bytes_flipped_in_place_or_a_cut_output_are_refused(setup):
    vectors, corpus, out = setup
    data = bytearray((out / "a.npz").read_bytes())
    with zipfile.ZipFile(out / "a.npz") as archive:
        info = archive.getinfo("features.npy")
    offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200  # inside the features' data
    data[offset] ^= 0xFF
    (out / "a.npz").write_bytes(bytes(data))
    with pytest.raises((ProvenanceError, FileFormatError), match=r"a\.npz.*(Bad CRC|changed after it was written)"):
        _rerun(vectors, corpus, out)  # the zip entry's CRC or the recorded hash, whichever is read first
    (out / "a.npz").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(FileFormatError, match=r"a\.npz: not a contextembed output.*cannot be reused: pass --overwrite"):
        _rerun(vectors, corpus, out)


@pytest.fixture
def npy_setup(tmp_path):
    vectors = _vectors(tmp_path / "v8.txt", 8)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the quick fox\nlazy dog\n", encoding="utf-8")
    out = tmp_path / "out"
    embed_corpus(vectors, str(corpus), str(out), output_format="npy", show_progress=False)
    assert sorted(os.listdir(out)) == ["a.npy", "a.npy.provenance.json"]
    return vectors, corpus, out


def test_an_npy_output_whose_record_was_deleted_is_refused(npy_setup):
    vectors, corpus, out = npy_setup
    assert _rerun(vectors, corpus, out, output_format="npy")["skipped"] == 1
    (out / "a.npy.provenance.json").unlink()
    with pytest.raises(ProvenanceError, match=r"a\.npy \(of input .*\) records no provenance"):
        _rerun(vectors, corpus, out, output_format="npy")


def test_an_npy_output_saved_again_or_cut_beside_its_record_is_refused(npy_setup):
    vectors, corpus, out = npy_setup
    features = np.load(out / "a.npy")
    np.save(out / "a.npy", features * 2)  # e.g. normalised in place by a user: the record beside it stays
    with pytest.raises(ProvenanceError, match=r"a\.npy .*holds other features than were written"):
        _rerun(vectors, corpus, out, output_format="npy")
    np.save(out / "a.npy", features)
    assert _rerun(vectors, corpus, out, output_format="npy")["skipped"] == 1  # the same bytes again: fine
    with open(out / "a.npy", "ab") as handle:
        handle.write(b"\0" * 8)  # bytes appended
    with pytest.raises(ProvenanceError, match="holds other features"):
        _rerun(vectors, corpus, out, output_format="npy")
    (out / "a.npy").write_bytes((out / "a.npy").read_bytes()[:-40])  # cut
    with pytest.raises(FileFormatError, match="cannot be reused"):
        _rerun(vectors, corpus, out, output_format="npy")


@pytest.mark.parametrize("text, reason", [
    ('{"artifact": ' * 1500 + '"x"' + "}" * 1500, "nested 1500 levels deep"),
    ("[" * 1500 + "]" * 1500, "nested 1500 levels deep"),
    ('{"artifact": "embedding output", "format": 1, "rows": NaN}', "holds NaN"),
    (" " * (provenance.MAX_RECORD_BYTES + 1), "larger than"),
], ids=["deep-object", "deep-array", "nan", "huge"])
def test_a_resumed_run_over_a_damaged_npy_record_names_it(npy_setup, text, reason):
    """A record nested 1,500 deep made the resumed run raise RecursionError (issue 53, item 4)."""
    vectors, corpus, out = npy_setup
    (out / "a.npy.provenance.json").write_text(text)
    with pytest.raises(ProvenanceError, match=rf"a\.npy .*damaged provenance record \({reason}") as caught:
        _rerun(vectors, corpus, out, output_format="npy")
    assert caught.value.field is None and "a.npy" in caught.value.artifact


def test_an_orphan_npy_record_is_replaced_by_the_next_write(npy_setup):
    vectors, corpus, out = npy_setup
    (out / "a.npy").unlink()
    (out / "a.npy.provenance.json").write_text('{"artifact": "something else"}')
    assert _rerun(vectors, corpus, out, output_format="npy")["embedded"] == 1
    assert json.loads((out / "a.npy.provenance.json").read_text())["artifact"] == "embedding output"
    assert _rerun(vectors, corpus, out, output_format="npy")["skipped"] == 1


def _interrupt_at_rename_of(monkeypatch, suffix: str) -> None:
    """Ctrl-C just before the rename of a file ending in ``suffix`` (after its temporary is written)."""
    import contextembed._runtime.files as files

    real = os.replace

    def replace(source, target):
        if str(target).endswith(suffix):
            raise KeyboardInterrupt
        return real(source, target)

    monkeypatch.setattr(files.os, "replace", replace)


def test_ctrl_c_between_the_record_and_the_npy_leaves_neither(npy_setup, monkeypatch):
    vectors, corpus, out = npy_setup
    shutil.rmtree(out)
    _interrupt_at_rename_of(monkeypatch, ".npy")  # the record beside it is already in place
    with pytest.raises(KeyboardInterrupt):
        _rerun(vectors, corpus, out, output_format="npy")
    assert os.listdir(out) == []  # no output, no orphan record, no temporary
    monkeypatch.undo()
    assert _rerun(vectors, corpus, out, output_format="npy")["embedded"] == 1


def test_ctrl_c_while_overwriting_keeps_the_old_npy_and_its_record(npy_setup, monkeypatch):
    vectors, corpus, out = npy_setup
    before = _snapshot(out)
    _interrupt_at_rename_of(monkeypatch, ".npy")
    with pytest.raises(KeyboardInterrupt):
        _rerun(vectors, corpus, out, output_format="npy", dtype="float16", overwrite=True)
    monkeypatch.undo()
    assert {path: data for path, (_, data) in _snapshot(out).items()} == {p: d for p, (_, d) in before.items()}
    assert _rerun(vectors, corpus, out, output_format="npy")["skipped"] == 1  # the old output, still consistent
    with pytest.raises(ProvenanceError, match="dtype"):
        _rerun(vectors, corpus, out, output_format="npy", dtype="float16")


def test_a_record_newer_than_its_npy_is_refused(npy_setup):
    """What a hard kill between the two renames leaves: the old output beside the new run's record."""
    vectors, corpus, out = npy_setup
    old = (out / "a.npy").read_bytes()
    _rerun(vectors, corpus, out, output_format="npy", overwrite=True, dtype="float16")
    (out / "a.npy").write_bytes(old)  # the float32 output, the float16 record
    with pytest.raises(ProvenanceError, match="changed after it was written"):
        _rerun(vectors, corpus, out, output_format="npy", dtype="float16")
    with pytest.raises(ProvenanceError, match="dtype"):
        _rerun(vectors, corpus, out, output_format="npy")


def test_the_cli_refuses_a_stale_output_and_redoes_it_with_overwrite(setup, tmp_path, capsys):
    vectors, corpus, out = setup
    other = _vectors(tmp_path / "v16.txt", 16)
    assert main(["embed", other, str(corpus), str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "contextembed embed: error: output" in err and "was made with model=" in err and "--overwrite" in err
    assert np.load(out / "a.npz")["features"].shape == (5, 8)
    assert main(["embed", other, str(corpus), str(out), "--quiet", "--overwrite"]) == 0
    assert np.load(out / "a.npz")["features"].shape == (5, 16)
    assert main(["embed", other, str(corpus), str(out), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 2  # the summary: stdout


def test_a_ray_actor_checks_an_existing_output_with_its_own_encoder(setup, tmp_path):
    """The file actor of ``--engine ray`` (run here without a cluster) keeps or refuses as the local engine does."""
    from contextembed.engines.ray import FileActor

    vectors, corpus, out = setup
    job = {"spec": vectors, "input": str(corpus / "a.txt"), "output": str(out / "a.npz"), "overwrite": False}
    assert FileActor(vectors, "auto", "auto")._embed(dict(job)) == {"output": str(out / "a.npz"), "skipped": True}
    with pytest.raises(ProvenanceError, match="was made with dtype="):
        FileActor(vectors, "auto", "auto")._embed({**job, "dtype": "float16"})
    other = _vectors(tmp_path / "v16.txt", 16)
    with pytest.raises(ProvenanceError, match="was made with model="):
        FileActor(other, "auto", "auto")._embed({**job, "spec": other})
    provenance.clear_hashes()
    (corpus / "a.txt").write_text("the brown fox\nlazy dog\n", encoding="utf-8")
    with pytest.raises(ProvenanceError, match="was made with input="):
        FileActor(vectors, "auto", "auto")._embed(dict(job))


def test_check_complete_takes_embed_file_options_only(setup):
    from contextembed.corpus import check_complete
    from contextembed.encoders import load_encoder

    vectors, corpus, out = setup
    encoder = load_encoder(vectors)
    check_complete(Job(str(corpus / "a.txt"), str(out / "a.npz")), encoder=encoder, chunk_sentences=7)
    with pytest.raises(TypeError, match="dtypes"):
        check_complete(Job(str(corpus / "a.txt"), str(out / "a.npz")), encoder=encoder, dtypes="float16")
