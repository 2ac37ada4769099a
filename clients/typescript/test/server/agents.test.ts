// AgentService through the client, against a real behest server, over each protocol: an
// agent created, run by name, changed into version 2, an alias moved back to version 1.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { eventKind, textOf, type AgentEvent, type NodeBehestClient } from "../../src/node.js";
import { clientFor, NO_SERVER, PROTOCOLS, TIMEOUT, script } from "./support.js";

async function collect(events: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const all: AgentEvent[] = [];
  for await (const event of events) all.push(event);
  return all;
}

function definition(instructions: string) {
  return { description: "says its instructions", instructions, provider: "local", model: "script" };
}

const SAY_INSTRUCTIONS = script({ say: "instructions" });

for (const protocol of PROTOCOLS) {
  describe(`AgentService over ${protocol}`, { skip: NO_SERVER, timeout: TIMEOUT }, () => {
    let client: NodeBehestClient;
    before(() => (client = clientFor(protocol)));
    after(() => client.close());

    test("an agent's versions and aliases decide what its runs are", async () => {
      const name = `ts-${randomUUID().slice(0, 8)}`;
      const created = await client.agents.createAgent({ name, definition: definition("one") });
      assert.equal(created.version?.version, 1);
      const changed = await client.agents.updateAgent({ name, definition: definition("two") });
      assert.equal(changed.changed, true);
      assert.equal(changed.agent?.latestVersion, 2);
      await client.agents.setAgentAlias({ name, alias: "production", version: 1 });

      const latest = await collect(client.streamRun({ agent: name, input: SAY_INSTRUCTIONS }));
      const aliased = await collect(
        client.streamRun({ agent: `${name}@production`, input: SAY_INSTRUCTIONS }),
      );
      assert.equal(textOf(latest), "two");
      assert.equal(textOf(aliased), "one");
      const started = aliased[0]!.event;
      assert.ok(started.case === "runStarted");
      assert.equal(started.value.agentVersion, 1);
      const record = await client.runs.getRun({ runId: aliased[0]!.runId });
      assert.equal(record.run?.agentName, name);
      assert.equal(eventKind(aliased.at(-1)!), "runCompleted");

      const versions = await client.agents.listAgentVersions({ name });
      assert.deepEqual(
        versions.versions.map((v) => v.version),
        [2, 1],
      );
    });

    test("an unknown agent: NOT_FOUND; a bad definition: INVALID_ARGUMENT naming it", async () => {
      await assert.rejects(
        client.agents.getAgent({ agent: `nobody-${randomUUID().slice(0, 8)}` }),
        (error: unknown) => ConnectError.from(error).code === Code.NotFound,
      );
      await assert.rejects(
        client.agents.createAgent({
          name: `bad-${randomUUID().slice(0, 8)}`,
          definition: { ...definition("x"), model: "no-such-model" },
        }),
        (error: unknown) => {
          const refused = ConnectError.from(error);
          return (
            refused.code === Code.InvalidArgument && refused.rawMessage.includes("definition.model")
          );
        },
      );
    });
  });
}
