// What the tests against a real behest server share. tests/e2e/test_typescript_client.py
// starts the server (bearer tokens of two tenants; the HTTP listener with the Connect door)
// and names it in the environment; without it these tests skip.
import type { Interceptor } from "@connectrpc/connect";
import { createBehestClient, type NodeBehestClient, type NodeProtocol } from "../../src/node.js";
import { Proxy } from "./proxy.js";

const env = process.env;
export const SERVER = {
  http: env.BEHEST_TEST_HTTP_URL ?? "", // the HTTP listener: Connect and gRPC-Web
  grpc: env.BEHEST_TEST_GRPC_URL ?? "", // the gRPC listener
  token: env.BEHEST_TEST_TOKEN ?? "", // tenant acme
  otherToken: env.BEHEST_TEST_OTHER_TOKEN ?? "", // tenant globex
};
export const NO_SERVER =
  SERVER.http && SERVER.grpc ? false : "no server: run tests/e2e/test_typescript_client.py";
/** Whether the server has the echo MCP server (tests/mcp_servers/echo_server.py) as `echo`,
 * whose `book` tool asks the user a question (BEHEST_TEST_ECHO_MCP=1). */
export const NO_ECHO_MCP =
  NO_SERVER ||
  (env.BEHEST_TEST_ECHO_MCP === "1" ? false : "the server has no echo MCP server (`echo__book`)");

/** A test's limit: a stream that hangs fails its test instead of the run (ms). */
export const TIMEOUT = 30_000;

/** The protocols to test (BEHEST_TEST_PROTOCOLS, comma-separated; default all three). */
export const PROTOCOLS = (env.BEHEST_TEST_PROTOCOLS || "connect,grpc-web,grpc").split(
  ",",
) as NodeProtocol[];

export function urlFor(protocol: NodeProtocol): string {
  return protocol === "grpc" ? SERVER.grpc : SERVER.http;
}

/** A client of the server (or of `baseUrl`, a proxy to it), with `token` (default acme's). */
export function clientFor(
  protocol: NodeProtocol,
  options: { token?: string; baseUrl?: string; interceptors?: Interceptor[] } = {},
): NodeBehestClient {
  return createBehestClient({
    baseUrl: options.baseUrl ?? urlFor(protocol),
    token: options.token ?? SERVER.token,
    transport: protocol,
    interceptors: options.interceptors ?? [],
    reconnect: { attempts: 8, baseMs: 20, maxMs: 200 },
  });
}

/** A proxy in front of the protocol's listener, to cut its connections. */
export function proxyFor(protocol: NodeProtocol): Promise<Proxy> {
  return Proxy.start(urlFor(protocol), protocol === "grpc");
}

/** Each call a client makes: its method and request (read as the transport sends it). */
export interface Sent {
  method: string;
  message: Record<string, unknown>;
}

export function recorder(sent: Sent[]): Interceptor {
  return (next) => async (request) => {
    const method = request.method.name;
    if (!request.stream) {
      sent.push({ method, message: request.message as Record<string, unknown> });
      return next(request);
    }
    const messages = request.message;
    async function* recorded() {
      for await (const message of messages) {
        sent.push({ method, message: message as Record<string, unknown> });
        yield message;
      }
    }
    return next({ ...request, message: recorded() });
  };
}

/** Input for the local `script` model: its model turns. */
export function script(...steps: object[]): string {
  return JSON.stringify({ steps });
}

/** A CreateRun request of the offline `local` provider. */
export function runOf(input: string, model = "echo", more: object = {}) {
  return { provider: { value: "local" }, model: { value: model }, input, ...more };
}

export const CALCULATOR = { name: "calculator", arguments: { expression: "6*7" } };
