// Questions a running tool asks the run's user (elicitation, behest 0.11): an MCP server's
// elicitation request, or a plugin tool's ToolContext.ask. The call waits for the answer (the
// run WAITING_FOR_INPUT meanwhile); the question comes as an elicitation_requested event, and
// ListPendingCalls shows it as a pending call of kind ELICITATION. It is answered once, with
// SubmitElicitationAnswers: accept (content that fits the question's JSON Schema), decline or
// cancel; elicitation_answered says how, to everyone watching the run.
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ElicitationAction,
  PendingCallKind,
  SubmitElicitationAnswersRequestSchema,
  type AgentEvent,
  type PendingCall,
  type SubmitElicitationAnswersRequest,
} from "./gen/agent/v1/run_pb.js";

/** A question a running tool asked, from its event or its pending call. */
export interface Question {
  /** Names the question in an answer ("<call_id>~<n>-<hash>"). */
  elicitationId: string;
  /** The tool call that asked, and its tool. */
  callId: string;
  toolName: string;
  /** What to show the user. */
  message: string;
  /** The JSON Schema (of an object) that an accepted answer's content must fit. */
  schema: Record<string, unknown>;
  /** When an unanswered question is answered cancel (timed out) instead; undefined if not
   * known (a pending call carries it on the call, which this reads too). */
  expiresAt?: Date;
}

/** An answer to a question: accept with content that fits its schema, decline (the user
 * refused to answer) or cancel (the user dismissed it). */
export type QuestionAnswer =
  { accept: Record<string, unknown> } | { decline: true } | { cancel: true };

/** The question an elicitation_requested event or an ELICITATION pending call asks;
 * undefined for any other event or call. */
export function questionOf(source: AgentEvent | PendingCall): Question | undefined {
  if ("event" in source) {
    if (source.event.case !== "elicitationRequested") {
      return undefined;
    }
    const asked = source.event.value;
    return question(asked, asked.expiresAt && timestampDate(asked.expiresAt));
  }
  if (source.kind !== PendingCallKind.ELICITATION || source.elicitation === undefined) {
    return undefined;
  }
  return question(source.elicitation, source.expiresAt && timestampDate(source.expiresAt));
}

interface Asked {
  elicitationId: string;
  callId: string;
  toolName: string;
  message: string;
  requestedSchema: string;
}

function question(asked: Asked, expiresAt: Date | undefined): Question {
  const { elicitationId, callId, toolName, message } = asked;
  const schema = asked.requestedSchema ? (JSON.parse(asked.requestedSchema) as object) : {};
  const found: Question = {
    elicitationId,
    callId,
    toolName,
    message,
    schema: schema as Record<string, unknown>,
  };
  if (expiresAt !== undefined) {
    found.expiresAt = expiresAt;
  }
  return found;
}

/** The SubmitElicitationAnswers request of one answer (InvalidArgument, before any call: an
 * answer that is not exactly one of accept, decline and cancel, or whose accepted content is
 * not an object). */
export function answersRequest(
  runId: string,
  elicitationId: string,
  answer: QuestionAnswer,
): SubmitElicitationAnswersRequest {
  const given = ["accept", "decline", "cancel"].filter((key) => key in (answer ?? {}));
  if (given.length !== 1) {
    throw new ConnectError(
      "an answer is one of { accept: {...} }, { decline: true } and { cancel: true }",
      Code.InvalidArgument,
    );
  }
  let action = ElicitationAction.CANCEL;
  let content = "";
  if ("accept" in answer) {
    const accepted: unknown = answer.accept;
    if (typeof accepted !== "object" || accepted === null || Array.isArray(accepted)) {
      throw new ConnectError("an accepted answer's content is an object", Code.InvalidArgument);
    }
    action = ElicitationAction.ACCEPT;
    content = JSON.stringify(accepted);
  } else if ("decline" in answer) {
    action = ElicitationAction.DECLINE;
  }
  return create(SubmitElicitationAnswersRequestSchema, {
    runId,
    answers: [{ elicitationId, action, content }],
  });
}
