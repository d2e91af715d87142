from __future__ import annotations

import json

import pytest
import torch

from contextembed.pretraining import MLMConfig, TrainingOptions, pretrain_mlm
from contextembed.pretraining._training import linear_schedule, summarize

from .conftest import tiny_training


def test_linear_schedule_warms_up_then_decays_to_zero():
    factors = [linear_schedule(step, 4, 20) for step in range(21)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[12] == pytest.approx(0.5) and factors[20] == 0.0
    assert all(a >= b for a, b in zip(factors[3:], factors[4:]))


def test_summarize_turns_sums_and_counts_into_ratios():
    assert summarize({"acc_sum": 3.0, "acc_count": 4, "tokens": 10.0, "none_sum": 1.0}) == {"acc": 0.75, "tokens": 10.0}


def test_training_option_errors():
    with pytest.raises(ValueError, match="max_steps=0"):
        TrainingOptions(max_steps=0)
    with pytest.raises(ValueError, match="precision='fp8'"):
        TrainingOptions(precision="fp8")
    with pytest.raises(ValueError, match="warmup_steps=50"):
        TrainingOptions(max_steps=10, warmup_steps=50)


def test_every_precision_has_a_dtype():
    from typing import get_args

    from contextembed._runtime.devices import PRECISIONS
    from contextembed.pretraining._training import TrainingPrecision

    assert set(get_args(TrainingPrecision)) <= set(PRECISIONS)


@pytest.mark.slow
def test_bf16_autocast_and_gradient_accumulation(tmp_path, corpus_file, tiny_size):
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1)
    single = pretrain_mlm(corpus_file, tmp_path / "a", config,
                          tiny_training(max_steps=2, log_every=1, held_out_fraction=0.0))
    accumulated = pretrain_mlm(corpus_file, tmp_path / "b", config,
                               tiny_training(max_steps=2, log_every=1, grad_accumulation=3, precision="bf16",
                                             held_out_fraction=0.0))
    assert single["held_out"] is None and accumulated["steps"] == 2
    records = [json.loads(line) for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    first = [json.loads(line) for line in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    # three micro-batches of 8 sequences per step instead of one
    assert 2.0 < records[0]["tokens"] / first[0]["tokens"] < 4.0
    assert records[0]["mlm_loss"] == pytest.approx(first[0]["mlm_loss"], rel=0.2)
    assert all(r["loss"] == r["loss"] for r in records)  # finite, not NaN


def test_fp16_autocast_with_gradient_scaler(tmp_path, corpus_file, tiny_size):
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1)
    summary = pretrain_mlm(corpus_file, tmp_path / "fp16", config,
                           tiny_training(max_steps=2, precision="fp16", held_out_fraction=0.2))
    assert summary["steps"] == 2 and summary["held_out"]["mlm_loss"] == summary["held_out"]["mlm_loss"]
    state = torch.load(tmp_path / "fp16" / "checkpoints" / "step-00000002.pt", weights_only=True)
    assert state["scaler"]  # the scaler's state is checkpointed for --resume
