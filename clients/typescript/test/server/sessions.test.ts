// A whole session through the client's watchSession, against a real behest server, over each
// protocol: every event of each run, the runs started after the watch began included, once
// and in order; a watch resumed from a cursor goes on right after it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { isTerminal, type AgentEvent, type NodeBehestClient } from "../../src/node.js";
import { clientFor, NO_SERVER, PROTOCOLS, TIMEOUT, runOf, script } from "./support.js";

async function collect(events: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const all: AgentEvent[] = [];
  for await (const event of events) all.push(event);
  return all;
}

/** The stream's events until `runs` runs have ended (it does not end by itself). */
async function untilEnded(events: AsyncIterable<AgentEvent>, runs: number): Promise<AgentEvent[]> {
  const seen: AgentEvent[] = [];
  for await (const event of events) {
    seen.push(event);
    if (seen.filter(isTerminal).length === runs) {
      return seen;
    }
  }
  throw new Error("the session's stream ended");
}

const key = (e: AgentEvent) => `${e.runId}:${e.sequence}`;

for (const protocol of PROTOCOLS) {
  describe(`a session's stream over ${protocol}`, { skip: NO_SERVER, timeout: TIMEOUT }, () => {
    let client: NodeBehestClient;
    before(() => (client = clientFor(protocol)));
    after(() => client.close());

    test("watchSession follows every run of the session, later ones too", async () => {
      const first = await client.runs.createRun(runOf(script({ text: "one" }), "script"));
      const sessionId = first.sessionId;
      await collect(client.watch(first.runId));
      const stop = new AbortController();
      const watching = untilEnded(
        client.watchSession(sessionId, undefined, { signal: stop.signal }),
        2,
      );
      const second = await client.runs.createRun(
        runOf(script({ text: "two" }), "script", { sessionId }),
      );
      const seen = await watching;
      stop.abort();
      const whole = [
        ...(await collect(client.watch(first.runId))),
        ...(await collect(client.watch(second.runId))),
      ];
      assert.deepEqual(seen.map(key), whole.map(key));

      const cut = whole[2]!;
      const rest = await untilEnded(
        client.watchSession(sessionId, { runId: cut.runId, sequence: cut.sequence }),
        2,
      );
      assert.deepEqual(rest.map(key), whole.slice(3).map(key));
    });
  });
}
