"""Entry points let ``spacy train`` / ``spacy.load`` find the component without an import."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import socket_guard

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "spacy_factories": {"contextembed": "make_contextembed"},
    "spacy_architectures": {"contextembed.Listener.v1": "listener_v1", "contextembed.Listener.v2": "listener_v2"},
    "spacy_layers": {"contextembed.ScalarMix.v1": "scalar_mix_v1", "contextembed.ConcatLayers.v1": "concat_layers_v1",
                     "contextembed.MeanLayers.v1": "mean_layers_v1", "contextembed.SumLayers.v1": "sum_layers_v1"},
    "spacy_misc": {"contextembed.Encoder.v1": "encoder_v1", "contextembed.Encoder.v2": "encoder_v2"},
}


def test_pyproject_entry_points_resolve():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for group, names in EXPECTED.items():
        for name, function in names.items():
            module_name, attribute = declared[group][name].split(":")
            assert attribute == function
            assert callable(getattr(importlib.import_module(module_name), attribute))


def test_registry_names():
    import spacy

    import contextembed.spacy  # noqa: F401

    for group, names in EXPECTED.items():
        registry = getattr(spacy.registry, group.removeprefix("spacy_"))
        for name, function in names.items():
            assert (registry.get(name).__name__ if group != "spacy_factories" else function) == function
    assert spacy.registry.misc.get("contextembed.Encoder.v1").__name__ == "encoder_v1"
    assert "contextembed" in spacy.registry.factories


@pytest.mark.slow
def test_installed_entry_points_are_found_without_import(tmp_path):
    """Only meaningful where the package is installed (a venv with ``pip install -e .``)."""
    from importlib.metadata import entry_points

    if not [e for e in entry_points(group="spacy_factories") if e.name == "contextembed"]:
        pytest.skip("contextembed is not installed in this environment (no entry-point metadata)")
    code = (
        "import spacy, sys; nlp = spacy.blank('en'); "
        "nlp.add_pipe('contextembed', config={'encoder': {'name': 'x'}}); "
        "print(spacy.registry.architectures.get('contextembed.Listener.v1').__module__)"
    )
    log = tmp_path / "sockets.log"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env=socket_guard.guarded_env(log))
    assert result.returncode == 0, result.stderr
    assert socket_guard.read_log(log) == ""
    assert result.stdout.strip() == "contextembed.spacy.architectures"
