"""The torch-hook path of steering: forward hooks on ``model.module`` (the torch model), plain HF ``generate``.

The live panel streams tokens through :func:`stream`; :func:`generate_hooked` is the hook twin of
:func:`interplab.core.steering.traces.generate` (same tokens, greedy; ``generate(..., backend="hooks")``).
Hooks steer only the thread that applied them and are removed on exit. Generations hold
``model.lock``, so a panel generating in a background thread and the notebook's nnsight traces
take turns (see :mod:`interplab.core.model.model`).

Example
-------
>>> with apply(model, vec * 4.0):
...     model.module(**inputs)          # any forward inside is steered
>>> stream(model, "I think that", vec * 4.0, on_token=print)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..checks import check_number, check_positive_int, check_texts
from ..model.sites import site_module_path
from .plans import SitePlan, Steering, plan, start_mask, steer_value

if TYPE_CHECKING:
    from transformers import GenerationMixin

    from ..model.model import Model


def _hook(p: SitePlan, state: dict[str, Any]) -> Callable[..., Any]:
    def steer(x: torch.Tensor) -> torch.Tensor:
        first = state["calls"] == 0
        return steer_value(x, p, state["mask"] if first else None)

    if p.io in ("output", "edited"):

        def post(_mod: Any, _args: Any, out: Any) -> Any:
            if threading.get_ident() != state["thread"]:
                return None  # another thread's forward (e.g. the notebook while a panel streams): untouched
            if isinstance(out, tuple):
                return (steer(out[0]), *out[1:])
            return steer(out)

        return post

    def pre(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if threading.get_ident() != state["thread"]:
            return None
        if p.io == "stream":  # the block keeps this very tensor as its residual stream: change it in place
            x = args[0] if args else kwargs.get("hidden_states", next(iter(kwargs.values())))
            x.copy_(steer(x))
            return None
        if args:
            return (steer(args[0]), *args[1:]), kwargs
        key = "hidden_states" if "hidden_states" in kwargs else next(iter(kwargs))
        return args, {**kwargs, key: steer(kwargs[key])}

    return pre


@contextlib.contextmanager
def apply(model: Model, steering: Steering, mask_BL: torch.Tensor | None = None) -> Iterator[list[SitePlan]]:
    """Steer every forward of ``model.nn._module`` inside the block with torch hooks (removed on exit).

    Only forwards run by the thread that entered the block are steered, so a panel generating in
    a background thread leaves the notebook's own calls untouched.

    ``mask_BL`` (bool [batch, prompt columns]) limits steering on the first forward (the prompt);
    later forwards (generated tokens) are steered at every position.

    >>> with apply(model, vec * 4.0):
    ...     ids = model.module.generate(**inputs, max_new_tokens=10)
    """
    plans = plan(model, steering)
    state: dict[str, Any] = {"calls": 0, "mask": mask_BL, "thread": threading.get_ident()}
    handles = []
    root = model.module
    try:
        for p in plans:
            module = root.get_submodule(site_module_path(model.check_mapped(), p.site)[0])
            if p.io in ("output", "edited"):
                handles.append(module.register_forward_hook(_hook(p, state)))
            else:
                handles.append(module.register_forward_pre_hook(_hook(p, state), with_kwargs=True))

        # count forwards of the whole model so the prompt mask applies to the first only
        def count(*_: Any) -> None:
            if threading.get_ident() == state["thread"]:
                state["calls"] += 1

        handles.append(root.register_forward_hook(count))
        yield plans
    finally:
        for h in handles:
            h.remove()


class _Streamer:
    """HF streamer: skips the prompt, hands each new token id to a callback."""

    def __init__(self, on_token: Callable[[int], None] | None):
        self.on_token, self.seen_prompt = on_token, False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        if self.on_token is not None:
            for tok in value.reshape(-1).tolist():
                self.on_token(int(tok))

    def end(self) -> None:
        pass


class StepStreamer:
    """HF streamer that advances a progress bar once per generation step (the prompt, handed over first, skipped)."""

    def __init__(self, bar: Any):
        self.bar, self.seen_prompt = bar, False

    def put(self, value: torch.Tensor) -> None:
        if self.seen_prompt:
            self.bar.update(1)
        self.seen_prompt = True

    def end(self) -> None:
        pass


def _generator(model: Model) -> GenerationMixin:
    """The torch model as a transformers generator (a clear error for a model that cannot generate)."""
    from transformers import GenerationMixin

    lm = model.module
    if not isinstance(lm, GenerationMixin):
        raise TypeError(f"Steered generation needs a transformers generator model, got {type(lm).__name__}.")
    return lm


def _sampling(temperature: float, seed: int | None) -> dict[str, Any]:
    temperature = check_number(temperature, "temperature")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}.")
    if seed is not None:
        torch.manual_seed(int(seed))
    return {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}


def stream(
    model: Model,
    prompt: str,
    steering: Steering | None,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    seed: int | None = 0,
    start: int | None = None,
    on_token: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[int]:
    """Generate from one prompt with torch hooks, calling ``on_token(id)`` as each token arrives.

    ``should_stop()`` is checked after every token (a cancelled run returns what it has).
    ``steering=None`` or ``[]`` runs the unsteered model. Returns the new token ids.
    """
    from transformers import StoppingCriteria, StoppingCriteriaList

    (prompt,) = check_texts([prompt]) if isinstance(prompt, str) else check_texts(prompt)
    check_positive_int("max_new_tokens", max_new_tokens)
    steering = [] if steering is None else steering
    plan(model, steering)  # validate before any work
    enc = model.to_tokens([prompt], padding_side="left")
    width = enc["input_ids"].shape[1]
    mask = start_mask(enc["attention_mask"].sum(1), width, start, left_padded=True)

    class _Stop(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
            stop = bool(should_stop()) if should_stop is not None else False
            return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    inputs = {k: v.to(model.device) for k, v in enc.items()}
    pad = model.tokenizer.pad_token_id
    with model.lock, torch.no_grad(), apply(model, steering, mask):
        kwargs = _sampling(temperature, seed)  # seeded under the lock: no other run draws in between
        ids = _generator(model).generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            streamer=_Streamer(on_token),
            stopping_criteria=StoppingCriteriaList([_Stop()]),
            pad_token_id=pad if pad is not None else model.tokenizer.eos_token_id,
            **kwargs,
        )
    return ids[0, width:].tolist()


def generate_hooked(
    model: Model,
    texts: str | Sequence[str],
    steering: Steering,
    max_new_tokens: int,
    start: int | None,
    do_sample: bool,
    **kwargs: Any,
) -> list[str]:
    """Steered generation through torch hooks and plain HF ``generate``; the new text of each prompt."""
    texts = check_texts(texts)
    check_positive_int("max_new_tokens", max_new_tokens)
    enc = model.to_tokens(texts, padding_side="left")
    width = enc["input_ids"].shape[1]
    mask = start_mask(enc["attention_mask"].sum(1), width, start, left_padded=True)
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    pad = model.tokenizer.pad_token_id
    with model.lock, torch.no_grad(), apply(model, steering, mask):
        ids = _generator(model).generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            pad_token_id=pad if pad is not None else model.tokenizer.eos_token_id,
            **kwargs,
        )
    return model.tokenizer.batch_decode(ids[:, width:].cpu(), skip_special_tokens=True)


def next_token_logits(model: Model, prompt: str, steering: Steering | None) -> torch.Tensor:
    """The next-token logits [vocab] after ``prompt`` under ``steering`` (torch hooks, as :func:`stream` steers).

    They are the distribution the first generated token is drawn from; metrics of the steering panel read them.

    >>> p = next_token_logits(model, "The film was", vec * 4.0).softmax(-1)[good_id]
    """
    (prompt,) = check_texts([prompt])
    steering = [] if steering is None else steering
    plan(model, steering)
    enc = model.to_tokens([prompt])
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with model.lock, torch.no_grad(), apply(model, steering):
        logits = model.module(**inputs).logits
    return logits[0, -1].detach().float().cpu()
