"""A request's graph is read into the typed model once, when its image is made."""

from __future__ import annotations

import dataclasses
import json

import msgspec
import pytest

from kernel_server.control.registry import GraphError, Registry
from kernel_server.wire.messages import CreateWorkflow
from qonductor_jupyter.splitter import split_cell

pytestmark = pytest.mark.unit


def test_an_image_keeps_a_graph_the_splitter_made_and_refuses_a_malformed_one(tmp_path) -> None:
    registry = Registry(tmp_path)
    graph = dataclasses.replace(split_cell("x = 1\ny = x + 1\n"), source="x = 1\ny = x + 1\n")
    image = registry.create(graph, {}, None, {})
    assert image.summary().steps == len(graph.steps)
    assert registry.get(image.id).graph == graph  # image.json keeps it typed
    broken = dataclasses.replace(graph, edges=((0, 7),))
    with pytest.raises(GraphError, match="an edge names no step"):
        registry.create(broken, {}, None, {})


def test_a_malformed_graph_is_refused_when_the_request_is_decoded() -> None:
    body = {"graph": {"steps": [{"id": 0}], "edges": []}}
    with pytest.raises(msgspec.ValidationError, match="missing required field"):
        CreateWorkflow.from_dict(body)
    good = split_cell("x = 1\n")
    assert CreateWorkflow.from_dict(CreateWorkflow(graph=good).to_dict()).graph == good


def test_an_image_written_by_the_dict_era_still_reads(tmp_path) -> None:
    graph = split_cell("x = 1\n")
    old = {
        "id": "img-000000000001",
        "name": "old",
        "source": "x = 1\n",
        "graph": {**graph.to_dict(), "source": "x = 1\n", "required_inputs": []},
        "config": {},
        "created_at": 1.0,
        "deployed": None,
        "bound_names": [],
        "owner": "",
    }
    (tmp_path / "img-000000000001").mkdir()
    (tmp_path / "img-000000000001" / "image.json").write_text(json.dumps(old))
    image = Registry(tmp_path).get("img-000000000001")
    assert image.graph == dataclasses.replace(graph, source="x = 1\n")
