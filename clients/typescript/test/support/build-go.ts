// Builds, from this repository's go.mod, what the tests run into .bin/ (npm pretest): the daemon,
// the Go CLI, and the nats-server release the daemon embeds (for a server with a small max_payload).
import { execFileSync } from "node:child_process";
import { binDir, repoRoot } from "./daemon.js";

const targets: [string, string][] = [
  ["checkpointd", "./cmd/checkpointd"],
  ["checkpointctl", "./cmd/checkpointctl"],
  ["nats-server", "github.com/nats-io/nats-server/v2"],
];
for (const [name, pkg] of targets) {
  execFileSync("go", ["build", "-o", `${binDir}/${name}`, pkg], { cwd: repoRoot, stdio: "inherit" });
}
