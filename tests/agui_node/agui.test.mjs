// behest's AG-UI door driven by the real @ag-ui/client HttpAgent (`node --test`), against the
// server tests/e2e/test_agui_door.py starts: AGUI_URL is its HTTP listener, AGUI_TOKEN a
// bearer token of one tenant. Every run's events pass @ag-ui/client's own checks inside
// runAgent's pipeline, and again over the events as received: each against @ag-ui/core's
// schema, their order with verifyEvents.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import net from "node:net";
import { test } from "node:test";

import { EventType, HttpAgent, verifyEvents } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray } from "rxjs";

const BASE = process.env.AGUI_URL;
const HEADERS = { Authorization: `Bearer ${process.env.AGUI_TOKEN}` };

function agent() {
  return new HttpAgent({ url: `${BASE}/ag-ui`, headers: HEADERS, threadId: randomUUID() });
}

function script(...steps) {
  return JSON.stringify({ steps });
}

function say(agentUnderTest, content) {
  agentUnderTest.addMessage({ id: randomUUID(), role: "user", content });
}

// Each event valid per @ag-ui/core's schema, the order per @ag-ui/client's verifyEvents.
async function verified(events) {
  for (const event of events) EventSchema.parse(event);
  return lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
}

// One runAgent: what it received, how it finished (or failed), each checked in order.
async function run(agentUnderTest, parameters = {}) {
  const seen = { events: [], finished: undefined, error: undefined };
  const result = await agentUnderTest.runAgent(parameters, {
    onEvent: ({ event }) => {
      seen.events.push(event);
    },
    onRunFinishedEvent: (params) => {
      seen.finished = params;
    },
    onRunErrorEvent: ({ event }) => {
      seen.error = event;
    },
  });
  await verified(seen.events);
  return { ...seen, result };
}

const types = (events) => events.map((e) => e.type);
const textOf = (events) =>
  events
    .filter((e) => e.type === EventType.TEXT_MESSAGE_CONTENT)
    .map((e) => e.delta)
    .join("");
const behestRun = (events) => events[0].metadata.behest.runId;

test("a text run", async () => {
  const a = agent();
  say(a, "hello from ag-ui");
  const runId = randomUUID();
  const first = await run(a, { runId, forwardedProps: { behest: { model: "echo" } } });
  const started = first.events[0];
  assert.equal(started.type, EventType.RUN_STARTED);
  assert.equal(started.threadId, a.threadId);
  assert.equal(started.runId, runId);
  assert.equal(first.events.at(-1).type, EventType.RUN_FINISHED);
  assert.equal(first.finished.outcome, "success");
  assert.equal(textOf(first.events), "hello from ag-ui");
  assert.ok(types(first.events).includes(EventType.STEP_STARTED));
  assert.deepEqual(
    a.messages.map((m) => [m.role, m.content]),
    [
      ["user", "hello from ag-ui"],
      ["assistant", "hello from ag-ui"],
    ],
  );

  // The next turn sends the whole thread: behest checks it against the session's.
  say(a, "and a second turn");
  const second = await run(a, { forwardedProps: { behest: { model: "echo" } } });
  assert.equal(textOf(second.events), "and a second turn");
  assert.equal(second.finished.outcome, "success");
  assert.notEqual(behestRun(second.events), behestRun(first.events));
  assert.equal(second.events[0].metadata.behest.sessionId, a.threadId);
  assert.deepEqual(
    a.messages.map((m) => m.role),
    ["user", "assistant", "user", "assistant"],
  );
});

test("a frontend tool the client answers", async () => {
  const a = agent();
  const tools = [
    {
      name: "lookup",
      description: "Looks a word up.",
      parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
    },
  ];
  const options = { tools, forwardedProps: { behest: { model: "script" } } };
  say(a, script({ tool_calls: [{ name: "lookup", arguments: { word: "behest" } }] }, { text: "found it" }));

  const first = await run(a, options);
  assert.equal(first.finished.outcome, "success");
  assert.deepEqual(first.finished.pendingToolCallIds, ["call_1_1"]);
  assert.ok(!types(first.events).includes(EventType.TOOL_CALL_RESULT));
  const [call] = a.messages.find((m) => m.role === "assistant").toolCalls;
  assert.equal(call.function.name, "lookup");
  assert.deepEqual(JSON.parse(call.function.arguments), { word: "behest" });

  a.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.id, content: "behest: a command" });
  const second = await run(a, options);
  assert.equal(behestRun(second.events), behestRun(first.events), "the same behest run goes on");
  assert.equal(second.finished.outcome, "success");
  assert.deepEqual(second.finished.pendingToolCallIds, []);
  assert.ok(!types(second.events).includes(EventType.TOOL_CALL_RESULT), "the client's own result");
  assert.equal(textOf(second.events), "found it");
  assert.deepEqual(
    a.messages.map((m) => m.role),
    ["user", "assistant", "tool", "assistant"],
  );
});

test("an approval as an interrupt, resumed", async () => {
  const a = agent();
  const calc = { name: "calculator", arguments: { expression: "2+2" } };
  say(a, script({ tool_calls: [calc] }, { text: "it is 4" }));
  const behest = { model: "script", approvalRequiredTools: ["calculator"] };

  const first = await run(a, { forwardedProps: { behest } });
  assert.equal(first.finished.outcome, "interrupt");
  const [interrupt] = first.finished.interrupts;
  assert.equal(interrupt.toolCallId, "call_1_1");
  assert.equal(interrupt.reason, "tool_approval");
  assert.deepEqual(a.pendingInterrupts.map((i) => i.id), [interrupt.id]);

  const resume = [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "allow" } }];
  const second = await run(a, { resume });
  assert.equal(behestRun(second.events), behestRun(first.events));
  assert.equal(second.finished.outcome, "success");
  const result = second.events.find((e) => e.type === EventType.TOOL_CALL_RESULT);
  assert.deepEqual([result.toolCallId, result.content], ["call_1_1", "4"]);
  assert.equal(textOf(second.events), "it is 4");
  assert.deepEqual(a.pendingInterrupts, []);
  assert.deepEqual(
    a.messages.map((m) => m.role),
    ["user", "assistant", "tool", "assistant"],
  );
});

test("a failed run as RUN_ERROR with its code", async () => {
  const a = agent();
  say(a, script({ error: "bad_request" }));
  const failed = await run(a, { forwardedProps: { behest: { model: "script" } } });
  assert.equal(failed.finished, undefined);
  assert.equal(failed.error.type, EventType.RUN_ERROR);
  assert.equal(failed.error.code, "FAILURE_CODE_PROVIDER_ERROR");
  assert.match(failed.error.message, /bad request/);
  assert.equal(failed.events.at(-1).type, EventType.RUN_ERROR);

  // The thread goes on after a failed run: its history is the session's.
  say(a, "after the failure");
  const next = await run(a, { forwardedProps: { behest: { model: "echo" } } });
  assert.equal(next.finished.outcome, "success");
  assert.equal(textOf(next.events), "after the failure");
});

test("a snapshot catches the client up with the session", async () => {
  // A structured answer that does not fit is repaired: behest asks the model again with a
  // user message of its own, which the client never streamed. MESSAGES_SNAPSHOT brings it.
  const a = agent();
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
  const behest = {
    model: "script",
    responseFormat: { name: "answer", jsonSchema: JSON.stringify(schema) },
  };
  say(a, script({ text: "not json" }, { text: '{"n": 4}' }));
  const repaired = await run(a, { forwardedProps: { behest } });
  assert.equal(repaired.finished.outcome, "success");
  const kinds = types(repaired.events);
  assert.equal(kinds.at(-2), EventType.MESSAGES_SNAPSHOT);
  assert.deepEqual(
    a.messages.filter((m) => m.role !== "reasoning").map((m) => m.role),
    ["user", "assistant", "user", "assistant"],
  );
  assert.equal(a.messages.at(-1).content, '{"n": 4}');

  // With the session's history, the next turn is accepted.
  say(a, "next");
  const next = await run(a, { forwardedProps: { behest: { model: "echo" } } });
  assert.equal(textOf(next.events), "next");
});

// --- Last-Event-ID: behest's extension -------------------------------------------------------

// A loopback TCP proxy whose `cut()` drops every connection it carries, from the server's side.
async function cutProxy(target) {
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    cut() {
      for (const socket of sockets) socket.resetAndDestroy();
      sockets.clear();
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

// Server-sent events, parsed as the spec says: {id, event} per frame with data.
async function* frames(response) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let id;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("id:")) id = line.slice(3).trim();
        if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { id, event: JSON.parse(data.join("\n")) };
    }
  }
}

async function post(base, body, headers = {}) {
  const response = await fetch(`${base}/ag-ui`, {
    method: "POST",
    headers: { ...HEADERS, "Content-Type": "application/json", Accept: "text/event-stream", ...headers },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200);
  return response;
}

async function all(response) {
  const got = [];
  for await (const frame of frames(response)) got.push(frame);
  return got;
}

test("a reconnect with Last-Event-ID gets the rest exactly once", async () => {
  const words = "one two three four five six seven eight nine ten";
  const body = {
    threadId: randomUUID(),
    runId: randomUUID(),
    messages: [{ id: randomUUID(), role: "user", content: script({ text: words, delay_ms: 40 }) }],
    tools: [],
    context: [],
    forwardedProps: { behest: { model: "script" } },
  };
  const proxy = await cutProxy(new URL(BASE));
  const got = [];
  let broken = false;
  try {
    for await (const frame of frames(await post(proxy.url, body))) {
      got.push(frame);
      const contents = got.filter((f) => f.event.type === EventType.TEXT_MESSAGE_CONTENT);
      if (contents.length === 3 && frame.id) proxy.cut();
    }
  } catch {
    broken = true;
  } finally {
    await proxy.close();
  }
  assert.ok(broken, "the stream was cut mid-way");
  assert.ok(!got.some((f) => f.event.type === EventType.RUN_FINISHED));

  // What was fully delivered: the events up to the last one with an id (those after it are
  // part of a behest event not yet complete, and come again).
  const last = got.findLastIndex((f) => f.id !== undefined);
  const kept = got.slice(0, last + 1);
  const lastId = kept.at(-1).id;
  const rest = await all(await post(BASE, body, { "Last-Event-ID": lastId }));
  const whole = await all(await post(BASE, body));

  const joined = [...kept, ...rest];
  assert.deepEqual(joined.map((f) => f.event), whole.map((f) => f.event));
  const ids = joined.filter((f) => f.id !== undefined).map((f) => Number(f.id));
  assert.deepEqual(ids, [...ids].sort((x, y) => x - y));
  assert.equal(new Set(ids).size, ids.length, "no behest event twice");
  assert.ok(rest.every((f) => f.id === undefined || Number(f.id) > Number(lastId)));
  await verified(joined.map((f) => f.event));
  assert.equal(textOf(joined.map((f) => f.event)), words.split(" ").join(" "));
});
