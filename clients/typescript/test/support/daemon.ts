// Starts a real checkpointd (built by build-go.ts) on free loopback ports with a temp data dir.
import { spawn, execFile } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
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

export class Daemon {
  private constructor(
    readonly proc: ChildProcess,
    readonly natsURL: string,
    readonly httpURL: string,
    readonly dataDir: string,
    private readonly stderr: string[],
  ) {}

  static async start(extraArgs: string[] = []): Promise<Daemon> {
    const bin = join(binDir, "checkpointd");
    if (!existsSync(bin)) throw new Error(`${bin} missing: run the tests with npm test (its pretest builds it)`);
    const dataDir = mkdtempSync(join(tmpdir(), "cp-ts-"));
    const [natsPort, httpPort] = [await freePort(), await freePort()];
    const args = ["--data-dir", dataDir, "--nats-listen", `127.0.0.1:${natsPort}`, "--http-listen", `127.0.0.1:${httpPort}`, "--log-level", "warn", ...extraArgs];
    const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
    const stderr: string[] = [];
    proc.stderr!.on("data", (d: Buffer) => stderr.push(d.toString()));
    const d = new Daemon(proc, `nats://127.0.0.1:${natsPort}`, `http://127.0.0.1:${httpPort}`, dataDir, stderr);
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
    if (this.proc.exitCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Runs the Go CLI against this daemon; resolves with stdout as bytes. */
  async ctl(args: string[], input?: Uint8Array): Promise<Buffer> {
    const run = promisify(execFile);
    const { stdout } = await run(join(binDir, "checkpointctl"), ["--server", this.natsURL, ...args], {
      encoding: "buffer",
      maxBuffer: 64 << 20,
    });
    void input;
    return stdout;
  }
}
