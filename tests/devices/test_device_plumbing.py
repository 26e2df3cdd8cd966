"""Device handling without a GPU: every capability on ``torch.device("cpu")`` given explicitly, and the
"meta" device (tensors without data) standing in for an accelerator where a function only builds tensors.

A meta tensor mixed with a CPU tensor raises, so a call that returns meta tensors for an SAE on "meta" fed
CPU activations proves the activations were moved to the SAE's device, not the other way round.
``tests/gpu/`` runs the same calls on CUDA.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.data.sources import activation_source
from interplab.core.model import trace_ops
from interplab.core.saes.training import trainer
from interplab.core.saes.training.in_memory import fit_tensor

import interplab as ilab
from tests.devices import calls

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # tiny SAEs warn about their quality
CPU = torch.device("cpu")
META = torch.device("meta")


@pytest.fixture(scope="module")
def model():
    return calls.model_on(CPU)


def sae_on_meta(arch: str = "jumprelu", **kw) -> ilab.SAE:
    sae = ilab.SAE.create(arch, d_in=8, d_sae=16, site="blocks.0.hook_resid_post", **kw)
    return sae.to(META)


# ------------------------------------------------------------------ every capability, explicitly on the CPU
@pytest.mark.parametrize("call", ["collect", "feature_data", "patching_grid", "steering", "probe", "das_fit"])
def test_each_capability_runs_on_an_explicit_cpu_device(model, call):
    result, devices = getattr(calls, call)(model)
    assert result is not None
    for what, device in devices.items():
        assert device == model.device or device == {model.device}, f"{call}: {what} on {device}"


def test_store_and_training_follow_the_model_device(model, tmp_path):
    _, devices = calls.store_and_train(model, tmp_path)
    assert devices == {"sae from store": {CPU}, "sae from model": {CPU}}


def test_attribution_on_an_explicit_cpu_device():
    result, devices = calls.attribution(calls.model_on(CPU, "gemma3"))
    assert devices == {"adjacency": CPU} and torch.isfinite(result["adjacency"]).all()


def test_model_device_is_its_weights_device(model):
    assert model.device == next(model.module.parameters()).device == CPU


# ------------------------------------------------------------------ SAEs: inputs go to the weights
@pytest.mark.parametrize("arch", ["jumprelu", "topk", "standard"])
def test_sae_moves_cpu_activations_to_its_own_device(arch):
    sae = sae_on_meta(arch, **({"k": 4} if arch == "topk" else {}))
    x = torch.randn(5, 8)  # on the CPU
    acts = sae.encode(x)
    assert acts.device == META and acts.shape == (5, 16)
    assert sae.decode(torch.rand(5, 16)).device == META
    assert sae(x).device == META


def test_transcoder_skip_and_target_follow_its_device():
    tc = ilab.SAE.create("jumprelu", d_in=8, d_sae=16, site="blocks.0.hook_mlp_in", site_out="blocks.0.hook_mlp_out",
                         d_out=6, skip=True).to(META)  # fmt: skip
    x, y = torch.randn(3, 8), torch.randn(3, 6)
    assert tc.skip_out(x).device == META
    assert tc.target_of(x, y).device == META
    assert tc(x).device == META and tc(x).shape == (3, 6)


def test_trace_params_of_some_latents_index_on_the_sae_device():
    params = sae_on_meta().trace_params([1, 5])
    assert all(t.device == META for t in params.values() if isinstance(t, torch.Tensor))
    assert params["W_enc"].shape == (8, 2)


def test_trace_ops_encode_and_decode_on_the_params_device():
    p = {"W_enc": torch.empty(8, 16, device=META), "b_enc": torch.empty(16, device=META),
         "b_in": torch.empty(8, device=META), "W_dec": torch.empty(16, 8, device=META),
         "b_dec": torch.empty(8, device=META)}  # fmt: skip
    acts = trace_ops.sae_encode(p, torch.randn(2, 8))
    assert acts.device == META and acts.shape == (2, 16)
    assert trace_ops.sae_decode(p, torch.rand(2, 16)).device == META


# ------------------------------------------------------------------ training: the SAEs and their counters
def test_training_builds_saes_and_counters_on_the_requested_device():
    specs = [{"arch": "topk", "width": 16, "k": 2, "site": "s"}, {"arch": "jumprelu", "width": 8, "site": "s"}]
    run = trainer._Training(specs, {"s": 8}, "m", 0, 10, 100, 5, device="meta")
    assert all(devices == {META} for devices in map(calls.devices_of, run.saes))
    assert {t.device for t in run.since_fired} == {META}
    cpu = trainer._Training(specs, {"s": 8}, "m", 0, 10, 100, 5)
    for on_meta, on_cpu in zip(run.saes, cpu.saes, strict=True):  # the same shapes, initialised the same way
        assert {n: p.shape for n, p in on_meta.named_parameters()} == {n: p.shape for n, p in on_cpu.named_parameters()}


@pytest.fixture
def trained_on(monkeypatch):
    """The device each training run was set up for, recorded from the runs of ``train_saes``."""
    seen: list[torch.device] = []

    class Recording(trainer._Training):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self.device)

    monkeypatch.setattr(trainer, "_Training", Recording)
    return seen


def test_train_saes_defaults_to_the_source_device_and_takes_an_explicit_one(model, tmp_path, trained_on):
    store = model.cache(calls.CORPUS, calls.SITE, tmp_path / "store", **calls.STORE_KW)
    default = ilab.train_sae(store, **calls.TRAIN_KW)
    explicit = ilab.train_sae(store, device=torch.device("cpu"), **calls.TRAIN_KW)
    ilab.train_sae(model, site=calls.SITE, corpus=calls.CORPUS, **calls.TRAIN_KW)
    assert trained_on == [CPU, CPU, model.device]
    assert activation_source(store).device == CPU and activation_source(model, calls.CORPUS).device == model.device
    assert torch.equal(default.W_dec, explicit.W_dec)  # naming the CPU changes nothing


def test_train_saes_refuses_an_unknown_device(model, tmp_path):
    store = model.cache(calls.CORPUS, calls.SITE, tmp_path / "store", **calls.STORE_KW)
    with pytest.raises(RuntimeError, match="device"):
        ilab.train_sae(store, device="no-such-device", **calls.TRAIN_KW)


def test_fit_tensor_trains_on_its_tensor_device():
    x = torch.randn(64, 8)
    sae = fit_tensor(x, arch="topk", width=16, k=2, steps=3, progress=False)
    assert calls.devices_of(sae) == {x.device}


# ------------------------------------------------------------------ DAS: the trace body mixes one device
def test_das_intervention_mixes_tensors_on_the_model_device(model, monkeypatch):
    from interplab.core.das import intervene

    from tests.das.test_das import pairs_for

    seen: list[set[torch.device]] = []
    real = intervene.interchange

    def recording(base, source, Q_DK):
        seen.append({base.device, source.device, Q_DK.device})
        return real(base, source, Q_DK)

    monkeypatch.setattr(intervene, "interchange", recording)
    prep = intervene.prepare(model, pairs_for(model), calls.SITE, [-1])
    with torch.no_grad():
        intervene.run(model, prep, torch.arange(2), torch.linalg.qr(torch.randn(model.d_model, 2))[0])
    assert seen == [{model.device}]


def test_interchange_returns_on_the_base_device_and_dtype():
    base, source = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8)
    Q = torch.linalg.qr(torch.randn(8, 2))[0]
    out = trace_ops.interchange(base, source, Q)
    assert out.device == base.device and out.dtype == torch.float64


def test_attribution_refuses_transcoders_on_another_device_than_the_model():
    from interplab.core.circuits import attribute

    from tests.circuits.test_attribute import transcoders

    model = calls.model_on(CPU, "gemma3")
    tcs = transcoders(model.d_model)
    tcs[1].to(META)
    with pytest.raises(ValueError, match="is on meta and the model on cpu"):
        attribute(model, tcs, "the cat sat", progress=False)
