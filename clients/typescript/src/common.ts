// What the Node and the browser entry points both export.
export { Code, ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";
export {
  bearer,
  clientOf,
  streamsOf,
  withToken,
  type BehestClient,
  type ClientOptions,
  type CreateRunInit,
} from "./client.js";
export { isBreak } from "./breaks.js";
export {
  eventKind,
  isEnded,
  isTerminal,
  textOf,
  TERMINAL_KINDS,
  type EventKind,
} from "./events.js";
export type { StreamOptions } from "./follow.js";
export { questionOf, type Question, type QuestionAnswer } from "./questions.js";
export type { SessionCursor } from "./session.js";
export { backoffMs, RECONNECT_DEFAULTS, type ReconnectOptions } from "./reconnect.js";
export * from "./gen/agent/v1/agent_pb.js";
export * from "./gen/agent/v1/catalog_pb.js";
export * from "./gen/agent/v1/common_pb.js";
export * from "./gen/agent/v1/execution_pb.js";
export * from "./gen/agent/v1/run_pb.js";
export * from "./gen/agent/v1/session_pb.js";
