"""Bad inputs of ilab.train: impossible sizes and unknown tasks, refused before any training."""

from __future__ import annotations

import interplab as ilab
from tests.contracts.rows import Row, T, V
from tests.train.nets import BitsMLP, PairMLP

ROWS: list[Row] = [
    Row(
        "ilab.train.group_table",
        lambda c: ilab.train.group_table("S7"),
        V,
        r"group='S7' is not one this builds: choose one of S3, S4, S5 or Z2 \.\. Z128",
    ),
    Row("ilab.train.group_table", lambda c: ilab.train.group_table("Z1"), V, r"group='Z1' is not one"),
    Row(
        "ilab.train.group_table",
        lambda c: ilab.train.group_table("S3", train_frac=1.5),
        V,
        r"train_frac=1\.5 must be a fraction in \(0, 1\] of the 36 rows",
    ),
    Row(
        "ilab.train.group_table",
        lambda c: ilab.train.group_table("S3", train_frac=0.01),
        V,
        r"train_frac=0\.01 leaves no training row out of 36",
    ),
    Row(
        "ilab.train.boolean",
        lambda c: ilab.train.boolean("nand"),
        V,
        r"fn='nand' is not a Boolean function this builds; choose one of xor, and, or",
    ),
    Row("ilab.train.boolean", lambda c: ilab.train.boolean("xor", n_inputs=40), V, r"n_inputs"),
    Row("ilab.train.boolean", lambda c: ilab.train.boolean("xor_first_two", n_inputs=1), V, r"n_inputs"),
    Row("ilab.train.group_elements", lambda c: ilab.train.group_elements("A5"), V, r"group='A5' is not one"),
    Row(
        "ilab.train.tiny",
        lambda c: ilab.train.tiny(BitsMLP(), ilab.train.boolean("xor"), batch_size=5),
        V,
        r"batch_size",
    ),
    Row("ilab.train.tiny", lambda c: ilab.train.tiny(BitsMLP(), ilab.train.boolean("xor"), steps=0), V, r"steps"),
    Row(
        "ilab.train.tiny",
        lambda c: ilab.train.tiny(PairMLP(6, n_out=3), ilab.train.group_table("S3")),
        V,
        r"PairMLP gives logits of shape \(2, 3\) for 2 rows of group_table:S3, which has 6 answers",
    ),
    Row("ilab.train.tiny", lambda c: ilab.train.tiny(BitsMLP(), "xor"), T, r"task must be a Task .*got str"),
    Row(
        "ilab.train.bursty_icl",
        lambda c: ilab.train.bursty_icl(2000, pool=1024),
        V,
        r"n_classes=2000 does not fit: pool=1024 items less n_novel=64 novel ones leave 960",
    ),
    Row(
        "ilab.train.bursty_icl",
        lambda c: ilab.train.bursty_icl(64, n_pairs=5, burst=2),
        V,
        r"n_pairs=5 is not a multiple of burst=2",
    ),
    Row("ilab.train.bursty_icl", lambda c: ilab.train.bursty_icl(64, n_labels=2), V, r"n_labels"),
    Row(
        "ilab.train.bursty_icl",
        lambda c: ilab.train.bursty_icl(4, n_pairs=8, burst=2),
        V,
        r"n_classes=4 is too few for contexts of n_pairs=8 // burst=2 = 4 classes .* give at least 5",
    ),
    Row(
        "ilab.train.bursty_icl",
        lambda c: ilab.train.bursty_icl(64, probe="both"),
        V,
        r"probe='both' is not one of 'icl', 'iwl'",
    ),
    Row("ilab.train.dag_reachability", lambda c: ilab.train.dag_reachability(8, n_edges=20), V, r"n_edges.*13"),
    Row("ilab.train.dag_reachability", lambda c: ilab.train.dag_reachability(40), V, r"n_vertices.*26"),
    Row(
        "ilab.train.dag_hops",
        lambda c: ilab.train.dag_hops(ilab.train.boolean("xor")),
        V,
        r"dag_hops reads a dag_reachability task, got 'boolean:xor'",
    ),
    Row(
        "ilab.train.byte_text",
        lambda c: ilab.train.byte_text({"prose": ["a short text"]}, seq_len=64),
        V,
        r"domain 'prose' holds 12 bytes, too few for windows of seq_len=64",
    ),
    Row("ilab.train.byte_text", lambda c: ilab.train.byte_text(["a text"]), V, r"domains must be a dict"),
    Row("ilab.train.byte_text", lambda c: ilab.train.byte_text({"prose": ["x" * 99]}, seq_len=0), V, r"seq_len"),
    Row("ilab.train.repeated_tokens", lambda c: ilab.train.repeated_tokens(n_tokens=1), V, r"n_tokens"),
    Row("ilab.train.repeated_tokens", lambda c: ilab.train.repeated_tokens(half_len=1), V, r"half_len"),
    Row(
        "ilab.train.TextTask.rows_of",
        lambda c: ilab.train.byte_text({"prose": ["x" * 99]}, seq_len=8, rows_per_domain=2).rows_of("code"),
        V,
        r"domain='code' is not one of this task's: prose",
    ),
    Row("ilab.train.q_agent_bandit", lambda c: ilab.train.q_agent_bandit(alpha=0.0), V, r"alpha"),
    Row("ilab.train.q_agent_bandit", lambda c: ilab.train.q_agent_bandit(n_episodes=1), V, r"n_episodes"),
    Row(
        "ilab.train.q_agent_bandit",
        lambda c: ilab.train.q_agent_bandit(p_reward=(0.8,)),
        V,
        r"p_reward must be two probabilities \(the better arm's, the other's\), got \(0\.8,\)",
    ),
    Row("ilab.train.q_agent_bandit", lambda c: ilab.train.q_agent_bandit(p_reward=(1.5, 0.2)), V, r"p_reward"),
]

EXEMPT: dict[str, str] = {
    "ilab.train.TextTask": "plain data built by byte_text, which has rows",
    "ilab.train.TextTask.decoded": "indexes its own rows with a mask or indices; torch names a bad index",
    "ilab.train.BanditTask": "plain data built by q_agent_bandit, which has rows",
    "ilab.train.Task": "plain data built by the task generators (group_table, boolean), which have rows",
    "ilab.train.TrainResult": "a result built by ilab.train.tiny (which has rows)",
    "ilab.train.answer_logits": "calls the module on token ids; a module that cannot read them raises its own error",
    "ilab.train.Task.texts": "indexes its own rows with a mask or indices; torch names a bad index",
}
