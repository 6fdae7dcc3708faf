// @ts-check
/**
 * The envelope built by outbox.envelope(m) parses with the twins' schema,
 * and occurredAt is exactly what Date.prototype.toISOString prints.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { drainOnce, envelopeSchema, isIsoTimestamp, parseEnvelope } from "../src/index.js";
import { appendCommitted, createTestDatabase } from "../support/db.js";

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
      pool: db.workerPool(),
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
      const envelope = parseEnvelope(message.envelope);
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
      "an extra key": { ...good, truncated: true },
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
    assert.equal(isIsoTimestamp("2026-03-04T05:06:07.891Z"), true);
    assert.equal(isIsoTimestamp("2026-03-04T05:06:07.891"), false);
  });
});
