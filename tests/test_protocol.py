"""Message round trips, signatures and the connection file."""

import os
import stat

import msgpack
import pytest

from kernel_server.wire import protocol as P


def test_round_trip_every_message_type():
    signer = P.Signer(b"k" * 32)
    for op, cls in P.MESSAGES.items():
        frames = P.encode(cls(), signer, "rid")
        env = P.decode(frames, signer)
        assert env.message.op == op and env.request_id == "rid"


def test_blobs_survive():
    signer = P.Signer(b"key")
    msg = P.Invoke(image_id="img", workflow_id="wf", inputs={"x": b"\x00\x01\xff"})
    env = P.decode(P.encode(msg, signer), signer)
    assert env.message == msg


def test_bad_signature_and_other_key_are_rejected():
    frames = P.encode(P.Ping(), P.Signer(b"right"))
    with pytest.raises(P.ProtocolError, match="signature"):
        P.decode(frames, P.Signer(b"wrong"))
    sig, payload = frames
    tampered = payload.replace(b"ping", b"pong")
    with pytest.raises(P.ProtocolError, match="signature"):
        P.decode([sig, tampered], P.Signer(b"right"))


def test_unknown_op_and_garbage_are_protocol_errors():
    signer = P.Signer(b"k")
    payload = msgpack.packb({"op": "rm_rf", "id": "1", "body": {}})
    with pytest.raises(P.ProtocolError, match="unknown op"):
        P.decode([signer.sign(payload), payload], signer)
    with pytest.raises(P.ProtocolError):
        P.decode([signer.sign(b"\xc1"), b"\xc1"], signer)
    with pytest.raises(P.ProtocolError, match="2 frames"):
        P.decode([b"x"], signer)


def test_unknown_fields_are_ignored():
    signer = P.Signer(b"k")
    payload = msgpack.packb({"op": "status", "id": "1", "body": {"workflow_id": "w", "new": 1}})
    env = P.decode([signer.sign(payload), payload], signer)
    assert env.message == P.GetStatus(workflow_id="w")


def test_empty_key_refused():
    with pytest.raises(ValueError):
        P.Signer(b"")


def test_connection_file_is_owner_only(tmp_path):
    info = P.ConnectionInfo(
        router="tcp://127.0.0.1:1",
        pub="tcp://127.0.0.1:2",
        key=P.new_key(),
        pid=os.getpid(),
        started_at=0.0,
    )
    path = tmp_path / "run" / "c.json"
    info.write(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert P.ConnectionInfo.read(path) == info
