// Another process: opens a fresh CheckpointSession on the session named in argv and prints its
// items (getItems, then getItems(2)) as JSON on stdout. Used by test/agents.test.ts.
import { Client } from "../../src/index.js";
import { CheckpointSession } from "../../src/agents.js";

const [url, session] = process.argv.slice(2);
const client = await Client.connect({ servers: url }, { timeoutMs: 10_000 });
try {
  const s = new CheckpointSession({ client, session });
  process.stdout.write(JSON.stringify({ all: await s.getItems(), last2: await s.getItems(2), version: s.version }));
} finally {
  await client.close();
}
