"""Bad inputs of automated interpretability (ilab.autointerp) and chat prompts: each row one bad call and the error
it must give, before any generation (the tiny model's forward passes fail in the rows marked ``before_work``).

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``.
"""

from __future__ import annotations

import socket
from typing import Any

import interplab as ilab
from tests.autointerp.planted import WordJudge
from tests.contracts.rows import Ctx, I, Row, T, V, before_work


def _silent_server() -> str:
    """The URL of a socket that accepts connections and never answers (kept open for the run)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    _KEEP.append(server)
    return f"http://127.0.0.1:{server.getsockname()[1]}/v1"


def _closed_port() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


_KEEP: list[Any] = []


def _explained(c: Ctx) -> Any:
    return ilab.autointerp.explain(c.data, [0, 1], explainer=WordJudge())


def _a_live_latent(c: Ctx) -> int:
    return int(next(i for i in range(c.data.d_sae) if c.data.top_max[i, 0] > 0))


ROWS: list[Row] = [
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [0], explainer="gpt-5"), V,
        r"explainer='gpt-5' is not an explainer: give None .*'smollm2-135m-instruct'.*URL"),
    Row("ilab.autointerp.explain", before_work(lambda c: ilab.autointerp.explain(c.data, [_a_live_latent(c)],
        explainer=c.model)), V, r"'.*' has no chat template, so it cannot take chat messages"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [c.data.d_sae], explainer=WordJudge()),
        I, r"24"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [], explainer=WordJudge()), V,
        r"latents=\[\] must be a non-empty list of latent ids"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [0], explainer=_closed_port()),
        ConnectionError, r"endpoint 'http://127\.0\.0\.1:\d+/v1/models' did not answer within 3 s"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [0], explainer=_silent_server()),
        ConnectionError, r"endpoint 'http://127\.0\.0\.1:\d+/v1/models' did not answer within 3 s"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [0], WordJudge(), variant="best"), V,
        r"variant='best' is not known; choose one of \['default', 'contrastive'\]"),
    Row("ilab.autointerp.explain", lambda c: ilab.autointerp.explain(c.data, [0], WordJudge(), prompts={"x": "y"}),
        V, r"prompts has an unknown key 'x'; the prompts are \["),
    Row("ilab.autointerp.score", lambda c: ilab.autointerp.score(c.data, _explained(c), "surprisal", WordJudge()), V,
        r"unknown scorer \['surprisal'\]; choose from \['detection', 'fuzzing', 'simulation'\]"),
    Row("ilab.autointerp.score", lambda c: ilab.autointerp.score(c.data, {0: "cats"}, model=WordJudge()), T,
        r"explanations must be what ilab\.autointerp\.explain gives, not dict"),
    Row("ilab.autointerp.score", lambda c: ilab.autointerp.score(c.data, _explained(c), "simulation", WordJudge()),
        V, r"simulation needs per-token log-probabilities of a local model; 'word judge' gives none"),
    Row("ilab.autointerp.chat_client", lambda c: ilab.autointerp.chat_client(42), V, r"explainer=42 is not"),
    Row("ilab.autointerp.explain_and_score", lambda c: ilab.autointerp.explain_and_score(
        c.data, [_a_live_latent(c)], WordJudge()), V, r"needs at least 2 latents"),
    Row("ilab.autointerp.explain_and_score", lambda c: ilab.autointerp.explain_and_score(
        c.data, [0, 1], WordJudge(), chunk=0), V, r"chunk"),
    Row("ilab.autointerp.explain_and_score", lambda c: ilab.autointerp.explain_and_score(
        c.data, [0, 1], WordJudge(), scorers=("intruder",)), V, r"scorers=\('intruder',\) holds an unknown scorer"),
    Row("ilab.autointerp.explain_and_score", lambda c: ilab.autointerp.explain_and_score(
        c.data, [0, 1], explainer="gpt-5"), V, r"explainer='gpt-5' is not an explainer"),
    Row("Model.chat_prompt", lambda c: c.model.chat_prompt("hello"), V, r"messages='hello' is not a conversation"),
    Row("Model.chat_prompt", lambda c: c.model.chat_prompt([{"role": "bot", "content": "hi"}]), V,
        r"messages\[0\] has role 'bot'; choose one of \['system', 'user', 'assistant'\]"),
    Row("Model.chat_prompt", lambda c: c.model.chat_prompt([{"role": "user", "content": "hi"}]), V,
        r"has no chat template"),
]  # fmt: skip

EXEMPT: dict[str, str] = {
    "ilab.autointerp.Explanations": "a result built by ilab.autointerp.explain (which has rows)",
    "ilab.autointerp.Scores": "a result built by ilab.autointerp.score (which has rows)",
}
