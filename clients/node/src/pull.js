// @ts-check
/**
 * The pull side of krizaka_outbox, one statement each: claim a batch,
 * complete or fail a message as the lease's owner, extend a lease, give a
 * dead message another life, purge.  Each runs as a transaction of its own
 * on the Query given (pool.query.bind(pool), or the Pool itself): a claim
 * must commit before anything is delivered.
 *
 * Glossary: owner = the lease_owner a worker claims as (unique per process,
 * e.g. "host:pid"); an outcome (complete, fail, extend) acts only while the
 * owner holds the lease, and reports false when another owner took it.
 */
import { toQuery } from "./query.js";

/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").Pool} Pool */
/**
 * @template [P=import("./envelope.js").JsonValue]
 * @typedef {import("./envelope.js").Envelope<P>} Envelope
 */

/**
 * A claimed message, as `deliver` receives it: every column of
 * outbox.message (the row outbox.claim returns), in camelCase, with the
 * envelope.  `event_type` is `type`, the envelope's name for it.  P is the
 * payload's type: a promise of the caller (see claim), not a check.
 *
 * @template [P=unknown]
 * @typedef {object} OutboxMessage
 * @property {string} id the message id (uuid)
 * @property {string} topic
 * @property {string} type the event type (routing key): the column event_type
 * @property {P} payload the JSON payload
 * @property {Date} createdAt when it was appended (created_at)
 * @property {Date} availableAt when it became claimable (available_at): the append's availableAt, or after a failure the end of its backoff
 * @property {number} attempts claims so far, this one included
 * @property {Date} leasedUntil lease expiry given by the claim (leased_until)
 * @property {string} leaseOwner the owner that holds the lease: the claim's owner (lease_owner)
 * @property {Date | null} deliveredAt when it was delivered (delivered_at): null for a claimed message
 * @property {Date | null} deadAt when it became dead (dead_at): null for a claimed message
 * @property {string | null} lastError the error text of the last failed attempt, null if none failed (last_error)
 * @property {number} seq its position in the stream (seq, bigint; extension 1.2)
 * @property {boolean} deferred whether it waits outside the stream, after a backoff or a delayed append (extension 1.2)
 * @property {string | null} orderingKey the append's ordering key, null without one (ordering_key; extension 1.2)
 * @property {unknown extends P ? Envelope : Envelope<P>} envelope the wire envelope, as outbox.envelope built it
 */

/**
 * @typedef {object} ClaimOptions
 * @property {string} owner the lease owner, unique per worker process
 * @property {string} [topic] the topic to claim from; all topics when omitted
 * @property {number} [batchSize] claim size (default: the setting outbox.batch_size)
 * @property {number} [leaseSeconds] lease length (default: the setting outbox.lease_seconds)
 */

/** The text fail stores when an error has no text of its own. */
const NO_ERROR_TEXT = "delivery failed without an error message";

/*
 * The claim.  The rows of a set-returning function in FROM come back in the
 * order it returns them, which is the claim order.  m.* is every column of
 * outbox.message, those of the installed version (seq, deferred and
 * ordering_key came with 1.2).  lease_left tells the lease length when the
 * caller left it to the outbox.lease_seconds setting.
 */
const CLAIMED_COLUMNS = `m.*, outbox.envelope(m) AS envelope,
       extract(epoch FROM m.leased_until - clock_timestamp())::float8 AS lease_left`;
const CLAIM_SQL = `SELECT ${CLAIMED_COLUMNS} FROM outbox.claim($1, $2, $3, $4) AS m`;

/* The same after completing the batch before, in one statement */
const COMPLETE_AND_CLAIM_SQL = `SELECT ${CLAIMED_COLUMNS}
  FROM outbox.complete_and_claim($5::uuid[], $1, $2, $3, $4) AS m`;

/**
 * A bigint (or count) as a number: pg returns bigint as text unless told
 * otherwise (a type parser may make it a BigInt, or a number).  Every value
 * the outbox counts fits a double exactly; one that does not is an error
 * rather than a rounded number.
 *
 * @param {unknown} value
 * @param {string} column named in the error
 * @returns {number}
 */
export function toNumber(value, column) {
  const n = typeof value === "number" ? value : Number(value);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`${column} = ${String(value)} is not an integer a JavaScript number holds exactly`);
  }
  return n;
}

/**
 * The claimed rows as messages.  seq, deferred and ordering_key are null on
 * an extension older than 1.2, which has no such columns.
 *
 * @param {any[]} rows
 * @returns {{ messages: OutboxMessage<any>[], leaseLeft: number }}
 */
function claimedMessages(rows) {
  return {
    messages: rows.map((row) => /** @type {OutboxMessage<any>} */ ({
      id: row.id,
      topic: row.topic,
      type: row.event_type,
      payload: row.payload,
      createdAt: row.created_at,
      availableAt: row.available_at,
      attempts: row.attempts,
      leasedUntil: row.leased_until,
      leaseOwner: row.lease_owner,
      deliveredAt: row.delivered_at,
      deadAt: row.dead_at,
      lastError: row.last_error,
      seq: row.seq === undefined || row.seq === null ? null : toNumber(row.seq, "seq"),
      deferred: row.deferred ?? null,
      orderingKey: row.ordering_key ?? null,
      envelope: row.envelope,
    })),
    leaseLeft: rows.length === 0 ? 0 : rows[0].lease_left,
  };
}

/**
 * Claims a batch and tells how long its leases were when the claim
 * returned (seconds, by the database's clock).
 *
 * @param {Query | Pool} query
 * @param {ClaimOptions} options
 * @returns {Promise<{ messages: OutboxMessage<any>[], leaseLeft: number }>}
 */
export async function claimBatch(query, options) {
  const { rows } = await toQuery(query, "query")(CLAIM_SQL, [
    options.owner,
    options.topic ?? null,
    options.batchSize ?? null,
    options.leaseSeconds ?? null,
  ]);
  return claimedMessages(rows);
}

/**
 * Leases up to a batch of due messages for `owner`, oldest first, and
 * returns them in that order (outbox.claim, committed when it returns).
 * P, the payload's type, is the caller's word for what the topic carries
 * (`claim<Credit>(pool, { owner, topic: "credits" })`): nothing checks it.
 *
 * @template [P=unknown]
 * @param {Query | Pool} query
 * @param {ClaimOptions} options
 * @returns {Promise<OutboxMessage<P>[]>}
 */
export async function claim(query, options) {
  return (await claimBatch(query, options)).messages;
}

/**
 * Marks a message delivered; false when `owner` does not hold its lease
 * (another worker took it) or it is already delivered or dead.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @param {string} owner
 * @returns {Promise<boolean>}
 */
export async function complete(query, id, owner) {
  const { rows } = await toQuery(query, "query")("SELECT outbox.complete($1::uuid, $2) AS done", [id, owner]);
  return rows[0].done === true;
}

/**
 * Marks delivered the messages of `ids` whose lease `owner` holds, in one
 * statement (outbox.complete_many); returns how many it marked.  The others
 * (another owner took them, or they are finished) are left as they are.
 *
 * @param {Query | Pool} query
 * @param {string[]} ids
 * @param {string} owner
 * @returns {Promise<number>}
 */
export async function completeMany(query, ids, owner) {
  const { rows } = await toQuery(query, "query")("SELECT outbox.complete_many($1::uuid[], $2) AS done", [
    checkIds(ids, "completeMany"),
    owner,
  ]);
  return rows[0].done;
}

/**
 * Marks delivered the messages of `ids` that `options.owner` holds and
 * claims the next batch, in one statement and one transaction
 * (outbox.complete_and_claim): the loop of a pull worker that delivers a
 * whole batch before it records it, with one round trip and one commit per
 * batch.  Pass the ids of the messages delivered (none the first time);
 * a failed one goes to fail first.
 *
 * @template [P=unknown]
 * @param {Query | Pool} query
 * @param {string[]} ids
 * @param {ClaimOptions} options
 * @returns {Promise<OutboxMessage<P>[]>}
 */
export async function completeAndClaim(query, ids, options) {
  const { rows } = await toQuery(query, "query")(COMPLETE_AND_CLAIM_SQL, [
    options.owner,
    options.topic ?? null,
    options.batchSize ?? null,
    options.leaseSeconds ?? null,
    checkIds(ids, "completeAndClaim"),
  ]);
  return claimedMessages(rows).messages;
}

/**
 * The ids argument, checked: an array of strings.
 *
 * @param {unknown} ids
 * @param {string} fn
 * @returns {string[]}
 */
function checkIds(ids, fn) {
  if (!Array.isArray(ids) || !ids.every((id) => typeof id === "string")) {
    throw new TypeError(`${fn}: ids must be an array of message ids (strings)`);
  }
  return ids;
}

/**
 * Records a failed delivery with the error's text (see errorText): the
 * message backs off, or is dead after the last allowed attempt.  False when
 * `owner` does not hold its lease.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @param {string} owner
 * @param {unknown} error what deliver threw
 * @returns {Promise<boolean>}
 */
export async function fail(query, id, owner, error) {
  const { rows } = await toQuery(query, "query")("SELECT outbox.fail($1::uuid, $2, $3) AS done", [
    id,
    owner,
    errorText(error),
  ]);
  return rows[0].done === true;
}

/**
 * Pushes the lease of a message to now + leaseSeconds (default: the setting
 * outbox.lease_seconds); false when `owner` no longer holds it.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @param {string} owner
 * @param {number} [leaseSeconds]
 * @returns {Promise<boolean>}
 */
export async function extend(query, id, owner, leaseSeconds) {
  const { rows } = await toQuery(query, "query")("SELECT outbox.extend($1::uuid, $2, $3) AS held", [
    id,
    owner,
    leaseSeconds ?? null,
  ]);
  return rows[0].held === true;
}

/**
 * Gives a dead message another life (attempts 0, available now); false when
 * the message is not dead.  Needs the operators' grant of retry_dead.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @returns {Promise<boolean>}
 */
export async function retryDead(query, id) {
  const { rows } = await toQuery(query, "query")("SELECT outbox.retry_dead($1::uuid) AS revived", [id]);
  return rows[0].revived === true;
}

/**
 * Deletes delivered and dead messages finished more than `olderThanSeconds`
 * ago (default: the setting outbox.retention_days), at most `maxRows` of
 * them, and the consume-once markers older than that; returns the number of
 * messages deleted.  Needs the operators' grant of purge.
 *
 * @param {Query | Pool} query
 * @param {{ olderThanSeconds?: number, maxRows?: number }} [options]
 * @returns {Promise<number>}
 */
export async function purge(query, options = {}) {
  /* make_interval is strict: no olderThanSeconds gives NULL, the retention */
  const { rows } = await toQuery(query, "query")(
    "SELECT outbox.purge(make_interval(secs => $1::float8), $2::bigint)::float8 AS purged",
    [options.olderThanSeconds ?? null, options.maxRows ?? null],
  );
  return rows[0].purged;
}

/**
 * The text to store for a failed delivery: the error's message, or its
 * String() form; never empty (outbox.fail refuses an empty text) and
 * without NUL characters (PostgreSQL text cannot hold them).
 *
 * @param {unknown} err
 * @returns {string}
 */
export function errorText(err) {
  let text = "";
  if (err instanceof Error && typeof err.message === "string" && err.message !== "") {
    text = err.message;
  } else {
    try {
      text = String(err);
    } catch {
      text = "";
    }
  }
  text = text.replace(/\0/g, "");
  return text.trim() === "" ? NO_ERROR_TEXT : text;
}
