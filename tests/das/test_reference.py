"""DAS against pyvene 0.1.8's RotatedSpaceIntervention on the same tiny GPT-2, data and seed.

The fixture ``tests/reference/pyvene_das.json`` (and the weights beside it) comes from
``bash tests/reference/build_pyvene.sh`` (its header names the command and versions). pyvene pins an
older transformers than interplab, so it runs in its own environment ``.ref/pyvene``; when that
environment is built, :func:`test_the_fixture_is_what_pyvene_gives_now` regenerates the fixture and
compares. Otherwise the committed outputs are the reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from interplab.core.das.intervene import prepare, run
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

import interplab as ilab
from tests.tiny import WORDS, tiny_tokenizer

HERE = Path(__file__).resolve().parents[1] / "reference"
FIXTURE = HERE / "pyvene_das.json"
ROOT = HERE.parents[1]
VENV = ROOT / ".ref" / "pyvene" / "bin" / "python"


def load_reference() -> tuple[dict, ilab.Model, ilab.das.CounterfactualPairs]:
    ref = json.loads(FIXTURE.read_text())
    hf = GPT2LMHeadModel(GPT2Config(**ref["config"])).eval()
    state = load_file(HERE / "pyvene_das_model.safetensors")
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    hf.tie_weights()
    assert torch.equal(hf.lm_head.weight, state["transformer.wte.weight"])
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    word = lambda i: WORDS[i - 4]  # noqa: E731  (tests/tiny.py: ids 4.. are WORDS, 1 is BOS)
    p = ref["pairs"]
    text = lambda ids: " ".join(word(i) for i in ids[1:])  # noqa: E731
    pairs = ilab.das.counterfactual_pairs(
        model,
        [text(x) for x in p["base"]],
        [text(x) for x in p["source"]],
        [word(i) for i in p["labels"]],
        [word(i) for i in p["base_labels"]],
    )
    for ids, t in zip(p["base"][:4], pairs.base, strict=False):
        assert model.to_tokens(t)["input_ids"][0].tolist() == ids
    return ref, model, pairs


def test_a_given_rotation_gives_pyvenes_outputs():
    ref, model, pairs = load_reference()
    g = ref["given_rotation"]
    R = torch.tensor(g["R"])
    prep = prepare(model, pairs[: g["n"]], ref["site"], [ref["position"]])
    with torch.no_grad():
        ours = run(model, prep, torch.arange(g["n"]), R[:, : g["k"]])
    torch.testing.assert_close(ours, torch.tensor(g["logits"]), rtol=1e-5, atol=1e-5)
    # and differs from no intervention and from a full swap: the subspace is what was swapped
    with torch.no_grad():
        none = run(model, prep, torch.arange(g["n"]), torch.zeros(R.shape[0], 1))
        full = run(model, prep, torch.arange(g["n"]), None)
    assert (ours - none).abs().max() > 1e-2 and (ours - full).abs().max() > 1e-2


def test_trained_iia_agrees_with_pyvene():
    ref, model, pairs = load_reference()
    t = ref["training"]
    das = ilab.das.fit(model, pairs, ref["site"], k=t["k"], positions=ref["position"], epochs=t["epochs"],
                       lr=t["lr"], batch_size=t["batch_size"], test_size=t["test_size"], seed=t["seed"],
                       init=torch.tensor(t["init_A"]), progress=False)  # fmt: skip
    assert das.full_iia == 1.0 and das.base_rate == 0.0  # pairs are built so that both hold
    assert len(das.losses) == len(t["losses"])
    assert abs(das.iia - t["iia"]) <= 0.03, (das.iia, t["iia"])


@pytest.mark.skipif(not VENV.exists(), reason="pyvene's environment is not built: bash tests/reference/build_pyvene.sh")
def test_the_fixture_is_what_pyvene_gives_now(tmp_path):
    out = tmp_path / "pyvene_das.json"
    subprocess.run([str(VENV), str(HERE / "pyvene_das.py"), str(out)], check=True, cwd=ROOT, capture_output=True,
                   timeout=300)  # fmt: skip
    new, old = json.loads(out.read_text()), json.loads(FIXTURE.read_text())
    assert new["pairs"] == old["pairs"] and new["training"]["iia"] == old["training"]["iia"]
    torch.testing.assert_close(torch.tensor(new["given_rotation"]["logits"]),
                               torch.tensor(old["given_rotation"]["logits"]))  # fmt: skip
    assert load_file(tmp_path / "pyvene_das_model.safetensors").keys() == load_file(
        HERE / "pyvene_das_model.safetensors").keys()  # fmt: skip
    assert sys.executable != str(VENV)
