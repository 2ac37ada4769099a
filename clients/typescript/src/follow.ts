// Following a run's events to its terminal one across breaks, as the Python client's
// `_follow` does (src/behest/client/_client.py):
// - every event with a sequence at or below the last one seen is skipped (a replay that
//   overlaps), so the caller sees each sequence once, in order, with no gap;
// - a break (breaks.ts) reconnects with WatchRunEvents(last_event_id = the last sequence
//   seen) after a backoff (reconnect.ts); until the first event the run id is unknown, so the
//   same CreateRunStream is sent again (the same client_request_id: the same run, streamed
//   from sequence 1);
// - a stream that ends without error before the terminal event (a server draining on
//   shutdown) is a break too, unless GetRun says the run has ended: then one more watch
//   collects whatever is left, and if that too ends early the caller has seen everything;
// - any other status is thrown at once, as the ConnectError the server sent;
// - once the attempts are used up, the stream throws Unavailable (the last break its cause).
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { AgentEvent, CreateRunRequest, RunService } from "./gen/agent/v1/run_pb.js";
import { isBreak } from "./breaks.js";
import { isEnded, isTerminal } from "./events.js";
import { backoff, type ReconnectOptions } from "./reconnect.js";

/** What a stream may be given per call: a signal that ends it, and headers to send. */
export interface StreamOptions {
  signal?: AbortSignal;
  headers?: HeadersInit;
}

export interface Start {
  create?: CreateRunRequest; // CreateRunStream this until the first event, then watch
  runId: string;
  after: bigint;
}

export async function* follow(
  runs: Client<typeof RunService>,
  start: Start,
  reconnect: Required<ReconnectOptions>,
  options: StreamOptions = {},
): AsyncGenerator<AgentEvent, void, undefined> {
  const { signal, headers } = options;
  let { runId, after: last } = start;
  let attempt = 0;
  let ended = false;
  for (;;) {
    let broke: unknown = undefined;
    const call = new AbortController();
    const cancel = () => call.abort(signal?.reason);
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      signal?.throwIfAborted();
      const events = runId
        ? runs.watchRunEvents({ runId, lastEventId: last }, { signal: call.signal, headers })
        : runs.createRunStream(start.create!, { signal: call.signal, headers });
      for await (const event of events) {
        if (event.sequence <= last) {
          continue; // a replay overlapping what was already yielded
        }
        runId = event.runId;
        last = event.sequence;
        attempt = 0;
        yield event;
        if (isTerminal(event)) {
          return;
        }
        signal?.throwIfAborted(); // cancelled while the caller held the event
      }
    } catch (reason) {
      broke = failure(reason, signal);
    } finally {
      signal?.removeEventListener("abort", cancel);
      call.abort(); // the call is over either way: release its connection
    }
    if (broke === undefined) {
      // OK before the terminal event: the run ended and nothing is left after the cursor, or
      // a server closed the stream early (draining on shutdown).
      if (ended) {
        return;
      }
      if (runId) {
        try {
          const { run } = await runs.getRun({ runId }, { signal, headers });
          if (run !== undefined && isEnded(run.status)) {
            ended = true;
            continue;
          }
        } catch (reason) {
          broke = failure(reason, signal);
        }
      }
    }
    if (!(await backoff(attempt, reconnect, signal))) {
      throw givenUp(broke);
    }
    attempt += 1;
  }
}

// The break to try again after, or throw: a status the server sent, or the caller's cancel.
export function failure(reason: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted) {
    throw ConnectError.from(signal.reason ?? reason, Code.Canceled);
  }
  if (!isBreak(reason)) {
    throw ConnectError.from(reason);
  }
  return reason;
}

export function givenUp(broke: unknown): ConnectError {
  if (broke === undefined) {
    return new ConnectError("the stream ended before the run's last event", Code.Unavailable);
  }
  const error = ConnectError.from(broke);
  if (error.code === Code.Unavailable) {
    return error;
  }
  return new ConnectError(error.rawMessage, Code.Unavailable, error.metadata, undefined, error);
}
