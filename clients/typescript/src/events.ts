// Small helpers over the generated AgentEvent: which kind an event is, and whether it ends
// its run. Every run's events are numbered 1, 2, 3, … and end with exactly one terminal
// event: run_completed, run_failed or run_cancelled.
import type { AgentEvent } from "./gen/agent/v1/run_pb.js";
import { RunStatus } from "./gen/agent/v1/common_pb.js";

/** The kind of an event: the case of its `event` oneof ("textDelta", "runCompleted", …). */
export type EventKind = NonNullable<AgentEvent["event"]["case"]>;

/** The kinds that end a run: its last event is exactly one of them. */
export const TERMINAL_KINDS: ReadonlySet<EventKind> = new Set<EventKind>([
  "runCompleted",
  "runFailed",
  "runCancelled",
]);

/** The event's kind; undefined for a kind newer than this client's generated code. */
export function eventKind(event: AgentEvent): EventKind | undefined {
  return event.event.case;
}

/** Whether the event is its run's last (run_completed, run_failed or run_cancelled). */
export function isTerminal(event: AgentEvent): boolean {
  const kind = event.event.case;
  return kind !== undefined && TERMINAL_KINDS.has(kind);
}

/** Whether a run in this status has ended (completed, failed or cancelled). */
export function isEnded(status: RunStatus): boolean {
  return (
    status === RunStatus.COMPLETED || status === RunStatus.FAILED || status === RunStatus.CANCELLED
  );
}

/** The answer's text as the events stream it: the text deltas joined, less the partial text
 * of a model call that was repeated (a new model_started with the same iteration says to
 * drop what that iteration had shown). */
export function textOf(events: Iterable<AgentEvent>): string {
  let text = "";
  const starts = new Map<number, number>(); // iteration → where its text began
  for (const event of events) {
    const { case: kind, value } = event.event;
    if (kind === "modelStarted") {
      const start = starts.get(value.iteration);
      if (start === undefined) {
        starts.set(value.iteration, text.length);
      } else {
        text = text.slice(0, start);
      }
    } else if (kind === "textDelta") {
      text += value.delta;
    }
  }
  return text;
}
