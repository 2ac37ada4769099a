// @behest/client for browsers: behest over the Connect protocol or gRPC-Web, through fetch,
// to the server's HTTP listener (`http_listen`; the page's origin must be in
// `http_cors_origins` unless the server serves the page). Bundled by `npm run bundle` into
// dist/browser/behest.js (ESM).
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { bearer, clientOf, withToken, type BehestClient, type ClientOptions } from "./client.js";

export * from "./common.js";

/** A client whose transport is made here, for a protocol. */
export interface WebProtocolOptions extends ClientOptions {
  /** http(s)://host:port of the server's HTTP listener. */
  baseUrl: string;
  /** Sent as `authorization: Bearer <token>` with every call (an interceptor). */
  token?: string;
  /** "connect" (the default) or "grpc-web". */
  transport?: "connect" | "grpc-web";
  /** More interceptors for the transport, after the token's. */
  interceptors?: Interceptor[];
}

/** A client over a transport of your own; the token is added to it. */
export interface WebTransportOptions extends ClientOptions {
  transport: Transport;
  token?: string;
}

export type WebClientOptions = WebProtocolOptions | WebTransportOptions;

/** A client of behest's services for browsers. */
export function createBehestClient(options: WebClientOptions): BehestClient {
  if (typeof options.transport === "object") {
    return clientOf(withToken(options.transport, options.token), options);
  }
  const {
    baseUrl,
    token,
    transport = "connect",
    interceptors = [],
  } = options as WebProtocolOptions;
  const common = {
    baseUrl,
    useBinaryFormat: true,
    interceptors: token ? [bearer(token), ...interceptors] : interceptors,
  };
  switch (transport) {
    case "connect":
      return clientOf(createConnectTransport(common), options);
    case "grpc-web":
      return clientOf(createGrpcWebTransport(common), options);
    default:
      throw new TypeError(`unknown transport ${JSON.stringify(transport)}: connect or grpc-web`);
  }
}
