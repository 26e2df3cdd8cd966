"""One representative call of each capability on a tiny model placed on a given device.

Each call returns ``(result, devices)``: the result as CPU tensors (to compare runs on two devices) and the
devices of what the call returned or trained before it was brought back, keyed by what they are.
``tests/devices/test_device_plumbing.py`` runs them on ``torch.device("cpu")`` given explicitly;
``tests/gpu/`` on CUDA, against the CPU run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import interplab as ilab
from tests.circuits.test_attribute import transcoders
from tests.tiny import TEXTS, tiny_hf_model, tiny_tokenizer

SITE = "blocks.0.hook_resid_post"
CORPUS = [*TEXTS, "the cat sat on the mat and the dog ran", "Mary gave a drink to John", *TEXTS[::-1]] * 30
STORE_KW = {"n_tokens": 300, "context_size": 16, "batch_size": 8, "shard_tokens": 100, "progress": False}
TRAIN_KW = {"arch": "topk", "width": 32, "k": 4, "n_tokens": 256, "batch_size": 32, "progress": False}


def model_on(device: str | torch.device, family: str = "gpt2") -> ilab.Model:
    """The tiny model of ``family`` (the same weights every time) on ``device``."""
    return ilab.load_model(tiny_hf_model(family), tokenizer=tiny_tokenizer(), device=device)


def devices_of(module: torch.nn.Module) -> set[torch.device]:
    return {p.device for p in module.parameters()} | {b.device for b in module.buffers()}


def collect(model: ilab.Model) -> tuple[torch.Tensor, dict[str, Any]]:
    acts = model.collect(TEXTS, SITE)
    return acts[SITE].cpu(), {"activations": acts[SITE].device}


def store_and_train(model: ilab.Model, folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Cache a store, train an SAE from it and one from the model (both on the model's device)."""
    store = model.cache(CORPUS, SITE, folder / "store", **STORE_KW)
    from_store = ilab.train_sae(store, device=model.device, **TRAIN_KW)
    from_model = ilab.train_sae(model, site=SITE, corpus=CORPUS, **TRAIN_KW)
    out = {"tokens": store.tokens(), "stored": store.read(SITE).float(),
           "store_W_dec": from_store.W_dec.detach().cpu(), "model_W_dec": from_model.W_dec.detach().cpu()}  # fmt: skip
    return out, {"sae from store": devices_of(from_store), "sae from model": devices_of(from_model)}


def sae_on(model: ilab.Model) -> ilab.SAE:
    """A seeded SAE at :data:`SITE` on the model's device."""
    sae = ilab.SAE.create("topk", d_in=model.d_model, d_sae=32, k=4, site=SITE)
    sae.init_weights(0)
    return sae.to(model.device)


def feature_data(model: ilab.Model) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sae = sae_on(model)
    data = ilab.feature_data(sae, model, CORPUS, n_top=3, n_quantile=2, context=4, lead=2, n_bins=8, seq_len=9,
                             batch_size=3, progress=False)  # fmt: skip
    return {"max": torch.as_tensor(data.max_act), "density": torch.as_tensor(data.density)}, {"sae": devices_of(sae)}


def patching_grid(model: ilab.Model) -> tuple[torch.Tensor, dict[str, Any]]:
    result = ilab.patching.grid(
        model, ["the cat sat on the"], ["the dog ran to the"], ilab.metrics.logit_diff("mat", "house")
    )
    return torch.as_tensor(result.values), {}


def steering(model: ilab.Model) -> tuple[dict[str, Any], dict[str, Any]]:
    vec = ilab.steering.contrast(model, SITE, ["the cat sat", "the cat ran"], ["the dog sat", "the dog ran"], scale=4.0)
    clamp = ilab.steering.clamp(sae_on(model), 3, 2.0)
    text = ilab.steering.generate(model, "the cat", [vec, clamp], max_new_tokens=4)
    logits = ilab.steering.logits(model, ["the cat sat"], [vec, clamp])
    return {"text": text, "direction": vec.direction.cpu(), "logits": logits.cpu()}, {"logits": logits.device}


def probe(model: ilab.Model) -> tuple[dict[str, Any], dict[str, Any]]:
    texts = [f"the {a} {b}" for a in ("cat", "dog", "fox", "bird") for b in ("sat", "ran", "jumps")] * 2
    labels = [t.split()[1] in ("cat", "dog") for t in texts]
    res = ilab.probes.train(model, texts, labels, sites=SITE, position="mean", cv=2, progress=False)
    return {"accuracy": res.accuracy[SITE], "W": res.probes[SITE].W_CD.cpu()}, {"W": res.probes[SITE].W_CD.device}


def das_fit(model: ilab.Model) -> tuple[dict[str, Any], dict[str, Any]]:
    from tests.das.test_das import BASE, SOURCE, pairs_for

    pairs = pairs_for(model, BASE, SOURCE)
    das = ilab.das.fit(model, pairs, SITE, k=1, epochs=2, lr=0.05, batch_size=4, progress=False)
    return {"Q": das.Q_DK.cpu(), "losses": torch.tensor(das.losses), "iia": das.iia}, {"Q": das.Q_DK.device}


def attribution(model: ilab.Model) -> tuple[dict[str, Any], dict[str, Any]]:
    from interplab.core.circuits import attribute

    tcs = [tc.to(model.device) for tc in transcoders(model.d_model)]
    graph = attribute(model, tcs, "the cat sat on the mat", batch_size=8, progress=False)
    return {"adjacency": graph.adjacency.cpu()}, {"adjacency": graph.adjacency.device}
