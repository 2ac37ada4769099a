// Which failed calls are breaks worth resuming from, and which are the server's answer.
//
// behest's Python client resumes on UNAVAILABLE only, because grpcio reports every broken
// connection as UNAVAILABLE. Connect-ES does not: a connection cut under an HTTP/1.1 stream
// is Aborted ("aborted", "read ECONNRESET") with Node's error as its cause, an HTTP/2 stream
// closed by its connection's end is Canceled, a fetch that fails in a browser is Unknown with
// fetch's TypeError as its cause, and a body that ends before its end-of-stream message is a
// "protocol error: missing …". None of these is a status the server sent; the server's own
// statuses (NotFound, Unauthenticated, Aborted for a busy session, …) carry no cause.
import { Code, ConnectError } from "@connectrpc/connect";

// A body cut short where its framing says more was due (the server never ended the stream).
const TRUNCATED =
  /^protocol error: (missing EndStreamResponse|missing trailer|missing status|incomplete envelope|promised \d+ bytes)/;

/** Whether a failed call broke off (the connection failed, or the stream was cut short)
 * rather than being answered with a status by the server; a break is worth trying again,
 * and so is UNAVAILABLE (the server is going away, or could not be reached). Tell a call the
 * caller cancelled apart first, by its AbortSignal: that looks like a break too. */
export function isBreak(reason: unknown): boolean {
  const error = ConnectError.from(reason);
  if (error.code === Code.Unavailable || error.code === Code.Canceled) {
    return true;
  }
  return networkCause(error.cause) || TRUNCATED.test(error.rawMessage);
}

// Node's system and stream errors have a string `code` (ECONNRESET, EPIPE,
// ERR_STREAM_PREMATURE_CLOSE, ERR_HTTP2_…); fetch rejects a network failure with a TypeError.
function networkCause(cause: unknown): boolean {
  for (let depth = 0; cause instanceof Error && depth < 8; depth++) {
    if (cause instanceof ConnectError) {
      return false;
    }
    if (cause instanceof TypeError) {
      return true;
    }
    const code = (cause as { code?: unknown }).code;
    if (typeof code === "string" && /^(E[A-Z]+$|ERR_STREAM_|ERR_HTTP2_|UND_ERR_)/.test(code)) {
      return true;
    }
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}
