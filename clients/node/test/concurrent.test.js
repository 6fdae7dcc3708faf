// @ts-check
/**
 * Two workers draining one topic at once, each on its own connections:
 * every message is delivered, and no message is ever being delivered by
 * both at the same time.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { performance } from "node:perf_hooks";
import { setTimeout as delay } from "node:timers/promises";

import { runWorker } from "../src/index.js";
import { appendCommitted, createTestDatabase, waitFor } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;

before(async () => {
  db = await createTestDatabase("concurrent");
});

after(async () => {
  await db?.drop();
});

describe("two workers at once", { timeout: 30000 }, () => {
  it("never deliver the same message at the same time, and deliver every message", async () => {
    const count = 60;
    const ids = await appendCommitted(
      db.writerPool(),
      "shared",
      Array.from({ length: count }, (_, n) => ({ n })),
    );
    /** @type {{ id: string, owner: string, start: number, end: number }[]} */
    const deliveries = [];
    const stop = new AbortController();

    /** @param {string} owner */
    const start = (owner) =>
      runWorker({
        query: db.workerPool({ max: 2 }),
        owner,
        topic: "shared",
        batchSize: 4,
        deliver: async (message) => {
          const begin = performance.now();
          await delay(1 + (/** @type {any} */ (message.payload).n % 4));
          deliveries.push({ id: message.id, owner, start: begin, end: performance.now() });
        },
        sleep: (seconds) => delay(seconds * 1000),
        idleSeconds: 0.02,
        signal: stop.signal,
      });

    const workers = [start("pair-a"), start("pair-b")];
    await waitFor(async () => {
      const { rows } = await db.admin.query(
        "SELECT count(*)::int AS n FROM outbox.message WHERE topic = 'shared' AND delivered_at IS NOT NULL",
      );
      return rows[0].n === count;
    }, "every message to be delivered");
    stop.abort();
    const [a, b] = await Promise.all(workers);

    assert.equal(a.delivered + b.delivered, count);
    assert.ok(a.delivered > 0 && b.delivered > 0, `both workers took part (${a.delivered}, ${b.delivered})`);
    assert.deepEqual(new Set(deliveries.map((d) => d.id)), new Set(ids));

    /** @type {Map<string, { start: number, end: number }[]>} */
    const byId = new Map();
    for (const d of deliveries) {
      byId.set(d.id, [...(byId.get(d.id) ?? []), d]);
    }
    for (const [id, list] of byId) {
      list.sort((x, y) => x.start - y.start);
      for (let i = 1; i < list.length; i++) {
        assert.ok(list[i].start >= list[i - 1].end, `deliveries of ${id} overlap`);
      }
    }
    /* leases held throughout, so no message needed a second delivery */
    assert.equal(deliveries.length, count);
  });
});
