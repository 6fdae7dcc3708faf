// @ts-check
/**
 * consumeOnce: the effect and the consume_once marker commit together, so
 * the effect is applied once per message id, also when the same message is
 * redelivered concurrently, and again after a rollback.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, beforeEach, describe, it } from "node:test";

import { consumeOnce } from "../src/index.js";
import { createTestDatabase, waitFor } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let consumer;

before(async () => {
  db = await createTestDatabase("consume");
  await db.admin.query(`CREATE TABLE credit (message_id uuid NOT NULL, amount int NOT NULL);
    GRANT SELECT, INSERT ON credit TO ${db.writerRole}`);
  consumer = db.writerPool(); // consume_once is granted to writers
});

after(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.admin.query("TRUNCATE credit");
});

/**
 * The effect of the tests: one credit row for the message.
 *
 * @param {string} messageId
 * @returns {(client: import("../src/index.js").Client) => Promise<unknown>}
 */
const grant = (messageId) => (client) =>
  client.query("INSERT INTO credit (message_id, amount) VALUES ($1, 10)", [messageId]);

/**
 * Credits and markers of a message, read as superuser.
 *
 * @param {string} messageId
 */
async function applied(messageId) {
  const { rows } = await db.admin.query(
    `SELECT (SELECT count(*)::int FROM credit WHERE message_id = $1) AS credits,
            (SELECT count(*)::int FROM outbox.processed WHERE message_id = $1) AS markers`,
    [messageId],
  );
  return rows[0];
}

/**
 * A promise with its resolve function.
 *
 * @returns {{ promise: Promise<void>, resolve: () => void }}
 */
function gate() {
  /** @type {() => void} */
  let resolve = () => {};
  const promise = new Promise((r) => {
    resolve = () => r(undefined);
  });
  return { promise, resolve };
}

/** Waits until a session of the test database waits for a lock in consume_once. */
async function waitForBlockedConsumeOnce() {
  await waitFor(async () => {
    const { rows } = await db.admin.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'
          AND query LIKE '%consume_once%'`,
    );
    return rows[0].n === 1;
  }, "the second consumeOnce to wait for the first");
}

describe("consumeOnce", { timeout: 30000 }, () => {
  it("applies the effect the first time only", async () => {
    const id = randomUUID();
    assert.equal(await consumeOnce(consumer, "credits", id, new Date(), grant(id)), true);
    assert.equal(await consumeOnce(consumer, "credits", id, new Date(), grant(id)), false);
    assert.deepEqual(await applied(id), { credits: 1, markers: 1 });
    /* another consumer has its own marker */
    assert.equal(await consumeOnce(consumer, "audit", id, new Date(), () => {}), true);
  });

  it("leaves neither marker nor effect when the effect throws", async () => {
    const id = randomUUID();
    await assert.rejects(
      consumeOnce(consumer, "credits", id, new Date(), async (client) => {
        await grant(id)(client);
        throw new Error("downstream refused");
      }),
      { message: "downstream refused" },
    );
    assert.deepEqual(await applied(id), { credits: 0, markers: 0 });
    assert.equal(await consumeOnce(consumer, "credits", id, new Date(), grant(id)), true);
    assert.deepEqual(await applied(id), { credits: 1, markers: 1 });
  });

  it("reports an effect whose failed statement it swallowed", async () => {
    const id = randomUUID();
    await assert.rejects(
      consumeOnce(consumer, "credits", id, new Date(), async (client) => {
        await client.query("SELECT 1/0").catch(() => {});
      }),
      /rolled back/,
    );
    assert.deepEqual(await applied(id), { credits: 0, markers: 0 });
  });

  it("applies the effect once under concurrent redelivery", async () => {
    const id = randomUUID();
    const inEffect = gate();
    const finish = gate();
    let runs = 0;
    const first = consumeOnce(consumer, "credits", id, new Date(), async (client) => {
      runs++;
      await grant(id)(client);
      inEffect.resolve();
      await finish.promise;
    });
    await inEffect.promise;
    const second = consumeOnce(consumer, "credits", id, new Date(), async (client) => {
      runs++;
      await grant(id)(client);
    });
    await waitForBlockedConsumeOnce();
    finish.resolve();
    assert.deepEqual(await Promise.all([first, second]), [true, false]);
    assert.equal(runs, 1);
    assert.deepEqual(await applied(id), { credits: 1, markers: 1 });
  });

  it("lets the redelivery apply the effect when the first attempt rolls back", async () => {
    const id = randomUUID();
    const inEffect = gate();
    const finish = gate();
    const first = consumeOnce(consumer, "credits", id, new Date(), async (client) => {
      await grant(id)(client);
      inEffect.resolve();
      await finish.promise;
      throw new Error("crashed after the effect");
    });
    await inEffect.promise;
    const second = consumeOnce(consumer, "credits", id, new Date(), grant(id));
    await waitForBlockedConsumeOnce();
    finish.resolve();
    await assert.rejects(first, { message: "crashed after the effect" });
    assert.equal(await second, true);
    assert.deepEqual(await applied(id), { credits: 1, markers: 1 });
  });

  it("joins the caller's transaction, or opens one on an idle client", async () => {
    const id = randomUUID();
    const client = await consumer.connect();
    try {
      await client.query("BEGIN");
      assert.equal(await consumeOnce(client, "credits", id, new Date(), grant(id)), true);
      assert.equal(client.getTransactionStatus(), "T", "the caller's transaction stays open");
      await client.query("ROLLBACK");
      assert.deepEqual(await applied(id), { credits: 0, markers: 0 });

      assert.equal(await consumeOnce(client, "credits", id, new Date(), grant(id)), true);
      assert.equal(client.getTransactionStatus(), "I", "its own transaction is committed");
      assert.deepEqual(await applied(id), { credits: 1, markers: 1 });
      assert.equal(await consumeOnce(client, "credits", id, new Date(), grant(id)), false);
    } finally {
      client.release();
    }
  });

  it("takes (tx, consumer, id, effect) without now: a Pool, a client in a transaction, an idle client, a Query", async () => {
    const id = randomUUID();
    assert.equal(await consumeOnce(consumer, "credits", id, grant(id)), true);
    assert.equal(await consumeOnce(consumer, "credits", id, grant(id)), false);
    assert.deepEqual(await applied(id), { credits: 1, markers: 1 });

    const other = randomUUID();
    const client = await consumer.connect();
    try {
      await client.query("BEGIN");
      assert.equal(await consumeOnce(client, "credits", other, grant(other)), true);
      assert.equal(client.getTransactionStatus(), "T", "the caller's transaction stays open");
      const query = /** @type {import("../src/index.js").Query} */ ((text, values) => client.query(text, values));
      assert.equal(await consumeOnce(query, "credits", other, () => assert.fail("applied twice")), false);
      await client.query("COMMIT");
      assert.deepEqual(await applied(other), { credits: 1, markers: 1 });

      const third = randomUUID();
      assert.equal(await consumeOnce(client, "credits", third, grant(third)), true);
      assert.equal(client.getTransactionStatus(), "I", "its own transaction is committed");
      assert.deepEqual(await applied(third), { credits: 1, markers: 1 });
    } finally {
      client.release();
    }
  });

  it("stores the transaction's time as the marker's, with or without the twin's now", async () => {
    const withNow = randomUUID();
    const without = randomUUID();
    const yesterday = new Date(Date.now() - 86400_000);
    assert.equal(await consumeOnce(consumer, "credits", withNow, yesterday, grant(withNow)), true);
    assert.equal(await consumeOnce(consumer, "credits", without, grant(without)), true);
    const { rows } = await db.admin.query(
      `SELECT count(*)::int AS n FROM outbox.processed
        WHERE message_id = ANY($1::uuid[]) AND processed_at > now() - interval '1 minute'`,
      [[withNow, without]],
    );
    assert.equal(rows[0].n, 2);
  });

  it("refuses an effect that is not a function, in both forms", async () => {
    const id = randomUUID();
    await assert.rejects(
      consumeOnce(consumer, "credits", id, /** @type {any} */ (new Date())),
      { name: "TypeError", message: "consumeOnce(tx, consumer, id, effect): effect must be a function" },
    );
    await assert.rejects(
      consumeOnce(consumer, "credits", id, new Date(), /** @type {any} */ ("INSERT ...")),
      { name: "TypeError", message: "consumeOnce(tx, consumer, id, now, effect): effect must be a function" },
    );
    assert.deepEqual(await applied(id), { credits: 0, markers: 0 });
  });
});
