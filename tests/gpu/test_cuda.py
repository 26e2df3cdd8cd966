"""Each capability on CUDA against the same call on the CPU (``tests/devices/calls.py``).

Every test checks where the result was (CUDA) and that it matches the CPU run within the tolerance it
states: float32 on both sides, so differences come from the order of reductions (TF32 is off here).
Training compares weights after a few Adam steps, so its tolerance is looser.
"""

from __future__ import annotations

import pytest
import torch
from interplab.core.circuits import attribute, embedded_transcoders

import interplab as ilab
from tests.devices import calls

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # tiny SAEs warn about their quality
CUDA = torch.device("cuda", 0)
CLOSE = {"rtol": 1e-4, "atol": 1e-4}  # a forward pass, float32
TRAINED = {"rtol": 1e-2, "atol": 1e-3}  # weights after a few Adam steps, float32


@pytest.fixture(scope="module", autouse=True)
def _exact_matmuls():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture(scope="module")
def cpu_model():
    return calls.model_on("cpu")


@pytest.fixture(scope="module")
def cuda_model():
    model = calls.model_on("cuda")
    assert model.device.type == "cuda"
    return model


def on_cuda(devices: dict) -> None:
    for what, device in devices.items():
        found = device if isinstance(device, set) else {device}
        assert {d.type for d in found} == {"cuda"}, f"{what} on {found}"


def same(a, b, tol) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            same(a[key], b[key], tol)
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, **tol)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=tol["rtol"], abs=max(tol["atol"], 1e-6))
    else:
        assert a == b


def test_collect(cpu_model, cuda_model):
    (ref, _), (got, devices) = calls.collect(cpu_model), calls.collect(cuda_model)
    on_cuda(devices)
    same(got, ref, CLOSE)


def test_store_and_training_from_store_and_model(cpu_model, cuda_model, tmp_path):
    ref, _ = calls.store_and_train(cpu_model, tmp_path / "cpu")
    got, devices = calls.store_and_train(cuda_model, tmp_path / "cuda")
    on_cuda(devices)
    assert torch.equal(got["tokens"], ref["tokens"])
    same(got["stored"], ref["stored"], CLOSE)
    same(got["store_W_dec"], ref["store_W_dec"], TRAINED)
    same(got["model_W_dec"], ref["model_W_dec"], TRAINED)


def test_feature_data(cpu_model, cuda_model):
    (ref, _), (got, devices) = calls.feature_data(cpu_model), calls.feature_data(cuda_model)
    on_cuda(devices)
    same(got, ref, CLOSE)


def test_patching_grid(cpu_model, cuda_model):
    same(calls.patching_grid(cuda_model)[0], calls.patching_grid(cpu_model)[0], CLOSE)


def test_steering_generate_and_logits(cpu_model, cuda_model):
    (ref, _), (got, _) = calls.steering(cpu_model), calls.steering(cuda_model)  # logits come back to the CPU
    assert got["text"] == ref["text"]  # greedy decoding of a tiny model: the same tokens
    same(got["direction"], ref["direction"], CLOSE)
    same(got["logits"], ref["logits"], CLOSE)


def test_probe(cpu_model, cuda_model):
    (ref, _), (got, _) = calls.probe(cpu_model), calls.probe(cuda_model)
    assert got["accuracy"] == ref["accuracy"]
    same(got["W"], ref["W"], TRAINED)


def test_das_fit(cpu_model, cuda_model):
    (ref, _), (got, _) = calls.das_fit(cpu_model), calls.das_fit(cuda_model)
    same(got["losses"], ref["losses"], TRAINED)
    same(got["Q"], ref["Q"], TRAINED)


def test_attribution_graph():
    ref, _ = calls.attribution(calls.model_on("cpu", "gemma3"))
    got, _ = calls.attribution(calls.model_on("cuda", "gemma3"))
    same(got["adjacency"], ref["adjacency"], CLOSE)


@pytest.mark.embedded
def test_attribution_graph_of_the_embedded_model_with_its_packaged_transcoders(embedded):
    """The packaged transcoders (every layer: a graph needs one per MLP) on the embedded model, on CUDA and on
    the CPU; the first layers' feature nodes and the whole adjacency agree (bfloat16 weights: 2e-2)."""
    graphs = []
    for model in (embedded, ilab.load_model(device="cuda")):
        tcs = [tc.to(model.device) for tc in embedded_transcoders()]
        graphs.append(attribute(model, tcs, "The cat sat on the", max_feature_nodes=64, batch_size=16,
                                progress=False))  # fmt: skip
    ref, got = graphs
    first = ref.features[:, 0] <= 1  # feature nodes of layers 0 and 1
    assert torch.equal(got.features.cpu()[first], ref.features[first])
    torch.testing.assert_close(got.adjacency.cpu(), ref.adjacency, rtol=2e-2, atol=2e-2)
