// @ts-check
/**
 * The package as users get it: `npm pack` makes the tarball (with the
 * declarations of types/, which test/types.test.js keeps equal to what the
 * JSDoc generates), a fresh project installs
 * it with pg and TypeScript from the registry, TypeScript checks and
 * compiles a consumer file against the generated declarations (and finds
 * the errors of a misuse file), and the compiled consumer appends in a
 * transaction, runs a worker that delivers typed messages, consumes once in
 * both forms and reads topic_stats against the real cluster.
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
    GRANT SELECT, INSERT ON credit TO ${db.writerRole};
    GRANT SELECT ON outbox.topic_stats TO ${db.workerRole}`);
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
  topicStats,
  type DrainCounts,
  type Envelope,
  type OutboxMessage,
  type TopicStats,
} from "@krizaka/outbox-extension";

type Redemption = { redemptionId: number };

const writer = new pg.Pool({ user: process.env.WRITER_ROLE });
const worker = new pg.Pool({ user: process.env.WORKER_ROLE });
const outbox = createOutbox();

// 1. In the use case: the message commits with the work.
const client = await writer.connect();
let id: string;
try {
  await client.query("BEGIN");
  id = await outbox.append<Redemption>(client, {
    topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 },
    orderingKey: "account-7",
  });
  await append(client, {
    topic: "credits", type: "evt.coupon.redeemed.v1", payload: [1, 2],
    availableAt: new Date(Date.now() + 3600_000),
  });
  await client.query("COMMIT");
} finally {
  client.release();
}

// 2. A worker delivers, and stops after the first message; it waits by itself.
const stop = new AbortController();
const delivered: Envelope<Redemption>[] = [];
const seen: { redemptionId: number, orderingKey: string | null, lastError: string | null, seq: number }[] = [];
const totals: DrainCounts = await runWorker<Redemption>({
  outbox,
  query: worker.query.bind(worker),
  owner: \`\${os.hostname()}:\${process.pid}\`,
  topic: "credits",
  signal: stop.signal,
  idleSeconds: 0.1,
  deliver: async (message) => {
    const { orderingKey, lastError, seq } = message;
    seen.push({ redemptionId: message.payload.redemptionId, orderingKey, lastError, seq });
    delivered.push(await readEnvelope<Redemption>(worker, JSON.stringify(message.envelope)));
    stop.abort();
  },
});

// 3. A consumer applies its effect once per message id (the twin's form with now still works).
const first: boolean = await consumeOnce(writer, "credits", delivered[0].id, (tx) =>
  tx.query("INSERT INTO credit (message_id, amount) VALUES ($1, 10)", [delivered[0].id]));
const again: boolean = await consumeOnce(writer, "credits", delivered[0].id, new Date(), (tx) =>
  tx.query("INSERT INTO credit (message_id, amount) VALUES ($1, 10)", [delivered[0].id]));

// 4. Monitoring: counts are numbers.
const stats: TopicStats[] = await topicStats(worker, { topic: "credits" });
const pending: number = stats[0].due + stats[0].delayed;

console.log(JSON.stringify({ id, totals, delivered, seen, first, again, pending, stats }));
await writer.end();
await worker.end();

// Code written for the versions before: it still compiles.
export async function written(pool: pg.Pool, signal: AbortSignal): Promise<void> {
  await runWorker({
    query: pool.query.bind(pool), owner: "o", topic: "credits", signal,
    sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)),
    deliver: async (message: OutboxMessage) => {
      const envelope: Envelope = message.envelope;
      void envelope;
    },
  });
  await consumeOnce(pool, "credits", "id", new Date(), (tx) => tx.query("SELECT 1"));
}
`;

/** Misuses the declarations must refuse: each line is an error, or tsc fails. */
const MISUSE = `import pg from "pg";
import { append, consumeOnce, createOutbox, runWorker, topicStats } from "@krizaka/outbox-extension";

type Redemption = { redemptionId: number };
declare const client: pg.PoolClient;
declare const pool: pg.Pool;

// @ts-expect-error the payload is required
void append(client, { topic: "t", type: "evt.t.v1" });
// @ts-expect-error availableAt is a Date
void append(client, { topic: "t", type: "evt.t.v1", payload: 1, availableAt: "tomorrow" });
// @ts-expect-error the payload is not a Redemption
void append<Redemption>(client, { topic: "t", type: "evt.t.v1", payload: { redemptionId: "41" } });
// @ts-expect-error the effect is required
void consumeOnce(pool, "credits", "id", new Date());
// @ts-expect-error the worker needs a signal
void runWorker({ query: pool, owner: "o", deliver: () => {} });
// @ts-expect-error a Redemption's id is a number
void runWorker<Redemption>({ query: pool, owner: "o", signal: new AbortController().signal, deliver: (m) => m.payload.redemptionId.toUpperCase() });
// @ts-expect-error counts are numbers
export const due: Promise<string> = topicStats(pool).then((rows) => rows[0].due);
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
    for (const name of ["create-outbox", "envelope", "index", "outbox", "pull", "query", "stats", "worker"]) {
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
    assert.deepEqual(result.seen, [{ redemptionId: 41, orderingKey: "account-7", lastError: null, seq: result.seen[0].seq }]);
    assert.equal(typeof result.seen[0].seq, "number");
    assert.equal(result.first, true);
    assert.equal(result.again, false);
    assert.equal(result.pending, 1);
    assert.equal(result.stats.length, 1);
    assert.deepEqual(
      { ...result.stats[0], oldestUndeliveredAgeSeconds: typeof result.stats[0].oldestUndeliveredAgeSeconds },
      {
        topic: "credits", due: 0, delayed: 1, leased: 0, dead: 0, delivered: 1,
        oldestUndeliveredAgeSeconds: "number", pausedUntil: null,
      },
    );

    const { rows } = await db.admin.query(
      `SELECT (SELECT count(*)::int FROM credit WHERE message_id = $1) AS credits,
              (SELECT count(*)::int FROM outbox.message WHERE delivered_at IS NOT NULL) AS delivered,
              (SELECT count(*)::int FROM outbox.message WHERE delivered_at IS NULL AND available_at > now()) AS delayed`,
      [result.id],
    );
    assert.deepEqual(rows[0], { credits: 1, delivered: 1, delayed: 1 });
  });
});
