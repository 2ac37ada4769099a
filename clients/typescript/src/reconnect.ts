// How a stream comes back after a break, as behest's Python client does it: bounded
// exponential backoff with full jitter (a uniform draw from 0 to the attempt's ceiling, which
// doubles per attempt up to a cap), `attempts` waits per outage, counted again from zero
// whenever an event gets through.
import { Code, ConnectError } from "@connectrpc/connect";

export interface ReconnectOptions {
  /** Waits per outage before giving up with the last error (default 8). */
  attempts?: number;
  /** The first wait's ceiling in milliseconds (default 200). */
  baseMs?: number;
  /** The cap on a wait's ceiling in milliseconds (default 5000). */
  maxMs?: number;
}

export const RECONNECT_DEFAULTS: Required<ReconnectOptions> = {
  attempts: 8,
  baseMs: 200,
  maxMs: 5000,
};

/** The wait after failed attempt number `attempt` (1-based): uniform from 0 to
 * min(maxMs, baseMs * 2 ** (attempt - 1)). */
export function backoffMs(attempt: number, baseMs: number, maxMs: number): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt, 1) - 1, 62));
  return Math.random() * ceiling;
}

/** Wait before attempt `attempt + 1`; false (no wait) once the attempts are used up. An
 * aborted `signal` ends the wait with the signal's reason as a ConnectError (Canceled). */
export async function backoff(
  attempt: number,
  options: Required<ReconnectOptions>,
  signal?: AbortSignal,
): Promise<boolean> {
  if (attempt >= options.attempts) {
    return false;
  }
  const ms = backoffMs(attempt + 1, options.baseMs, options.maxMs);
  await new Promise<void>((resolve, reject) => {
    const aborted = () => {
      clearTimeout(timer);
      reject(ConnectError.from(signal?.reason ?? "aborted", Code.Canceled));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }, ms);
    if (signal?.aborted) {
      aborted();
    } else {
      signal?.addEventListener("abort", aborted, { once: true });
    }
  });
  return true;
}
