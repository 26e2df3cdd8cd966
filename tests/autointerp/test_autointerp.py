"""Automated interpretability on planted latents (each fires exactly on one word): the scorers against their
brute-force definitions, the metrics against scikit-learn, and the embedded SmolLM2 as explainer and scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.autointerp.examples import Example, marked_text, negative_examples, split_examples
from interplab.core.autointerp.explain import explanation_ended
from interplab.core.autointerp.scoring import auroc, balanced_accuracy
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

import interplab as ilab
from tests.autointerp.planted import WORDS, WordJudge, explanation_of, planted_data


@pytest.fixture(scope="module")
def planted(smollm2):
    return planted_data(smollm2.tokenizer)


def test_auroc_and_balanced_accuracy_match_scikit_learn():
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.random(30) < 0.4
        scores = np.round(rng.random(30), 1)  # ties included
        assert auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))
        assert balanced_accuracy(scores, labels) == pytest.approx(balanced_accuracy_score(labels, scores > 0.5))


def test_marked_text_puts_each_run_between_marks():
    tokens = ["The", " city", " of", " Paris", " is", " big"]
    assert marked_text(tokens, np.array([0, 0, 0, 1, 0, 0], bool)) == "The city of<< Paris>> is big"
    assert marked_text(tokens, np.array([1, 1, 0, 0, 1, 1], bool)) == "<<The city>> of Paris<< is big>>"
    assert Example(tokens, np.array([0, 0, 0, 4.0, 1.0, 0])).active(0.3).tolist() == [0, 0, 0, 1, 0, 0]


def test_held_out_and_negative_examples(planted):
    shown, held = split_examples(planted, 0, 8)
    assert len(shown) == 8 and len(held) == planted.n_top - 8
    assert all("Paris" in e.text for e in shown + held)
    negatives = negative_examples(planted, 0, 10, np.random.default_rng(0))
    assert len(negatives) == 10 and not any("Paris" in e.text for e in negatives)
    assert all(e.acts.max() == 0 for e in negatives)


def test_planted_latents_score_one_with_their_own_explanation_and_chance_with_another(planted):
    """The judge answers by the scorers' definitions: a planted latent's own explanation separates its examples
    perfectly, another latent's does no better than chance, the constant one gives exactly chance."""
    judge = WordJudge()
    explained = ilab.autointerp.explain(planted, range(len(WORDS)), explainer=judge)
    assert explained.texts == {m: explanation_of(w) for m, w in enumerate(WORDS)}
    table = ilab.autointerp.score(planted, explained, ("detection", "fuzzing"), judge).table
    assert len(table) == len(WORDS) * 2 * 2
    assert (table["explanation"] == 1.0).all()
    assert (table["shuffled"] <= 0.5).all() and (table["constant"] == 0.5).all()
    assert table["beats_shuffled"].all()
    assert (table["shuffled_from"] != table["latent"]).all()


def test_prompts_are_shown_and_overridable(planted):
    custom = "Marked: {tokens}\n{examples}\nName the word."
    explained = ilab.autointerp.explain(planted, [0, 1], explainer=WordJudge(), prompts={"explain": custom})
    assert explained.prompts[0].startswith('Marked: "Paris"\n1. ') and "<< Paris>>" in explained.prompts[0]
    assert explained.settings["prompts"]["explain"] == custom
    assert ilab.autointerp.PROMPTS["explain"] != custom  # the defaults are left as they were


@pytest.mark.embedded
@pytest.mark.parametrize("variant", ["default", "contrastive"])
def test_smollm2_explains_planted_latents_by_their_word(smollm2, planted, variant):
    explained = ilab.autointerp.explain(planted, range(len(WORDS)), variant=variant)  # the default explainer
    assert explained.explainer == "smollm2-135m-instruct"
    for m, word in enumerate(WORDS):
        assert word.strip() in explained.texts[m], (m, explained.texts[m])
        assert not any(w.strip() in explained.texts[m] for w in WORDS if w != word)  # control: only its own word
    if variant == "contrastive":
        assert "does not fire anywhere" in explained.prompts[0] and "<< dogs>>" not in explained.prompts[0]


@pytest.mark.embedded
def test_smollm2_scores_beside_baselines(smollm2, planted):
    """SmolLM2-135M as the scorer: every score and both baselines come out of one run, as probabilities and
    correlations in range. (At 135M parameters its judgements are near chance on planted latents; the notebook
    shows the numbers.)"""
    explained = ilab.autointerp.explain(planted, [0, 1], explainer=WordJudge())
    scores = ilab.autointerp.score(planted, explained, ("detection", "simulation"), smollm2, n_examples=3)
    table = scores.table
    assert set(table["metric"]) == {"auroc", "balanced_accuracy", "correlation"}
    for column in ("explanation", "shuffled", "constant"):
        auc = table.loc[table["metric"] != "correlation", column]
        assert ((auc >= 0) & (auc <= 1)).all()
        corr = table.loc[table["metric"] == "correlation", column]
        assert ((corr >= -1) & (corr <= 1)).all()
    assert scores.summary().shape[0] == 3


@pytest.mark.embedded
def test_simulation_reads_a_digit_after_every_line(smollm2):
    from interplab.core.autointerp.clients import ModelChat

    chat = ModelChat(smollm2)
    messages = [{"role": "user", "content": "Rate each token 0-9."}]
    lines = ["The", " cat", " sat"]
    expected = chat.digit_expectations(messages, lines)
    assert expected.shape == (3,) and ((expected >= 0) & (expected <= 9)).all()
    # control: the same positions read by hand from the logits of the whole text
    head = chat.prompt(messages)
    text = head + "".join(f"{line}\t0\n" for line in lines)
    ids = smollm2.tokenizer(text)["input_ids"]
    tab = [i for i, t in enumerate(ids) if smollm2.tokenizer.decode([t]).endswith("\t")]
    assert len(tab) == 3
    logits = smollm2.logits(text, positions=tab)[0]
    digits = [smollm2.tokenizer(str(d), add_special_tokens=False)["input_ids"][0] for d in range(10)]
    by_hand = (logits[:, digits].softmax(1) @ torch.arange(10.0)).numpy()
    np.testing.assert_allclose(expected, by_hand, atol=1e-5)


#: Answers as SmolLM2 writes them (and harder ones): what follows the explanation must change nothing.
ANSWERS = (
    'The neuron fires on the token "last" in the text: "1.  Hughes made his Morris County debut in his bid',
    'The neuron fires on the token "pro" which is a symbol of the opposition to the incumbent',
    "The neuron fires on the token marked between << and >> in these texts:\n\n<<These>> contend there",
    'The neuron fires on the token "as".',
    "Answer: which words end a clause, such as commas",
    "the U.S. flag and the U.N. charter",
    "  \n\nExplanation: dates\nand more",
    "numbers",
)


class Canned:
    """An explainer that writes the canned answers, in full."""

    name = "canned"

    def __init__(self, answers):
        self.answers = list(answers)

    def complete(self, conversations, max_new_tokens):
        return [self.answers.pop(0) for _ in conversations]

    def yes_probability(self, conversations):
        return np.full(len(conversations), 0.5)


class CannedUntil(Canned):
    """The same answers cut as a local model cuts them: after the first character for which ``ended`` holds."""

    def complete_until(self, conversations, max_new_tokens, ended):
        full = self.complete(conversations, max_new_tokens)
        return [next((a[:n] for n in range(1, len(a)) if ended(a[:n])), a) for a in full]


def test_answers_cut_once_the_explanation_ended_give_the_same_explanations(planted):
    assert len(ANSWERS) % len(WORDS) == 0
    cut = CannedUntil(ANSWERS).complete_until([None] * len(ANSWERS), 30, explanation_ended)
    assert sum(len(c) < len(a) for c, a in zip(cut, ANSWERS)) >= 5  # control: most answers are cut short
    for first in range(0, len(ANSWERS), len(WORDS)):
        group = ANSWERS[first : first + len(WORDS)]
        whole = ilab.autointerp.explain(planted, range(len(WORDS)), explainer=Canned(group)).texts
        assert ilab.autointerp.explain(planted, range(len(WORDS)), explainer=CannedUntil(group)).texts == whole
    assert whole[1] == "the U.S" and whole[2] == "dates"
