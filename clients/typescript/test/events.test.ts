// The event helpers: kinds, the terminal events, and the answer's text as streamed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  AgentEventSchema,
  eventKind,
  isEnded,
  isTerminal,
  RunStatus,
  textOf,
} from "../src/node.js";

type Payload = MessageInitShape<typeof AgentEventSchema>["event"];

function events(...payloads: Payload[]) {
  return payloads.map((event, i) => create(AgentEventSchema, { sequence: BigInt(i + 1), event }));
}

const started = (iteration: number): Payload => ({ case: "modelStarted", value: { iteration } });
const text = (delta: string): Payload => ({ case: "textDelta", value: { delta } });

test("the terminal events are run_completed, run_failed and run_cancelled", () => {
  const all = events(
    { case: "runStarted", value: {} },
    text("hi"),
    { case: "runCompleted", value: {} },
    { case: "runFailed", value: {} },
    { case: "runCancelled", value: {} },
  );
  assert.deepEqual(all.map(isTerminal), [false, false, true, true, true]);
  assert.deepEqual(all.map(eventKind).slice(0, 2), ["runStarted", "textDelta"]);
  assert.equal(eventKind(create(AgentEventSchema, {})), undefined, "a kind newer than the client");
});

test("a run in an ended status has ended", () => {
  const ended = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED];
  for (const status of Object.values(RunStatus).filter((v) => typeof v === "number")) {
    assert.equal(isEnded(status), ended.includes(status), RunStatus[status]);
  }
});

test("textOf drops the partial text of a model call that was repeated", () => {
  const streamed = events(
    started(1),
    text("Let me "),
    text("look."),
    started(2),
    text("The answer "),
    text("is"),
    started(2), // the call of iteration 2 was repeated (a retry): its partial text goes
    text("It is 42."),
  );
  assert.equal(textOf(streamed), "Let me look.It is 42.");
});
