"""Benchmark SAE training steps: interplab against SAELens, on the same activations and machine.

Run ``python bench/bench_sae.py`` (3-4 minutes on 2 busy cores). It prints ONE JSON object
on stdout; progress goes to stderr. ``--quick`` (about 2 minutes) runs 3 timed rounds and checks
only the TopK gradients; ``--steps N`` sets the number of timed rounds; ``--device cuda`` runs every
variant, the matmul reference and the gradient check on that device (default ``cpu``), each timed step
followed by a synchronisation of the device.

Setting: fp32 on CPU, d_in 640, width 8192, k 32, batch 4096 (the anchors in
``shared/research/style-and-tooling.md``). All variants train on the SAME in-memory batch:
real activations of ``blocks.6.hook_resid_post`` from an interplab store when one is at
``--acts`` (default ``/tmp/suite/acts``; one shard is read), otherwise ``torch.randn``. Either
way the batch is scaled so that E||x|| = sqrt(d_in), as ``core/saes/training/trainer.py`` does.

One step, per variant:
- interplab (topk, batchtopk, standard/L1, jumprelu): what ``core/saes/training/trainer.py`` does per
  step, calling the real code: ``sae.training_loss(x, dead=...)``, ``zero_grad``,
  ``backward``, ``remove_parallel_grad``, ``clip_grad_norm_(1.0)``, ``Adam.step``,
  ``normalize_decoder`` and the firing bookkeeping.
- SAELens 6.54: its own ``SAETrainer.step(batch)``: ``training_forward_pass(TrainStepInput)``
  (under its autocast context, off here), firing statistics, ``loss.backward()``,
  ``clip_grad_norm_(1.0)``, ``Adam.step``, ``zero_grad`` and the LR/coefficient schedulers.
  Variants: topk (defaults: dense scatter + dense decode, ``rescale_acts_by_decoder_norm``),
  topk with ``use_sparse_activations=True`` (crashes in backward on CPU with the default
  rescaling; the crash is recorded, and the same setting also runs with
  ``rescale_acts_by_decoder_norm=False``), batchtopk (it has no sparse path: its BatchTopK
  activation is always dense), standard, jumprelu.

Timing: one warm-up round (a variant that crashes there is recorded and dropped), then
``--steps`` rounds. Every round runs one step of every variant, in groups of the variants that
are compared (the TopK family; standard; jumprelu) run back to back, each group after one dense
matmul [4096, 640] x [640, 8192] (the machine's physical reference, measured under the same
load). Groups rotate and members reverse order every other round. Reported per variant: median
step time and tokens/s (batch / median step time), min and max. Ratios are the median over
rounds of same-round step-time ratios, so load that changes between rounds (a shared machine)
cancels; the ratio of median tokens/s and of the best (fastest) steps are given too. On a
machine shared with a job whose load comes and goes, expect round-to-round spread of 2x.

Cost model (FLOPs per step, B batch, d d_in, m width): a dense SAE step is six matmuls of
2*B*d*m (encoder and decoder forward, two backward products each) = 12*B*d*m. interplab's
TopK step computes only the dense encoder forward (2*B*d*m) plus O(B*k*d) terms: decode,
both decoder gradients and the encoder gradient at the k active latents, 2*B*k*d each, so
useful = 2*B*d*m + 8*B*k*d. SAELens's sparse TopK decodes sparsely but keeps the encoder
backward dense: 6*B*d*m + 4*B*k*d. "Fraction of matmul peak" = useful FLOP/s / dense matmul
FLOP/s (the median of the interleaved matmul timings); "dense_equivalent" = 12*B*d*m / step time.

Goals (from the issue): interplab topk and batchtopk >= 4x SAELens default and >= 2.5x its
sparse setting; standard and jumprelu >= 1.2x. For batchtopk the "sparse setting" reference
is SAELens's sparse topk step (its batchtopk has none).

Also a gradient check: interplab's sparse TopK/BatchTopK backward against plain dense autograd
of the same maths at this size (max abs difference of every parameter gradient).

The machine may be shared: ``load_average`` (1, 5, 15 min) is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

D_IN, WIDTH, K, BATCH = 640, 8192, 32, 4096
DEVICE = torch.device("cpu")  # set by --device before anything is built
SITE = "blocks.6.hook_resid_post"
LR = 4e-4  # interplab's DEFAULT_LR
GOALS = {
    "topk": {"default": 4.0, "sparse": 2.5},
    "batchtopk": {"default": 4.0, "sparse": 2.5},
    "standard": {"default": 1.2},
    "jumprelu": {"default": 1.2},
}


def log(msg: str) -> None:
    print(f"[bench_sae {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sync() -> None:
    """Wait for the device's queued work (a CUDA step returns before it has run)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def load_avg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


# ------------------------------------------------------------------ data
def make_batch(acts: str | None, seed: int = 0) -> tuple[torch.Tensor, dict[str, Any]]:
    """One [BATCH, D_IN] fp32 batch scaled to E||x|| = sqrt(D_IN); real activations when possible."""
    info: dict[str, Any] = {}
    x = None
    if acts:
        try:
            from interplab import ActivationStore

            store = ActivationStore(acts)
            if store.d(SITE) != D_IN:
                raise ValueError(f"{SITE} is {store.d(SITE)} wide, not {D_IN}")
            x = next(store.batches(BATCH, site=SITE, shuffle=True, seed=seed, buffer_shards=1))
            info = {
                "source": "store",
                "path": str(acts),
                "site": SITE,
                "model": store.model_name,
                "store_tokens": store.n_tokens,
            }
        except Exception as err:  # any failure: fall back to random data
            info = {"store_error": f"{type(err).__name__}: {err}"[:300]}
            x = None
    if x is None:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(BATCH, D_IN, generator=gen)
        info["source"] = "randn"
    x = x.float().contiguous().to(DEVICE)
    x *= math.sqrt(D_IN) / float(x.norm(dim=-1).mean())
    info["mean_norm"] = round(float(x.norm(dim=-1).mean()), 3)
    return x, info


# ------------------------------------------------------------- variants
class InterplabStep:
    """One training step of core/saes/training/trainer.py for one interplab SAE."""

    def __init__(self, arch: str, x: torch.Tensor):
        from interplab import SAE

        extra = (
            {"k": K}
            if arch in ("topk", "batchtopk")
            else ({"l1_coefficient": 2.0} if arch == "standard" else {"l0_coefficient": 0.5})
        )
        self.sae = SAE.create(arch, d_in=D_IN, d_sae=WIDTH, site=SITE, **extra).to(DEVICE)
        self.sae.train()
        with torch.no_grad():
            self.sae.b_dec.copy_(x.mean(0))  # as train_saes does at step 0
        self.opt = torch.optim.Adam(self.sae.parameters(), lr=LR, betas=(0.9, 0.999))
        self.since_fired = torch.zeros(WIDTH, dtype=torch.long, device=DEVICE)
        self.dead_tokens = 10_000_000
        self.x = x

    def __call__(self) -> float:
        from interplab.core.saes.training.trainer import train_step

        sae, opt, x = self.sae, self.opt, self.x
        dead = self.since_fired > self.dead_tokens
        info = train_step(sae, opt, x, dead, self.since_fired)
        return info["mse"]


class SAELensStep:
    """SAELens's own ``SAETrainer.step`` on one SAELens training SAE."""

    def __init__(self, arch: str, x: torch.Tensor, **cfg_kwargs: Any):
        from sae_lens import SAETrainer
        from sae_lens.config import SAETrainerConfig

        cls, cfg_cls = _saelens_classes(arch)
        extra = {"k": K} if arch in ("topk", "batchtopk") else {}
        self.sae = cls(cfg_cls(d_in=D_IN, d_sae=WIDTH, dtype="float32", device=str(DEVICE), **extra, **cfg_kwargs))
        trainer_cfg = SAETrainerConfig(
            total_training_samples=BATCH * 100_000,
            train_batch_size_samples=BATCH,
            lr=LR,
            lr_end=LR,
            device=str(DEVICE),
            autocast=False,
        )
        self.trainer = SAETrainer(trainer_cfg, self.sae, data_provider=iter(()))
        self.x = x

    def __call__(self) -> float:
        out = self.trainer.step(self.x)
        self.trainer.n_training_steps += 1
        return float(out.loss.detach())


def _saelens_classes(arch: str) -> tuple[type, type]:
    if arch == "topk":
        from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig

        return TopKTrainingSAE, TopKTrainingSAEConfig
    if arch == "batchtopk":
        from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig

        return BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig
    if arch == "standard":
        from sae_lens.saes.standard_sae import StandardTrainingSAE, StandardTrainingSAEConfig

        return StandardTrainingSAE, StandardTrainingSAEConfig
    if arch == "jumprelu":
        from sae_lens.saes.jumprelu_sae import JumpReLUTrainingSAE, JumpReLUTrainingSAEConfig

        return JumpReLUTrainingSAE, JumpReLUTrainingSAEConfig
    raise ValueError(arch)


class MatmulStep:
    """The physical reference: one dense fp32 [B, d] x [d, m] matmul (2*B*d*m FLOPs)."""

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(1)
        self.a = torch.randn(BATCH, D_IN, generator=gen).to(DEVICE)
        self.b = torch.randn(D_IN, WIDTH, generator=gen).to(DEVICE)
        self.out = torch.empty(BATCH, WIDTH, device=DEVICE)

    def __call__(self) -> float:
        torch.matmul(self.a, self.b, out=self.out)
        return 0.0


# -------------------------------------------------------- gradient check
def gradient_check(x: torch.Tensor, batch_topk: bool) -> dict[str, Any]:
    """interplab's sparse-backward loss vs dense autograd of the same maths, same weights, one step."""
    from interplab import SAE

    arch = "batchtopk" if batch_topk else "topk"
    sae = SAE.create(arch, d_in=D_IN, d_sae=WIDTH, k=K, site=SITE)
    with torch.no_grad():
        sae.b_dec.copy_(x.mean(0))
        sae.b_enc.normal_(0, 0.01, generator=torch.Generator().manual_seed(2))
    sae.to(x.device)  # initialised on the CPU: the same weights on any device
    loss, _ = sae.training_loss(x)
    loss.backward()
    sparse = {n: p.grad.detach().clone() for n, p in sae.named_parameters()}

    W_enc, b_enc, W_dec, b_dec = (
        p.detach().clone().requires_grad_(True) for p in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec)
    )
    pre = (x - b_dec) @ W_enc + b_enc
    if batch_topk:
        vals, flat = torch.topk(pre.flatten(), K * len(x))
        acts = torch.zeros_like(pre).flatten().scatter(0, flat, vals.relu()).view_as(pre)
    else:
        vals, idx = torch.topk(pre, K, dim=1)
        acts = torch.zeros_like(pre).scatter(1, idx, vals.relu())
    recon = acts @ W_dec + b_dec
    ref_loss = (recon - x).pow(2).sum(-1).mean()
    ref_loss.backward()
    dense = {"W_enc": W_enc.grad, "b_enc": b_enc.grad, "W_dec": W_dec.grad, "b_dec": b_dec.grad}
    per_param = {n: float((sparse[n] - dense[n]).abs().max()) for n in dense}
    scale = {n: float(dense[n].abs().max()) for n in dense}
    return {
        "arch": arch,
        "loss_abs_diff": abs(float(loss) - float(ref_loss)),
        "max_abs_grad_diff": max(per_param.values()),
        "per_param_max_abs_diff": per_param,
        "per_param_max_abs_grad": scale,
        "max_rel_grad_diff": max(per_param[n] / max(scale[n], 1e-30) for n in dense),
    }


# ------------------------------------------------------------------ main
def cost_model(name: str) -> tuple[str, int]:
    """(formula, FLOPs) of the work a variant's step must do, counting only the O(B*d*m) and O(B*k*d) terms."""
    B, d, m, k = BATCH, D_IN, WIDTH, K
    if name in ("interplab/topk", "interplab/batchtopk"):
        return "sparse encoder backward and decoder: 2*B*d*m + 8*B*k*d", 2 * B * d * m + 8 * B * k * d
    if name.startswith("saelens/topk_sparse"):
        # dense encoder forward and its two dense backward products; sparse decode (torch.sparse.mm) both ways
        return "dense encoder, sparse decoder: 6*B*d*m + 4*B*k*d", 6 * B * d * m + 4 * B * k * d
    return "dense: 12*B*d*m", 12 * B * d * m


def build_variants(x: torch.Tensor) -> tuple[dict[str, Callable[[], float]], dict[str, str]]:
    variants: dict[str, Callable[[], float]] = {"matmul": MatmulStep()}
    errors: dict[str, str] = {}
    for arch in ("topk", "batchtopk", "standard", "jumprelu"):
        variants[f"interplab/{arch}"] = InterplabStep(arch, x)
    specs: list[tuple[str, str, dict[str, Any]]] = [
        ("saelens/topk", "topk", {}),
        ("saelens/topk_sparse", "topk", {"use_sparse_activations": True}),
        (
            "saelens/topk_sparse_norescale",
            "topk",
            {"use_sparse_activations": True, "rescale_acts_by_decoder_norm": False},
        ),
        ("saelens/batchtopk", "batchtopk", {}),
        ("saelens/standard", "standard", {}),
        ("saelens/jumprelu", "jumprelu", {}),
    ]
    for name, arch, kwargs in specs:
        try:
            variants[name] = SAELensStep(arch, x, **kwargs)
        except Exception as err:  # record the failure, go on with the rest
            errors[name] = describe_error(err)
    return variants, errors


def describe_error(err: BaseException) -> str:
    """The exception's last line and the innermost frames, e.g. to show a crash was in backward."""
    line = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
    frames = traceback.extract_tb(err.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{line[:300]} [at {where}]"


GROUPS = [  # variants compared with each other run back to back, each group after its own matmul sample
    ["interplab/topk", "saelens/topk", "saelens/topk_sparse", "saelens/topk_sparse_norescale",
     "interplab/batchtopk", "saelens/batchtopk"],
    ["interplab/standard", "saelens/standard"],
    ["interplab/jumprelu", "saelens/jumprelu"],
]  # fmt: skip
SPARSE_REFS = ("saelens/topk_sparse", "saelens/topk_sparse_norescale")  # the first one that ran


def schedule(groups: list[list[str]], rnd: int) -> list[tuple[int, list[str]]]:
    """Groups rotated by round, members reversed on odd rounds, so no variant always runs first."""
    order = [(i, g if rnd % 2 == 0 else g[::-1]) for i, g in enumerate(groups)]
    shift = rnd % len(order)
    return order[shift:] + order[:shift]


def run(n_steps: int, acts: str | None, quick: bool = False) -> dict[str, Any]:
    load_before = load_avg()
    torch.manual_seed(0)
    x, data = make_batch(acts)
    log(f"data: {data}; threads {torch.get_num_threads()}; load {load_before}")
    import sae_lens

    variants, errors = build_variants(x)
    matmul = variants.pop("matmul")
    groups = [[n for n in g if n in variants] for g in GROUPS]
    # times[name][r] and the matmul time of its group in round r (None where it did not run)
    times: dict[str, list[float]] = {n: [] for n in variants}
    peak_s: dict[str, list[float]] = {n: [] for n in variants}
    load_rounds = []
    for rnd in range(n_steps + 1):  # round 0 is the warm-up; a variant that crashes there is recorded and dropped
        for _, members in schedule(groups, rnd):
            t0 = time.perf_counter()
            matmul()
            sync()
            t_mm = time.perf_counter() - t0
            for name in members:
                if name in errors:
                    continue
                t0 = time.perf_counter()
                try:
                    variants[name]()
                    sync()
                except Exception as err:
                    if rnd > 0:
                        raise
                    errors[name] = describe_error(err)
                    log(f"{name} crashed: {errors[name][:160]}")
                    continue
                if rnd > 0:
                    times[name].append(time.perf_counter() - t0)
                    peak_s[name].append(t_mm)
        load_rounds.append(load_avg()[0])
        done = {n: round(BATCH / t[-1]) for n, t in times.items() if t}
        log(f"round {rnd}/{n_steps}{' (warm-up)' if rnd == 0 else ''}: tokens/s {done}; load {load_avg()}")
    names = [n for n in variants if n not in errors]

    step_flops_dense = 12 * BATCH * D_IN * WIDTH
    step_flops_topk = 2 * BATCH * D_IN * WIDTH + 8 * BATCH * K * D_IN
    matmul_flops = 2 * BATCH * D_IN * WIDTH
    all_mm = [t for n in names for t in peak_s[n]]
    results: dict[str, Any] = {}
    for name in names:
        t, mm = times[name], peak_s[name]
        med = statistics.median(t)
        formula, useful = cost_model(name)
        fractions = [useful / ti / (matmul_flops / mi) for ti, mi in zip(t, mm)]
        results[name] = {
            "tokens_per_s": round(BATCH / med, 1),
            "tokens_per_s_min": round(BATCH / max(t), 1),
            "tokens_per_s_max": round(BATCH / min(t), 1),
            "median_step_s": round(med, 4),
            "steps_s": [round(v, 4) for v in t],
            "cost_model": formula,
            "useful_gflops_per_s": round(useful / med / 1e9, 2),
            "fraction_of_matmul_peak": round(statistics.median(fractions), 4),
            "dense_equivalent_gflops_per_s": round(step_flops_dense / med / 1e9, 2),
        }

    def paired(mine: str, ref: str) -> dict[str, Any] | None:
        """Speed ratio mine/ref from steps of the same round (run back to back): median and per round."""
        if mine not in results or ref not in results:
            return None
        per_round = [tr / tm for tm, tr in zip(times[mine], times[ref])]
        return {
            "ratio": round(statistics.median(per_round), 2),
            "per_round": [round(r, 2) for r in per_round],
            "ratio_of_median_tokens_per_s": round(results[mine]["tokens_per_s"] / results[ref]["tokens_per_s"], 2),
            "ratio_of_best_steps": round(min(times[ref]) / min(times[mine]), 2),
            "reference": ref,
        }

    sparse_ref = next((r for r in SPARSE_REFS if r in results), None)
    ratios: dict[str, Any] = {}
    for arch, goals in GOALS.items():
        entry: dict[str, Any] = {}
        refs = [("vs_saelens_default", f"saelens/{arch}", goals["default"])]
        if "sparse" in goals and sparse_ref:
            refs.append(("vs_saelens_sparse", sparse_ref, goals["sparse"]))
        for key, ref, goal in refs:
            cmp = paired(f"interplab/{arch}", ref)
            if cmp is not None:
                entry[key] = {**cmp, "goal": goal, "goal_met": cmp["ratio"] >= goal}
        entry["goal_met"] = bool(entry) and all(v["goal_met"] for v in entry.values() if isinstance(v, dict))
        ratios[arch] = entry

    log("gradient check (sparse backward vs dense autograd)")
    grad = {"topk": gradient_check(x, batch_topk=False)}
    if not quick:
        grad["batchtopk"] = gradient_check(x, batch_topk=True)
    topk = results["interplab/topk"]
    peak = matmul_flops / statistics.median(all_mm)
    return {
        "benchmark": "sae_training_step",
        "config": {
            "d_in": D_IN,
            "width": WIDTH,
            "k": K,
            "batch": BATCH,
            "dtype": "float32",
            "device": str(DEVICE),
            "timed_rounds": n_steps,
            "warmup_rounds": 1,
            "schedule": "per round: groups of compared variants back to back, each group after one matmul; "
            "groups rotated and member order reversed every other round",
            "ratios": "median over rounds of same-round step-time ratios (robust to load changing between rounds)",
        },
        "data": data,
        "environment": {
            "torch": torch.__version__,
            "sae_lens": getattr(sae_lens, "__version__", "?"),
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        "load_average": {
            "before": load_before,
            "after": load_avg(),
            "1min_after_each_round": load_rounds,
            "note": "1/5/15-min averages; above cpu_count means contention",
        },
        "matmul_reference": {
            "shape": f"[{BATCH},{D_IN}]x[{D_IN},{WIDTH}] fp32",
            "gflops_per_s_median": round(peak / 1e9, 2),
            "gflops_per_s_best": round(matmul_flops / min(all_mm) / 1e9, 2),
            "gflops_per_s_worst": round(matmul_flops / max(all_mm) / 1e9, 2),
        },
        "interplab_topk_flops": {
            "useful_gflops_per_s": topk["useful_gflops_per_s"],
            "fraction_of_matmul_peak": topk["fraction_of_matmul_peak"],
            "fraction_note": "median over rounds of (useful FLOP/s) / (matmul FLOP/s measured just before, same group)",
            "useful_gflop_per_step": round(step_flops_topk / 1e9, 2),
            "dense_step_gflop": round(step_flops_dense / 1e9, 2),
            "dense_step_cap_tokens_per_s": round(peak / (12 * D_IN * WIDTH), 1),
            "encoder_forward_cap_tokens_per_s": round(peak / (2 * D_IN * WIDTH), 1),
        },
        "results": results,
        "ratios": ratios,
        "goals_met": all(r["goal_met"] for r in ratios.values()),
        "saelens_errors": errors,
        "gradient_check": grad,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="timed rounds (default 4; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="3 timed rounds; gradient check of TopK only")
    parser.add_argument("--acts", default="/tmp/suite/acts", help="an interplab store to take a real batch from")
    parser.add_argument("--random", action="store_true", help="use torch.randn activations even if a store exists")
    parser.add_argument("--device", default="cpu", help="where every variant runs: cpu (default), cuda, cuda:1")
    args = parser.parse_args()
    global DEVICE
    try:
        DEVICE = torch.device(args.device)
        torch.empty(0, device=DEVICE)
    except RuntimeError as err:
        parser.error(f"--device {args.device!r} is not usable here ({err}); use cpu or cuda")
    n_steps = args.steps if args.steps is not None else (3 if args.quick else 4)
    if n_steps < 1:
        parser.error("--steps must be at least 1")
    warnings.filterwarnings("ignore", category=UserWarning)
    t0 = time.perf_counter()
    out = run(n_steps, None if args.random else args.acts, quick=args.quick)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
