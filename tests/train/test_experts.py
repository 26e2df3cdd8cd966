"""Byte-level domain tasks, a next-token objective at every position, and the experts of a tiny Mixtral: routing
shares from the routing sites, removal of experts (restored after), and Monet's resection claim failing on an
untrained model (the notebook's control)."""

from __future__ import annotations

import pytest
import torch
from transformers import ByT5Tokenizer, MixtralConfig, MixtralForCausalLM

import interplab as ilab
from tests.train.nets import BitsMLP

experts = ilab.train.experts
PROSE = ["The cat sat on the mat and the dog ran to the house. " * 8]
CODE = ["def f(x):\n    return [y * 2 for y in range(x)]\n" * 8]


def tiny_mixtral(seed: int = 0) -> MixtralForCausalLM:
    config = MixtralConfig(vocab_size=259, hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=1,
                           max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(seed)
    return MixtralForCausalLM(config).eval()


def test_byte_text_windows_answer_the_next_byte_and_decode_back():
    task = ilab.train.byte_text({"prose": PROSE, "code": CODE}, seq_len=12, rows_per_domain=5, train_frac=0.6)
    assert task.inputs_NL.shape == task.targets_N.shape == (10, 12)
    assert torch.equal(task.inputs_NL[:, 1:], task.targets_N[:, :-1])
    assert task.rows_of("code").tolist() == [False] * 5 + [True] * 5
    assert all(text in PROSE[0] for text in task.decoded(task.rows_of("prose")))
    tok = ByT5Tokenizer(extra_ids=0)
    assert tok(task.decoded([7])[0], add_special_tokens=False).input_ids == task.inputs_NL[7].tolist()
    other = ilab.train.byte_text({"prose": PROSE, "code": CODE[0][:-1]}, seq_len=12, rows_per_domain=5)
    assert other.identity()["texts_sha256"] != task.identity()["texts_sha256"]


def test_repeated_tokens_answer_only_on_the_repeat():
    task = ilab.train.repeated_tokens(n_tokens=9, half_len=5, n_rows=4)
    ids, answers = task.inputs_NL, task.targets_N
    assert torch.equal(ids[:, :5], ids[:, 5:])
    assert (answers[:, :5] == -100).all() and (answers[:, -1] == -100).all()
    assert torch.equal(answers[:, 5:-1], ids[:, 1:5])


def test_the_trainer_learns_a_next_token_at_every_position():
    class PreviousToken(torch.nn.Module):
        """Logits at each position from the token before it: with a repeat of two, [a b a b] answers b after a."""

        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(9, 9)

        def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
            return self.table(ids_BL.roll(1, dims=1))

    task = ilab.train.repeated_tokens(n_tokens=9, half_len=2, n_rows=64)
    torch.manual_seed(0)
    res = ilab.train.tiny(PreviousToken(), task, steps=150, lr=0.1, eval_every=150, progress=False)
    assert res.final["train_acc"] > 0.9
    with pytest.raises(ValueError, match=r"an answer at every position"):
        ilab.train.tiny(BitsMLP(n_inputs=4), task, steps=1, progress=False)


def test_expert_usage_comes_from_the_routing_sites_and_removed_experts_come_back():
    net = tiny_mixtral()
    model = ilab.load_model(net, tokenizer=ByT5Tokenizer(extra_ids=0))
    usage = {"prose": experts.expert_usage(model, [PROSE[0][:60]]), "code": experts.expert_usage(model, [CODE[0][:60]])}
    assert usage["prose"].shape == (2, 4) and torch.allclose(usage["prose"].sum(1), torch.ones(2))
    top = experts.domain_experts(usage, "code", k=1)
    assert sorted(top) == [0, 1] and all(len(v) == 1 for v in top.values())
    before = [p.detach().clone() for p in net.parameters()]
    ids = torch.tensor([[70, 71, 72, 73]])
    with experts.without_experts(net, {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}):
        assert (net.model.layers[1].mlp.experts.down_proj == 0).all()
        assert not torch.equal(net(ids).logits, tiny_mixtral()(ids).logits)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


def test_the_resection_claim_fails_for_an_untrained_model():
    net = tiny_mixtral()
    task = ilab.train.byte_text({"prose": PROSE, "code": CODE}, seq_len=16, rows_per_domain=16, train_frac=0.5)
    model = ilab.load_model(net, tokenizer=ByT5Tokenizer(extra_ids=0))
    usage = {d: experts.expert_usage(model, task.decoded(task.rows_of(d))) for d in task.domains}
    table = experts.resection(net, task, usage, k=1, draws=4)
    assert list(table.index) == ["prose", "code"]
    assert not experts.selective(table, domains=["code"]) and not experts.selective(table, domains=["prose"])


def test_bad_expert_requests_are_refused():
    with pytest.raises(ValueError, match=r"domain='poetry' must be one of at least two domains in usage: a, b"):
        experts.domain_experts({"a": torch.ones(1, 2), "b": torch.ones(1, 2)}, "poetry", k=1)
    with pytest.raises(ValueError, match=r"has no stacked experts"), experts.without_experts(BitsMLP(), {0: [0]}):
        pass


def test_impossible_text_task_sizes_are_refused_before_any_work():
    with pytest.raises(ValueError, match=r"domain 'code' holds 9 bytes, too few for windows of seq_len=32"):
        ilab.train.byte_text({"prose": PROSE, "code": ["def f(): "]}, seq_len=32)
    with pytest.raises(ValueError, match=r"half_len"):
        ilab.train.repeated_tokens(half_len=1)
    with pytest.raises(ValueError, match=r"domain='poetry' is not one of this task's: prose, code"):
        ilab.train.byte_text({"prose": PROSE, "code": CODE}, seq_len=8, rows_per_domain=2).rows_of("poetry")
