"""behest.client's public face is exact (httpx's exported-members test), its enums mirror the
proto's, its event types the AgentEvent oneof, and only its converter speaks the wire."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import subprocess
import sys
from pathlib import Path

import behest
import behest.client
from behest._proto.agent.v1 import common_pb2, run_pb2
from behest.client._events import EVENT_TYPES
from tests.unit.test_layers import graph

SRC = Path(behest.__file__).parent


def test_all_is_sorted_and_exactly_the_public_names() -> None:
    public = {name for name in vars(behest.client) if not name.startswith("_")}
    assert behest.client.__all__ == sorted(public)


def test_every_public_class_and_function_is_the_packages_own() -> None:
    for name in behest.client.__all__:
        value = getattr(behest.client, name)
        if isinstance(value, type) or inspect.isfunction(value):
            assert value.__module__.startswith("behest.client._"), name


def test_behest_exports_the_client_lazily() -> None:
    assert behest.BehestClient is behest.client.BehestClient
    code = "import sys, behest; print('grpc' in sys.modules, 'behest.client' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_enums_mirror_the_protos() -> None:
    c = behest.client
    for ours, theirs, prefix in [
        (c.RunStatus, common_pb2.RunStatus, "RUN_STATUS_"),
        (c.FinishReason, common_pb2.FinishReason, "FINISH_REASON_"),
        (c.FailureCode, run_pb2.FailureCode, "FAILURE_CODE_"),
        (c.CancelSource, run_pb2.CancelSource, "CANCEL_SOURCE_"),
        (c.BusyPolicy, run_pb2.BusyPolicy, "BUSY_POLICY_"),
        (c.BudgetKind, run_pb2.BudgetKind, "BUDGET_KIND_"),
        (c.Decision, run_pb2.ApprovalDecision, "APPROVAL_DECISION_"),
        (c.PendingCallKind, run_pb2.PendingCallKind, "PENDING_CALL_KIND_"),
        (c.ElicitAction, run_pb2.ElicitationAction, "ELICITATION_ACTION_"),
    ]:
        assert issubclass(ours, enum.IntEnum)
        wire = {name.removeprefix(prefix): value for name, value in theirs.items()}
        assert {m.name: m.value for m in ours} == wire, ours


def test_each_event_kind_of_the_wire_has_a_type_with_its_fields() -> None:
    oneof = run_pb2.AgentEvent.DESCRIPTOR.oneofs_by_name["event"]
    assert set(EVENT_TYPES) == {f.name for f in oneof.fields}
    for kind, cls in EVENT_TYPES.items():
        message = run_pb2.AgentEvent.DESCRIPTOR.fields_by_name[kind].message_type
        assert {f.name for f in dataclasses.fields(cls)} == set(message.fields_by_name), kind
        assert getattr(behest.client, cls.__name__) is cls


def test_the_cli_uses_only_the_public_client() -> None:
    # Which modules may import the client and the generated code at all: tests/unit/test_layers.py.
    for module, targets in graph().items():
        if module == "behest.cli" or module.startswith("behest.cli."):
            assert not {t for t in targets if t.startswith("behest.client.")}, module
