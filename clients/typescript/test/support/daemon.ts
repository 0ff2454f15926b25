// Starts a real checkpointd (built by build-go.ts) on free loopback ports with a temp data dir.
import { spawn, execFile } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, existsSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test/support
export const pkgRoot = resolve(here, "../../..");
export const repoRoot = resolve(pkgRoot, "../..");
export const binDir = join(pkgRoot, ".bin");
export const corpusDir = join(repoRoot, "testdata/corpus");

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/** A nats-server of our own (for a max_payload other than the embedded server's 1 MiB). */
export class NatsServer {
  private constructor(readonly proc: ChildProcess, readonly url: string, readonly dir: string) {}

  static async start(maxPayload: number): Promise<NatsServer> {
    const dir = mkdtempSync(join(tmpdir(), "cp-ts-nats-"));
    const port = await freePort();
    const conf = join(dir, "nats.conf");
    writeFileSync(conf, `listen: "127.0.0.1:${port}"\nmax_payload: ${maxPayload}\njetstream { store_dir: "${join(dir, "js")}" }\n`);
    const proc = spawn(join(binDir, "nats-server"), ["-c", conf], { stdio: "ignore" });
    const s = new NatsServer(proc, `nats://127.0.0.1:${port}`, dir);
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      if (proc.exitCode !== null) throw new Error(`nats-server exited ${proc.exitCode}`);
      if (await canConnect(port)) return s;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("nats-server did not listen in 20 s");
  }

  async stop(): Promise<void> {
    await stopProc(this.proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function canConnect(port: number): Promise<boolean> {
  const { connect } = await import("node:net");
  return new Promise((res) => {
    const sock = connect(port, "127.0.0.1");
    sock.once("connect", () => (sock.destroy(), res(true)));
    sock.once("error", () => res(false));
  });
}

async function stopProc(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGTERM");
  await exited;
}

export class Daemon {
  private constructor(
    readonly proc: ChildProcess,
    readonly natsURL: string,
    readonly httpURL: string,
    readonly dataDir: string,
    private readonly stderr: string[],
  ) {}

  /** Starts checkpointd; with natsURL it uses that server instead of its embedded one. */
  static async start(extraArgs: string[] = [], natsURL?: string): Promise<Daemon> {
    const bin = join(binDir, "checkpointd");
    if (!existsSync(bin)) throw new Error(`${bin} missing: run the tests with npm test (its pretest builds it)`);
    const dataDir = mkdtempSync(join(tmpdir(), "cp-ts-"));
    const [natsPort, httpPort] = [await freePort(), await freePort()];
    const nats = natsURL ? ["--nats-url", natsURL] : ["--nats-listen", `127.0.0.1:${natsPort}`];
    const args = ["--data-dir", dataDir, ...nats, "--http-listen", `127.0.0.1:${httpPort}`, "--log-level", "warn", ...extraArgs];
    const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
    const stderr: string[] = [];
    proc.stderr!.on("data", (d: Buffer) => stderr.push(d.toString()));
    const d = new Daemon(proc, natsURL ?? `nats://127.0.0.1:${natsPort}`, `http://127.0.0.1:${httpPort}`, dataDir, stderr);
    await d.waitReady();
    return d;
  }

  private async waitReady(): Promise<void> {
    const until = Date.now() + 30_000;
    while (Date.now() < until) {
      if (this.proc.exitCode !== null) throw new Error(`checkpointd exited ${this.proc.exitCode}: ${this.stderr.join("")}`);
      try {
        const r = await fetch(`${this.httpURL}/readyz`);
        if (r.status === 200) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`checkpointd not ready in 30 s: ${this.stderr.join("")}`);
  }

  async stop(): Promise<void> {
    await stopProc(this.proc);
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Runs the Go CLI against this daemon; resolves with stdout as bytes. */
  async ctl(args: string[]): Promise<Buffer> {
    const run = promisify(execFile);
    const { stdout } = await run(join(binDir, "checkpointctl"), ["--server", this.natsURL, ...args], {
      encoding: "buffer",
      maxBuffer: 64 << 20,
    });
    return stdout;
  }
}
