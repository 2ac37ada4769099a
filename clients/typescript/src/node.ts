// @behest/client for Node: behest over the Connect protocol (HTTP/1.1, the server's HTTP
// listener), gRPC-Web (the same listener) or gRPC (HTTP/2, the server's gRPC port).
import type { Interceptor, Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { bearer, clientOf, withToken, type BehestClient, type ClientOptions } from "./client.js";

export * from "./common.js";

export type NodeProtocol = "connect" | "grpc-web" | "grpc";

/** A client whose transport is made here, for a protocol. */
export interface NodeProtocolOptions extends ClientOptions {
  /** http(s)://host:port: the HTTP listener (`http_listen`) for "connect" and "grpc-web",
   * the gRPC listener for "grpc". */
  baseUrl: string;
  /** Sent as `authorization: Bearer <token>` with every call (an interceptor). */
  token?: string;
  /** "connect" (the default), "grpc-web" or "grpc". */
  transport?: NodeProtocol;
  /** More interceptors for the transport, after the token's. */
  interceptors?: Interceptor[];
}

/** A client over a transport of your own (TLS options, say); the token is added to it. */
export interface NodeTransportOptions extends ClientOptions {
  transport: Transport;
  token?: string;
}

export type NodeClientOptions = NodeProtocolOptions | NodeTransportOptions;

export interface NodeBehestClient extends BehestClient {
  /** Close the HTTP/2 connection of a "grpc" client (the others keep none open). */
  close(): void;
}

/** A client of behest's services for Node. */
export function createBehestClient(options: NodeClientOptions): NodeBehestClient {
  if (typeof options.transport === "object") {
    return { ...clientOf(withToken(options.transport, options.token), options), close() {} };
  }
  const {
    baseUrl,
    token,
    transport = "connect",
    interceptors = [],
  } = options as NodeProtocolOptions;
  const made = madeTransport(transport, {
    baseUrl,
    useBinaryFormat: true,
    interceptors: token ? [bearer(token), ...interceptors] : interceptors,
  });
  return { ...clientOf(made.transport, options), close: made.close };
}

interface Common {
  baseUrl: string;
  useBinaryFormat: boolean;
  interceptors: Interceptor[];
}

function madeTransport(protocol: string, common: Common): { transport: Transport; close(): void } {
  switch (protocol) {
    case "connect":
      return { transport: createConnectTransport({ ...common, httpVersion: "1.1" }), close() {} };
    case "grpc-web":
      return { transport: createGrpcWebTransport({ ...common, httpVersion: "1.1" }), close() {} };
    case "grpc": {
      const sessionManager = new Http2SessionManager(common.baseUrl);
      return {
        transport: createGrpcTransport({ ...common, sessionManager }),
        close: () => sessionManager.abort(),
      };
    }
    default:
      throw new TypeError(
        `unknown transport ${JSON.stringify(protocol)}: connect, grpc-web or grpc`,
      );
  }
}
