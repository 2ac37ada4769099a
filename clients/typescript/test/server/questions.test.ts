// A running tool's question through the client, against a real behest server whose echo MCP
// server's `book` tool asks "How many nights in <city>?" (an elicitation), over each protocol:
// the question seen as an event and as a pending call, answered with answerQuestion, the
// answer reaching the MCP server (the model says its result); an answer that breaks the
// question's schema refused with InvalidArgument.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Code,
  ConnectError,
  ElicitationAction,
  PendingCallKind,
  RunStatus,
  eventKind,
  questionOf,
  textOf,
  type AgentEvent,
  type NodeBehestClient,
  type Question,
} from "../../src/node.js";
import { clientFor, NO_ECHO_MCP, PROTOCOLS, TIMEOUT, runOf, script } from "./support.js";

const BOOK = runOf(
  script(
    { tool_calls: [{ name: "echo__book", arguments: { city: "Lisbon" } }] },
    { say: "tool_results" },
  ),
  "script",
);

function refusedWith(code: Code, message?: string) {
  return (error: unknown) => {
    const e = ConnectError.from(error);
    assert.equal(Code[e.code], Code[code], e.rawMessage);
    if (message !== undefined) {
      assert.ok(e.rawMessage.includes(message), e.rawMessage);
    }
    return true;
  };
}

function answered(events: AgentEvent[]) {
  const found = events.find((e) => e.event.case === "elicitationAnswered")?.event;
  assert.ok(found?.case === "elicitationAnswered", "an elicitation_answered event");
  return found.value;
}

for (const protocol of PROTOCOLS) {
  describe(`a tool's question over ${protocol}`, { skip: NO_ECHO_MCP, timeout: TIMEOUT }, () => {
    let client: NodeBehestClient;
    before(() => (client = clientFor(protocol)));
    after(() => client.close());

    test("the question is seen, answered, and its answer reaches the tool", async () => {
      const events: AgentEvent[] = [];
      let asked: Question | undefined;
      for await (const event of client.streamRun(BOOK)) {
        events.push(event);
        const question = questionOf(event);
        if (question === undefined) {
          continue;
        }
        asked = question;
        assert.equal(question.toolName, "echo__book");
        assert.equal(question.message, "How many nights in Lisbon?");
        assert.deepEqual(question.schema.required, ["nights"]);
        assert.ok(question.expiresAt instanceof Date && question.expiresAt > new Date());

        const { run } = await client.runs.getRun({ runId: event.runId });
        assert.equal(run?.status, RunStatus.WAITING_FOR_INPUT);
        const { calls } = await client.runs.listPendingCalls({ runId: event.runId });
        assert.deepEqual(
          calls.map((c) => c.kind),
          [PendingCallKind.ELICITATION],
        );
        assert.deepEqual(questionOf(calls[0]!), question, "the pending call asks the same");

        const waiting = await client.answerQuestion(event.runId, question.elicitationId, {
          accept: { nights: 3, breakfast: true },
        });
        assert.deepEqual(waiting, [], "nothing else waits: the run goes on");
      }
      assert.ok(asked, "an elicitation_requested event");
      assert.equal(eventKind(events.at(-1)!), "runCompleted");
      const answer = answered(events);
      assert.equal(answer.elicitationId, asked.elicitationId);
      assert.equal(answer.action, ElicitationAction.ACCEPT);
      assert.ok(!answer.timedOut && !answer.replayed);
      assert.match(textOf(events), /echo__book: booked 3 night\(s\) in Lisbon with breakfast/);
    });

    test("an answer that breaks the schema is InvalidArgument; the question still waits", async () => {
      const events: AgentEvent[] = [];
      let runId = "";
      let elicitationId = "";
      for await (const event of client.streamRun(BOOK)) {
        events.push(event);
        const question = questionOf(event);
        if (question === undefined) {
          continue;
        }
        ({ runId } = event);
        ({ elicitationId } = question);
        for (const content of [{ nights: "three" }, { breakfast: true }, { nights: 99 }]) {
          await assert.rejects(
            client.answerQuestion(runId, elicitationId, { accept: content }),
            refusedWith(
              Code.InvalidArgument,
              "answers[0].content does not match the question's schema",
            ),
            JSON.stringify(content),
          );
        }
        await assert.rejects(
          client.answerQuestion(runId, "no-such-question", { accept: { nights: 1 } }),
          refusedWith(Code.NotFound),
        );
        const { calls } = await client.runs.listPendingCalls({ runId });
        assert.deepEqual(
          calls.map((c) => questionOf(c)?.elicitationId),
          [elicitationId],
          "nothing was stored: the question still waits",
        );
        await client.answerQuestion(runId, elicitationId, { decline: true });
      }
      assert.equal(eventKind(events.at(-1)!), "runCompleted");
      assert.equal(answered(events).action, ElicitationAction.DECLINE);
      assert.match(textOf(events), /echo__book: not booked: the user chose decline/);
      await assert.rejects(
        client.answerQuestion(runId, elicitationId, { accept: { nights: 2 } }),
        refusedWith(Code.FailedPrecondition),
        "answered otherwise before",
      );
      assert.deepEqual(
        await client.answerQuestion(runId, elicitationId, { decline: true }),
        [],
        "the same answer again is harmless",
      );
    });
  });
}
