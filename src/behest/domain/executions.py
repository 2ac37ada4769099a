"""Tool executions: every time behest runs a tool call, a durable record of the attempt.

An execution begins STARTED, written in the step whose ToolExecutionStarted says so, before
the tool runs; it ends SUCCEEDED or FAILED with the step that commits the tool's result. One
whose end was never recorded because behest stopped while it ran (a crash, a kill, a failover)
is re-run if its tool is idempotent (a new execution, the next attempt); otherwise it becomes
OUTCOME_UNKNOWN and its run waits until someone says what happened (a Verdict): RECONCILED.
Every change of status is a Transition with its time, actor and reason.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime

# The longest result an execution record keeps as text (its digest covers all of it).
RESULT_KEPT_CHARS = 4096
# Hex characters of an idempotency key: 128 bits, no realistic collision.
IDEMPOTENCY_KEY_CHARS = 32
# Kept apart from every other digest of the same fields; changed only with the scheme.
_KEY_DOMAIN = b"behest tool call idempotency v1"


class ExecutionStatus(enum.IntEnum):
    """Where an execution is; values match agent.v1.ToolExecutionStatus."""

    SCHEDULED = 1
    STARTED = 2
    SUCCEEDED = 3
    FAILED = 4
    OUTCOME_UNKNOWN = 5
    RECONCILED = 6

    @property
    def is_final(self) -> bool:
        return self in (
            ExecutionStatus.SUCCEEDED,
            ExecutionStatus.FAILED,
            ExecutionStatus.RECONCILED,
        )


class Verdict(enum.IntEnum):
    """What is known of an execution whose outcome was unknown; values match
    agent.v1.ReconcileVerdict."""

    RAN = 1  # its result is given (the model gets it)
    DID_NOT_RUN = 2  # it runs again, as a new attempt
    GIVE_UP = 3  # the model gets an error result saying nobody could tell


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """One change of an execution's status."""

    status: ExecutionStatus
    at: datetime
    actor: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecution:
    """One execution (one attempt) of a tool call, as stored."""

    id: str
    run_id: str
    tenant: str
    call_id: str
    tool_name: str
    source: str
    attempt: int
    status: ExecutionStatus
    executor: str
    idempotent: bool
    started_at: datetime
    ended_at: datetime | None = None
    result: str = ""
    is_error: bool = False
    result_digest: str = ""
    verdict: Verdict | None = None
    transitions: tuple[Transition, ...] = ()  # read only by ToolExecutionStore.execution

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.tenant, self.run_id, self.call_id)

    def ended(self, text: str, is_error: bool, at: datetime) -> ToolExecution:
        """This execution ended with the result `text`."""
        status = ExecutionStatus.FAILED if is_error else ExecutionStatus.SUCCEEDED
        head, digest = kept(text)
        return replace(
            self, status=status, ended_at=at, is_error=is_error, result=head, result_digest=digest
        )

    def reconciled(
        self, verdict: Verdict, text: str, is_error: bool, at: datetime
    ) -> ToolExecution:
        """This execution reconciled: with RAN, `text` is its result."""
        ran = verdict == Verdict.RAN
        head, digest = kept(text) if ran else (self.result, self.result_digest)
        return replace(
            self,
            status=ExecutionStatus.RECONCILED,
            verdict=verdict,
            ended_at=at,
            is_error=is_error if ran else verdict == Verdict.GIVE_UP,
            result=head,
            result_digest=digest,
        )


def kept(text: str) -> tuple[str, str]:
    """What an execution record keeps of a result: its head and the digest of all of it."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return text[:RESULT_KEPT_CHARS], f"sha256:{digest}"


def idempotency_key(tenant: str, run_id: str, call_id: str) -> str:
    """The key of one tool call: a digest of its tenant, run and call id (32 hex chars), the
    same for every attempt of the call and different for any other call; a tool passes it to
    its backend to make its side effect happen once (e.g. an Idempotency-Key header).

    A digest rather than the ids themselves: it has one length and one alphabet whatever a
    model names its calls (any backend's header or column takes it), and it tells a tool's
    backend nothing about the tenant. Each field is length-prefixed, so no two different
    triples are hashed as the same bytes.
    """
    digest = hashlib.sha256(_KEY_DOMAIN)
    for part in (tenant, run_id, call_id):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:IDEMPOTENCY_KEY_CHARS]
