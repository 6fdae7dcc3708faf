// @ts-check
/**
 * The batch loop of a pull worker: completeMany marks a batch delivered in
 * one statement, completeAndClaim marks it and claims the next in one; both
 * act only for the lease's owner, and bad ids are refused before the
 * database is asked.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { completeAndClaim, completeMany } from "../src/index.js";
import { appendCommitted, createTestDatabase } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("batch");
  writer = db.writerPool();
  worker = db.workerPool();
});

after(async () => {
  await db?.drop();
});

/**
 * Who holds each message and whether it is delivered, read as superuser.
 *
 * @param {string[]} ids
 */
async function states(ids) {
  const { rows } = await db.admin.query(
    `SELECT lease_owner, delivered_at IS NOT NULL AS delivered
       FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n) JOIN outbox.message m USING (id)
      ORDER BY i.n`,
    [ids],
  );
  return rows.map((r) => [r.lease_owner, r.delivered]);
}

describe("batches", { timeout: 60000 }, () => {
  it("completeAndClaim completes the owner's batch and claims the next", async () => {
    const [a, b, c] = await appendCommitted(writer, "batched", [{ n: 1 }, { n: 2 }, { n: 3 }]);
    const query = worker.query.bind(worker);

    const first = await completeAndClaim(query, [], { owner: "w1", topic: "batched", batchSize: 2, leaseSeconds: 30 });
    assert.deepEqual(first.map((m) => [m.id, m.payload, m.attempts, m.envelope.id]), [
      [a, { n: 1 }, 1, a],
      [b, { n: 2 }, 1, b],
    ]);

    /* w2 does not hold a and b: they stay w1's; w2 gets c */
    const second = await completeAndClaim(worker, [a, b], { owner: "w2", topic: "batched", batchSize: 2 });
    assert.deepEqual(second.map((m) => m.id), [c]);
    assert.deepEqual(await states([a, b, c]), [["w1", false], ["w1", false], ["w2", false]]);

    assert.equal(await completeMany(query, [a, b], "w1"), 2);
    assert.equal(await completeMany(query, [a, b], "w1"), 0, "already delivered");
    assert.equal(await completeMany(query, [], "w1"), 0);

    assert.deepEqual(await completeAndClaim(query, [c], { owner: "w2", topic: "batched" }), []);
    assert.deepEqual(await states([a, b, c]), [["w1", true], ["w1", true], ["w2", true]]);
  });

  it("refuses ids that are not an array of strings, and the database refuses bad uuids", async () => {
    const query = worker.query.bind(worker);
    for (const ids of [undefined, "x", [1], [null]]) {
      await assert.rejects(completeMany(query, /** @type {any} */ (ids), "w1"), {
        name: "TypeError",
        message: "completeMany: ids must be an array of message ids (strings)",
      });
      await assert.rejects(completeAndClaim(query, /** @type {any} */ (ids), { owner: "w1" }), {
        name: "TypeError",
        message: "completeAndClaim: ids must be an array of message ids (strings)",
      });
    }
    await assert.rejects(completeMany(query, ["not-a-uuid"], "w1"), { code: "22P02" });
  });
});
