"""Workflow registry: hybrid workflow images on disk.

An image is a folder ``images/<image_id>/`` with ``image.json`` (name, source, split graph, config,
deployment config) and ``bound.msgpack`` (objects bound into the image, e.g. the step functions
of the function-list form). The id is a content hash, so re-running the same cell reuses its image.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import msgspec

from kernel_server.core.deployment import DeploymentConfig, load_config
from kernel_server.core.files import write_private
from kernel_server.core.graph import StepKind, WorkflowGraph
from kernel_server.core.status import ImageSummary

# What create() makes; anything else (a path, "..") names no image.
IMAGE_ID = re.compile(r"^img-[0-9a-f]{12}$")


class UnknownImage(KeyError):
    def __str__(self) -> str:
        return f"no workflow image {self.args[0]!r}; list them with list_images()"


@dataclass
class Image:
    id: str
    name: str
    source: str
    graph: WorkflowGraph
    config: DeploymentConfig
    created_at: float
    deployed: DeploymentConfig | None = None
    bound_names: list[str] = field(default_factory=list)
    owner: str = ""  # the shared orchestrator's user who created it ("": its owner)

    def summary(self) -> ImageSummary:
        steps = self.graph.steps
        return ImageSummary(
            id=self.id,
            name=self.name,
            created_at=self.created_at,
            deployed=self.deployed is not None,
            steps=len(steps),
            quantum_steps=sum(1 for s in steps if s.kind is not StepKind.CLASSICAL),
            inputs=[n for n in self.graph.inputs if n not in self.bound_names],
            outputs=sorted(self.graph.outputs),
            config=self.config,
        )


class GraphError(ValueError):
    """A workflow graph the orchestrator cannot run (a client that is not ours, or a bug)."""


def check_graph(graph: WorkflowGraph) -> WorkflowGraph:
    """A request's graph, whose types the wire checked, with its references checked too:
    refused here, once, rather than when a step is looked up halfway through a run."""
    ids = {step.id for step in graph.steps}
    if len(ids) != len(graph.steps) or any(a not in ids or b not in ids for a, b in graph.edges):
        raise GraphError("malformed workflow graph: step ids repeat, or an edge names no step")
    return graph


def _read_image(path: Path) -> Image:
    """An image as ``Registry._write`` left it (the graph of an older version's image, a flat
    dict with the cell's source and required inputs, reads the same)."""
    return msgspec.json.decode(path.read_bytes(), type=Image)


class Registry:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def create(
        self,
        graph: WorkflowGraph,
        config: DeploymentConfig,
        name: str | None,
        bound: dict[str, bytes],
        owner: str = "",
    ) -> Image:
        config = load_config(config)  # typed by the wire; its values checked here
        check_graph(graph)
        source = graph.source
        digest = hashlib.sha256()
        # Each user's images are their own: the same cell of two users makes two images.
        digest.update(f"{owner}\0".encode() if owner else b"")
        digest.update(source.encode())
        digest.update(json.dumps(config.as_builtins(), sort_keys=True).encode())
        # The name is part of what the image is: the same cell run unnamed after a --name run
        # must not carry that name.
        digest.update((name or "").encode())
        for key in sorted(bound):
            digest.update(key.encode())
            digest.update(bound[key])
        image_id = "img-" + digest.hexdigest()[:12]
        folder = self.root / image_id
        if (folder / "image.json").exists():
            return self.get(image_id, owner)
        image = Image(
            id=image_id,
            name=name or f"workflow-{image_id[4:10]}",
            source=source,
            graph=graph,
            config=config,
            created_at=time.time(),
            bound_names=sorted(bound),
            owner=owner,
        )
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "bound.msgpack").write_bytes(msgpack.packb(bound, use_bin_type=True))
        self._write(image)
        return image

    def _write(self, image: Image) -> None:
        # Owner-only: an image holds the cell's source and its deployment.
        text = msgspec.json.format(msgspec.json.encode(image), indent=1).decode()
        write_private(self.root / image.id / "image.json", text)

    def get(self, image_id: str, owner: str | None = None) -> Image:
        """The image; a user (``owner`` not None nor "") finds only their own."""
        if not IMAGE_ID.match(image_id):
            raise UnknownImage(image_id)
        path = self.root / image_id / "image.json"
        if not path.is_file():
            raise UnknownImage(image_id)
        image = _read_image(path)
        if owner and image.owner != owner:
            raise UnknownImage(image_id)
        return image

    def bound(self, image_id: str) -> dict[str, bytes]:
        path = self.root / image_id / "bound.msgpack"
        return msgpack.unpackb(path.read_bytes(), raw=False) if path.is_file() else {}

    def deploy(
        self, image_id: str, config: DeploymentConfig | None, owner: str | None = None
    ) -> Image:
        image = self.get(image_id, owner)
        image.deployed = load_config(config).over(image.config)  # each layer checked
        self._write(image)
        return image

    def list(self, owner: str | None = None) -> list[Image]:
        images = []
        for path in sorted(self.root.glob("*/image.json")):
            try:
                images.append(_read_image(path))
            except (OSError, msgspec.DecodeError):
                continue  # a half-written or foreign folder is not an image
        if owner:
            images = [i for i in images if i.owner == owner]
        return sorted(images, key=lambda i: i.created_at)
