"""``distill``: a contextual encoder reduced to static word vectors that load back as an encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _cli import call_cli
from contextembed import StaticVectors, distill, load_encoder
from contextembed._runtime import provenance
from contextembed.pretraining._distillation import DISTILLATION_FILE, middle_layers, whole_words
from contextembed.encoders import TableStorage
from contextembed.extraction import FeatureExtractor

CORPUS = [["the", "cat", "sat"], ["the", "dog", "ran", "home"], [], ["a", "cat", "ran"]]


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32")


def _reference(encoder, corpus, layers, combine, fold=lambda w: w):
    """Plain loop: every occurrence's pooled vector, averaged per word."""
    extractor = FeatureExtractor(encoder, layers=layers, combine=combine, subword_pooling="mean")
    vectors: dict[str, list] = {}
    for sentence in corpus:
        if not sentence:
            continue
        (words,) = extractor.words([sentence])
        for word, vector in zip(sentence, words):
            vectors.setdefault(fold(word), []).append(vector)
    return {word: np.mean(rows, axis=0) for word, rows in vectors.items()}


def _piece_reference(encoder, corpus, layers):
    """Plain loop: every piece occurrence's layers averaged (NumPy), averaged per piece id."""
    vectors: dict[int, list] = {}
    for sentence in corpus:
        if not sentence:
            continue
        (encoding,) = encoder.iter_encode_pieces([sentence], layers)
        (pieces,) = encoder.pieces([sentence])
        for piece_id, vector in zip(pieces.ids, encoding.hidden.mean(axis=0)):
            vectors.setdefault(int(piece_id), []).append(vector)
    return {piece_id: np.mean(rows, axis=0) for piece_id, rows in vectors.items()}


def test_corpus_mean_matches_a_plain_loop_and_loads_back(bert, tmp_path):
    student = distill(bert, tmp_path / "out", corpus=CORPUS, layers=[-2, -1], combine="mean", subwords=False)
    expected = _reference(bert, CORPUS, [-2, -1], "mean")
    assert sorted(student.words) == sorted(expected)
    for word, vector in expected.items():
        np.testing.assert_allclose(student.table[student.lookup(word)], vector, rtol=1e-5, atol=1e-6)
    loaded = load_encoder(tmp_path / "out")
    assert isinstance(loaded, StaticVectors) and loaded.width == bert.width and loaded.subwords is None
    np.testing.assert_array_equal(loaded.table, student.table)
    (cat,) = loaded.encode([["cat", "unseen"]])
    np.testing.assert_allclose(cat[0, 0], expected["cat"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cat[0, 1], student.table[:-1].mean(axis=0), rtol=1e-5)  # oov="mean"
    record = json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())
    assert record["source"] == "corpus" and record["words"] == len(expected) and record["occurrences"] == 10
    assert record["layers"] == [1, 2] and record["subword_pieces"] is None  # absolute layers of the tiny BERT


def test_default_layers_are_the_middle_two(bert, tmp_path):
    assert [middle_layers(n) for n in (1, 2, 3, 4, 7, 13)] == [[0], [0, 1], [1, 2], [1, 2], [3, 4], [6, 7]]
    distill(bert, tmp_path / "out", corpus=CORPUS)
    assert json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())["layers"] == middle_layers(bert.n_layers)


def test_out_of_vocabulary_words_take_their_pieces_mean(bert, tmp_path):
    student = distill(bert, tmp_path / "out", corpus=CORPUS, layers=[-2, -1], combine="mean")
    pieces = _piece_reference(bert, CORPUS, [-2, -1])
    assert sorted(student.subwords.ids.tolist()) == sorted(pieces)
    loaded = load_encoder(tmp_path / "out")
    np.testing.assert_array_equal(loaded.subwords.vectors, student.subwords.vectors)
    unseen = ["cats", "hometh", "sat"]  # two new words made of corpus pieces, one known word
    assert [student.is_oov(w) for w in unseen] == [True, True, False]
    (rows,) = loaded.encode([unseen])
    for i, word in enumerate(unseen[:2]):
        ids = bert.pieces([[word]])[0].ids
        known = [pieces[int(p)] for p in ids if int(p) in pieces]
        assert known, f"{word} shares no piece with the corpus"
        np.testing.assert_allclose(rows[0, i], np.mean(known, axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rows[0, 2], student.table[student.lookup("sat")])
    np.testing.assert_array_equal(student.encode([unseen])[0], rows)
    record = json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())
    assert record["subword_pieces"] == len(pieces)


def test_a_word_with_no_known_piece_takes_the_oov_vector(bert):
    student = distill(bert, corpus=[["the", "cat"]], layers=-1, oov="zeros")
    unknown, *_ = [w for w in ("dog", "ran", "home") if not set(bert.pieces([[w]])[0].ids) & set(student.subwords.ids)]
    assert student.is_oov(unknown)
    (rows,) = student.encode([["cat", unknown, "the"]])
    np.testing.assert_array_equal(rows[0, 1], np.zeros(bert.width))
    np.testing.assert_array_equal(rows[0, [0, 2]], student.table[[student.lookup("cat"), student.lookup("the")]])


def test_roberta_subwords_split_words_as_the_teacher_does(tiny_roberta_dir, tmp_path):
    roberta = load_encoder(tiny_roberta_dir, device="cpu", precision="fp32")
    distill(roberta, tmp_path / "out", corpus=CORPUS, layers=-1)
    loaded = load_encoder(tmp_path / "out")
    for word in ("cats", "homework", "dog"):
        np.testing.assert_array_equal(loaded.subwords.pieces([[word]])[0].ids, roberta.pieces([[word]])[0].ids)


def test_case_keep_gives_written_forms_and_a_pooled_lowercase_row(bert):
    corpus = [["Paris", "is", "big"], ["PARIS", "is"], ["Rome", "rome"]]
    student = distill(bert, corpus=corpus, layers=-1, subwords=False)
    assert student.words == ["Paris", "is", "big", "PARIS", "Rome", "rome", "paris"] and not student.lowercase
    expected = _reference(bert, corpus, -1, "mean")
    pooled = _reference(bert, corpus, -1, "mean", str.lower)["paris"]
    for word, vector in {**expected, "paris": pooled, "pArIs": pooled, "ROME": expected["rome"]}.items():
        np.testing.assert_allclose(student.table[student.lookup(word)], vector, rtol=1e-5, atol=1e-6)
    frequent = distill(bert, corpus=corpus, layers=-1, subwords=False, min_count=2)
    # every Paris form and "rome" occur once (dropped); pooled, "paris" and "rome" occur twice
    assert frequent.words == ["is", "paris", "rome"]
    np.testing.assert_allclose(frequent.table[frequent.lookup("Rome")], _reference(bert, corpus, -1, "mean", str.lower)["rome"],
                               rtol=1e-5, atol=1e-6)


def test_case_fold_lowercases_every_word(minilm):
    student = distill(minilm, corpus=[["Paris", "is", "big"], ["paris", "PARIS"]], layers=-1, case="fold")
    assert sorted(student.words) == ["big", "is", "paris"] and student.lowercase
    expected = _reference(minilm, [["Paris", "is", "big"], ["paris", "PARIS"]], -1, "mean", str.lower)
    np.testing.assert_allclose(student.table[student.lookup("Paris")], expected["paris"], rtol=1e-5, atol=1e-5)


def test_concat_layers_and_min_count(bert):
    student = distill(bert, corpus=CORPUS, layers=[-2, -1], combine="concat", min_count=2)
    assert sorted(student.words) == ["cat", "ran", "the"]
    assert student.width == 2 * bert.width
    expected = _reference(bert, CORPUS, [-2, -1], "concat")
    np.testing.assert_allclose(student.table[student.lookup("ran")], expected["ran"], rtol=1e-5, atol=1e-6)
    assert student.is_oov("dog")


def test_vocabulary_mode_encodes_whole_words_alone(bert):
    words = whole_words(bert)
    assert words and all(bert.pieces([[w]])[0].n_pieces == 1 for w in words)
    assert not any(w.startswith("##") or w in ("[CLS]", "[SEP]", "[PAD]") for w in words)
    student = distill(bert, layers=-1, dim=None, weighting="none")
    assert student.words == words
    (alone,) = FeatureExtractor(bert, layers=-1, combine="mean", subword_pooling="mean").words([[words[5]]])
    np.testing.assert_allclose(student.table[5], alone[0], rtol=1e-5, atol=1e-6)


def test_roberta_vocabulary_strips_the_space_marker(tiny_roberta_dir):
    roberta = load_encoder(tiny_roberta_dir, device="cpu", precision="fp32")
    words = whole_words(roberta)
    assert words and not any("Ġ" in w for w in words)


def test_vocabulary_mode_keeps_the_whole_words_as_pieces(bert):
    student = distill(bert, layers=-1, dim=None, weighting="none")
    ids = [int(bert.pieces([[w]])[0].ids[0]) for w in student.words]
    assert student.subwords.ids.tolist() == ids
    np.testing.assert_array_equal(student.subwords.vectors, student.table[:-1])


@pytest.mark.parametrize("storage", [None, TableStorage("int8")], ids=str)
def test_a_vocabulary_table_stores_each_vector_once(bert, storage, tmp_path):
    """The pieces are the words, after PCA and SIF too: format 5 stores no piece row of its own."""
    from safetensors.numpy import load_file

    student = distill(bert, tmp_path / "s", storage=storage)  # the defaults: PCA (centred) and SIF
    np.testing.assert_array_equal(student.subwords.vectors, student.table[:-1])
    options = json.loads((tmp_path / "s" / "contextembed_static.json").read_text())
    assert options["format_version"] == 5 and options["piece_rows"] == 0
    assert len(load_file(tmp_path / "s" / "vectors.safetensors")["vectors"]) == len(student.words)
    loaded = load_encoder(tmp_path / "s")
    np.testing.assert_array_equal(loaded.subwords.vectors, loaded.table[:-1])


def test_pca_reduces_to_dim_and_projects_the_pieces_alike(bert):
    from sklearn.decomposition import PCA

    full = distill(bert, corpus=CORPUS * 3, layers=[-2, -1], combine="concat")
    student = distill(bert, corpus=CORPUS * 3, layers=[-2, -1], combine="concat", dim=4)
    assert student.width == student.subwords.width == 4
    table = student.table[:-1]
    np.testing.assert_allclose(table.mean(axis=0), 0, atol=1e-5)  # PCA centres
    pca = PCA(n_components=4, random_state=0).fit(full.table[:-1])
    np.testing.assert_allclose(student.subwords.vectors, pca.transform(full.subwords.vectors), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"corpus": []}, ValueError, "no words"),
        ({"corpus": [[], []]}, ValueError, "no words"),
        ({"corpus": CORPUS, "min_count": 5}, ValueError, "min_count=5"),
        ({"corpus": CORPUS, "dim": 33}, ValueError, "dim=33 is wider"),
        ({"corpus": CORPUS, "dim": 20}, ValueError, "dim=20 needs at least 20 words"),
        ({"corpus": CORPUS, "dim": 0}, ValueError, "dim must be a positive int"),
        ({"corpus": CORPUS, "min_count": 0}, ValueError, "min_count"),
        ({"corpus": CORPUS, "oov": "random"}, ValueError, "oov='random'"),
        ({"corpus": ["the cat sat"]}, TypeError, "corpus sentence 0 is a str"),
        ({"corpus": [["a"]] * 1500 + [["b", None]]}, TypeError, "corpus sentence 1500, word 1 is NoneType"),
        ({"corpus": CORPUS, "combine": "average"}, ValueError, "average"),
        ({"corpus": CORPUS, "case": "lower"}, ValueError, "case='lower'"),
        ({"corpus": CORPUS, "subwords": "yes"}, ValueError, "subwords must be True, False or None, got 'yes'"),
        ({"min_count": 2}, ValueError, "min_count=2 counts corpus occurrences"),
    ],
)
def test_bad_input(bert, options, error, message):
    with pytest.raises(error, match=message):
        distill(bert, **options)


def test_static_and_elmo_teachers(tiny_elmo_dir):
    with pytest.raises(ValueError, match="static vectors already"):
        distill(StaticVectors(["a", "b"], np.eye(2)), corpus=CORPUS)
    elmo = load_encoder(tiny_elmo_dir, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="no piece vocabulary.*pass a corpus"):
        distill(elmo)
    student = distill(elmo, corpus=CORPUS)
    assert student.width == elmo.width and "dog" in student.words and student.subwords is None
    with pytest.raises(ValueError, match=r"\(elmo\) has no fast piece tokenizer.*subwords=False"):
        distill(elmo, corpus=CORPUS, subwords=True)


def test_existing_output_is_kept(bert, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        distill(bert, out, corpus=CORPUS)
    assert (out / "mine.txt").read_text() == "keep"
    distill(bert, out, corpus=CORPUS, overwrite=True)
    assert not (out / "mine.txt").exists() and load_encoder(out).vocab_size == 7


def test_cli(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\nthe dog ran home\n\na cat ran\n", encoding="utf-8")
    out = tmp_path / "student"
    result = call_cli(["distill", str(tiny_bert_dir), str(out), "--corpus", str(corpus), "--layers=-2,-1",
                       "--dim", "3", "--precision", "fp32", "--quiet"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"output": str(out), "words": 7, "dim": 3,
                                                                  "backend": "torch", "precision": "fp32"}
    assert load_encoder(out).width == 3 and load_encoder(out).subwords.width == 3
    folded = call_cli(["distill", str(tiny_bert_dir), str(tmp_path / "folded"), "--corpus", str(corpus),
                       "--case", "fold", "--no-subwords", "--precision", "fp32", "--quiet"])
    assert folded.returncode == 0, folded.stderr
    record = json.loads((tmp_path / "folded" / DISTILLATION_FILE).read_text())
    assert record["case"] == "fold" and record["subword_pieces"] is None and load_encoder(tmp_path / "folded").lowercase
    again = call_cli(["distill", str(tiny_bert_dir), str(out), "--corpus", str(corpus), "--quiet"])
    assert again.returncode == 2 and "already exists" in again.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    failed = call_cli(["distill", str(tiny_bert_dir), str(tmp_path / "other"), "--corpus", str(empty), "--quiet"])
    assert failed.returncode == 2 and "no words" in failed.stderr and not (tmp_path / "other").exists()


def _tree(folder):
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


@pytest.fixture
def teacher(tiny_bert_dir, tmp_path):
    """A copy of the tiny BERT (a test that fails must not damage the session's fixture)."""
    import shutil

    copy = tmp_path / "models" / "bert"
    shutil.copytree(tiny_bert_dir, copy)
    return copy


@pytest.mark.parametrize(("where", "relation"), [
    (lambda teacher: teacher, "is"),
    (lambda teacher: teacher / "student", "lies inside"),
    (lambda teacher: teacher.parent, "contains"),
    (lambda teacher: teacher.parent / "link", "is"),  # a link to the teacher's directory
])
@pytest.mark.parametrize("given", ["spec", "encoder"])
def test_output_on_the_teacher_is_refused_and_the_teacher_kept(teacher, where, relation, given):
    (teacher.parent / "link").symlink_to(teacher, target_is_directory=True)
    out = where(teacher)
    before = _tree(teacher.parent)
    spec = str(teacher) if given == "spec" else load_encoder(teacher, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match=rf"distilled encoder directory {out} \(.*\) {relation} the teacher "
                       rf".*{teacher.name}.*; writing there would replace or mix with it"):
        distill(spec, out, corpus=CORPUS, overwrite=True)
    assert _tree(teacher.parent) == before


def test_cli_refuses_the_teacher_as_output_before_any_work(teacher, tmp_path, capsys):
    from contextembed.cli import main

    before = _tree(teacher)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\n", encoding="utf-8")
    for out in (teacher, teacher / "sub"):
        assert main(["distill", str(teacher), str(out), "--corpus", str(corpus), "--overwrite", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"distilled encoder directory {out} (" in err and str(teacher.resolve()) in err
    assert _tree(teacher) == before


def test_the_distilled_directory_records_its_provenance(teacher, tmp_path):
    from contextembed.encoders._identity import identify

    distill(str(teacher), tmp_path / "a", corpus=CORPUS, layers=[-1], subwords=False)
    record = provenance.read(tmp_path / "a" / DISTILLATION_FILE)
    assert record["artifact"] == "distilled static vectors" and record["format"] == provenance.FORMAT_VERSION
    assert record["teacher_fingerprint"] == identify(str(teacher)).fingerprint
    assert record["layers"] == [2] and record["subwords"] is False and record["oov"] == "mean"
    # the corpus is recorded by content: another corpus, another hash; the same corpus, the same record
    distill(str(teacher), tmp_path / "b", corpus=CORPUS[:-1], layers=[-1], subwords=False)
    distill(str(teacher), tmp_path / "c", corpus=[list(s) for s in CORPUS], layers=[-1], subwords=False)
    other, same = (provenance.read(tmp_path / name / DISTILLATION_FILE) for name in ("b", "c"))
    assert other["corpus_hash"] != record["corpus_hash"] and same == record
    assert load_encoder(tmp_path / "a").vocab_size == 7


def test_a_teacher_spec_runs_on_the_backend_asked_and_the_record_says_so(tiny_bert_dir, bert, tmp_path, monkeypatch):
    pytest.importorskip("openvino", reason='backend="openvino" needs pip install ".[openvino]"')
    monkeypatch.setenv("CONTEXTEMBED_AUTO_CPU_PRECISION", "fp32")  # precision="auto" on the engine: fp32
    student = distill(str(tiny_bert_dir), tmp_path / "engine", corpus=CORPUS, layers=[-1], backend="openvino")
    record = json.loads((tmp_path / "engine" / DISTILLATION_FILE).read_text())
    assert (record["teacher_backend"], record["teacher_precision"]) == ("openvino", "fp32")
    on_torch = distill(bert, tmp_path / "torch", corpus=CORPUS, layers=[-1])
    assert json.loads((tmp_path / "torch" / DISTILLATION_FILE).read_text())["teacher_backend"] == "torch"
    np.testing.assert_allclose(student.table, on_torch.table, atol=1e-4)


def test_a_backend_with_a_loaded_teacher_is_refused(bert, tmp_path):
    with pytest.raises(ValueError, match="backend='openvino' applies to a teacher given as a spec; the loaded "
                                         "teacher already runs on backend 'torch'"):
        distill(bert, tmp_path / "out", corpus=CORPUS, backend="openvino")
    assert not (tmp_path / "out").exists()


def test_distill_command_takes_the_backend(tiny_bert_dir, tmp_path):
    pytest.importorskip("openvino", reason='--backend openvino needs pip install ".[openvino]"')
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\nthe dog ran home\n", encoding="utf-8")
    result = call_cli(["distill", str(tiny_bert_dir), str(tmp_path / "out"), "--corpus", str(corpus), "--quiet",
                       "--device", "cpu", "--precision", "fp32", "--backend", "openvino"])
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["backend"], summary["precision"]) == ("openvino", "fp32")
    assert json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())["teacher_backend"] == "openvino"
