"""Steering vector files (core/steering/vectors.py): a tampered file is refused, naming the file and the field."""

from __future__ import annotations

import json

import pytest
import torch
from interplab.core.storage.readers import FileError
from safetensors.torch import save_file

import interplab as ilab

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
