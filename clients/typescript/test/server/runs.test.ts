// Every RunService RPC through the client, against a real behest server, over each protocol.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  ApprovalDecision,
  FinishReason,
  PendingCallKind,
  RunStatus,
  eventKind,
  isTerminal,
  textOf,
  type AgentEvent,
  type NodeBehestClient,
} from "../../src/node.js";
import { CALCULATOR, clientFor, NO_SERVER, PROTOCOLS, TIMEOUT, runOf, script } from "./support.js";

async function collect(events: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const all: AgentEvent[] = [];
  for await (const event of events) all.push(event);
  return all;
}

function assertWhole(events: AgentEvent[], last = "runCompleted"): void {
  assert.deepEqual(
    events.map((e) => Number(e.sequence)),
    events.map((_, i) => i + 1),
    "numbered 1, 2, 3, … with no gap and no repeat",
  );
  assert.equal(eventKind(events[0]!), "runStarted");
  assert.equal(eventKind(events.at(-1)!), last);
  assert.equal(events.filter(isTerminal).length, 1, "one terminal event, the last");
}

const BROWSER = {
  name: "browser_open",
  description: "Opens a page in the user's browser.",
  parametersSchema: JSON.stringify({
    type: "object",
    properties: { url: { type: "string" } },
    required: ["url"],
  }),
};

for (const protocol of PROTOCOLS) {
  describe(`RunService over ${protocol}`, { skip: NO_SERVER, timeout: TIMEOUT }, () => {
    let client: NodeBehestClient;
    before(() => (client = clientFor(protocol)));
    after(() => client.close());

    test("CreateRunStream: streamRun yields the run's events to the terminal one", async () => {
      const events = await collect(client.streamRun(runOf(`hello over ${protocol}`)));
      assertWhole(events);
      assert.equal(textOf(events), `hello over ${protocol}`);
      const completed = events.at(-1)!.event;
      assert.ok(completed.case === "runCompleted");
      assert.equal(completed.value.finishReason, FinishReason.STOP);
    });

    test("CreateRun, GetRun, GetRunOutput, ListRuns, WatchRunEvents and ListRunEvents", async () => {
      const created = await client.runs.createRun(runOf("one two three four"));
      assert.ok(created.runId && created.sessionId);
      const events = await collect(client.watch(created.runId));
      assertWhole(events);
      assert.deepEqual(
        (await collect(client.watch(created.runId, 3))).map((e) => e.sequence),
        events.slice(3).map((e) => e.sequence),
        "watch(run, 3) starts at 4",
      );

      const { run } = await client.runs.getRun({ runId: created.runId });
      assert.equal(run?.id, created.runId);
      assert.equal(run?.status, RunStatus.COMPLETED);

      const { output } = await client.runs.getRunOutput({ runId: created.runId });
      const answer = output?.messages.filter((m) => m.role === "assistant").at(-1);
      const part = answer?.content[0]?.content;
      assert.equal(part?.case === "text" ? part.value.text : undefined, "one two three four");

      const listed = await client.runs.listRuns({ sessionId: created.sessionId });
      assert.deepEqual(
        listed.runs.map((r) => r.id),
        [created.runId],
      );

      const page = await client.runs.listRunEvents({
        runId: created.runId,
        afterSequence: 2n,
        limit: 3,
      });
      assert.deepEqual(
        page.events.map((e) => e.sequence),
        [3n, 4n, 5n],
      );
      assert.equal(page.lastSequence, 5n);
      assert.equal(page.more, true);
    });

    test("ListPendingCalls and SubmitApprovals: a run that waits for an approval", async () => {
      const request = runOf(
        script({ tool_calls: [CALCULATOR] }, { say: "tool_results" }),
        "script",
        {
          approvalRequiredTools: ["calculator"],
        },
      );
      const events: AgentEvent[] = [];
      for await (const event of client.streamRun(request)) {
        events.push(event);
        if (event.event.case === "approvalRequested") {
          const { calls } = await client.runs.listPendingCalls({ runId: event.runId });
          assert.deepEqual(
            calls.map((c) => [c.call?.name, c.kind]),
            [["calculator", PendingCallKind.APPROVAL]],
          );
          const answer = { callId: event.event.value.call!.id, decision: ApprovalDecision.ALLOW };
          const submitted = await client.runs.submitApprovals({
            runId: event.runId,
            approvals: [answer],
          });
          assert.deepEqual(submitted.waitingCallIds, []);
        }
      }
      assertWhole(events);
      const resolved = events.find((e) => e.event.case === "approvalResolved")?.event;
      assert.ok(resolved?.case === "approvalResolved");
      assert.equal(resolved.value.decision, ApprovalDecision.ALLOW);
      assert.match(textOf(events), /42/, "the calculator ran: the model saw 6*7 = 42");
    });

    test("SubmitToolResults: a run that waits for a client tool's result", async () => {
      const call = { name: "browser_open", arguments: { url: "https://example.com" } };
      const request = runOf(script({ tool_calls: [call] }, { say: "tool_results" }), "script", {
        clientTools: [BROWSER],
      });
      const events: AgentEvent[] = [];
      for await (const event of client.streamRun(request)) {
        events.push(event);
        if (event.event.case === "clientToolRequested") {
          const result = { callId: event.event.value.call!.id, output: "the page is open" };
          await client.runs.submitToolResults({ runId: event.runId, results: [result] });
        }
      }
      assertWhole(events);
      assert.ok(events.some((e) => e.event.case === "clientToolAnswered"));
      assert.match(textOf(events), /the page is open/);
    });

    test("CancelRun: a waiting run ends cancelled", async () => {
      const request = runOf(script({ tool_calls: [CALCULATOR] }, { text: "never" }), "script", {
        approvalRequiredTools: ["calculator"],
      });
      const events: AgentEvent[] = [];
      for await (const event of client.streamRun(request)) {
        events.push(event);
        if (event.event.case === "approvalRequested") {
          const cancelled = await client.runs.cancelRun({
            runId: event.runId,
            reason: "not today",
          });
          assert.equal(cancelled.status, RunStatus.CANCELLED);
        }
      }
      assertWhole(events, "runCancelled");
      const last = events.at(-1)!.event;
      assert.ok(last.case === "runCancelled");
      assert.equal(last.value.reason, "not today");
    });
  });
}
