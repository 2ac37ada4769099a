// Following a whole session (WatchSessionEvents) across breaks, as the Python client's
// `watch_session` does (src/behest/client/_session_watch.py): the stream does not end by
// itself; after a break (breaks.ts) it comes back after the last event it yielded — that
// event's run id and sequence are the session's cursor — with the reconnect backoff, so the
// caller sees every event once, in order. Any other status is thrown at once; the caller ends
// it with its signal (or by leaving the loop).
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { AgentEvent } from "./gen/agent/v1/run_pb.js";
import type { SessionService } from "./gen/agent/v1/session_pb.js";
import { failure, givenUp, type StreamOptions } from "./follow.js";
import { backoff, type ReconnectOptions } from "./reconnect.js";

/** The last event a client saw of a session: its run and sequence. */
export interface SessionCursor {
  runId: string;
  sequence: bigint;
}

export async function* followSession(
  sessions: Client<typeof SessionService>,
  sessionId: string,
  after: SessionCursor,
  reconnect: Required<ReconnectOptions>,
  options: StreamOptions = {},
): AsyncGenerator<AgentEvent, void, undefined> {
  const { signal, headers } = options;
  let last = after;
  let attempt = 0;
  for (;;) {
    let broke: unknown = undefined;
    const call = new AbortController();
    const cancel = () => call.abort(signal?.reason);
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      signal?.throwIfAborted();
      const request = { sessionId, afterRunId: last.runId, afterSequence: last.sequence };
      for await (const event of sessions.watchSessionEvents(request, {
        signal: call.signal,
        headers,
      })) {
        last = { runId: event.runId, sequence: event.sequence };
        attempt = 0;
        yield event;
        signal?.throwIfAborted(); // cancelled while the caller held the event
      }
      broke = new ConnectError("the server ended the session's stream", Code.Unavailable);
    } catch (reason) {
      broke = failure(reason, signal);
    } finally {
      signal?.removeEventListener("abort", cancel);
      call.abort();
    }
    if (!(await backoff(attempt, reconnect, signal))) {
      throw givenUp(broke);
    }
    attempt += 1;
  }
}
