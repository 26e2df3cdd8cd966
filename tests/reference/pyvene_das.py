"""Reference outputs of pyvene 0.1.8's RotatedSpaceIntervention (DAS) on a tiny GPT-2: run in .ref/pyvene only.

    .ref/pyvene/bin/python tests/reference/pyvene_das.py tests/reference/pyvene_das.json
    .ref/pyvene/bin/python tests/reference/pyvene_das.py --bench '{"n_layer": 4, ...}'   # steps/s as JSON

Writes the tiny model's weights (``pyvene_das_model.safetensors`` beside the JSON) so interplab's side
loads exactly these weights, the counterfactual pairs as token ids, pyvene's intervened logits for a
given rotation, and the IIA of DAS trained with pyvene from the same start, data order, optimiser and
seed that ``ilab.das.fit`` uses. This file imports nothing of interplab (the two environments differ).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pyvene as pv
import torch
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

CONFIG = dict(n_layer=2, n_embd=32, n_head=4, n_positions=128, vocab_size=64, bos_token_id=1, eos_token_id=2,
              pad_token_id=0, initializer_range=0.3)  # fmt: skip
FIRST_WORD, N_WORDS = 4, 35  # tests/tiny.py: ids 4..38 are words
LAST = (6, 7)  # 'cat', 'dog'
LENGTH, N_PAIRS, K, LR, BATCH, EPOCHS, SEED, TEST_SIZE = 6, 480, 1, 0.01, 32, 20, 0, 0.25


def model_and_data() -> tuple[GPT2LMHeadModel, dict]:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**CONFIG)).eval()
    gen = torch.Generator().manual_seed(1)
    base, source, labels, base_labels = [], [], [], []
    while len(base) < N_PAIRS:
        b = torch.cat([torch.tensor([1]), FIRST_WORD + torch.randint(N_WORDS, (LENGTH - 1,), generator=gen)])
        flip = int(torch.randint(2, (1,), generator=gen))  # the variable: which of two words ends the prompt
        b[-1] = LAST[flip]
        s = b.clone()
        s[-1] = LAST[1 - flip]
        with torch.no_grad():
            top = model(torch.stack([b, s])).logits[:, -1].argmax(-1)
        words = (top >= FIRST_WORD) & (top < FIRST_WORD + N_WORDS)
        if words.all() and top[0] != top[1]:
            base.append(b.tolist()), source.append(s.tolist())
            labels.append(int(top[1])), base_labels.append(int(top[0]))
    return model, {"base": base, "source": source, "labels": labels, "base_labels": base_labels}


def intervenable(model: torch.nn.Module, k: int, R: torch.Tensor | None) -> pv.IntervenableModel:
    cfg = pv.IntervenableConfig(representations=[{"layer": 0, "component": "block_output", "unit": "pos",
                                                  "max_number_of_units": 1}],
                                intervention_types=pv.RotatedSpaceIntervention)  # fmt: skip
    iv = pv.IntervenableModel(cfg, model)
    iv.disable_model_gradients()
    (inter,) = iv.interventions.values()
    inter = inter[0] if isinstance(inter, (tuple, list)) else inter
    inter.set_interchange_dim(k)
    if R is not None:
        with torch.no_grad():
            inter.rotate_layer.weight = R
    return iv, inter


def logits(iv: pv.IntervenableModel, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    pos = [[[base.shape[1] - 1]] * len(base)]
    _, out = iv({"input_ids": base}, [{"input_ids": source}], {"sources->base": (pos, pos)})
    return out.logits[:, -1]


def rotation_from(A_DK: torch.Tensor, seed: int) -> torch.Tensor:
    """A full orthogonal matrix whose first k columns are interplab's orthonormal(A) (sign-fixed QR)."""
    d, k = A_DK.shape
    rest = torch.randn(d, d - k, generator=torch.Generator().manual_seed(seed + 7))
    Q, R = torch.linalg.qr(torch.cat([A_DK, rest], 1))
    sign = torch.sign(torch.diagonal(R))
    return Q * torch.where(sign == 0, torch.ones_like(sign), sign)


def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SEED))
    n_test = min(n - 1, max(1, round(TEST_SIZE * n)))
    return perm[n_test:].sort().values, perm[:n_test].sort().values


def train(model: torch.nn.Module, data: dict, R0: torch.Tensor) -> tuple[pv.IntervenableModel, list[float], float]:
    iv, inter = intervenable(model, K, R0)
    base, source, labels = (torch.tensor(data[k]) for k in ("base", "source", "labels"))
    train_idx, _ = split(len(base))
    opt = torch.optim.Adam(inter.parameters(), lr=LR)
    steps = math.ceil(len(train_idx) / BATCH)
    losses, start = [], time.perf_counter()
    for epoch in range(EPOCHS):
        order = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(SEED * 1000 + epoch))]
        for s in range(steps):
            idx = order[s * BATCH : (s + 1) * BATCH]
            loss = torch.nn.functional.cross_entropy(logits(iv, base[idx], source[idx]).float(), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return iv, losses, EPOCHS * steps / (time.perf_counter() - start)


def iia(iv: pv.IntervenableModel, data: dict, idx: torch.Tensor) -> float:
    base, source, labels = (torch.tensor(data[k])[idx] for k in ("base", "source", "labels"))
    with torch.no_grad():
        return float((logits(iv, base, source).argmax(-1) == labels).float().mean())


def fixture(out: Path) -> None:
    torch.set_num_threads(1)
    model, data = model_and_data()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, out.with_name("pyvene_das_model.safetensors"))
    d = CONFIG["n_embd"]
    R = rotation_from(torch.randn(d, 4, generator=torch.Generator().manual_seed(3)), 3)
    iv, _ = intervenable(model, 4, R)
    n_show = 8
    base, source = torch.tensor(data["base"][:n_show]), torch.tensor(data["source"][:n_show])
    with torch.no_grad():
        given = logits(iv, base, source)
    A0 = torch.randn(d, K, generator=torch.Generator().manual_seed(SEED))  # what ilab.das.fit draws first
    trained, losses, _ = train(model, data, rotation_from(A0, SEED))
    train_idx, test_idx = split(N_PAIRS)
    info = {
        "_generated_by": "bash tests/reference/build_pyvene.sh  (runs .ref/pyvene/bin/python "
                         "tests/reference/pyvene_das.py tests/reference/pyvene_das.json)",
        "_versions": {"pyvene": getattr(pv, "__version__", "0.1.8"), "torch": torch.__version__,
                      "transformers": transformers.__version__, "python": sys.version.split()[0]},
        "config": CONFIG, "site": "blocks.0.hook_resid_post", "position": -1,
        "given_rotation": {"k": 4, "R": R.tolist(), "n": n_show, "logits": given.tolist()},
        "training": {"k": K, "lr": LR, "batch_size": BATCH, "epochs": EPOCHS, "seed": SEED, "test_size": TEST_SIZE,
                     "init_A": A0.tolist(), "losses": losses, "iia": iia(trained, data, test_idx),
                     "train_iia": iia(trained, data, train_idx)},
        "pairs": data,
    }  # fmt: skip
    out.write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps({k: info["training"][k] for k in ("iia", "train_iia")}))


def bench(spec: dict) -> None:
    """Steps/s of pyvene DAS training on a random GPT-2 of ``spec['config']`` (the same as bench_das.py's side)."""
    torch.set_num_threads(spec.get("threads", 1))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**spec["config"])).eval()
    gen = torch.Generator().manual_seed(1)
    n, length, vocab = spec["batch_size"] * spec["steps"], spec["length"], spec["config"]["vocab_size"]
    base = torch.randint(3, vocab, (n, length), generator=gen)
    source = torch.randint(3, vocab, (n, length), generator=gen)
    labels = torch.randint(3, vocab, (n,), generator=gen)
    iv, inter = intervenable(model, spec["k"], None)
    opt = torch.optim.Adam(inter.parameters(), lr=0.01)
    B = spec["batch_size"]
    times = []
    for s in range(spec["steps"] + 1):
        idx = slice(s % spec["steps"] * B, (s % spec["steps"] + 1) * B)
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(logits(iv, base[idx], source[idx]).float(), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    print(json.dumps({"steps_per_s": 1 / (sum(times[1:]) / len(times[1:])), "steps": spec["steps"]}))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--bench":
        bench(json.loads(sys.argv[2]))
    else:
        fixture(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/reference/pyvene_das.json"))
