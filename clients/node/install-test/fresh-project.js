// @ts-check
/**
 * The package as users get it: `npm pack` makes the tarball (declarations
 * generated from the JSDoc by the prepack script), a fresh project installs
 * it with pg and TypeScript from the registry, TypeScript checks and
 * compiles a consumer file against the generated declarations (and finds
 * the errors of a misuse file), and the compiled consumer appends in a
 * transaction, runs a worker that delivers, and consumes once against the
 * real cluster.
 *
 * Not part of `npm test` (it installs from the registry): `npm run
 * test:install`, which test/run's node suite runs.  The project is made
 * under $KRIZAKA_SCRATCH, or the system's temporary directory.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { createTestDatabase } from "../support/db.js";

const packageRoot = fileURLToPath(new URL("..", import.meta.url));
const scratch = mkdtempSync(path.join(process.env.KRIZAKA_SCRATCH ?? os.tmpdir(), "krizaka-fresh-"));
const project = path.join(scratch, "project");

/** @type {import("../support/db.js").TestDatabase} */
let db;

before(async () => {
  db = await createTestDatabase("install");
  await db.admin.query(`CREATE TABLE credit (message_id uuid NOT NULL, amount int NOT NULL);
    GRANT SELECT, INSERT ON credit TO ${db.writerRole}`);
});

after(async () => {
  await db?.drop();
  rmSync(scratch, { recursive: true, force: true });
});

/**
 * Runs a command and returns its output; fails the test with that output
 * when it exits with another status than `status`.
 *
 * @param {string} cwd
 * @param {string} command
 * @param {string[]} args
 * @param {{ status?: number, env?: NodeJS.ProcessEnv }} [options]
 * @returns {string}
 */
function run(cwd, command, args, options = {}) {
  const result = spawnSync(command, args, {
    cwd,
    encoding: "utf8",
    env: { ...process.env, ...options.env },
  });
  const output = `${result.stdout ?? ""}${result.stderr ?? ""}`;
  assert.equal(result.error, undefined, `${command}: ${result.error}`);
  assert.equal(result.status, options.status ?? 0, `${command} ${args.join(" ")}:\n${output}`);
  return output;
}

/** The consumer a user would write, in TypeScript. */
const CONSUMER = `import os from "node:os";
import pg from "pg";
import {
  append,
  consumeOnce,
  createOutbox,
  readEnvelope,
  runWorker,
  type DrainCounts,
  type Envelope,
  type OutboxMessage,
} from "@krizaka/outbox-extension";

const writer = new pg.Pool({ user: process.env.WRITER_ROLE });
const worker = new pg.Pool({ user: process.env.WORKER_ROLE });
const outbox = createOutbox();

// 1. In the use case: the message commits with the work.
const client = await writer.connect();
let id: string;
try {
  await client.query("BEGIN");
  id = await outbox.append(client, {
    topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 },
  });
  await append(client, {
    topic: "credits", type: "evt.coupon.redeemed.v1", payload: [1, 2],
    availableAt: new Date(Date.now() + 3600_000),
  });
  await client.query("COMMIT");
} finally {
  client.release();
}

// 2. A worker delivers, and stops after the first message.
const stop = new AbortController();
const delivered: Envelope[] = [];
const totals: DrainCounts = await runWorker({
  outbox,
  query: worker.query.bind(worker),
  owner: \`\${os.hostname()}:\${process.pid}\`,
  topic: "credits",
  signal: stop.signal,
  sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)),
  deliver: async (message: OutboxMessage) => {
    delivered.push(await readEnvelope(worker, JSON.stringify(message.envelope)));
    stop.abort();
  },
});

// 3. A consumer applies its effect once per message id.
const consume = () =>
  consumeOnce(writer, "credits", delivered[0].id, new Date(), (tx) =>
    tx.query("INSERT INTO credit (message_id, amount) VALUES ($1, 10)", [delivered[0].id]));
const first: boolean = await consume();
const again: boolean = await consume();

console.log(JSON.stringify({ id, totals, delivered, first, again }));
await writer.end();
await worker.end();
`;

/** Misuses the declarations must refuse: each line is an error, or tsc fails. */
const MISUSE = `import pg from "pg";
import { append, consumeOnce, createOutbox, runWorker } from "@krizaka/outbox-extension";

declare const client: pg.PoolClient;
declare const pool: pg.Pool;

// @ts-expect-error the payload is required
void append(client, { topic: "t", type: "evt.t.v1" });
// @ts-expect-error availableAt is a Date
void append(client, { topic: "t", type: "evt.t.v1", payload: 1, availableAt: "tomorrow" });
// @ts-expect-error now comes before the effect
void consumeOnce(pool, "credits", "id", () => undefined);
// @ts-expect-error the worker needs a sleep
void runWorker({ query: pool, owner: "o", signal: new AbortController().signal, deliver: () => {} });
// @ts-expect-error settings are the extension's
createOutbox({ settings: () => ({}) });
`;

describe("the packed package in a fresh project", { timeout: 300000 }, () => {
  it("packs, installs, type-checks and runs against the cluster", async () => {
    /* the tarball holds the sources, the declarations and the README only */
    run(packageRoot, "npm", ["pack", "--pack-destination", scratch, "--loglevel=error"]);
    const tarballs = readdirSync(scratch).filter((f) => f.endsWith(".tgz"));
    assert.deepEqual(tarballs, ["krizaka-outbox-extension-1.2.0.tgz"]);
    const tarball = path.join(scratch, tarballs[0]);
    const files = run(scratch, "tar", ["-tzf", tarball]).trim().split("\n").sort();
    const expected = ["package/README.md", "package/package.json"];
    for (const name of ["create-outbox", "envelope", "index", "outbox", "pull", "query", "worker"]) {
      expected.push(`package/src/${name}.js`, `package/types/${name}.d.ts`);
    }
    assert.deepEqual(files, expected.sort());

    /* a fresh project: the tarball, pg and TypeScript from the registry */
    run(scratch, "mkdir", [project]);
    writeFileSync(
      path.join(project, "package.json"),
      JSON.stringify({ name: "fresh-consumer", version: "0.0.0", private: true, type: "module" }, null, 2),
    );
    run(project, "npm", [
      "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error",
      tarball, "pg@^8.23.1", "@types/pg@^8.23.1", "@types/node@^18.19.130", "typescript@~5.9",
    ]);
    writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true, target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext",
          types: ["node"], outDir: "out",
        },
        include: ["consumer.ts", "misuse.ts"],
      }),
    );
    writeFileSync(path.join(project, "consumer.ts"), CONSUMER);
    writeFileSync(path.join(project, "misuse.ts"), MISUSE);
    run(project, process.execPath, ["node_modules/typescript/bin/tsc", "-p", "."]);

    /* the compiled consumer against the real cluster */
    const output = run(project, process.execPath, ["out/consumer.js"], {
      env: { PGDATABASE: db.name, WRITER_ROLE: db.writerRole, WORKER_ROLE: db.workerRole },
    });
    const result = JSON.parse(output.trim().split("\n").pop() ?? "");
    assert.deepEqual(result.totals, { claimed: 1, delivered: 1, failed: 0, lost: 0, skipped: 0 });
    assert.equal(result.delivered.length, 1);
    assert.deepEqual(
      { id: result.delivered[0].id, type: result.delivered[0].type, payload: result.delivered[0].payload },
      { id: result.id, type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 } },
    );
    assert.equal(result.first, true);
    assert.equal(result.again, false);

    const { rows } = await db.admin.query(
      `SELECT (SELECT count(*)::int FROM credit WHERE message_id = $1) AS credits,
              (SELECT count(*)::int FROM outbox.message WHERE delivered_at IS NOT NULL) AS delivered,
              (SELECT count(*)::int FROM outbox.message WHERE delivered_at IS NULL AND available_at > now()) AS delayed`,
      [result.id],
    );
    assert.deepEqual(rows[0], { credits: 1, delivered: 1, delayed: 1 });
  });
});
