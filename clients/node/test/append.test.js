// @ts-check
/**
 * append: the message commits or rolls back with the caller's transaction,
 * an id makes it idempotent, and the payload is stored as the JSON given.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { append } from "../src/index.js";
import { createTestDatabase, inTransaction } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;

before(async () => {
  db = await createTestDatabase("append");
  writer = db.writerPool();
});

after(async () => {
  await db?.drop();
});

/**
 * The stored row of a message, read as superuser, or undefined.
 *
 * @param {string} id
 */
async function row(id) {
  const { rows } = await db.admin.query(
    `SELECT topic, event_type, payload, attempts, available_at, delivered_at,
            available_at BETWEEN created_at AND clock_timestamp() AS available_now
       FROM outbox.message WHERE id = $1`,
    [id],
  );
  return rows[0];
}

describe("append", { timeout: 30000 }, () => {
  it("commits with the caller's transaction", async () => {
    const id = await inTransaction(writer, "COMMIT", async (client) => {
      await client.query("SELECT 1"); // the business work would be here
      return append(client, { topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 41 } });
    });
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const { available_at: _availableAt, ...stored } = await row(id);
    assert.deepEqual(stored, {
      topic: "credits",
      event_type: "evt.coupon.redeemed.v1",
      payload: { redemptionId: 41 },
      attempts: 0,
      delivered_at: null,
      available_now: true,
    });
  });

  it("rolls back with the caller's transaction", async () => {
    const id = await inTransaction(writer, "ROLLBACK", (client) =>
      append(client, { topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 42 } }),
    );
    assert.equal(await row(id), undefined);
  });

  it("is visible to nobody else before the commit", async () => {
    const client = await writer.connect();
    try {
      await client.query("BEGIN");
      const id = await append(client, { topic: "credits", type: "evt.t.v1", payload: 1 });
      assert.equal(await row(id), undefined);
      await client.query("COMMIT");
      assert.equal((await row(id)).payload, 1);
    } finally {
      client.release();
    }
  });

  it("refuses a client outside a transaction, and a pool", async () => {
    const client = await writer.connect();
    try {
      await assert.rejects(append(client, { topic: "credits", type: "evt.t.v1", payload: {} }), {
        message: "append must run inside the caller's transaction: call BEGIN first",
      });
    } finally {
      client.release();
    }
    await assert.rejects(
      append(/** @type {any} */ (writer), { topic: "credits", type: "evt.t.v1", payload: {} }),
      TypeError,
    );
  });

  it("with an id is idempotent: the same fact twice is one message", async () => {
    const id = randomUUID();
    const input = { topic: "credits", type: "evt.coupon.redeemed.v1", payload: { redemptionId: 43 }, id };
    assert.equal(await inTransaction(writer, "COMMIT", (client) => append(client, input)), id);
    assert.equal(await inTransaction(writer, "COMMIT", (client) => append(client, input)), id);
    const { rows } = await db.admin.query("SELECT count(*)::int AS n FROM outbox.message WHERE id = $1", [id]);
    assert.equal(rows[0].n, 1);
  });

  it("with an id appended again with other content is a unique violation naming the id", async () => {
    const id = randomUUID();
    await inTransaction(writer, "COMMIT", (client) => append(client, { topic: "credits", type: "evt.t.v1", payload: { n: 1 }, id }));
    await assert.rejects(
      inTransaction(writer, "COMMIT", (client) => append(client, { topic: "credits", type: "evt.t.v1", payload: { n: 2 }, id })),
      (/** @type {any} */ err) => {
        assert.equal(err.code, "23505");
        assert.ok(err.message.includes(id), err.message);
        return true;
      },
    );
    assert.deepEqual((await row(id)).payload, { n: 1 });
  });

  it("stores arrays, strings and null as JSON and keeps availableAt", async () => {
    const later = new Date(Date.now() + 3600_000);
    const ids = await inTransaction(writer, "COMMIT", async (client) => [
      await append(client, { topic: "json", type: "evt.t.v1", payload: [1, "two", { three: 3 }] }),
      await append(client, { topic: "json", type: "evt.t.v1", payload: "text" }),
      await append(client, { topic: "json", type: "evt.t.v1", payload: null }),
      await append(client, { topic: "json", type: "evt.t.v1", payload: {}, availableAt: later }),
    ]);
    assert.deepEqual((await row(ids[0])).payload, [1, "two", { three: 3 }]);
    assert.equal((await row(ids[1])).payload, "text");
    assert.equal((await row(ids[2])).payload, null);
    assert.equal((await row(ids[3])).available_at.getTime(), later.getTime());
  });

  it("passes an ordering key, and none when not given", async () => {
    const ids = await inTransaction(writer, "COMMIT", async (client) => [
      await append(client, { topic: "keyed", type: "evt.t.v1", payload: {}, orderingKey: "account:7" }),
      await append(client, { topic: "keyed", type: "evt.t.v1", payload: {} }),
    ]);
    const { rows } = await db.admin.query(
      "SELECT id, ordering_key FROM outbox.message WHERE id = ANY ($1::uuid[]) ORDER BY seq",
      [ids],
    );
    assert.deepEqual(rows, [
      { id: ids[0], ordering_key: "account:7" },
      { id: ids[1], ordering_key: null },
    ]);
    await assert.rejects(
      inTransaction(writer, "COMMIT", (client) =>
        append(client, { topic: "keyed", type: "evt.t.v1", payload: {}, orderingKey: /** @type {any} */ (7) }),
      ),
      TypeError,
    );
    await assert.rejects(
      inTransaction(writer, "COMMIT", (client) => append(client, { topic: "keyed", type: "evt.t.v1", payload: {}, orderingKey: "" })),
      { code: "22023" },
    );
  });

  it("refuses what is not JSON, and bad names with the extension's SQLSTATE", async () => {
    await assert.rejects(
      inTransaction(writer, "COMMIT", (client) => append(client, { topic: "credits", type: "evt.t.v1", payload: undefined })),
      TypeError,
    );
    await assert.rejects(
      inTransaction(writer, "COMMIT", (client) => append(client, { topic: "", type: "evt.t.v1", payload: {} })),
      { code: "22023" },
    );
  });
});
