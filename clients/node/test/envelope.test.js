// @ts-check
/**
 * The envelope built by outbox.envelope(m) parses with the twins' schema,
 * and occurredAt is exactly what Date.prototype.toISOString prints.  A
 * NOTIFY route's truncated envelope parses in its own form, and
 * readEnvelope replaces it with the whole one.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";

import {
  drainOnce,
  envelopeSchema,
  isIsoTimestamp,
  isTruncated,
  parseEnvelope,
  readEnvelope,
  truncatedEnvelopeSchema,
} from "../src/index.js";
import { appendCommitted, createTestDatabase, waitFor } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;

before(async () => {
  db = await createTestDatabase("envelope");
});

after(async () => {
  await db?.drop();
});

const good = {
  id: "01890a5d-ac96-774b-bcce-b302099a8057",
  type: "evt.coupon.redeemed.v1",
  occurredAt: "2026-03-04T05:06:07.891Z",
  payload: { redemptionId: 41 },
};

describe("the envelope", { timeout: 30000 }, () => {
  it("built by outbox.envelope parses with the schema and round-trips occurredAt", async () => {
    const payloads = [{ redemptionId: 41, tags: ["a", "é"], nested: { ok: true, n: 1.5 } }, null, "text", [1, 2]];
    const ids = await appendCommitted(db.writerPool(), "envelopes", payloads);

    /** @type {import("../src/index.js").OutboxMessage[]} */
    const seen = [];
    const counts = await drainOnce({
      query: db.workerPool(),
      owner: "envelope-1",
      topic: "envelopes",
      deliver: (message) => {
        seen.push(message);
      },
    });
    assert.equal(counts.delivered, payloads.length);

    /* created_at in UTC with milliseconds truncated, as PostgreSQL prints it */
    const { rows } = await db.admin.query(
      `SELECT id, outbox.envelope(m)::text AS text,
              to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created
         FROM outbox.message m WHERE topic = 'envelopes' ORDER BY id`,
    );
    seen.forEach((message, i) => {
      const envelope = envelopeSchema.parse(message.envelope);
      assert.deepEqual(Object.keys(envelope).sort(), ["id", "occurredAt", "payload", "type"]);
      assert.equal(envelope.id, ids[i]);
      assert.equal(envelope.type, "evt.test.appended.v1");
      assert.deepEqual(envelope.payload, payloads[i]);
      assert.equal(new Date(envelope.occurredAt).toISOString(), envelope.occurredAt);
      assert.equal(envelope.occurredAt, rows[i].created);

      /* the same envelope, read as JSON text */
      assert.deepEqual(parseEnvelope(rows[i].text), envelope);
    });
  });

  it("schema accepts the twins' envelope and nothing else", () => {
    assert.deepEqual(envelopeSchema.parse(good), good);
    assert.ok(envelopeSchema.safeParse({ ...good, payload: null }).success, "a JSON null payload");
    assert.ok(envelopeSchema.safeParse({ ...good, id: "00000000-0000-0000-0000-000000000001" }).success);
    assert.ok(envelopeSchema.safeParse({ ...good, occurredAt: "+275760-09-13T00:00:00.000Z" }).success);

    const bad = {
      "an extra key": { ...good, extra: 1 },
      "a payload and truncated": { ...good, truncated: true },
      "no payload": { id: good.id, type: good.type, occurredAt: good.occurredAt },
      "an id that is no uuid": { ...good, id: "41" },
      "a type that is no string": { ...good, type: 1 },
      "seconds only": { ...good, occurredAt: "2026-03-04T05:06:07Z" },
      "microseconds": { ...good, occurredAt: "2026-03-04T05:06:07.891000Z" },
      "an offset": { ...good, occurredAt: "2026-03-04T05:06:07.891+00:00" },
      "a date only": { ...good, occurredAt: "2026-03-04" },
      "an impossible date": { ...good, occurredAt: "2026-02-30T05:06:07.891Z" },
      "a Date object": { ...good, occurredAt: new Date(good.occurredAt) },
      "a payload that is no JSON": { ...good, payload: undefined },
    };
    for (const [what, value] of Object.entries(bad)) {
      assert.equal(envelopeSchema.safeParse(value).success, false, what);
    }
    assert.throws(() => parseEnvelope("{not json"), SyntaxError);

    /* the truncated form: exactly id, type, occurredAt and truncated: true */
    const { payload: _payload, ...head } = good;
    const truncated = { ...head, truncated: true };
    assert.deepEqual(truncatedEnvelopeSchema.parse(truncated), truncated);
    assert.deepEqual(parseEnvelope(JSON.stringify(truncated)), truncated);
    assert.equal(isTruncated(parseEnvelope(truncated)), true);
    assert.equal(isTruncated(parseEnvelope(good)), false);
    const badTruncated = {
      "truncated false": { ...head, truncated: false },
      "truncated as text": { ...head, truncated: "true" },
      "an extra key": { ...truncated, extra: 1 },
      "a payload as well": { ...truncated, payload: 1 },
      "no id": { type: head.type, occurredAt: head.occurredAt, truncated: true },
    };
    for (const [what, value] of Object.entries(badTruncated)) {
      assert.throws(() => parseEnvelope(value), { name: "ZodError" }, what);
    }
    assert.equal(isIsoTimestamp("2026-03-04T05:06:07.891Z"), true);
    assert.equal(isIsoTimestamp("2026-03-04T05:06:07.891"), false);
  });

  it("sent truncated by a NOTIFY route is read whole by readEnvelope", async () => {
    await db.admin.query("SELECT outbox.route_notify('big', 'big_events')");
    const listener = new pg.Client({ database: db.name, user: db.listenerRole });
    await listener.connect();
    try {
      /** @type {string[]} */
      const received = [];
      listener.on("notification", (n) => {
        if (n.channel === "big_events" && n.payload !== undefined) {
          received.push(n.payload);
        }
      });
      await listener.query("LISTEN big_events");

      const bigPayload = { text: "x".repeat(9000), n: 1 };
      const [small, big] = await appendCommitted(db.writerPool(), "big", [{ n: 0 }, bigPayload]);
      const { rows: drained } = await db.admin.query("SELECT outbox.drain_once('big') AS n");
      assert.equal(drained[0].n, 2);
      await waitFor(() => received.length === 2, "two notifications");

      /* the small one whole: readEnvelope parses it and runs no statement */
      const noQuery = async () => assert.fail("a whole envelope needs no statement");
      const whole = await readEnvelope(noQuery, received[0]);
      assert.equal(whole.id, small);
      assert.deepEqual(whole.payload, { n: 0 });
      assert.deepEqual(Object.keys(JSON.parse(received[0])).sort(), ["id", "occurredAt", "payload", "type"]);

      /* the big one truncated: exactly these keys, within NOTIFY's limit */
      const raw = JSON.parse(received[1]);
      assert.deepEqual(Object.keys(raw).sort(), ["id", "occurredAt", "truncated", "type"]);
      assert.equal(raw.truncated, true);
      assert.ok(Buffer.byteLength(received[1]) <= 7999);
      const parsed = parseEnvelope(received[1]);
      assert.equal(isTruncated(parsed), true);

      /* read whole by id, as the listener role, with a Pool or a Query */
      const listeners = db.listenerPool();
      const { rows } = await db.admin.query(
        "SELECT outbox.envelope(m) AS envelope FROM outbox.message m WHERE id = $1",
        [big],
      );
      const expected = rows[0].envelope;
      assert.deepEqual(await readEnvelope(listeners, received[1]), expected);
      assert.deepEqual(await readEnvelope(listeners.query.bind(listeners), parsed), expected);
      assert.deepEqual(
        { id: expected.id, type: expected.type, occurredAt: expected.occurredAt, truncated: true },
        raw,
      );
      assert.deepEqual(expected.payload, bigPayload);

      /* an id the listener cannot see: unknown, or a topic with no NOTIFY route */
      const [pulled] = await appendCommitted(db.writerPool(), "pulled", [{ n: 2 }]);
      for (const id of [randomUUID(), pulled]) {
        await assert.rejects(readEnvelope(listeners, { ...raw, id }), {
          message: `envelope ${id} was truncated and outbox.envelope_by_id finds no such message: purged, or not visible to this role`,
        });
      }
    } finally {
      await listener.end();
    }
  });
});
