// Builds the daemon and the Go CLI the tests run, from this repository, into .bin/ (npm pretest).
import { execFileSync } from "node:child_process";
import { binDir, repoRoot } from "./daemon.js";

for (const cmd of ["checkpointd", "checkpointctl"]) {
  execFileSync("go", ["build", "-o", `${binDir}/${cmd}`, `./cmd/${cmd}`], { cwd: repoRoot, stdio: "inherit" });
}
