"""Enums that mirror agent.v1's: the same values, the names without their prefix.

A value newer than this client reads as the enum's UNSPECIFIED member (`_wire.py`), so an
older client keeps working against a newer server; tests/unit/test_client_exports.py checks
that each enum here has exactly its proto enum's names and values.
"""

from __future__ import annotations

import enum


class RunStatus(enum.IntEnum):
    """Where a run is (agent.v1.RunStatus)."""

    UNSPECIFIED = 0
    PENDING = 1
    SESSION_LOADED = 2
    BUILDING_CONTEXT = 3
    CALLING_MODEL = 4
    WAITING_FOR_TOOLS = 5
    PERSISTING = 6
    COMPLETED = 7
    FAILED = 8
    CANCELLED = 9
    WAITING_FOR_INPUT = 10

    @property
    def ended(self) -> bool:
        """Whether a run in this status has ended (completed, failed or cancelled)."""
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class FinishReason(enum.IntEnum):
    """Why the model stopped (agent.v1.FinishReason)."""

    UNSPECIFIED = 0
    STOP = 1
    TOOL_CALLS = 2
    LENGTH = 3
    CONTENT_FILTER = 4
    ERROR = 5
    UNKNOWN = 6


class FailureCode(enum.IntEnum):
    """Why a run failed (agent.v1.FailureCode)."""

    UNSPECIFIED = 0
    PROVIDER_ERROR = 1
    PROVIDER_UNAVAILABLE = 2
    RATE_LIMITED = 3
    AUTHENTICATION = 4
    CONTEXT_OVERFLOW = 5
    MAX_ITERATIONS = 6
    DOOM_LOOP = 7
    BUDGET_EXCEEDED = 8
    TOOL_OUTCOME_UNKNOWN = 9
    ABANDONED = 10
    CONFIGURATION = 11
    INTERNAL = 12
    INVALID_OUTPUT = 13
    STORAGE = 14


class CancelSource(enum.IntEnum):
    """Who cancelled a run (agent.v1.CancelSource)."""

    UNSPECIFIED = 0
    CALLER = 1
    PARENT_RUN = 2
    NEW_RUN = 3  # a new message on its session interrupted it (BusyPolicy)


class BusyPolicy(enum.IntEnum):
    """What a new run does when its session's run is still active (agent.v1.BusyPolicy):
    REJECT (the default), ENQUEUE (start after it, in order), INTERRUPT (cancel it, keep its
    messages), ROLLBACK (cancel it, its messages leave the session's history)."""

    UNSPECIFIED = 0
    REJECT = 1
    ENQUEUE = 2
    INTERRUPT = 3
    ROLLBACK = 4
    STEER = 5


class BudgetKind(enum.IntEnum):
    """Which budget ran out (agent.v1.BudgetKind)."""

    UNSPECIFIED = 0
    TOKENS = 1
    TOOL_CALLS = 2
    WALL_TIME = 3
    COST = 4
    DAILY_TOKENS = 5
    DAILY_COST = 6


class Decision(enum.IntEnum):
    """How an approval request is decided (agent.v1.ApprovalDecision); answers are ALLOW,
    DENY or ALLOW_ALWAYS, TIMED_OUT is the server's for a request nobody decided in time."""

    UNSPECIFIED = 0
    ALLOW = 1
    DENY = 2
    ALLOW_ALWAYS = 3
    TIMED_OUT = 4


class PendingCallKind(enum.IntEnum):
    """What a waiting call waits for (agent.v1.PendingCallKind)."""

    UNSPECIFIED = 0
    APPROVAL = 1
    CLIENT_TOOL = 2
    OUTCOME_UNKNOWN = 3  # a reconciliation of its execution (BehestClient.reconcile)
    # A running tool asked the user a question (BehestClient.submit_elicitation_answers).
    ELICITATION = 4


class ElicitAction(enum.IntEnum):
    """How a question of a running tool is answered (agent.v1.ElicitationAction): ACCEPT
    (the content goes to the tool), DECLINE (the user refused), CANCEL (the user dismissed it;
    also the server's for a question nobody answered in time)."""

    UNSPECIFIED = 0
    ACCEPT = 1
    DECLINE = 2
    CANCEL = 3


class ExecutionStatus(enum.IntEnum):
    """Where a tool execution is (agent.v1.ToolExecutionStatus)."""

    UNSPECIFIED = 0
    SCHEDULED = 1
    STARTED = 2
    SUCCEEDED = 3
    FAILED = 4
    OUTCOME_UNKNOWN = 5
    RECONCILED = 6


class Verdict(enum.IntEnum):
    """What is known of an execution whose outcome was unknown (agent.v1.ReconcileVerdict):
    RAN (its result given), DID_NOT_RUN (run it again), GIVE_UP (the model gets an error)."""

    UNSPECIFIED = 0
    RAN = 1
    DID_NOT_RUN = 2
    GIVE_UP = 3
