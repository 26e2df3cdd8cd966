"""Graph files from other people: every field's type and every number's range checked before a graph loads."""

from __future__ import annotations

import json

import pytest
import torch
from interplab.core.circuits.graph import Graph
from interplab.core.storage.readers import FileError
from safetensors.torch import load_file, save_file


def _graph() -> Graph:
    """Two layers, two tokens, one feature, one logit: 1 + 2*2 + 2 + 1 = 8 nodes."""
    adjacency = torch.zeros(8, 8)
    adjacency[7, 0], adjacency[0, 5] = 1.0, 0.5
    return Graph(prompt="a b", token_ids=[5, 6], tokens=["a", " b"], n_layers=2,
                 features=torch.tensor([[1, 1, 3]]), activations=torch.tensor([0.5]), logit_ids=[7],
                 logit_tokens=[" c"], logit_probs=torch.tensor([0.9]), adjacency=adjacency)  # fmt: skip


@pytest.mark.parametrize(("change", "match"), [
    ({"token_ids": "abc"}, "token_ids must be a list of integers"),
    ({"tokens": [1, 2]}, "tokens must be a list of strings"),
    ({"token_ids": {"a": 1}}, "token_ids must be a list of integers"),
    ({"token_ids": [5, -7]}, r"token_ids holds -7 at \[1\]: must be a finite number >= 0"),
    ({"logit_ids": [-1]}, r"logit_ids holds -1 at \[0\]"),
])  # fmt: skip
def test_graph_json_fields_of_the_wrong_type_or_range_are_named(tmp_path, change, match):
    _graph().save(tmp_path / "g")
    meta = json.loads((tmp_path / "g" / "graph.json").read_text())
    (tmp_path / "g" / "graph.json").write_text(json.dumps({**meta, **change}))
    with pytest.raises(FileError, match=match):
        Graph.load(tmp_path / "g")


@pytest.mark.parametrize(("name", "edit", "match"), [
    ("features", lambda t: t.index_fill_(1, torch.tensor([0]), 10**6), r"layer\) holds 1000000 at \[0\]: must be in "
                                                                       r"0\.\.1 \(n_layers 2\)"),
    ("features", lambda t: t.index_fill_(1, torch.tensor([1]), 9), r"position\) holds 9 at \[0\]"),
    ("features", lambda t: t.index_fill_(1, torch.tensor([2]), -1), r"latent\) holds -1 at \[0\]"),
    ("values", lambda t: t.fill_(float("nan")), r"values holds nan at \[0\]: must be finite"),
    ("activations", lambda t: t.fill_(float("inf")), r"activations holds inf"),
    ("logit_probs", lambda t: t.fill_(float("nan")), r"logit_probs holds nan"),
    ("logit_probs", lambda t: t.fill_(3.0), r"logit_probs holds 3 at \[0\]: must be a finite number in 0\.\.1"),
])  # fmt: skip
def test_graph_arrays_out_of_range_or_not_finite_are_refused(tmp_path, name, edit, match):
    """All-NaN arrays loaded and scores() then reported a cycle; a feature layer of 1e6 loaded silently."""
    _graph().save(tmp_path / "g")
    file = tmp_path / "g" / "graph.safetensors"
    arrays = load_file(str(file))
    edit(arrays[name])
    save_file(arrays, str(file))
    with pytest.raises(FileError, match=match):
        Graph.load(tmp_path / "g")


def test_a_graph_round_trips_through_its_files(tmp_path):
    graph = _graph()
    back = Graph.load(graph.save(tmp_path / "g"))
    assert back.token_ids == graph.token_ids and torch.equal(back.adjacency, graph.adjacency)
    assert back.scores() == pytest.approx(graph.scores())
