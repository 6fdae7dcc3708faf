// @ts-check
/**
 * What a claim returns: every column of outbox.message, in camelCase and
 * with its type (bigint seq as a number, timestamps as Dates, the nullable
 * columns null), the ordering key an append was given, the error text of
 * the last failed attempt; and topicStats, whose counts are numbers.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import pg from "pg";

import { append, claim, completeAndClaim, fail, topicStats } from "../src/index.js";
import { appendCommitted, createTestDatabase, inTransaction } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("message");
  writer = db.writerPool();
  worker = db.workerPool();
});

after(async () => {
  await db?.drop();
});

/**
 * snake_case to camelCase.
 *
 * @param {string} name
 */
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

describe("claimed messages", { timeout: 30000 }, () => {
  it("carry every column of outbox.message, named and typed as the claim returns it", async () => {
    const id = randomUUID();
    await inTransaction(writer, "COMMIT", (client) =>
      append(client, { topic: "columns", type: "evt.col.v1", payload: { n: 1 }, id, orderingKey: "account-7" }),
    );
    const [message] = await claim(worker, { owner: "w-1", topic: "columns" });

    /* the property of each column (event_type is the envelope's "type"), and the envelope */
    const { rows: columns } = await db.admin.query(
      `SELECT attname FROM pg_attribute
        WHERE attrelid = 'outbox.message'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    );
    const expected = columns.map((c) => (c.attname === "event_type" ? "type" : camel(c.attname)));
    assert.deepEqual(Object.keys(message).sort(), [...expected, "envelope"].sort());

    const { rows } = await db.admin.query(
      "SELECT created_at, available_at, leased_until, seq::text AS seq FROM outbox.message WHERE id = $1",
      [id],
    );
    assert.deepEqual(message, {
      id,
      topic: "columns",
      type: "evt.col.v1",
      payload: { n: 1 },
      createdAt: rows[0].created_at,
      availableAt: rows[0].available_at,
      attempts: 1,
      leasedUntil: rows[0].leased_until,
      leaseOwner: "w-1",
      deliveredAt: null,
      deadAt: null,
      lastError: null,
      seq: Number(rows[0].seq),
      deferred: false,
      orderingKey: "account-7",
      envelope: { id, type: "evt.col.v1", occurredAt: rows[0].created_at.toISOString(), payload: { n: 1 } },
    });
    assert.equal(typeof message.seq, "number");
    assert.ok(message.createdAt instanceof Date && message.availableAt instanceof Date);
  });

  it("carry the error of the last failed attempt and no ordering key when the append gave none", async () => {
    const [id] = await appendCommitted(writer, "errors", [{ n: 2 }]);
    const [first] = await claim(worker, { owner: "w-2", topic: "errors" });
    assert.equal(first.lastError, null);
    assert.equal(first.orderingKey, null);
    assert.equal(await fail(worker, id, "w-2", new Error("HTTP 503")), true);
    await db.admin.query("UPDATE outbox.message SET available_at = clock_timestamp() WHERE id = $1", [id]);

    /* completeAndClaim returns the same shape */
    const [again] = await completeAndClaim(worker, [], { owner: "w-3", topic: "errors" });
    assert.equal(again.id, id);
    assert.equal(again.attempts, 2);
    assert.equal(again.lastError, "HTTP 503");
    assert.equal(again.leaseOwner, "w-3");
  });

  it("type their payload with the caller's type parameter", async () => {
    /** @typedef {{ redemptionId: number }} Redemption */
    await inTransaction(writer, "COMMIT", (client) =>
      append(/** @type {import("../src/index.js").Client} */ (client), {
        topic: "typed", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 },
      }),
    );
    /** @type {import("../src/index.js").OutboxMessage<Redemption>[]} */
    const messages = await claim(worker, { owner: "w-4", topic: "typed" });
    /** @type {number} */
    const redemptionId = messages[0].payload.redemptionId;
    assert.equal(redemptionId, 41);
    /** @type {number} */
    const fromEnvelope = messages[0].envelope.payload.redemptionId;
    assert.equal(fromEnvelope, 41);
  });
});

describe("topicStats", { timeout: 30000 }, () => {
  it("returns the counts of outbox.topic_stats as numbers, and the age in seconds", async () => {
    const ids = await appendCommitted(writer, "stats", [1, 2, 3, 4]);
    await inTransaction(writer, "COMMIT", (client) =>
      append(client, { topic: "stats", type: "evt.t.v1", payload: 5, availableAt: new Date(Date.now() + 3600_000) }),
    );
    /* the oldest undelivered message is ids[2], two minutes old (ids[0], older, gets delivered) */
    await db.admin.query("UPDATE outbox.message SET created_at = now() - interval '180 seconds' WHERE id = $1", [ids[0]]);
    await db.admin.query("UPDATE outbox.message SET created_at = now() - interval '120 seconds' WHERE id = $1", [ids[2]]);
    const claimed = await claim(worker, { owner: "w-5", topic: "stats", batchSize: 2 });
    assert.deepEqual(claimed.map((m) => m.id), ids.slice(0, 2));
    await db.admin.query("UPDATE outbox.message SET delivered_at = now(), leased_until = NULL WHERE id = $1", [ids[0]]);
    await db.admin.query("UPDATE outbox.message SET dead_at = now(), leased_until = NULL WHERE id = $1", [ids[1]]);
    await appendCommitted(writer, "stats-other", [6]);

    const [stats] = await topicStats(db.admin, { topic: "stats" });
    const age = stats.oldestUndeliveredAgeSeconds;
    assert.ok(typeof age === "number" && age >= 120 && age < 170, `age ${age}: two minutes and the test's time`);
    assert.deepEqual(stats, {
      topic: "stats",
      due: 2,
      delayed: 1,
      leased: 0,
      dead: 1,
      delivered: 1,
      oldestUndeliveredAgeSeconds: age,
      pausedUntil: null,
    });

    /* every topic, in topic order; the same numbers when pg is told to read bigint as BigInt */
    const all = await topicStats(db.admin);
    assert.deepEqual(
      all.filter((s) => s.topic.startsWith("stats")).map((s) => [s.topic, s.due]),
      [["stats", 2], ["stats-other", 1]],
    );
    assert.deepEqual(all.map((s) => s.topic), [...all.map((s) => s.topic)].sort());
    const bigints = new pg.Pool({
      database: db.name,
      max: 1,
      types: {
        getTypeParser: /** @type {any} */ ((/** @type {number} */ oid, /** @type {any} */ format) =>
          oid === 20 ? BigInt : pg.types.getTypeParser(oid, format)),
      },
    });
    try {
      /* the ages grow between the two reads */
      const counts = (/** @type {import("../src/index.js").TopicStats[]} */ rows) =>
        rows.map(({ oldestUndeliveredAgeSeconds, ...rest }) => rest);
      assert.deepEqual(counts(await topicStats(bigints)), counts(all));
    } finally {
      await bigints.end();
    }
    assert.deepEqual(await topicStats(db.admin, { topic: "no-such-topic" }), []);
  });
});
