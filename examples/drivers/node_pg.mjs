// krizaka_outbox from node-postgres (npm: pg).
//
// Appends in a business transaction, claims, completes with complete_many,
// fails one message, consumes once, runs a pull worker's loop with
// complete_and_claim, and receives envelopes of a NOTIFY route.
// Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE) to
// a database prepared by setup.sql; prints one line per check and exits 1 on
// any mismatch.
import { randomBytes, randomUUID } from "node:crypto";
import pg from "pg";
import { check, checkEnvelopes, finish, sqlstateOf } from "./checks.mjs";

const DRIVER = "node-postgres";
const TYPE = "evt.shop.order_placed.v1";
const OWNER = `${DRIVER}-worker-1`;
const run = randomBytes(4).toString("hex");
const topic = `shop.${DRIVER}.${run}`;

// node-postgres sends every parameter as untyped text.  A JS array would
// become a PostgreSQL array literal, null SQL NULL and a string its raw text,
// so a payload goes as JSON.stringify(payload) to $3::jsonb: every JSON
// value, null included.
const appendSql = "SELECT outbox.append($1, $2, $3::jsonb) AS id";
const one = async (client, text, values) => Object.values((await client.query(text, values)).rows[0])[0];

const client = new pg.Client();
await client.connect();

// 1. The business row and its events commit together.
const payloads = [{ item: "lamp", qty: 2 }, null, [1, 2, 3], "gift wrap"];
const later = new Date(Math.floor(Date.now() / 1000) * 1000 + 3600 * 1000);
const givenId = randomUUID();
const ids = [];
let delayedId;
await client.query("BEGIN");
try {
  await client.query("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", [DRIVER, `lamp-${run}`]);
  for (const payload of payloads) {
    ids.push(await one(client, appendSql, [topic, TYPE, JSON.stringify(payload)]));
  }
  ids.push(await one(client, "SELECT outbox.append($1, $2, $3::jsonb, $4::uuid)",
    [topic, TYPE, JSON.stringify({ item: "desk" }), givenId]));
  payloads.push({ item: "desk" });
  // append_batch: an array of JSON texts, cast to jsonb[]
  const batch = [{ item: "pen" }, null];
  const { rows } = await client.query("SELECT id FROM outbox.append_batch($1, $2, $3::jsonb[]) AS id",
    [topic, TYPE, batch.map((p) => JSON.stringify(p))]);
  ids.push(...rows.map((r) => r.id));
  payloads.push(...batch);
  // available_at: a Date is sent with its offset, exact in any server zone
  delayedId = await one(client, "SELECT outbox.append($1, $2, $3::jsonb, available_at => $4::timestamptz)",
    [topic, TYPE, JSON.stringify({ item: "later" }), later]);
  await client.query("COMMIT");
} catch (error) {
  await client.query("ROLLBACK");
  throw error;
}
check("append keeps the given id", ids[4], givenId);
check("available_at stored exactly",
  (await one(client, "SELECT available_at FROM outbox.message WHERE id = $1", [delayedId])).getTime(),
  later.getTime());

// 2. A rolled-back business transaction leaves no row and no message.
const rolledId = randomUUID();
await client.query("BEGIN");
await client.query("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", [DRIVER, `umbrella-${run}`]);
await client.query("SELECT outbox.append($1, $2, $3::jsonb, $4::uuid)",
  [topic, TYPE, JSON.stringify({ item: "umbrella" }), rolledId]);
await client.query("ROLLBACK");
check("rolled back: no message",
  await one(client, "SELECT count(*)::int FROM outbox.message WHERE id = $1", [rolledId]), 0);
check("rolled back: no business row",
  await one(client, "SELECT count(*)::int FROM public.shop_order WHERE item = $1", [`umbrella-${run}`]), 0);

// Pitfalls: the value itself instead of JSON.stringify(value).
check("an array as it is fails (a PostgreSQL array literal)",
  await sqlstateOf(client.query(appendSql, [topic, TYPE, [1, 2, 3]])), "22P02");
check("a string as it is fails (not JSON)",
  await sqlstateOf(client.query(appendSql, [topic, TYPE, "gift wrap"])), "22P02");
check("null as it is fails (SQL NULL)",
  await sqlstateOf(client.query(appendSql, [topic, TYPE, null])), "22004");

// 3. Claim: a number for batch_size, rows oldest first; uuid as strings,
//    jsonb parsed.
const claimed = (await client.query(
  "SELECT id, payload, attempts FROM outbox.claim($1, $2, $3::int)", [OWNER, topic, 10])).rows;
check("claim: the due messages in order", claimed.map((r) => r.id), ids);
check("claim: payloads as appended", claimed.map((r) => r.payload), payloads);
check("claim: first attempt", [...new Set(claimed.map((r) => r.attempts))], [1]);

// 4. complete_many with an array of id strings, cast to uuid[]; fail one.
const last = claimed[claimed.length - 1];
check("complete_many", await one(client, "SELECT outbox.complete_many($1::uuid[], $2)",
  [claimed.slice(0, -1).map((r) => r.id), OWNER]), claimed.length - 1);
check("fail", await one(client, "SELECT outbox.fail($1::uuid, $2, $3)",
  [last.id, OWNER, "HTTP 503 from the shipping service"]), true);
check("failed message backs off with its error",
  (await client.query("SELECT attempts, last_error, available_at > now() AS later FROM outbox.message WHERE id = $1",
    [last.id])).rows[0],
  { attempts: 1, last_error: "HTTP 503 from the shipping service", later: true });

// 5. consume_once in the effect's transaction: true once, then false.
async function consume(messageId) {
  await client.query("BEGIN");
  const first = await one(client, "SELECT outbox.consume_once($1, $2::uuid)", ["mailer", messageId]);
  await client.query("COMMIT");
  return first;
}
check("consume_once first", await consume(ids[0]), true);
check("consume_once again", await consume(ids[0]), false);

// 6. topic_stats: bigint counts come as strings and the interval as an
//    object; cast in SQL for numbers.
const raw = (await client.query("SELECT due, oldest_undelivered_age FROM outbox.topic_stats WHERE topic = $1",
  [topic])).rows[0];
check("topic_stats raw: bigint is a string", typeof raw.due, "string");
check("topic_stats raw: interval is an object", typeof raw.oldest_undelivered_age, "object");
const stats = (await client.query(
  `SELECT due::int, delayed::int, leased::int, dead::int, delivered::int,
          extract(epoch FROM oldest_undelivered_age)::float8 AS age_seconds
     FROM outbox.topic_stats WHERE topic = $1`, [topic])).rows[0];
const { age_seconds: ageSeconds, ...counts } = stats;
check("topic_stats counts", counts, { due: 0, delayed: 2, leased: 0, dead: 0, delivered: claimed.length - 1 });
check("topic_stats age in seconds is a number", typeof ageSeconds === "number" && ageSeconds >= 0, true);

// 7. The pull worker's loop: complete_and_claim completes the batch just
//    delivered and claims the next in one call and one commit.
const loop = `${topic}.loop`;
await client.query("BEGIN");
const first = await one(client, appendSql, [loop, TYPE, JSON.stringify({ n: 1 })]);
const second = await one(client, appendSql, [loop, TYPE, JSON.stringify({ n: 2 })]);
await client.query("COMMIT");
let batch = (await client.query("SELECT id FROM outbox.claim($1, $2, $3::int)", [OWNER, loop, 1])).rows.map((r) => r.id);
check("claim one", batch, [first]);
batch = (await client.query("SELECT id FROM outbox.complete_and_claim($1::uuid[], $2, $3, $4::int)",
  [batch, OWNER, loop, 10])).rows.map((r) => r.id);
check("complete_and_claim: the next batch", batch, [second]);
check("complete_many: the last batch",
  await one(client, "SELECT outbox.complete_many($1::uuid[], $2)", [batch, OWNER]), 1);
check("loop: both delivered", await one(client,
  "SELECT count(*)::int FROM outbox.message WHERE topic = $1 AND delivered_at IS NOT NULL", [loop]), 2);

// 8. LISTEN on the channel of the route of 'shop.live'; the background
//    worker notifies after the commit.  A notification over 8000 bytes comes
//    without its payload and with "truncated": true: fetch it with
//    envelope_by_id.
const listener = new pg.Client();
await listener.connect();
const envelopes = {};
let small;
let large;
let arrived;
const both = new Promise((resolve) => { arrived = resolve; });
listener.on("notification", (message) => {
  const envelope = JSON.parse(message.payload);
  if (envelope.id === small || envelope.id === large) envelopes[envelope.id] = envelope;
  if (Object.keys(envelopes).length === 2) arrived();
});
await listener.query("LISTEN shop_events");
await client.query("BEGIN");
await client.query("INSERT INTO public.shop_order (driver, item) VALUES ($1, $2)", [DRIVER, `chair-${run}`]);
small = await one(client, "SELECT outbox.append('shop.live', $1, $2::jsonb)",
  [TYPE, JSON.stringify({ driver: DRIVER, run })]);
large = await one(client, "SELECT outbox.append('shop.live', $1, $2::jsonb)",
  [TYPE, JSON.stringify({ driver: DRIVER, note: "x".repeat(9000) })]);
await client.query("COMMIT");
let timer;
await Promise.race([both, new Promise((resolve) => { timer = setTimeout(resolve, 30000); })]);
clearTimeout(timer);
await listener.end();
const full = await one(client, "SELECT outbox.envelope_by_id($1::uuid)", [large]);
checkEnvelopes(envelopes, small, large, full, DRIVER, run, TYPE);

await client.end();
finish(DRIVER);
