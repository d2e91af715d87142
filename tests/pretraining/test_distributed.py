"""Two CPU processes under torchrun (gloo): gradients are synchronised, only rank 0 writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import contextembed.pretraining._bilm as bilm
    import contextembed.pretraining._mlm as mlm
    import contextembed.pretraining._outline as outline
    from contextembed.pretraining import BiLMConfig, MLMConfig, TrainingOptions

    objective, corpus, out, size, report = sys.argv[1:6]
    captured = {}
    original = outline.train  # the training loop every neural recipe runs

    def spy(model, *args, **kwargs):
        captured["before"] = [p.detach().clone() for p in model.parameters()]
        result = original(model, *args, **kwargs)
        captured["after"] = [p.detach().clone() for p in model.parameters()]
        return result

    outline.train = spy
    if objective == "mlm":
        config = MLMConfig(size=size, vocab_size=120, max_length=32, min_frequency=1, nsp=True)
    else:
        config = BiLMConfig(size="tiny", n_layers=1, min_count=1, dropout=0.0)
    options = TrainingOptions(max_steps=3, batch_size=4, grad_accumulation=2, learning_rate=1e-3, log_every=1,
                              checkpoint_every=2, device="cpu", show_progress=False, held_out_fraction=0.2)
    summary = (mlm.pretrain_mlm if objective == "mlm" else bilm.pretrain_bilm)(corpus, out, config, options)
    rank = os.environ["RANK"]
    record = {
        "world_size": int(os.environ["WORLD_SIZE"]),
        "checksum": [float(p.double().sum()) for p in captured["after"]],
        "changed": max(float((a - b).abs().max()) for a, b in zip(captured["after"], captured["before"])),
        "held_out": summary["held_out"],
    }
    with open(f"{report}.{rank}", "w") as handle:
        json.dump(record, handle)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "bilm"])
def test_under_torchrun_with_two_cpu_processes(tmp_path, corpus_file, tiny_size, objective):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out, report = tmp_path / "out", tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), objective, str(corpus_file), str(out), tiny_size, str(report)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads(Path(f"{report}.{rank}").read_text()) for rank in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    # the processes saw different data but hold identical weights: gradients were all-reduced
    assert ranks[0]["changed"] > 0
    assert ranks[0]["checksum"] == ranks[1]["checksum"]
    # held-out statistics are summed over both processes, so both report the same numbers
    assert ranks[0]["held_out"] == ranks[1]["held_out"]
    # rank 0 alone wrote the log (one record per step, no duplicates) and the model
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 3]
    from contextembed import load_encoder

    assert load_encoder(str(out), device="cpu").n_layers == 2  # BERT: embeddings + 1 layer; ELMo: token + 1
