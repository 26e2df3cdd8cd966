"""Making and saving steering vectors (``core/steering/vectors.py``): difference of means, PCA, probes, SAE
latents, save and load, and a tampered file refused with the file and the field named.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from interplab.core.saes import SAE
from interplab.core.storage.readers import FileError
from safetensors.torch import save_file

import interplab as ilab
from tests.steering.common import S
from tests.tiny import tiny_model


def test_diff_of_means_and_pca(model):
    site = "blocks.1.hook_resid_post"
    pos, neg = ["the happy cat", "the happy dog", "a happy bird"], ["the sad cat", "the sad dog", "a sad bird"]
    vec = S.diff_of_means(model, site, pos, neg)
    acts_p = model.collect(pos, sites=[site]).values[site][:, -1]
    acts_n = model.collect(neg, sites=[site]).values[site][:, -1]
    torch.testing.assert_close(vec.direction, acts_p.mean(0) - acts_n.mean(0), rtol=1e-5, atol=1e-6)
    assert vec.provenance["method"] == "diff_of_means" and vec.site == site
    mean_vec = S.diff_of_means(model, site, pos, neg, position="mean")
    assert not torch.equal(mean_vec.direction, vec.direction)
    pca = S.pca_direction(model, site, pos, neg)
    diffs = (acts_p - acts_n).double()
    assert float(diffs.mean(0) @ pca.direction.double()) > 0  # points from negative to positive
    _, _, vh = torch.linalg.svd(diffs, full_matrices=False)
    cos = torch.nn.functional.cosine_similarity(pca.direction.double(), vh[0], dim=0).abs()
    assert cos > 0.9999
    with pytest.raises(ValueError, match="as many positive as negative"):
        S.pca_direction(model, site, pos, neg[:2])


def test_pca_of_identical_differences_is_their_direction():
    model = tiny_model("gpt2")
    site = "blocks.0.hook_resid_pre"  # the embedding: same word swap gives related differences
    vec = S.pca_direction(model, site, ["happy"], ["sad"], position=-1)
    dom = S.diff_of_means(model, site, ["happy"], ["sad"])
    torch.testing.assert_close(vec.direction, dom.direction, rtol=1e-4, atol=1e-5)


def test_from_probe_and_from_sae(model):
    site = "blocks.1.hook_resid_post"
    linear = torch.nn.Linear(model.d_model, 1)
    vec = S.from_probe(linear, site)
    assert torch.allclose(vec.direction.norm(), torch.tensor(1.0)) and vec.provenance["method"] == "probe"
    two_class = np.stack([np.zeros(model.d_model), np.ones(model.d_model)]).astype(np.float32)
    assert torch.allclose(S.from_probe(two_class, site, normalize=False).direction, torch.ones(model.d_model))
    sae = SAE.create("standard", d_in=model.d_model, d_sae=40, site=site)
    lat = S.from_sae(sae, 3, scale=2.0)
    assert torch.equal(lat.direction, sae.W_dec[3].detach()) and lat.site == site and lat.scale == 2.0
    assert lat.provenance["latent"] == 3


def test_save_load_round_trip(tmp_path, model):
    vec = S.diff_of_means(model, "blocks.0.hook_mlp_out", ["the cat"], ["the dog"], scale=2.5)
    path = vec.save(tmp_path / "sub" / "v.safetensors")
    back = S.SteeringVector.load(path)
    assert back == vec and back.direction.dtype == torch.float32
    assert back != vec * 3.0
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["v.safetensors"]  # no temp file left
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an interplab steering vector"):
        S.SteeringVector.load(tmp_path / "other.safetensors")
    with pytest.raises(FileNotFoundError):
        S.SteeringVector.load(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError, match="JSON"):
        S.SteeringVector("blocks.0.hook_mlp_out", torch.ones(4), provenance={"f": object()}).save(tmp_path / "b")


SITE = "blocks.1.hook_resid_post"


def test_a_tampered_steering_vector_file_is_named_with_its_field(tmp_path):
    vec = ilab.steering.SteeringVector(SITE, torch.ones(32))
    vec.save(tmp_path / "v.safetensors")
    save_file({"direction": torch.ones(2, 3)}, str(tmp_path / "w.safetensors"),
              metadata={"format": "interplab.steering_vector/1", "interplab": "{}"})  # fmt: skip
    with pytest.raises(FileError, match=r"w\.safetensors': direction must be the file's one tensor, of shape \[d\]"):
        ilab.steering.SteeringVector.load(tmp_path / "w.safetensors")
    save_file(
        {"direction": torch.ones(3)},
        str(tmp_path / "x.safetensors"),
        metadata={"format": "interplab.steering_vector/1", "interplab": json.dumps({"site": SITE})},
    )
    with pytest.raises(FileError, match=r"x\.safetensors': interplab\.scale is missing"):
        ilab.steering.SteeringVector.load(tmp_path / "x.safetensors")
