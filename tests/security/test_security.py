"""Signed messages: forged, replayed, stale and garbage frames are dropped, counted, never run."""

import os
import random
import stat
import time

import msgpack
import pytest
import zmq
from helpers import wait_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import qonductor_jupyter as qj
from kernel_server.core.paths import qonductor_home
from kernel_server.wire.connection import connection_file_path
from kernel_server.wire.envelope import (
    Envelope,
    ReplayGuard,
    Signer,
    decode,
    encode,
    new_request_id,
)
from kernel_server.wire.errors import ProtocolError
from kernel_server.wire.messages import (
    MESSAGES,
    Cancel,
    ErrorReply,
    GetFleet,
    Message,
    Ping,
    Request,
)
from qonductor_jupyter.client import get_client, read_connection

SLOW = "import time\ntime.sleep(20)\nfrom qiskit import QuantumCircuit\nq = QuantumCircuit(1)\n"
SLOW += "q.measure_all()\nc = sample(q, shots=5)\n"


# ---------------------------------------------------------------- the replay guard, pure
def _envelope(ts, nonce="n1"):
    return Envelope(Ping(), "rid", ts, nonce)


def test_replay_guard_refuses_old_future_and_repeated_messages():
    now = [1000.0]
    guard = ReplayGuard(window_s=60, clock=lambda: now[0])
    guard.check(_envelope(1000.0, "a"))
    with pytest.raises(ProtocolError) as replayed:
        guard.check(_envelope(1000.0, "a"))
    assert replayed.value.reason == "replayed"
    for ts in (900.0, 1100.0):
        with pytest.raises(ProtocolError) as stale:
            guard.check(_envelope(ts, "b"))
        assert stale.value.reason == "stale"
    with pytest.raises(ProtocolError):
        guard.check(_envelope(1000.0, ""))  # no nonce, no replay protection: refused
    # Nonces are forgotten only once their messages could no longer pass the time check.
    for i in range(1000):
        now[0] += 1
        guard.check(_envelope(now[0], f"m{i}"))
    assert len(guard._seen) <= 2 * 60 + 60 // 4 + 2


# ---------------------------------------------------------------- the live orchestrator
def _counters():
    fleet = get_client().request(GetFleet())
    return fleet.dropped_messages, fleet.dropped_by_reason


@pytest.fixture
def raw_socket(orchestrator):
    """A DEALER of our own, as an attacker on the same machine would open one."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(read_connection().router)
    yield sock
    sock.close()


def _answer(sock, timeout_ms=1000):
    if sock.poll(timeout_ms):
        return sock.recv_multipart()
    return None


def test_a_valid_message_is_answered_once_and_its_replay_dropped(raw_socket):
    signer = read_connection().signer()
    frames = encode(Ping(), signer)
    raw_socket.send_multipart(frames)
    assert _answer(raw_socket) is not None
    before, reasons = _counters()
    raw_socket.send_multipart(frames)
    assert _answer(raw_socket) is None
    after, reasons_after = _counters()
    assert after == before + 1
    assert reasons_after.get("replayed", 0) == reasons.get("replayed", 0) + 1


def test_stale_and_foreign_messages_are_never_executed(raw_socket):
    workflow_id = qj.invoke(qj.deploy(qj.create_workflow(SLOW)))
    wait_for(lambda: qj.workflow_status(workflow_id) == "running", 60)
    before, reasons = _counters()
    # A cancel signed with another key (another user's, or a guess).
    raw_socket.send_multipart(encode(Cancel(workflow_id=workflow_id), Signer(b"not-the-key")))
    # A cancel validly signed, but two minutes old (captured and held back).
    signer = read_connection().signer()
    payload = msgpack.packb(
        {
            "op": "cancel",
            "id": "r1",
            "ts": time.time() - 120,
            "nonce": "old",
            "body": {"workflow_id": workflow_id},
        },
        use_bin_type=True,
    )
    raw_socket.send_multipart([signer.sign(payload), payload])
    assert _answer(raw_socket) is None
    after, reasons_after = _counters()
    assert after == before + 2
    assert reasons_after["bad_signature"] == reasons.get("bad_signature", 0) + 1
    assert reasons_after["stale"] == reasons.get("stale", 0) + 1
    assert qj.workflow_status(workflow_id) == "running"  # neither cancel ran
    qj.cancel(workflow_id)


def test_garbage_frames_do_not_stop_the_orchestrator(raw_socket):
    before, _ = _counters()
    junk = [[b"x"], [b"", b""], [b"sig", b"\xff\x00garbage"], [b"a", b"b", b"c"], [os.urandom(64)]]
    signer = read_connection().signer()
    not_a_map = msgpack.packb([1, 2, 3])
    unknown_op = msgpack.packb(
        {"op": "rm -rf", "id": "x", "ts": time.time(), "nonce": "z", "body": {}}
    )
    for payload in (not_a_map, unknown_op):
        junk.append([signer.sign(payload), payload])
    rng = random.Random(7)  # and a few hundred random frame sets
    junk += [
        [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 5))]
        for _ in range(300)
    ]
    for frames in junk:
        raw_socket.send_multipart(frames)
    assert _answer(raw_socket, 500) is None
    wait_for(lambda: _counters()[0] >= before + len(junk), 10)
    assert get_client().request(Ping(), timeout=5).pid == read_connection().pid


def test_connection_and_state_files_are_owner_only(orchestrator):
    home = qonductor_home()
    for path in (connection_file_path(), home / "state.db"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700


# ---------------------------------------------------------------- the decoder, fuzzed
_KEY = Signer(b"fuzz-key")


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), max_size=4))
def test_random_frames_give_a_protocol_error(frames):
    with pytest.raises(ProtocolError):
        decode(frames, _KEY)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(sorted(MESSAGES)) | st.text(max_size=12),
    body=st.dictionaries(st.text(max_size=16), _values, max_size=6) | _values,
    ts=st.floats(allow_nan=True) | st.text(max_size=5) | st.none(),
)
@pytest.mark.slow
def test_signed_but_malformed_payloads_decode_or_give_a_protocol_error(op, body, ts):
    payload = msgpack.packb({"op": op, "id": "i", "ts": ts, "nonce": "n", "body": body})
    try:
        env = decode([_KEY.sign(payload), payload], _KEY)
    except ProtocolError:
        return
    assert env.message.op == op and isinstance(env.message, Message)


# ---------------------------------------------------------------- wrongly typed fields, live
# One value of each wire type; a field gets only values of types its annotation refuses.
_WIRE_VALUES = {
    "int": st.integers(-(2**40), 2**40),
    "float": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
    "str": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
    "list": st.lists(st.integers(-1000, 1000), max_size=3),
    "dict": st.dictionaries(st.text(max_size=4), st.integers(-9, 9), min_size=1, max_size=3),
    "none": st.none(),
    "bool": st.booleans(),
}


def _accepted_kinds(t) -> set[str]:
    """The wire types a msgspec field type takes (ints pass for floats, as msgspec allows)."""
    from msgspec import inspect as mi

    if isinstance(t, mi.UnionType):
        return set().union(*(_accepted_kinds(u) for u in t.types))
    if isinstance(t, mi.AnyType):
        return set(_WIRE_VALUES)
    kinds = {
        mi.IntType: {"int"},
        mi.FloatType: {"int", "float"},
        mi.StrType: {"str"},
        mi.BytesType: {"bytes"},
        mi.ListType: {"list"},
        mi.DictType: {"dict"},
        mi.DataclassType: {"dict"},  # an object (the workflow graph)
        mi.StructType: {"dict"},
        mi.NoneType: {"none"},
        mi.BoolType: {"bool"},
    }
    return next(v for k, v in kinds.items() if isinstance(t, k))


def _requests_with_fields():
    from msgspec import inspect as mi

    # Requests are the Request subclasses; everything else is a reply or an event.
    replies = {cls for cls in MESSAGES.values() if not issubclass(cls, Request)}
    out = []
    for op, cls in sorted(MESSAGES.items()):
        if cls in replies:
            continue
        for f in mi.type_info(cls).fields:
            wrong = sorted(set(_WIRE_VALUES) - _accepted_kinds(f.type))
            out.append((op, f.encode_name, wrong))
    return out


REQUEST_FIELDS = _requests_with_fields()


def test_the_fuzzed_fields_cover_every_request_type():
    fuzzed = {op for op, _, wrong in REQUEST_FIELDS if wrong}
    requests = {
        op for op, cls in MESSAGES.items() if cls.__struct_fields__ and issubclass(cls, Request)
    }
    assert fuzzed == requests, requests - fuzzed


@st.composite
def _wrongly_typed_request(draw):
    op, name, wrong = draw(st.sampled_from([r for r in REQUEST_FIELDS if r[2]]))
    value = draw(st.one_of(*(_WIRE_VALUES[k] for k in wrong)))
    return op, {name: value}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(request=_wrongly_typed_request())
@example(request=("sample", {"circuits": ""}))  # a str where bytes belong (not base64)
def test_every_request_with_a_wrongly_typed_field_gets_an_invalid_message_reply(
    raw_socket, request
):
    op, body = request
    signer = read_connection().signer()
    raw_socket.send_multipart(_signed(signer, op, body))
    answer = _answer(raw_socket, 5000)
    assert answer is not None, f"no reply to {op} {body!r}"
    reply = decode(answer, signer).message
    assert isinstance(reply, ErrorReply), reply
    assert reply.type == "InvalidMessage", reply
    field = next(iter(body))
    assert field in reply.message, reply.message  # it says which field is wrong


def test_the_orchestrator_serves_on_after_wrongly_typed_requests(raw_socket):
    """Every field of every request, once with a list where it takes none: each refused, and
    a cell runs afterwards."""
    signer = read_connection().signer()
    for op, name, wrong in REQUEST_FIELDS:
        if "list" not in wrong:
            continue
        raw_socket.send_multipart(_signed(signer, op, {name: [1, 2]}))
        answer = _answer(raw_socket, 5000)
        assert answer is not None, (op, name)
        assert decode(answer, signer).message.type == "InvalidMessage", (op, name)
    assert get_client().request(Ping(), timeout=5).pid == read_connection().pid
    workflow_id = qj.invoke(qj.deploy(qj.create_workflow("x = 1\ny = 2\ndel y\n")))
    assert qj.workflow_results(workflow_id, timeout=60) == {"x": 1}  # `del y`: y is gone


def _signed(signer, op, body):
    payload = msgpack.packb(
        {"op": op, "id": new_request_id(), "ts": time.time(), "nonce": os.urandom(8).hex(),
         "body": body},
        use_bin_type=True,
    )  # fmt: skip
    return [signer.sign(payload), payload]
