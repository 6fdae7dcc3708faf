// @ts-check
/**
 * A worker process killed (SIGKILL) in the middle of a batch loses nothing:
 * what it completed stays delivered, its other leases hold the messages
 * until they expire, and then another worker delivers every one of them.
 */
import assert from "node:assert/strict";
import { fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";

import { drainOnce } from "../src/index.js";
import { appendCommitted, createTestDatabase } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("crash");
  writer = db.writerPool();
  worker = db.workerPool();
});

after(async () => {
  await db?.drop();
});

describe("a worker killed mid-batch", { timeout: 30000 }, () => {
  it("loses nothing: the rest is delivered after the lease", async () => {
    const ids = await appendCommitted(writer, "crash", [1, 2, 3, 4, 5, 6].map((n) => ({ n })));

    /* the child delivers 1 and 2, and is killed while delivering 3 */
    const child = fork(fileURLToPath(new URL("../support/crash-worker.js", import.meta.url)), [], {
      env: {
        ...process.env,
        KRIZAKA_DB: db.name,
        KRIZAKA_USER: db.workerRole,
        KRIZAKA_OWNER: "doomed",
        KRIZAKA_TOPIC: "crash",
        KRIZAKA_STUCK_AT: "3",
      },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    /** @type {string[]} */
    const startedByChild = [];
    const exited = once(child, "exit");
    await new Promise((resolve, reject) => {
      child.on("message", (/** @type {any} */ m) => {
        if (m.event === "delivering") {
          startedByChild.push(m.id);
        } else if (m.event === "stuck") {
          resolve(undefined);
        }
      });
      child.on("exit", (code) => reject(new Error(`the worker exited early (${code})`)));
    });
    child.kill("SIGKILL");
    const [code, signal] = await exited;
    assert.equal(code, null);
    assert.equal(signal, "SIGKILL");
    assert.deepEqual(startedByChild, ids.slice(0, 3));

    const stateSql = `SELECT id, attempts, delivered_at IS NOT NULL AS delivered, lease_owner,
                             leased_until > clock_timestamp() AS leased
                        FROM outbox.message WHERE topic = 'crash' ORDER BY id`;
    const { rows: afterKill } = await db.admin.query(stateSql);
    assert.deepEqual(afterKill, [
      { id: ids[0], attempts: 1, delivered: true, lease_owner: "doomed", leased: null },
      { id: ids[1], attempts: 1, delivered: true, lease_owner: "doomed", leased: null },
      ...ids.slice(2).map((id) => ({ id, attempts: 1, delivered: false, lease_owner: "doomed", leased: true })),
    ]);

    /** @type {string[]} */
    const rescued = [];
    const rescue = () =>
      drainOnce({
        query: worker,
        owner: "rescuer",
        topic: "crash",
        deliver: (message) => {
          rescued.push(message.id);
        },
      });

    /* while the dead worker's leases are valid, nobody else may claim */
    assert.equal((await rescue()).claimed, 0);

    /* the leases expire (forced here instead of waiting a minute) */
    const expired = await db.admin.query(
      `UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 second'
        WHERE topic = 'crash' AND lease_owner = 'doomed' AND delivered_at IS NULL`,
    );
    assert.equal(expired.rowCount, 4);

    assert.deepEqual(await rescue(), { claimed: 4, delivered: 4, failed: 0, lost: 0, skipped: 0 });
    assert.deepEqual(rescued, ids.slice(2));

    const { rows: end } = await db.admin.query(stateSql);
    assert.deepEqual(end, [
      { id: ids[0], attempts: 1, delivered: true, lease_owner: "doomed", leased: null },
      { id: ids[1], attempts: 1, delivered: true, lease_owner: "doomed", leased: null },
      ...ids.slice(2).map((id) => ({ id, attempts: 2, delivered: true, lease_owner: "rescuer", leased: null })),
    ]);

    /* at least once: the message being delivered at the kill was delivered twice */
    const deliveries = [...startedByChild, ...rescued];
    assert.deepEqual(new Set(deliveries), new Set(ids));
    assert.equal(deliveries.filter((id) => id === ids[2]).length, 2);
  });
});
