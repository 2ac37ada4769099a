// @behest/client for browsers: behest over the Connect protocol or gRPC-Web, through fetch,
// to the server's HTTP listener (`http_listen`; the page's origin must be in
// `http_cors_origins` unless the server serves the page). Bundled by `npm run bundle` into
// dist/browser/behest.js (ESM).
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { bearer, clientOf, withToken, type BehestClient, type ClientOptions } from "./client.js";

export * from "./common.js";

export interface WebClientOptions extends ClientOptions {
  /** http(s)://host:port of the server's HTTP listener. */
  baseUrl: string;
  /** Sent as `authorization: Bearer <token>` with every call. */
  token?: string;
  /** The protocol ("connect", the default), or a transport of your own. */
  transport?: "connect" | "grpc-web" | Transport;
  /** More interceptors for the transport made here, after the token's. */
  interceptors?: Interceptor[];
}

/** A client of behest's services for browsers. */
export function createBehestClient(options: WebClientOptions): BehestClient {
  const { baseUrl, token, transport = "connect", interceptors = [] } = options;
  if (typeof transport !== "string") {
    if (interceptors.length > 0) {
      throw new TypeError("give the interceptors to your transport, not to createBehestClient");
    }
    return clientOf(withToken(transport, token), options);
  }
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
