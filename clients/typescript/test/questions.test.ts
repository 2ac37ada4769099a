// Questions of running tools, without a server: questionOf reads the question of an event
// and of a pending call; answerQuestion sends one SubmitElicitationAnswers (to a fake
// RunService) and refuses a malformed answer before any call.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import {
  AgentEventSchema,
  clientOf,
  ElicitationAction,
  PendingCallKind,
  PendingCallSchema,
  questionOf,
  RunService,
  type QuestionAnswer,
  type SubmitElicitationAnswersRequest,
} from "../src/node.js";

const SCHEMA = { type: "object", properties: { nights: { type: "integer" } } };
const EXPIRES = new Date("2026-12-02T04:00:00Z");
const ASKED = {
  elicitationId: "call-1~1-abcdef012345",
  callId: "call-1",
  toolName: "echo__book",
  message: "How many nights in Lisbon?",
  requestedSchema: JSON.stringify(SCHEMA),
};
const QUESTION = {
  elicitationId: ASKED.elicitationId,
  callId: "call-1",
  toolName: "echo__book",
  message: "How many nights in Lisbon?",
  schema: SCHEMA,
  expiresAt: EXPIRES,
};

test("questionOf: the question of an elicitation_requested event", () => {
  const event = create(AgentEventSchema, {
    sequence: 7n,
    event: {
      case: "elicitationRequested",
      value: { ...ASKED, expiresAt: timestampFromDate(EXPIRES) },
    },
  });
  assert.deepEqual(questionOf(event), QUESTION);
  const other = create(AgentEventSchema, { event: { case: "textDelta", value: { delta: "x" } } });
  assert.equal(questionOf(other), undefined);
  assert.equal(questionOf(create(AgentEventSchema, {})), undefined);
});

test("questionOf: the question of an ELICITATION pending call", () => {
  const pending = create(PendingCallSchema, {
    kind: PendingCallKind.ELICITATION,
    expiresAt: timestampFromDate(EXPIRES),
    elicitation: ASKED,
  });
  assert.deepEqual(questionOf(pending), QUESTION);
  const approval = create(PendingCallSchema, { kind: PendingCallKind.APPROVAL });
  assert.equal(questionOf(approval), undefined);
});

function fakeServer() {
  const received: SubmitElicitationAnswersRequest[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(RunService, {
      submitElicitationAnswers(request) {
        received.push(request);
        return { waitingCallIds: ["call-2"] };
      },
    });
  });
  return { client: clientOf(transport), received };
}

test("answerQuestion: accept sends the content as JSON, decline and cancel send none", async () => {
  const { client, received } = fakeServer();
  const waiting = await client.answerQuestion("run-1", "q-1", {
    accept: { nights: 3, breakfast: true },
  });
  assert.deepEqual(waiting, ["call-2"], "the calls and questions still waiting");
  await client.answerQuestion("run-1", "q-2", { decline: true });
  await client.answerQuestion("run-1", "q-3", { cancel: true });
  assert.deepEqual(
    received.map((r) => [r.runId, r.answers.map((a) => [a.elicitationId, a.action, a.content])]),
    [
      ["run-1", [["q-1", ElicitationAction.ACCEPT, '{"nights":3,"breakfast":true}']]],
      ["run-1", [["q-2", ElicitationAction.DECLINE, ""]]],
      ["run-1", [["q-3", ElicitationAction.CANCEL, ""]]],
    ],
  );
});

test("answerQuestion: a malformed answer is InvalidArgument, and nothing is sent", async () => {
  const { client, received } = fakeServer();
  const malformed = [
    {},
    { accept: { nights: 1 }, decline: true },
    { accept: [1, 2] },
    { accept: null },
    null,
  ] as unknown as QuestionAnswer[];
  for (const answer of malformed) {
    await assert.rejects(
      client.answerQuestion("run-1", "q-1", answer),
      (error: unknown) => ConnectError.from(error).code === Code.InvalidArgument,
      JSON.stringify(answer),
    );
  }
  assert.equal(received.length, 0);
});
