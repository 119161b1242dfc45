"""A request's graph is read into the typed model once, when its image is made."""

from __future__ import annotations

import pytest

from kernel_server.control.registry import GraphError, Registry
from qonductor_jupyter.splitter import split_cell

pytestmark = pytest.mark.unit


def test_an_image_keeps_a_graph_the_splitter_made_and_refuses_a_malformed_one(tmp_path) -> None:
    registry = Registry(tmp_path)
    graph = split_cell("x = 1\ny = x + 1\n").to_dict()
    image = registry.create("x = 1\ny = x + 1\n", graph, {}, None, {})
    assert image.summary().steps == len(graph["steps"])
    with pytest.raises(GraphError, match="malformed workflow graph: KeyError"):
        registry.create("x = 1", {"steps": [{"id": 0}], "edges": []}, {}, None, {})
    broken = dict(graph, edges=[[0, 7]])
    with pytest.raises(GraphError, match="an edge names no step"):
        registry.create("y = 2", broken, {}, None, {})
