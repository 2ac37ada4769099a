// The client of behest's agent.v1 services over any Connect transport: one generated
// Connect-ES client per service, and the run streams that resume (follow.ts). Node and the
// browser build it from their own transports (node.ts, web.ts).
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  createClient,
  type CallOptions,
  type Client,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { AgentService } from "./gen/agent/v1/agent_pb.js";
import { ProviderService, ToolService } from "./gen/agent/v1/catalog_pb.js";
import { ToolExecutionService } from "./gen/agent/v1/execution_pb.js";
import {
  CompactionService,
  CreateRunRequestSchema,
  RunService,
  SnapshotService,
  UsageService,
  type AgentEvent,
} from "./gen/agent/v1/run_pb.js";
import { SessionService } from "./gen/agent/v1/session_pb.js";
import { follow, type StreamOptions } from "./follow.js";
import { answersRequest, type QuestionAnswer } from "./questions.js";
import { followSession, type SessionCursor } from "./session.js";
import { RECONNECT_DEFAULTS, type ReconnectOptions } from "./reconnect.js";

export type CreateRunInit = MessageInitShape<typeof CreateRunRequestSchema>;

export interface BehestClient {
  readonly runs: Client<typeof RunService>;
  readonly sessions: Client<typeof SessionService>;
  readonly tools: Client<typeof ToolService>;
  readonly providers: Client<typeof ProviderService>;
  readonly usage: Client<typeof UsageService>;
  readonly executions: Client<typeof ToolExecutionService>;
  readonly compaction: Client<typeof CompactionService>;
  readonly snapshots: Client<typeof SnapshotService>;
  /** Stored, versioned agents (docs/AGENTS.md); a run names one with `agent`. */
  readonly agents: Client<typeof AgentService>;
  /** Create a run (CreateRunStream) and yield its events to the terminal one, resuming
   * after breaks from the last sequence seen. Without a client_request_id one is made up,
   * so that sending the create again after an early break is idempotent. */
  streamRun(request: CreateRunInit, options?: StreamOptions): AsyncIterable<AgentEvent>;
  /** Yield a run's events with sequence > `after` (0: from the start) to the terminal one,
   * resuming after breaks from the last sequence seen. */
  watch(runId: string, after?: bigint | number, options?: StreamOptions): AsyncIterable<AgentEvent>;
  /** Yield every event of a session's runs after `after` (none: from its first), the runs
   * started later included, resuming after breaks; it does not end by itself. */
  watchSession(
    sessionId: string,
    after?: SessionCursor,
    options?: StreamOptions,
  ): AsyncIterable<AgentEvent>;
  /** Answer a question a running tool asked (SubmitElicitationAnswers): `{ accept: content }`
   * (an object that fits the question's schema), `{ decline: true }` or `{ cancel: true }`.
   * Resolves to the run's calls and questions still waiting (empty: the run goes on). Content
   * that does not fit the schema is InvalidArgument, an unknown question NotFound, one
   * answered otherwise (or expired) FailedPrecondition; the same answer again is harmless. */
  answerQuestion(
    runId: string,
    elicitationId: string,
    answer: QuestionAnswer,
    options?: CallOptions,
  ): Promise<string[]>;
}

export interface ClientOptions {
  /** How a broken stream comes back (reconnect.ts): 8 attempts, 200 ms doubling to 5 s. */
  reconnect?: ReconnectOptions;
}

/** behest's services over `transport` (give the transport the `bearer(token)` interceptor). */
export function clientOf(transport: Transport, options: ClientOptions = {}): BehestClient {
  const runs = createClient(RunService, transport);
  const sessions = createClient(SessionService, transport);
  const reconnect = { ...RECONNECT_DEFAULTS, ...options.reconnect };
  return {
    runs,
    sessions,
    tools: createClient(ToolService, transport),
    providers: createClient(ProviderService, transport),
    usage: createClient(UsageService, transport),
    executions: createClient(ToolExecutionService, transport),
    compaction: createClient(CompactionService, transport),
    snapshots: createClient(SnapshotService, transport),
    agents: createClient(AgentService, transport),
    ...streamsOf(runs, options.reconnect),
    watchSession(sessionId, after = { runId: "", sequence: 0n }, streamOptions) {
      return followSession(sessions, sessionId, after, reconnect, streamOptions);
    },
    async answerQuestion(runId, elicitationId, answer, callOptions) {
      const request = answersRequest(runId, elicitationId, answer);
      return (await runs.submitElicitationAnswers(request, callOptions)).waitingCallIds;
    },
  };
}

/** streamRun and watch over a RunService client. */
export function streamsOf(
  runs: Client<typeof RunService>,
  options: ReconnectOptions = {},
): Pick<BehestClient, "streamRun" | "watch"> {
  const reconnect = { ...RECONNECT_DEFAULTS, ...options };
  return {
    streamRun(request, streamOptions) {
      const message = create(CreateRunRequestSchema, request);
      message.clientRequestId ||= requestId();
      return follow(runs, { create: message, runId: "", after: 0n }, reconnect, streamOptions);
    },
    watch(runId, after = 0n, streamOptions) {
      return follow(runs, { runId, after: BigInt(after) }, reconnect, streamOptions);
    },
  };
}

/** An interceptor that sends `authorization: Bearer <token>` with every call. */
export function bearer(token: string): Interceptor {
  const value = `Bearer ${token}`;
  return (next) => (request) => {
    request.header.set("authorization", value);
    return next(request);
  };
}

/** `transport` with `authorization: Bearer <token>` added to every call's headers (for a
 * transport made elsewhere, whose interceptors are fixed); without a token, `transport`. */
export function withToken(transport: Transport, token: string | undefined): Transport {
  if (!token) {
    return transport;
  }
  const value = `Bearer ${token}`;
  const headers = (init: HeadersInit | undefined) => {
    const header = new Headers(init);
    header.set("authorization", value);
    return header;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.unary(method, signal, timeoutMs, headers(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.stream(method, signal, timeoutMs, headers(header), input, contextValues),
  };
}

// A random (version 4) UUID; crypto.randomUUID exists only in secure contexts in browsers.
function requestId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
