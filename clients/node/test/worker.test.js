// @ts-check
/**
 * drainOnce as a worker role with only the README's worker grants: delivery
 * in claim order, failures backing off and ending dead after max_attempts
 * (set on the worker's connections), the heartbeat during slow deliveries,
 * and the owner rule when another worker took the lease.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";

import { drainOnce, errorText } from "../src/index.js";
import { appendCommitted, createTestDatabase, waitFor } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("worker");
  writer = db.writerPool();
  worker = db.workerPool();
});

after(async () => {
  await db?.drop();
});

/**
 * The state of a message, read as superuser.
 *
 * @param {string} id
 */
async function state(id) {
  const { rows } = await db.admin.query(
    `SELECT attempts, lease_owner, leased_until, last_error,
            delivered_at IS NOT NULL AS delivered, dead_at IS NOT NULL AS dead,
            extract(epoch FROM available_at - clock_timestamp())::float8 AS due_in
       FROM outbox.message WHERE id = $1`,
    [id],
  );
  return rows[0];
}

/**
 * Makes the messages of a topic due now, as if their backoff had passed.
 *
 * @param {string} topic
 */
async function makeDue(topic) {
  await db.admin.query(
    "UPDATE outbox.message SET available_at = clock_timestamp() WHERE topic = $1 AND available_at > clock_timestamp()",
    [topic],
  );
}

describe("drainOnce", { timeout: 30000 }, () => {
  it("delivers a batch in claim order and completes each message", async () => {
    const ids = await appendCommitted(writer, "ordered", [{ n: 1 }, { n: 2 }, { n: 3 }]);
    /** @type {import("../src/index.js").OutboxMessage[]} */
    const seen = [];
    const counts = await drainOnce({
      query: worker.query.bind(worker), // the twin's pool-level Query
      owner: "ordered-1",
      topic: "ordered",
      deliver: (message) => {
        seen.push(message);
      },
    });
    assert.deepEqual(counts, { claimed: 3, delivered: 3, failed: 0, lost: 0, skipped: 0 });
    assert.deepEqual(
      seen.map((m) => m.id),
      ids,
    );
    assert.deepEqual(
      seen.map((m) => [m.topic, m.type, m.payload, m.attempts, m.envelope.id]),
      ids.map((id, i) => ["ordered", "evt.test.appended.v1", { n: i + 1 }, 1, id]),
    );
    for (const id of ids) {
      assert.equal((await state(id)).delivered, true);
    }
    assert.deepEqual(
      await drainOnce({ query: worker, owner: "ordered-1", topic: "ordered", deliver: () => assert.fail("nothing is due") }),
      { claimed: 0, delivered: 0, failed: 0, lost: 0, skipped: 0 },
    );
  });

  it("fails with the error text, backs off, and ends dead after max_attempts", async () => {
    const failing = db.workerPool({
      options: "-c outbox.max_attempts=3 -c outbox.backoff_seconds=2 -c outbox.backoff_max_seconds=3",
    });
    const { rows: shown } = await failing.query("SELECT current_setting('outbox.max_attempts') AS v");
    assert.equal(shown[0].v, "3");
    const [id] = await appendCommitted(writer, "failing", [{ to: "billing" }]);
    const drain = (/** @type {unknown} */ thrown) =>
      drainOnce({
        query: failing,
        owner: "failing-1",
        topic: "failing",
        deliver: () => {
          throw thrown;
        },
      });

    assert.deepEqual(await drain(new Error("HTTP 503 from billing")), {
      claimed: 1, delivered: 0, failed: 1, lost: 0, skipped: 0,
    });
    let s = await state(id);
    assert.equal(s.attempts, 1);
    assert.equal(s.last_error, "HTTP 503 from billing");
    assert.equal(s.leased_until, null);
    assert.equal(s.dead, false);
    assert.ok(s.due_in > 1 && s.due_in <= 2, `first backoff is 2 s, due in ${s.due_in}`);
    assert.equal((await drain(new Error("not due"))).claimed, 0, "backing off: not claimable");

    await makeDue("failing");
    assert.equal((await drain("plain string thrown")).failed, 1);
    s = await state(id);
    assert.equal(s.attempts, 2);
    assert.equal(s.last_error, "plain string thrown");
    assert.ok(s.due_in > 2 && s.due_in <= 3, `second backoff is min(4, 3) s, due in ${s.due_in}`);

    await makeDue("failing");
    assert.equal((await drain(new Error(""))).failed, 1);
    s = await state(id);
    assert.equal(s.attempts, 3);
    assert.equal(s.last_error, "Error");
    assert.equal(s.dead, true);
    assert.equal(s.delivered, false);

    await makeDue("failing");
    assert.equal((await drain(new Error("dead"))).claimed, 0, "a dead message is never claimed");
  });

  it("gives a never-empty error text", () => {
    assert.equal(errorText(new Error("boom")), "boom");
    assert.equal(errorText(new TypeError("")), "TypeError");
    assert.equal(errorText("text"), "text");
    assert.equal(errorText(42), "42");
    assert.equal(errorText(undefined), "undefined");
    assert.equal(errorText(""), "delivery failed without an error message");
    assert.equal(errorText(" \n"), "delivery failed without an error message");
    assert.equal(errorText("a\0b"), "ab");
    assert.equal(errorText(Object.create(null)), "delivery failed without an error message");
  });

  it("extends the lease while a slow delivery runs", async () => {
    const [id] = await appendCommitted(writer, "slow", [{ slow: true }]);
    const counts = await drainOnce({
      query: worker,
      owner: "slow-1",
      topic: "slow",
      leaseSeconds: 10,
      heartbeatSeconds: 0.2,
      deliver: async (message) => {
        /* the heartbeat moves leased_until past what the claim gave */
        await waitFor(
          async () => (await state(message.id)).leased_until > message.leasedUntil,
          "the heartbeat to extend the lease",
          5000,
        );
      },
    });
    assert.deepEqual(counts, { claimed: 1, delivered: 1, failed: 0, lost: 0, skipped: 0 });
    assert.equal((await state(id)).delivered, true);
  });

  it("leaves a message to the worker that took its lease", async () => {
    /*
     * While the message is being delivered, its lease expires and another
     * worker claims it: this worker's complete is refused and changes
     * nothing.
     */
    const [first] = await appendCommitted(writer, "stolen", [{ n: 1 }]);
    const counts = await drainOnce({
      query: worker,
      owner: "slow-owner",
      topic: "stolen",
      deliver: async () => {
        await db.admin.query(
          "UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 second' WHERE topic = 'stolen'",
        );
        const { rows } = await worker.query("SELECT id FROM outbox.claim('thief', 'stolen')");
        assert.deepEqual(rows, [{ id: first }]);
      },
    });
    assert.deepEqual(counts, { claimed: 1, delivered: 0, failed: 0, lost: 1, skipped: 0 });
    const taken = await state(first);
    assert.equal(taken.lease_owner, "thief");
    assert.equal(taken.delivered, false);
    assert.equal(taken.attempts, 2);
  });

  it("checks the lease of a message that waited for its turn", async () => {
    /*
     * The second message of the batch is taken by another worker while the
     * first is delivered; by its turn its lease has aged past the heartbeat
     * period, so it is extended first, found taken, and not delivered.
     */
    const [third, fourth] = await appendCommitted(writer, "stolen2", [{ n: 3 }, { n: 4 }]);
    /** @type {string[]} */
    const delivered2 = [];
    const counts2 = await drainOnce({
      query: worker,
      owner: "slow-owner",
      topic: "stolen2",
      heartbeatSeconds: 0.05,
      deliver: async (message) => {
        delivered2.push(message.id);
        await db.admin.query(
          "UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 second' WHERE id = $1",
          [fourth],
        );
        const { rows } = await worker.query("SELECT id FROM outbox.claim('thief', 'stolen2')");
        assert.deepEqual(rows, [{ id: fourth }]);
        await delay(100); // the lease of the second ages past the heartbeat period
      },
    });
    assert.deepEqual(counts2, { claimed: 2, delivered: 1, failed: 0, lost: 1, skipped: 0 });
    assert.deepEqual(delivered2, [third], "the taken message is not delivered a second time");
    assert.equal((await state(fourth)).lease_owner, "thief");
  });
});
