// A TCP proxy on 127.0.0.1 in front of a behest listener, whose connections a test cuts from
// the server's side: at once (`cut`), or when the next response's first body bytes arrive
// from the server, before the client sees any of them (`cutAtFirstBody`).
import net from "node:net";

export class Proxy {
  /** Connections accepted so far. */
  accepted = 0;
  private readonly open = new Set<net.Socket>();
  private armed: (() => void) | undefined;

  private constructor(
    private readonly server: net.Server,
    readonly url: string,
  ) {}

  /** A proxy to `target` (http://host:port); `http2`: the target speaks HTTP/2 (gRPC). */
  static async start(target: string, http2: boolean): Promise<Proxy> {
    const { hostname, port } = new URL(target);
    let proxy: Proxy | undefined;
    const server = net.createServer((client) =>
      proxy!.accept(client, hostname, Number(port), http2),
    );
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address() as net.AddressInfo;
    proxy = new Proxy(server, `http://127.0.0.1:${address.port}`);
    return proxy;
  }

  /** Drop every open connection now (a reset, as a server that went away). */
  cut(): void {
    for (const socket of this.open) {
      socket.resetAndDestroy();
    }
    this.open.clear();
  }

  /** Drop the connection that carries the next response body, before its first byte is
   * passed on; resolves once it has. */
  cutAtFirstBody(): Promise<void> {
    return new Promise((resolve) => (this.armed = resolve));
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private accept(client: net.Socket, host: string, port: number, http2: boolean): void {
    this.accepted += 1;
    const upstream = net.connect(port, host);
    const pair = [client, upstream];
    for (const socket of pair) {
      this.open.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => {
        this.open.delete(socket);
        for (const other of pair) other.destroy();
      });
    }
    client.pipe(upstream);
    const body = http2 ? new Http2Body() : new Http1Body();
    upstream.on("data", (chunk: Buffer) => {
      if (this.armed !== undefined && body.startsIn(chunk)) {
        const done = this.armed;
        this.armed = undefined;
        for (const socket of pair) socket.resetAndDestroy();
        done();
        return;
      }
      client.write(chunk);
    });
  }
}

// Finds where the first response of an HTTP/1.1 connection ends its headers.
class Http1Body {
  private head = "";
  private inBody = false;

  startsIn(chunk: Buffer): boolean {
    if (this.inBody) {
      return true;
    }
    this.head += chunk.toString("latin1");
    const end = this.head.indexOf("\r\n\r\n");
    this.inBody = end >= 0;
    return end >= 0 && this.head.length > end + 4;
  }
}

// Finds the first DATA frame with a payload among an HTTP/2 server's frames.
class Http2Body {
  private pending = Buffer.alloc(0);

  startsIn(chunk: Buffer): boolean {
    this.pending = Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 9) {
      const length = this.pending.readUIntBE(0, 3);
      const type = this.pending[3];
      if (type === 0 && length > 0) {
        return true;
      }
      if (this.pending.length < 9 + length) {
        return false;
      }
      this.pending = this.pending.subarray(9 + length);
    }
    return false;
  }
}
