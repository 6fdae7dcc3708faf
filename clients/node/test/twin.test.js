// @ts-check
/**
 * The twin's shapes: code written for @krizaka/outbox runs with few edits.
 * A transaction hands out a Query function (as @krizaka/db's transaction
 * does), outbox.append takes it, runWorker takes { outbox, query, owner,
 * topic, signal, sleep, deliver }, consumeOnce takes (tx, consumer, id, now,
 * effect), and the outbox object's claim, complete, fail, extend, retryDead
 * and purge act as the extension's functions do.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { consumeOnce, createOutbox, runWorker } from "../src/index.js";
import { appendCommitted, createTestDatabase, inTransaction } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("twin");
  writer = db.writerPool();
  worker = db.workerPool();
  await db.admin.query(`CREATE TABLE credit (message_id uuid NOT NULL, amount int NOT NULL);
    GRANT SELECT, INSERT ON credit TO ${db.writerRole}`);
});

after(async () => {
  await db?.drop();
});

/**
 * A transaction helper in the manner of @krizaka/db's: BEGIN, the work with
 * the transaction's Query, COMMIT (ROLLBACK when the work throws).
 *
 * @template T
 * @param {import("pg").Pool} pool
 * @param {(tx: import("../src/index.js").Query) => Promise<T>} work
 * @returns {Promise<T>}
 */
const transaction = (pool, work) =>
  inTransaction(pool, "COMMIT", (client) => work((text, values) => client.query(text, values)));

/**
 * The state of a message, read as superuser.
 *
 * @param {string} id
 */
async function state(id) {
  const { rows } = await db.admin.query(
    `SELECT attempts, leased_until IS NOT NULL AS leased, last_error, delivered_at IS NOT NULL AS delivered,
            dead_at IS NOT NULL AS dead
       FROM outbox.message WHERE id = $1`,
    [id],
  );
  return rows[0];
}

describe("the twin's shapes", { timeout: 30000 }, () => {
  it("append in a transaction's Query, runWorker with outbox and query, consumeOnce with now", async () => {
    const outbox = createOutbox();
    const eventId = randomUUID();
    const id = await transaction(writer, (tx) =>
      outbox.append(tx, { topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 }, id: eventId }),
    );
    assert.equal(id, eventId);
    await assert.rejects(
      transaction(writer, async (tx) => {
        await outbox.append(tx, { topic: "credits", type: "evt.coupon.redeemed.v1", payload: [1], id: randomUUID() });
        throw new Error("the use case failed");
      }),
      { message: "the use case failed" },
    );

    const stop = new AbortController();
    /** @type {import("../src/index.js").OutboxMessage[]} */
    const delivered = [];
    const totals = await runWorker({
      outbox,
      query: worker.query.bind(worker),
      owner: "twin-1",
      topic: "credits",
      signal: stop.signal,
      sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)),
      deliver: async (message) => {
        delivered.push(message);
        stop.abort();
      },
    });
    assert.deepEqual(totals, { claimed: 1, delivered: 1, failed: 0, lost: 0, skipped: 0 });
    assert.deepEqual(delivered.map((m) => [m.id, m.envelope.payload]), [[eventId, { redemptionId: 41 }]]);
    assert.equal((await state(eventId)).delivered, true);

    /* the consumer: the marker and the effect in the transaction's Query */
    const message = delivered[0];
    const consume = () =>
      transaction(writer, (tx) =>
        consumeOnce(tx, "credits", message.id, new Date(), () =>
          tx("INSERT INTO credit (message_id, amount) VALUES ($1, 10)", [message.id]),
        ),
      );
    assert.equal(await consume(), true);
    assert.equal(await consume(), false);
    const { rows } = await db.admin.query("SELECT count(*)::int AS n FROM credit WHERE message_id = $1", [message.id]);
    assert.equal(rows[0].n, 1);
  });

  it("refuses what the twin takes and this store cannot honour, with the reason", async () => {
    assert.throws(() => createOutbox(/** @type {any} */ ({ settings: () => ({}) })), {
      name: "TypeError",
      message: /^createOutbox: no option "settings": the settings are the extension's: set outbox\.batch_size/,
    });
    assert.throws(() => createOutbox(/** @type {any} */ ({ clock: { now: () => new Date() } })), {
      name: "TypeError",
      message: /^createOutbox: no option "clock": the extension reads the database's clock/,
    });
    await assert.rejects(
      consumeOnce(writer, "credits", randomUUID(), /** @type {any} */ (() => {}), /** @type {any} */ (undefined)),
      { name: "TypeError", message: "consumeOnce(tx, consumer, id, now, effect): now must be a valid Date" },
    );
    await assert.rejects(
      consumeOnce(writer, "credits", randomUUID(), new Date(Number.NaN), () => {}),
      { name: "TypeError", message: "consumeOnce(tx, consumer, id, now, effect): now must be a valid Date" },
    );
    const base = {
      query: worker,
      owner: "x",
      deliver: () => {},
      signal: new AbortController().signal,
      sleep: async () => {},
    };
    await assert.rejects(runWorker({ ...base, outbox: /** @type {any} */ ({ append() {} }) }), {
      name: "TypeError",
      message: "outbox must come from this package's createOutbox()",
    });
    await assert.rejects(runWorker({ ...base, query: /** @type {any} */ (undefined) }), {
      name: "TypeError",
      message: "query must be a pool-level Query (pool.query.bind(pool)) or a pg Pool",
    });
  });

  it("claim, complete, fail, extend, retryDead and purge act for the lease's owner", async () => {
    const outbox = createOutbox();
    const [a, b] = await appendCommitted(writer, "pulled", [{ n: 1 }, { n: 2 }]);
    const query = worker.query.bind(worker);

    const claimed = await outbox.claim(query, { owner: "w1", topic: "pulled", leaseSeconds: 30 });
    assert.deepEqual(claimed.map((m) => [m.id, m.type, m.payload, m.attempts, m.envelope.id]), [
      [a, "evt.test.appended.v1", { n: 1 }, 1, a],
      [b, "evt.test.appended.v1", { n: 2 }, 1, b],
    ]);
    assert.deepEqual(await outbox.claim(query, { owner: "w2", topic: "pulled" }), [], "leased: nothing to claim");

    assert.equal(await outbox.complete(query, a, "w2"), false, "not the owner");
    assert.equal(await outbox.extend(query, a, "w2", 60), false, "not the owner");
    assert.equal(await outbox.extend(query, a, "w1", 60), true);
    assert.equal(await outbox.complete(worker, a, "w1"), true, "a Pool works as the query too");
    assert.equal(await outbox.complete(query, a, "w1"), false, "already delivered");

    /* one attempt allowed on this connection: the failure makes b dead */
    const once = db.workerPool({ options: "-c outbox.max_attempts=1" });
    assert.equal(await outbox.fail(once, b, "w1", new Error("HTTP 503")), true);
    assert.deepEqual(await state(b), { attempts: 1, leased: false, last_error: "HTTP 503", delivered: false, dead: true });
    assert.equal(await outbox.fail(once, b, "w1", new Error("again")), false, "the lease is gone");

    /* the operators' functions, here as superuser */
    assert.equal(await outbox.retryDead(db.admin, b), true);
    assert.equal(await outbox.retryDead(db.admin, b), false, "no longer dead");
    assert.deepEqual(await state(b), { attempts: 0, leased: false, last_error: "HTTP 503", delivered: false, dead: false });

    /* purge: every finished message goes (a, and the earlier tests'), b stays */
    const finished = async () => {
      const { rows } = await db.admin.query(
        "SELECT count(*)::int AS n FROM outbox.message WHERE delivered_at IS NOT NULL OR dead_at IS NOT NULL",
      );
      return rows[0].n;
    };
    const finishedBefore = await finished();
    assert.ok(finishedBefore >= 1);
    assert.equal(await outbox.purge(db.admin), 0, "nothing older than the retention");
    assert.equal(await outbox.purge(db.admin, { olderThanSeconds: 0 }), finishedBefore);
    assert.equal(await finished(), 0);
    assert.equal(await state(a), undefined);
    assert.equal((await state(b)).delivered, false);
  });
});
