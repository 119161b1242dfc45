"""Message round trips, signatures and the connection file."""

import os
import stat

import msgpack
import pytest

from kernel_server.core.graph import WorkflowGraph
from kernel_server.wire.connection import ConnectionInfo, new_key
from kernel_server.wire.envelope import Signer, decode, encode
from kernel_server.wire.errors import ProtocolError
from kernel_server.wire.messages import MESSAGES, CreateWorkflow, GetStatus, Invoke, Ping


def test_round_trip_every_message_type():
    signer = Signer(b"k" * 32)
    # Every field has a default but a request's graph: an empty one stands in for it.
    empty = WorkflowGraph(steps=(), edges=(), inputs=(), outputs={})
    for op, cls in MESSAGES.items():
        message = cls(graph=empty) if cls is CreateWorkflow else cls()
        env = decode(encode(message, signer, "rid"), signer)
        assert env.message == message
        assert env.message.op == op and env.request_id == "rid"


def test_blobs_survive():
    signer = Signer(b"key")
    msg = Invoke(image_id="img", workflow_id="wf", inputs={"x": b"\x00\x01\xff"})
    env = decode(encode(msg, signer), signer)
    assert env.message == msg


def test_bad_signature_and_other_key_are_rejected():
    frames = encode(Ping(), Signer(b"right"))
    with pytest.raises(ProtocolError, match="signature"):
        decode(frames, Signer(b"wrong"))
    sig, payload = frames
    tampered = payload.replace(b"ping", b"pong")
    with pytest.raises(ProtocolError, match="signature"):
        decode([sig, tampered], Signer(b"right"))


def test_unknown_op_and_garbage_are_protocol_errors():
    signer = Signer(b"k")
    payload = msgpack.packb({"op": "rm_rf", "id": "1", "body": {}})
    with pytest.raises(ProtocolError, match="unknown op"):
        decode([signer.sign(payload), payload], signer)
    with pytest.raises(ProtocolError):
        decode([signer.sign(b"\xc1"), b"\xc1"], signer)
    with pytest.raises(ProtocolError, match="2 frames"):
        decode([b"x"], signer)


def test_unknown_fields_are_ignored():
    signer = Signer(b"k")
    payload = msgpack.packb({"op": "status", "id": "1", "body": {"workflow_id": "w", "new": 1}})
    env = decode([signer.sign(payload), payload], signer)
    assert env.message == GetStatus(workflow_id="w")


def test_empty_key_refused():
    with pytest.raises(ValueError):
        Signer(b"")


def test_connection_file_is_owner_only(tmp_path):
    info = ConnectionInfo(
        router="tcp://127.0.0.1:1",
        pub="tcp://127.0.0.1:2",
        key=new_key(),
        pid=os.getpid(),
        started_at=0.0,
    )
    path = tmp_path / "run" / "c.json"
    info.write(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ConnectionInfo.read(path) == info
