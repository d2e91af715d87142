"""What loads is what was saved: a model's fingerprint covers every file its loading reads.

The fingerprint binds fitted estimators and saved pipelines to their model. It used to hash the
files at the top of a model directory only, so replacing a distilled table's ``subwords/`` moved
a word's vector without any error.
"""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest

from contextembed import distill, load_encoder
from contextembed.encoders._identity import ModelIdentity, fingerprint, identify, locate
from contextembed.errors import ProvenanceError, ModelMismatchError
from contextembed._runtime.provenance import clear_hashes
from contextembed.sklearn import TokenEmbedder, clear_cache, clear_encoders

CORPUS = [["the", "cat", "sat"], ["the", "dog", "ran", "home"], ["a", "cat", "ran"]]
#: a word outside the distilled table: its vector comes from the subword pieces
UNSEEN = [["catdog"]]


@pytest.fixture(scope="module")
def tables(tiny_bert_dir, tmp_path_factory):
    """Two distilled tables with the same file names but other layers and pieces (static format 5
    keeps the piece vectors in the table and the pieces' ids and rows under ``subwords/``)."""
    teacher = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")
    root = tmp_path_factory.mktemp("tables")
    distill(teacher, root / "a", corpus=CORPUS, layers=[-1], subwords=True)
    distill(teacher, root / "b", corpus=CORPUS + [["dogs", "catnip", "homework"]], layers=[0], subwords=True)
    return root / "a", root / "b"


def _swap_subwords(source, target):
    """Replace ``target``'s ``subwords/`` by ``source``'s, keeping every top-level file as it was."""
    shutil.rmtree(target / "subwords")
    shutil.copytree(source / "subwords", target / "subwords")
    clear_hashes()


def test_a_distilled_table_has_files_in_a_subdirectory(tables):
    a, _ = tables
    assert (a / "subwords").is_dir() and any((a / "subwords").iterdir())


def test_replacing_a_subdirectory_changes_the_fingerprint(tables, tmp_path):
    a, b = tables
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    before = fingerprint(str(copy))
    assert before == fingerprint(str(a))  # content, not path
    _swap_subwords(b, copy)
    assert fingerprint(str(copy)) != before
    assert fingerprint(str(copy), scheme=1) == fingerprint(str(a), scheme=1)  # what the old rule saw


def test_a_fitted_estimator_refuses_a_model_whose_subwords_were_replaced(tables, tmp_path):
    a, b = tables
    copy = tmp_path / "model"
    shutil.copytree(a, copy)
    clear_cache(), clear_encoders()
    embedder = TokenEmbedder(str(copy)).fit(CORPUS)
    before = embedder.transform(UNSEEN)
    saved = pickle.dumps(embedder)
    _swap_subwords(b, copy)
    with pytest.raises(ProvenanceError, match="its files changed after it was saved"):  # the table's own record
        load_encoder(str(copy))
    clear_cache(), clear_encoders()
    with pytest.raises(ModelMismatchError, match="has other files"):
        pickle.loads(saved)
    _swap_subwords(a, copy)  # put the original back: it loads again, with the same vectors
    clear_cache(), clear_encoders()
    np.testing.assert_array_equal(pickle.loads(saved).transform(UNSEEN), before)


def test_documentation_and_hidden_files_at_any_depth_are_not_the_model(tables, tmp_path):
    a, _ = tables
    copy = tmp_path / "model"
    shutil.copytree(a, copy)
    before = fingerprint(str(copy))
    (copy / "subwords" / "README.md").write_text("notes")
    (copy / "subwords" / ".partial-leftover").write_bytes(b"x")
    (copy / "LICENSE").write_text("MIT")
    assert fingerprint(str(copy)) == before


def test_a_link_loop_inside_a_model_directory_ends(tables, tmp_path):
    a, _ = tables
    copy = tmp_path / "model"
    shutil.copytree(a, copy)
    before = fingerprint(str(copy))
    (copy / "subwords" / "loop").symlink_to("..")
    assert fingerprint(str(copy)) == before


def test_identities_record_their_scheme_and_old_ones_are_compared_by_their_own_rule(tables):
    a, _ = tables
    current = identify(str(a))
    assert current.scheme == 2 and ModelIdentity.from_dict(current.as_dict()) == current
    old = {"spec": str(a), "kind": "path", "location": str(a), "fingerprint": fingerprint(str(a), scheme=1)}
    assert locate(ModelIdentity.from_dict(old)) == str(a)  # saved before scheme 2: still loads
    with pytest.raises(ModelMismatchError, match="scheme 7"):
        ModelIdentity.from_dict({**old, "scheme": 7})
