// krizaka_outbox from postgres.js (npm: postgres).
//
// Appends in a business transaction, claims, completes with complete_many,
// fails one message, consumes once, runs a pull worker's loop with
// complete_and_claim, and receives envelopes of a NOTIFY route.
// Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE) to
// a database prepared by setup.sql; prints one line per check and exits 1 on
// any mismatch.
import { randomBytes, randomUUID } from "node:crypto";
import postgres from "postgres";
import { check, checkEnvelopes, finish, sqlstateOf } from "./checks.mjs";

const DRIVER = "postgres.js";
const TYPE = "evt.shop.order_placed.v1";
const OWNER = `${DRIVER}-worker-1`;
const run = randomBytes(4).toString("hex");
const topic = `shop.${DRIVER}.${run}`;

// postgres.js asks the server for the parameter types and JSON.stringify()s
// whatever is bound to a jsonb parameter: pass the value (object, array,
// string, number), never JSON text.  null is SQL NULL, so JSON null goes as
// text.
const sql = postgres({ onnotice: () => {} });
const jsonb = (value) => (value === null ? sql`${"null"}::text::jsonb` : sql`${value}::jsonb`);

// 1. The business row and its events commit together (sql.begin commits
//    when the callback returns, rolls back when it throws).
const payloads = [{ item: "lamp", qty: 2 }, null, [1, 2, 3], "gift wrap"];
const later = new Date(Math.floor(Date.now() / 1000) * 1000 + 3600 * 1000);
const givenId = randomUUID();
const batch = [{ item: "pen" }, { item: "ink" }];
const { ids, delayedId } = await sql.begin(async (tx) => {
  await tx`INSERT INTO public.shop_order (driver, item) VALUES (${DRIVER}, ${`lamp-${run}`})`;
  const appended = [];
  for (const payload of payloads) {
    const [{ id }] = await tx`SELECT outbox.append(${topic}, ${TYPE}, ${jsonb(payload)}) AS id`;
    appended.push(id);
  }
  const [{ id }] = await tx`SELECT outbox.append(${topic}, ${TYPE}, ${{ item: "desk" }}, ${givenId}) AS id`;
  appended.push(id);
  // append_batch: an array of values for jsonb[]
  const rows = await tx`SELECT id FROM outbox.append_batch(${topic}, ${TYPE}, ${batch}) AS id`;
  appended.push(...rows.map((r) => r.id));
  // available_at: a Date is sent as UTC, exact in any server zone
  const [delayed] = await tx`SELECT outbox.append(${topic}, ${TYPE}, ${{ item: "later" }},
                                                  available_at => ${later}) AS id`;
  return { ids: appended, delayedId: delayed.id };
});
payloads.push({ item: "desk" }, ...batch);
check("append keeps the given id", ids[4], givenId);
const [{ available_at: availableAt }] = await sql`SELECT available_at FROM outbox.message WHERE id = ${delayedId}`;
check("available_at stored exactly", availableAt.getTime(), later.getTime());

// 2. A rolled-back business transaction leaves no row and no message.
const rolledId = randomUUID();
await sql.begin(async (tx) => {
  await tx`INSERT INTO public.shop_order (driver, item) VALUES (${DRIVER}, ${`umbrella-${run}`})`;
  await tx`SELECT outbox.append(${topic}, ${TYPE}, ${{ item: "umbrella" }}, ${rolledId})`;
  throw new Error("payment declined");
}).catch((error) => { if (error.message !== "payment declined") throw error; });
const [rolled] = await sql`SELECT
    (SELECT count(*)::int FROM outbox.message WHERE id = ${rolledId}) AS messages,
    (SELECT count(*)::int FROM public.shop_order WHERE item = ${`umbrella-${run}`}) AS orders`;
check("rolled back: no message", rolled.messages, 0);
check("rolled back: no business row", rolled.orders, 0);

// Pitfalls: JSON text is encoded again (one JSON string); sql.json(null) and
// null are SQL NULL.
const [{ t: kind }] = await sql`SELECT jsonb_typeof(${'{"item": "lamp"}'}::jsonb) AS t`;
check("JSON text is double-encoded", kind, "string");
check("sql.json(null) fails (SQL NULL)",
  await sqlstateOf(sql`SELECT outbox.append(${topic}, ${TYPE}, ${sql.json(null)})`), "22004");

// 3. Claim: a number for batch_size, rows oldest first; uuid as strings,
//    jsonb parsed.
const claimed = await sql`SELECT id, payload, attempts FROM outbox.claim(${OWNER}, ${topic}, ${10})`;
check("claim: the due messages in order", claimed.map((r) => r.id), ids);
check("claim: payloads as appended", claimed.map((r) => r.payload), payloads);
check("claim: first attempt", [...new Set(claimed.map((r) => r.attempts))], [1]);

// 4. complete_many with an array of id strings (the server says uuid[]);
//    fail the last one.
const last = claimed[claimed.length - 1];
const [{ done }] = await sql`SELECT outbox.complete_many(${claimed.slice(0, -1).map((r) => r.id)}, ${OWNER}) AS done`;
check("complete_many", done, claimed.length - 1);
const [{ failed }] = await sql`SELECT outbox.fail(${last.id}, ${OWNER}, 'HTTP 503 from the shipping service') AS failed`;
check("fail", failed, true);
const [backoff] = await sql`SELECT attempts, last_error, available_at > now() AS later
                              FROM outbox.message WHERE id = ${last.id}`;
check("failed message backs off with its error", { ...backoff },
  { attempts: 1, last_error: "HTTP 503 from the shipping service", later: true });

// 5. consume_once in the effect's transaction: true once, then false.
const consume = (messageId) => sql.begin(async (tx) => {
  const [{ first }] = await tx`SELECT outbox.consume_once('mailer', ${messageId}) AS first`;
  return first;
});
check("consume_once first", await consume(ids[0]), true);
check("consume_once again", await consume(ids[0]), false);

// 6. topic_stats: bigint counts and the interval come as strings; cast in
//    SQL for numbers (or postgres({ types: { bigint: postgres.BigInt } })).
const [raw] = await sql`SELECT due, oldest_undelivered_age FROM outbox.topic_stats WHERE topic = ${topic}`;
check("topic_stats raw: bigint and interval are strings",
  [typeof raw.due, typeof raw.oldest_undelivered_age], ["string", "string"]);
const [{ age_seconds: ageSeconds, ...counts }] = await sql`
  SELECT due::int, delayed::int, leased::int, dead::int, delivered::int,
         extract(epoch FROM oldest_undelivered_age)::float8 AS age_seconds
    FROM outbox.topic_stats WHERE topic = ${topic}`;
check("topic_stats counts", counts, { due: 0, delayed: 2, leased: 0, dead: 0, delivered: claimed.length - 1 });
check("topic_stats age in seconds is a number", typeof ageSeconds === "number" && ageSeconds >= 0, true);

// 7. The pull worker's loop: complete_and_claim completes the batch just
//    delivered and claims the next in one call and one commit.
const loop = `${topic}.loop`;
const [first, second] = await sql.begin(async (tx) => {
  const [a] = await tx`SELECT outbox.append(${loop}, ${TYPE}, ${{ n: 1 }}) AS id`;
  const [b] = await tx`SELECT outbox.append(${loop}, ${TYPE}, ${{ n: 2 }}) AS id`;
  return [a.id, b.id];
});
let loopBatch = (await sql`SELECT id FROM outbox.claim(${OWNER}, ${loop}, ${1})`).map((r) => r.id);
check("claim one", loopBatch, [first]);
loopBatch = (await sql`SELECT id FROM outbox.complete_and_claim(${loopBatch}, ${OWNER}, ${loop}, ${10})`)
  .map((r) => r.id);
check("complete_and_claim: the next batch", loopBatch, [second]);
const [{ n: lastDone }] = await sql`SELECT outbox.complete_many(${loopBatch}, ${OWNER}) AS n`;
check("complete_many: the last batch", lastDone, 1);
const [{ n: delivered }] = await sql`SELECT count(*)::int AS n FROM outbox.message
                                      WHERE topic = ${loop} AND delivered_at IS NOT NULL`;
check("loop: both delivered", delivered, 2);

// 8. LISTEN on the channel of the route of 'shop.live' (postgres.js keeps a
//    connection of its own for it); the background worker notifies after the
//    commit.  A notification over 8000 bytes comes without its payload and
//    with "truncated": true: fetch it with envelope_by_id.
const envelopes = {};
let small;
let large;
let arrived;
const both = new Promise((resolve) => { arrived = resolve; });
const listening = await sql.listen("shop_events", (payload) => {
  const envelope = JSON.parse(payload);
  if (envelope.id === small || envelope.id === large) envelopes[envelope.id] = envelope;
  if (Object.keys(envelopes).length === 2) arrived();
});
[small, large] = await sql.begin(async (tx) => {
  await tx`INSERT INTO public.shop_order (driver, item) VALUES (${DRIVER}, ${`chair-${run}`})`;
  const [a] = await tx`SELECT outbox.append('shop.live', ${TYPE}, ${{ driver: DRIVER, run }}) AS id`;
  const [b] = await tx`SELECT outbox.append('shop.live', ${TYPE}, ${{ driver: DRIVER, note: "x".repeat(9000) }}) AS id`;
  return [a.id, b.id];
});
let timer;
await Promise.race([both, new Promise((resolve) => { timer = setTimeout(resolve, 30000); })]);
clearTimeout(timer);
await listening.unlisten();
const [{ envelope: full }] = await sql`SELECT outbox.envelope_by_id(${large}) AS envelope`;
checkEnvelopes(envelopes, small, large, full, DRIVER, run, TYPE);

await sql.end();
finish(DRIVER);
