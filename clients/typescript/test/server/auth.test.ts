// Bearer tokens and tenants through the client: no token is UNAUTHENTICATED, another
// tenant's run is NOT_FOUND, each a ConnectError with its code, thrown at once.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import {
  Code,
  ConnectError,
  createBehestClient,
  type AgentEvent,
  type NodeBehestClient,
} from "../../src/node.js";
import {
  clientFor,
  NO_SERVER,
  PROTOCOLS,
  TIMEOUT,
  recorder,
  runOf,
  SERVER,
  urlFor,
  type Sent,
} from "./support.js";

const TRANSPORTS = {
  connect: createConnectTransport,
  "grpc-web": createGrpcWebTransport,
  grpc: createGrpcTransport,
};

function hasCode(code: Code) {
  return (error: unknown) => {
    assert.ok(error instanceof ConnectError, `a ConnectError, not ${String(error)}`);
    assert.equal(Code[error.code], Code[code], error.message);
    return true;
  };
}

async function drain(events: AsyncIterable<AgentEvent>): Promise<void> {
  for await (const _ of events);
}

for (const protocol of PROTOCOLS) {
  describe(`tokens and tenants over ${protocol}`, { skip: NO_SERVER, timeout: TIMEOUT }, () => {
    let alice: NodeBehestClient;
    let bob: NodeBehestClient; // another tenant
    let anonymous: NodeBehestClient;
    const anonymousSent: Sent[] = [];
    let runId = "";
    before(async () => {
      alice = clientFor(protocol);
      bob = clientFor(protocol, { token: SERVER.otherToken });
      anonymous = clientFor(protocol, { token: "", interceptors: [recorder(anonymousSent)] });
      runId = (await alice.runs.createRun(runOf("mine"))).runId;
      await drain(alice.watch(runId));
    });
    after(() => [alice, bob, anonymous].forEach((c) => c.close()));

    test("no token: UNAUTHENTICATED, for calls and streams, not retried", async () => {
      await assert.rejects(anonymous.runs.getRun({ runId }), hasCode(Code.Unauthenticated));
      await assert.rejects(anonymous.runs.listRuns({}), hasCode(Code.Unauthenticated));
      await assert.rejects(drain(anonymous.streamRun(runOf("hi"))), hasCode(Code.Unauthenticated));
      await assert.rejects(drain(anonymous.watch(runId)), hasCode(Code.Unauthenticated));
      assert.deepEqual(
        anonymousSent.map((s) => s.method),
        ["GetRun", "ListRuns", "CreateRunStream", "WatchRunEvents"],
        "each call made once",
      );
    });

    test("a wrong token: UNAUTHENTICATED", async () => {
      const wrong = clientFor(protocol, { token: "not-a-token-of-this-server" });
      await assert.rejects(wrong.runs.getRun({ runId }), hasCode(Code.Unauthenticated));
      wrong.close();
    });

    test("a transport of one's own gets the token added", async () => {
      const make = TRANSPORTS[protocol];
      const baseUrl = urlFor(protocol);
      const httpVersion = protocol === "grpc" ? "2" : "1.1";
      const transport = make({ baseUrl, httpVersion, useBinaryFormat: true });
      const own = createBehestClient({ transport, token: SERVER.token });
      const { run } = await own.runs.getRun({ runId });
      assert.equal(run?.id, runId);
      const without = createBehestClient({ transport });
      await assert.rejects(without.runs.getRun({ runId }), hasCode(Code.Unauthenticated));
    });

    test("another tenant's run: NOT_FOUND", async () => {
      await assert.rejects(bob.runs.getRun({ runId }), hasCode(Code.NotFound));
      await assert.rejects(bob.runs.getRunOutput({ runId }), hasCode(Code.NotFound));
      await assert.rejects(bob.runs.listRunEvents({ runId }), hasCode(Code.NotFound));
      await assert.rejects(bob.runs.cancelRun({ runId }), hasCode(Code.NotFound));
      await assert.rejects(drain(bob.watch(runId)), hasCode(Code.NotFound));
      const theirs = await bob.runs.listRuns({});
      assert.ok(!theirs.runs.some((r) => r.id === runId), "not listed either");
    });

    test("an invalid request: INVALID_ARGUMENT with the server's message", async () => {
      await assert.rejects(
        alice.runs.createRun({
          provider: { value: "local" },
          model: { value: "no-such-model" },
          input: "x",
        }),
        hasCode(Code.InvalidArgument),
      );
    });
  });
}
