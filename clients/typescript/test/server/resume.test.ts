// Streams whose connection the server's side drops (a proxy between client and server cut
// under them) resume from the last sequence seen: no gap, no duplicate, one run.
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import { ApprovalDecision, type AgentEvent, type NodeBehestClient } from "../../src/node.js";
import type { Proxy } from "./proxy.js";
import {
  CALCULATOR,
  clientFor,
  NO_SERVER,
  PROTOCOLS,
  proxyFor,
  recorder,
  runOf,
  script,
  TIMEOUT,
  type Sent,
} from "./support.js";

function sequences(events: AgentEvent[]): number[] {
  return events.map((e) => Number(e.sequence));
}

function upTo(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i + 1);
}

for (const protocol of PROTOCOLS) {
  describe(
    `a stream cut by the server's side, over ${protocol}`,
    { skip: NO_SERVER, timeout: TIMEOUT },
    () => {
      let proxy: Proxy;
      let direct: NodeBehestClient; // the same server, not through the proxy
      let client: NodeBehestClient; // through the proxy
      let sent: Sent[];
      before(async () => (direct = clientFor(protocol)));
      after(() => direct.close());
      async function throughProxy() {
        proxy = await proxyFor(protocol);
        sent = [];
        client = clientFor(protocol, { baseUrl: proxy.url, interceptors: [recorder(sent)] });
      }
      afterEach(async () => {
        client.close();
        await proxy.close();
      });

      test("mid-run resumes with WatchRunEvents after the last event seen", async () => {
        await throughProxy();
        const request = runOf(
          script({ text: "let me check", tool_calls: [CALCULATOR] }, { text: "it is 42" }),
          "script",
          {
            approvalRequiredTools: ["calculator"],
          },
        );
        const events: AgentEvent[] = [];
        let cutAfter = 0;
        for await (const event of client.streamRun(request)) {
          events.push(event);
          if (event.event.case === "approvalRequested") {
            // The run waits for this approval, so it is mid-run for sure: cut, then approve.
            cutAfter = Number(event.sequence);
            proxy.cut();
            const answer = { callId: event.event.value.call!.id, decision: ApprovalDecision.ALLOW };
            await direct.runs.submitApprovals({ runId: event.runId, approvals: [answer] });
          }
        }
        assert.deepEqual(sequences(events), upTo(events.length), "no gap, no duplicate");
        assert.equal(events.at(-1)!.event.case, "runCompleted");
        assert.ok(events.length > cutAfter + 3, "the events after the cut arrived");
        const watches = sent.filter((s) => s.method === "WatchRunEvents");
        assert.ok(watches.length >= 1, "resumed with WatchRunEvents");
        assert.equal(
          watches[0]!.message.lastEventId,
          BigInt(cutAfter),
          "after the last event seen",
        );
        assert.equal(watches[0]!.message.runId, events[0]!.runId);
        assert.ok(proxy.accepted >= 2, "on a new connection");
      });

      test("before the first event sends the same CreateRunStream again: one run", async () => {
        await throughProxy();
        const tag = crypto.randomUUID(); // marks the runs of this test
        const cut = proxy.cutAtFirstBody();
        const events: AgentEvent[] = [];
        const request = runOf("cut before its first event", "echo", {
          metadata: JSON.stringify({ tag }),
        });
        for await (const event of client.streamRun(request)) {
          events.push(event);
        }
        await cut;
        assert.deepEqual(sequences(events), upTo(events.length), "from 1, no gap, no duplicate");
        assert.equal(events.at(-1)!.event.case, "runCompleted");
        const creates = sent.filter((s) => s.method === "CreateRunStream");
        assert.equal(creates.length, 2, "the create was sent again");
        assert.equal(creates[1]!.message.clientRequestId, creates[0]!.message.clientRequestId);
        const runs = (await direct.runs.listRuns({ pagination: { limit: 100 } })).runs;
        const tagged = runs.filter((r) => r.metadata && JSON.parse(r.metadata).tag === tag);
        assert.deepEqual(
          tagged.map((r) => r.id),
          [events[0]!.runId],
          "the create that was cut and its repeat made one run",
        );
      });

      test("watch resumes too, and a run that ended is read to its end", async () => {
        const created = await direct.runs.createRun(runOf("a b c d e f g h"));
        const all: AgentEvent[] = [];
        for await (const event of direct.watch(created.runId)) all.push(event);
        await throughProxy();
        const cut = proxy.cutAtFirstBody();
        const events: AgentEvent[] = [];
        for await (const event of client.watch(created.runId, 2)) events.push(event);
        await cut;
        assert.deepEqual(sequences(events), sequences(all).slice(2));
        assert.deepEqual(
          sent.map((s) => [s.method, s.message.lastEventId]),
          [
            ["WatchRunEvents", 2n],
            ["WatchRunEvents", 2n],
          ],
        );
      });
    },
  );
}
