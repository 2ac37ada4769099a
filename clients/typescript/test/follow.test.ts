// How streamRun and watch resume, against a fake RunService (no server): which failures are
// breaks, the cursor sent after one, overlaps skipped, retries bounded, the caller's cancel.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Client } from "@connectrpc/connect";
import {
  AgentEventSchema,
  RunRecordSchema,
  RunStatus,
  streamsOf,
  type AgentEvent,
  type CreateRunRequest,
  type RunService,
} from "../src/node.js";

const RECONNECT = { attempts: 3, baseMs: 1, maxMs: 2 };
const RUN = "run-1";

function event(sequence: number, terminal = false): AgentEvent {
  return create(AgentEventSchema, {
    sequence: BigInt(sequence),
    runId: RUN,
    event: terminal
      ? { case: "runCompleted", value: {} }
      : { case: "textDelta", value: { delta: `w${sequence} ` } },
  });
}

// A run of five events, the fifth terminal.
const LOG = [1, 2, 3, 4].map((n) => event(n)).concat([event(5, true)]);

interface Call {
  method: string;
  lastEventId?: bigint;
  clientRequestId?: string;
}

// What one call of a stream does: yields these events of the log, then fails, ends or waits
// for the caller's cancel.
type Script = { from?: number; to?: number; fail?: unknown; hang?: boolean };

// streamRun and watch over a fake RunService that plays `scripts`, one per stream call.
function fake(scripts: Script[], status = RunStatus.CALLING_MODEL) {
  const calls: Call[] = [];
  async function* stream(cursor: number, signal?: AbortSignal): AsyncGenerator<AgentEvent> {
    const script = scripts.shift() ?? {};
    yield* LOG.slice(script.from ?? cursor, script.to ?? LOG.length);
    if (script.fail !== undefined) {
      throw script.fail;
    }
    if (script.hang) {
      await new Promise((_, reject) => {
        const cancelled = () => reject(new ConnectError("aborted", Code.Canceled));
        signal?.aborted ? cancelled() : signal?.addEventListener("abort", cancelled);
      });
    }
  }
  const runs = {
    createRunStream(request: CreateRunRequest, options?: { signal?: AbortSignal }) {
      calls.push({ method: "CreateRunStream", clientRequestId: request.clientRequestId });
      return stream(0, options?.signal);
    },
    watchRunEvents(request: { lastEventId: bigint }, options?: { signal?: AbortSignal }) {
      calls.push({ method: "WatchRunEvents", lastEventId: request.lastEventId });
      return stream(Number(request.lastEventId), options?.signal);
    },
    async getRun() {
      calls.push({ method: "GetRun" });
      return { run: create(RunRecordSchema, { id: RUN, status }) };
    },
  };
  return { client: streamsOf(runs as unknown as Client<typeof RunService>, RECONNECT), calls };
}

async function collect(events: AsyncIterable<AgentEvent>): Promise<number[]> {
  const seen: number[] = [];
  for await (const e of events) {
    seen.push(Number(e.sequence));
  }
  return seen;
}

const reset = new ConnectError(
  "read ECONNRESET",
  Code.Aborted,
  undefined,
  undefined,
  Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
);
const h2Closed = new ConnectError(
  "http/2 stream closed with error code CANCEL (0x8)",
  Code.Canceled,
);
const truncated = new ConnectError(
  "protocol error: missing EndStreamResponse",
  Code.InvalidArgument,
);
const fetchFailed = ConnectError.from(new TypeError("network error"));

describe("a stream that breaks", () => {
  for (const [name, error] of [
    ["UNAVAILABLE", new ConnectError("shutting down", Code.Unavailable)],
    ["a reset connection", reset],
    ["an HTTP/2 stream its connection closed", h2Closed],
    ["a body cut short", truncated],
    ["a failed fetch", fetchFailed],
  ] as const) {
    test(`resumes after ${name} from the last sequence seen`, async () => {
      const { client, calls } = fake([
        { to: 2, fail: error },
        { from: 1, to: 3, fail: error },
      ]);
      assert.deepEqual(await collect(client.watch(RUN)), [1, 2, 3, 4, 5]);
      assert.deepEqual(
        calls.map((c) => c.lastEventId),
        [0n, 2n, 3n],
        "each watch starts after the last event yielded; the overlap replayed is skipped",
      );
    });
  }

  test("re-sends the same CreateRunStream until the first event, then watches", async () => {
    const { client, calls } = fake([
      { to: 0, fail: reset },
      { to: 3, fail: reset },
    ]);
    const events = client.streamRun({ input: "hi" });
    assert.deepEqual(await collect(events), [1, 2, 3, 4, 5]);
    assert.deepEqual(
      calls.map((c) => c.method),
      ["CreateRunStream", "CreateRunStream", "WatchRunEvents"],
    );
    assert.ok(calls[0]!.clientRequestId, "a client_request_id is made up");
    assert.equal(
      calls[1]!.clientRequestId,
      calls[0]!.clientRequestId,
      "the same one, so the same run",
    );
    assert.equal(calls[2]!.lastEventId, 3n);
  });

  test("gives up with UNAVAILABLE once the attempts are used up, counted from the last event", async () => {
    const outage = Array.from({ length: 10 }, () => ({ fail: reset, to: 0 }));
    const { client, calls } = fake([{ to: 2, fail: reset }, ...outage]);
    const seen: number[] = [];
    await assert.rejects(
      (async () => {
        for await (const e of client.watch(RUN)) seen.push(Number(e.sequence));
      })(),
      (error: ConnectError) => error.code === Code.Unavailable && error.cause === reset,
    );
    assert.deepEqual(seen, [1, 2]);
    assert.equal(calls.length, 1 + RECONNECT.attempts, "the call that broke, then one per attempt");
  });

  test("throws a status the server sent at once, without retrying", async () => {
    for (const code of [Code.NotFound, Code.Unauthenticated, Code.Aborted, Code.Internal]) {
      const { client, calls } = fake([{ to: 1, fail: new ConnectError("no", code) }]);
      await assert.rejects(
        collect(client.watch(RUN)),
        (error: ConnectError) => error.code === code,
      );
      assert.equal(calls.length, 1);
    }
  });
});

describe("a stream that ends without error before the terminal event", () => {
  test("is a break while the run goes on", async () => {
    const { client, calls } = fake([{ to: 2 }, {}]);
    assert.deepEqual(await collect(client.watch(RUN)), [1, 2, 3, 4, 5]);
    assert.deepEqual(
      calls.map((c) => c.method),
      ["WatchRunEvents", "GetRun", "WatchRunEvents"],
    );
  });

  test("of an ended run, is read once more, then done", async () => {
    const { client, calls } = fake([{ to: 2 }, { to: 3 }], RunStatus.COMPLETED);
    assert.deepEqual(await collect(client.watch(RUN)), [1, 2, 3]);
    assert.deepEqual(
      calls.map((c) => c.method),
      ["WatchRunEvents", "GetRun", "WatchRunEvents"],
    );
  });
});

test("watch(runId, after) yields only the events after `after`", async () => {
  const { client } = fake([{}]);
  assert.deepEqual(await collect(client.watch(RUN, 3)), [4, 5]);
});

test("the caller's signal ends a stream with CANCELED, not retried", async () => {
  const { client, calls } = fake([{ to: 2, hang: true }]);
  const controller = new AbortController();
  const seen: number[] = [];
  await assert.rejects(
    (async () => {
      for await (const e of client.watch(RUN, 0, { signal: controller.signal })) {
        seen.push(Number(e.sequence));
        if (e.sequence === 2n) controller.abort();
      }
    })(),
    (error: ConnectError) => error.code === Code.Canceled,
  );
  assert.deepEqual(seen, [1, 2]);
  assert.equal(calls.length, 1);
});
