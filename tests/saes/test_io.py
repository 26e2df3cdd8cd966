"""SAE files through the entry points: ``load_sae`` picks the source from its arguments (a path, the packaged
suite, a release) and refuses keywords that source does not read; ``sae.save`` is the SAELens writer.
"""

from __future__ import annotations

from pathlib import Path

import interplab.core.saes.releases as releases_mod
import pytest
import torch
from interplab.core.saes import SAE, load_sae
from interplab.core.saes.pretrained import embedded_layers, suite_folder
from interplab.core.saes.writer import save_saelens

from tests.saes.helpers import SITE_A, SITE_B, assert_same_weights, randomize


def test_load_sae_reads_a_saved_folder_from_a_str_or_a_path(tmp_path):
    sae = randomize(SAE.create("topk", d_in=8, d_sae=16, k=2, site=SITE_A), seed=4)
    assert sae.save(tmp_path / "sae") == tmp_path / "sae"
    for where in (tmp_path / "sae", str(tmp_path / "sae")):
        back = load_sae(where)
        assert type(back) is type(sae) and back.site == SITE_A and not back.training
        assert_same_weights(back, sae)
        assert back.source_path == tmp_path / "sae"
    assert load_sae(tmp_path / "sae", site=SITE_B).site == SITE_B


def test_sae_save_writes_the_files_save_saelens_writes(tmp_path):
    sae = randomize(SAE.create("jumprelu", d_in=8, d_sae=16), seed=5)
    sae.save(tmp_path / "a", dtype=torch.float16)
    save_saelens(sae, tmp_path / "b", dtype=torch.float16)
    for name in ("cfg.json", "sae_weights.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_load_sae_embedded_is_the_packaged_suite():
    layer = embedded_layers()[0]
    sae = load_sae("embedded", layer=layer)
    assert sae.site == f"blocks.{layer}.hook_resid_post"
    assert_same_weights(sae, load_sae(suite_folder() / f"blocks.{layer}.hook_resid_post"))


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (("embedded",), {"layer": 6, "site": SITE_A}, ValueError, r"site='blocks\.0\.hook_resid_post' is for a local"),
        (("embedded", "layer_6"), {"layer": 6}, ValueError, r"sae_id='layer_6' is for a release, not for embedded"),
        (("embedded",), {"layer": 6, "local_files_only": True}, ValueError, r"local_files_only=True is for a release"),
        (("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_small"), {"layer": 5}, ValueError,
         r"layer=5 is for 'embedded', not for a release"),
        (("gemma-scope-2-270m-pt-res", "layer_5_width_16k_l0_small"), {"site": SITE_A}, ValueError,
         r"site=.* is for a local path, not for a release"),
        (("some/folder",), {"layer": 6}, ValueError, r"layer=6 is for 'embedded', not for a path"),
        (("some/folder",), {"local_files_only": False}, ValueError, r"local_files_only=False is for a release"),
        ((6,), {}, TypeError, r"path_or_name must be a path, 'embedded' or a SAELens release name, got int"),
        (("gemma-scope-2-270m-pt-res",), {}, ValueError,
         r"'gemma-scope-2-270m-pt-res' is a SAELens release: give one of its \d+ SAE ids too, e.g. load_sae\("),
    ],
)  # fmt: skip
def test_load_sae_refuses_what_its_source_does_not_read(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        load_sae(*args, **kwargs)


def test_a_release_that_builds_something_else_is_refused(monkeypatch, tmp_path):
    release = releases_mod.Release("test-clt", "org/repo", "model", "clt", "clt/", ("layer_0",))
    monkeypatch.setitem(releases_mod.RELEASES, release.name, release)
    monkeypatch.setitem(releases_mod.BUILDERS, "clt", lambda rel, sae_id, folder: {"not": "an SAE"})
    monkeypatch.setattr(releases_mod, "fetch", lambda rel, sae_id, local_files_only=None: Path(tmp_path))
    with pytest.raises(ValueError, match=r"'test-clt' holds dict objects, not SAEs: .*load_release"):
        load_sae("test-clt", "layer_0")


def test_the_sae_class_is_not_an_entry_point():
    """Loading and training are functions; ``SAE.train`` is torch's mode switch."""
    assert not hasattr(SAE, "load") and not hasattr(SAE, "train_many")
    assert SAE.train is torch.nn.Module.train


def test_firing_rates_come_from_the_sparsity_file_and_are_saved_back(tmp_path):
    """SAELens keeps log10 firing rates in sparsity.safetensors: the packaged suite has them (its densest latents
    fire on 40-60% of tokens), a saved SAE keeps them, and one without the file has none."""
    from safetensors.torch import load_file

    packaged = load_sae("embedded", layer=6)
    file = suite_folder() / "blocks.6.hook_resid_post" / "sparsity.safetensors"
    want = 10.0 ** load_file(str(file))["sparsity"]
    assert packaged.firing_rates is not None and packaged.firing_rates.shape == (packaged.d_sae,)
    torch.testing.assert_close(packaged.firing_rates, want.where(want > 1e-10, torch.zeros(())))
    assert 0.4 < float(packaged.firing_rates.max()) < 0.7 and 0 < int((packaged.firing_rates > 0.1).sum()) < 100
    sae = randomize(SAE.create("topk", d_in=8, d_sae=16, k=2, site=SITE_A), seed=4)
    sae.save(tmp_path / "none")
    assert load_sae(tmp_path / "none").firing_rates is None
    sae.firing_rates = torch.linspace(0, 1, 16)
    sae.save(tmp_path / "some")
    torch.testing.assert_close(load_sae(tmp_path / "some").firing_rates, torch.linspace(0, 1, 16))


@pytest.mark.parametrize(
    ("tensors", "match"),
    [
        ({"sparsity": torch.zeros(3)}, r"sparsity has shape \[3\], expected \[16\]"),
        ({"rates": torch.zeros(16)}, "sparsity is missing"),
        ({"sparsity": torch.full((16,), 0.5)}, "holds values above 0 or NaN: it is not log10 firing rates"),
    ],
)
def test_a_crafted_sparsity_file_is_refused_naming_it(tmp_path, tensors, match):
    from interplab.core.storage.readers import FileError
    from safetensors.torch import save_file

    randomize(SAE.create("topk", d_in=8, d_sae=16, k=2, site=SITE_A), seed=4).save(tmp_path / "sae")
    save_file(tensors, str(tmp_path / "sae" / "sparsity.safetensors"))
    with pytest.raises(FileError, match=f"sparsity.safetensors.*{match}"):
        load_sae(tmp_path / "sae")
