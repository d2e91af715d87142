"""The engines carry one EmbedSettings: BatchEmbedder holds it (and ships it pickled), the Ray file
actor builds it once per job and hands that object to the check and to the writer."""

from __future__ import annotations

import os
import pickle

import pytest

from contextembed.encoders._registry import EncoderRef
from contextembed.engines import BatchEmbedder
from contextembed.io._settings import EmbedSettings


def test_a_batch_embedder_holds_checked_settings(tiny_vectors):
    embedder = BatchEmbedder(tiny_vectors, level="text", text_pooling="max", tokenizer="whitespace")
    assert embedder.settings == EmbedSettings(EncoderRef(os.path.abspath(tiny_vectors)), level="text",
                                              text_pooling="max", tokenizer="whitespace")
    assert pickle.loads(pickle.dumps(embedder)).settings == embedder.settings
    assert embedder.options["text_pooling"] == "max" and embedder.options["batch_tokens"] is None


def test_a_batch_embedder_refuses_a_text_option_at_word_level(tiny_vectors):
    """As embed_file does: a text pooling that word rows would ignore is an error, not dropped."""
    with pytest.raises(ValueError, match=r"text_pooling='max' \(--text-pooling\) shapes text vectors"):
        BatchEmbedder(tiny_vectors, text_pooling="max")


def test_a_file_actor_builds_the_settings_once_and_passes_them_down(tiny_vectors, tmp_path, monkeypatch):
    import contextembed.io._pipeline as pipeline
    from contextembed.engines.ray import FileActor

    source = tmp_path / "a.txt"
    source.write_text("the fox\n", encoding="utf-8")
    seen = []
    monkeypatch.setattr(pipeline, "embed_with", lambda settings, *args, **kwargs: seen.append((settings, kwargs)) or {})
    job = {"spec": tiny_vectors, "input": str(source), "output": str(tmp_path / "a.npz"), "overwrite": False,
           **EmbedSettings.from_keywords(tiny_vectors, dtype="float16").keywords()}
    FileActor(tiny_vectors, "auto", "auto")._embed(dict(job))
    settings, kwargs = seen[0]
    assert settings == EmbedSettings.from_keywords(tiny_vectors, dtype="float16")
    assert kwargs["overwrite"] is False and kwargs["show_progress"] is False


def test_ray_jobs_carry_the_settings_as_keywords(tiny_vectors, tmp_path, shipped_jobs):
    """What run_corpus_jobs ships is the settings' keywords, checked on the driver before any cluster."""
    from contextembed.engines import ray as ray_engine
    from contextembed.io._jobs import Job

    shipped = shipped_jobs
    jobs = [Job(str(tmp_path / "a.txt"), str(tmp_path / "a.npz"))]
    ray_engine.run_corpus_jobs(tiny_vectors, jobs, set(), overwrite=False, done=print, level="text", layers=[0])
    options = {k: v for k, v in shipped[0].items() if k not in ("spec", "input", "output", "overwrite")}
    assert EmbedSettings.from_keywords(shipped[0]["spec"], **options) == \
        EmbedSettings.from_keywords(os.path.abspath(tiny_vectors), level="text", layers=(0,))
    with pytest.raises(ValueError, match="dtype='float64'"):
        ray_engine.run_corpus_jobs(tiny_vectors, jobs, set(), overwrite=False, done=print, dtype="float64")
