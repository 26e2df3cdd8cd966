"""Logits are normalised in float32 only: every softmax, log-softmax and logsumexp of logits in interplab goes
through core/model/trace_ops.py (``token_probs``, ``log_probs``, ``log_normaliser``), which cast first.

A bfloat16 model's logits normalised in bfloat16 are wrong by several points of probability (the logit lens
showed 1.0 for 0.965). The first test reads the source: a call of ``softmax``, ``log_softmax``, ``logsumexp`` or
``cross_entropy`` (as a function or a method) is allowed only in trace_ops, on an argument cast with
``.float()`` in the call itself, or where an exemption names why its input is float32 already. The others check
the helpers on bfloat16 logits against float64.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from interplab.core.model.trace_ops import log_normaliser, log_probs, token_probs

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "core").rglob("*.py")), *sorted((ROOT / "interplab").rglob("*.py")),
           *sorted((ROOT / "widgets").rglob("*.py"))]  # fmt: skip
NORMALISERS = {"softmax", "log_softmax", "logsumexp", "cross_entropy"}
HOME = "core/model/trace_ops.py"
#: (file, function called): why its input is float32 whatever the model's dtype
EXEMPT = {
    ("core/probes/solver.py", "softmax"): "a probe's own float32 scores (features are float32), not model logits",
    ("core/probes/solver.py", "logsumexp"): "a probe's own float32 scores, not model logits",
    ("core/probes/binding.py", "cross_entropy"): "float32 scores of the binding subspace, not model logits",
    ("core/das/intervene.py", "cross_entropy"): "the readout's logits cast with .float() the line before",
    ("core/evals/planted.py", "cross_entropy"): "the planted model is built and trained in float32",
}


def _normalising_calls(path: Path) -> list[tuple[str, int]]:
    """(name, line) of each normalising call whose first argument is not cast with ``.float()`` in the call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in NORMALISERS:
            continue
        # torch.softmax(x.float(), ...) or x.float().softmax(...)
        subject = node.args[0] if node.args and not _is_method_on_tensor(func) else getattr(func, "value", None)
        cast = isinstance(subject, ast.Call) and isinstance(subject.func, ast.Attribute) and (
            subject.func.attr == "float")  # fmt: skip
        if not cast:
            found.append((name, node.lineno))
    return found


def _is_method_on_tensor(func: ast.expr) -> bool:
    """``x.softmax(-1)`` rather than ``torch.softmax(x, -1)`` / ``F.softmax`` / ``torch.nn.functional.softmax``."""
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    named = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    return named not in {"torch", "F", "functional"}


def test_logits_are_normalised_only_through_the_float32_helpers():
    offenders = []
    used_exemptions = set()
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        if rel == HOME:
            continue
        for name, line in _normalising_calls(path):
            if (rel, name) in EXEMPT:
                used_exemptions.add((rel, name))
            else:
                offenders.append(f"{rel}:{line} {name}")
    assert not offenders, (
        "Normalise logits with trace_ops.token_probs / log_probs / log_normaliser (float32), not: "
        + ", ".join(offenders)
    )
    assert used_exemptions == set(EXEMPT), f"stale exemptions: {set(EXEMPT) - used_exemptions}"


def test_the_source_check_finds_a_bfloat16_softmax(tmp_path):
    """The control: the check above does see a softmax on uncast logits, in each spelling."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\nimport torch.nn.functional as F\n"
        "a = torch.softmax(logits, -1)\nb = logits.log_softmax(-1)\nc = F.cross_entropy(logits, y)\n"
        "d = torch.logsumexp(logits.float(), -1)\ne = logits.float().softmax(-1)\n"
    )
    assert _normalising_calls(sample) == [("softmax", 3), ("log_softmax", 4), ("cross_entropy", 5)]


def test_helpers_normalise_bfloat16_logits_in_float32():
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 50_000, generator=gen) * 6 + 20).to(torch.bfloat16)  # Gemma-sized values
    exact = torch.softmax(logits.double(), -1)
    assert token_probs(logits).dtype == torch.float32
    torch.testing.assert_close(token_probs(logits).double(), exact, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(log_probs(logits).exp().double(), exact, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(log_probs(logits, in_place=True), log_probs(logits))
    lse = log_normaliser(logits)
    torch.testing.assert_close(lse.double(), torch.logsumexp(logits.double(), -1), atol=1e-4, rtol=0)
    # the control: the same normaliser in bfloat16 is off by far more
    assert (torch.logsumexp(logits, -1).double() - torch.logsumexp(logits.double(), -1)).abs().max() > 1e-2
