// @ts-check
/**
 * Writing and consuming with krizaka_outbox: append a message in the
 * caller's transaction, and apply a consumer's effect once per message id
 * (outbox.consume_once in the effect's transaction).
 *
 * The transaction (`tx`) is what the caller's code already has: a pg
 * Client or PoolClient after BEGIN, or the twin's Query (a function with
 * pg's query signature) of a transaction.
 */
import { isPool, toQuery, transactionStatus } from "./query.js";

/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").Client} Client */
/** @typedef {import("./query.js").Pool} Pool */

/**
 * What to append.  P is the payload's type (`append<Credit>(tx, ...)`
 * checks the payload against it); any JSON value when not given.
 *
 * @template [P=unknown]
 * @typedef {object} AppendInput
 * @property {string} topic the stream a worker drains, e.g. "credits"
 * @property {string} type routing key, by convention evt.<module>.<fact>.v<N>
 * @property {P} payload any JSON value (null included, undefined not)
 * @property {string} [id] makes the append idempotent: the same fact twice is one message
 * @property {Date} [availableAt] not claimable before this
 * @property {string} [orderingKey] delivered in order with the other messages of its topic and key (extension 1.2)
 */

/**
 * JSON text of a payload.  pg would turn a JavaScript array into a
 * PostgreSQL array and null into SQL NULL, so every payload is sent as JSON
 * text.
 *
 * @param {unknown} payload
 * @returns {string}
 */
function payloadText(payload) {
  const text = payload === undefined ? undefined : JSON.stringify(payload);
  if (text === undefined) {
    throw new TypeError("payload must be a JSON value (undefined, functions and symbols are not)");
  }
  return text;
}

/**
 * Appends one message in the caller's transaction and returns its id.  The
 * message commits or rolls back with the transaction of `tx`: a client
 * known to be outside a transaction (idle, or a Pool) is refused, because
 * its message would commit on its own, apart from the work it reports.  A
 * Query function cannot tell, and is trusted to be a transaction's.
 *
 * @template [P=unknown]
 * @param {Client | Query} tx a pg Client or PoolClient after BEGIN, or a transaction's Query
 * @param {AppendInput<P>} input
 * @returns {Promise<string>} the message id (the given one, or a new UUIDv7)
 */
export async function append(tx, input) {
  if (isPool(tx)) {
    throw new TypeError("append needs the caller's transaction, not a pool: take a client with pool.connect() and BEGIN");
  }
  const status = transactionStatus(tx);
  if (status === "I") {
    throw new Error("append must run inside the caller's transaction: call BEGIN first");
  }
  if (status === "E") {
    throw new Error("append: the transaction has failed; roll it back first");
  }
  const { topic, type, payload, id, availableAt, orderingKey } = input;
  if (availableAt !== undefined && !(availableAt instanceof Date)) {
    throw new TypeError("availableAt must be a Date");
  }
  if (orderingKey !== undefined && typeof orderingKey !== "string") {
    throw new TypeError("orderingKey must be a string");
  }
  const params = [topic, type, payloadText(payload), id ?? null, availableAt ?? null];
  // without a key, the call that versions before 1.2 have too
  const { rows } = await toQuery(tx, "append's tx")(
    orderingKey === undefined
      ? "SELECT outbox.append($1, $2, $3::jsonb, $4::uuid, $5::timestamptz) AS id"
      : "SELECT outbox.append($1, $2, $3::jsonb, $4::uuid, $5::timestamptz, ordering_key => $6) AS id",
    orderingKey === undefined ? params : [...params, orderingKey],
  );
  return rows[0].id;
}

/**
 * The effect's argument: the client a Pool lent, or the tx itself.
 *
 * @template {Query | Client | Pool} T
 * @typedef {T extends Pool ? Client : T} EffectTx
 */

/**
 * Runs outbox.consume_once(consumer, id) and then `effect(tx)` in one
 * transaction, so that the marker commits exactly when the effect does: a
 * crash leaves neither, and a redelivered message finds the marker and skips
 * the effect.  The marker comes first: a concurrent redelivery of the same
 * message waits for this transaction and then skips (or runs, if this one
 * rolled back).
 *
 * `tx` is a transaction's Query or a client inside the caller's transaction
 * (the marker and the effect join it; the caller commits), an idle client
 * (its own transaction is opened and committed here), or a Pool (a client is
 * taken, used so, and released; the effect gets that client).  An error of
 * the effect rolls back what this call began and is thrown again.
 *
 * @template {Query | Client | Pool} T
 * @overload
 * @param {T} tx
 * @param {string} consumer who applies the effect, e.g. "credits"
 * @param {string} id the message (envelope) id
 * @param {(tx: EffectTx<T>) => unknown} effect the consumer's work, in the marker's transaction
 * @returns {Promise<boolean>} true when the effect ran, false when the marker existed
 */
/**
 * The form of the twin, `consumeOnce(tx, consumer, id, now, effect)`: the
 * same, with the caller's clock reading `now`, which must be a valid Date
 * and is not stored (the marker's processed_at, which purge ages, is the
 * database transaction's now()).  Kept for code written so; new code leaves
 * `now` out.
 *
 * @template {Query | Client | Pool} T
 * @overload
 * @param {T} tx
 * @param {string} consumer who applies the effect, e.g. "credits"
 * @param {string} id the message (envelope) id
 * @param {Date} now the caller's clock; checked, not stored
 * @param {(tx: EffectTx<T>) => unknown} effect the consumer's work, in the marker's transaction
 * @returns {Promise<boolean>} true when the effect ran, false when the marker existed
 */
/**
 * @param {Query | Client | Pool} tx
 * @param {string} consumer
 * @param {string} id
 * @param {Date | ((tx: any) => unknown)} nowOrEffect
 * @param {(tx: any) => unknown} [effect]
 * @returns {Promise<boolean>}
 */
export async function consumeOnce(tx, consumer, id, nowOrEffect, effect) {
  /* four arguments: (tx, consumer, id, effect); five: the twin's form with now */
  if (arguments.length < 5) {
    if (typeof nowOrEffect !== "function") {
      throw new TypeError("consumeOnce(tx, consumer, id, effect): effect must be a function");
    }
    effect = nowOrEffect;
  } else {
    const now = nowOrEffect;
    if (!(now instanceof Date) || Number.isNaN(now.getTime())) {
      throw new TypeError("consumeOnce(tx, consumer, id, now, effect): now must be a valid Date");
    }
    if (typeof effect !== "function") {
      throw new TypeError("consumeOnce(tx, consumer, id, now, effect): effect must be a function");
    }
  }
  const run = /** @type {(tx: Query | Client) => unknown} */ (effect);
  if (isPool(tx)) {
    const client = await tx.connect();
    let broken = false;
    try {
      return await consumeInOwnTransaction(client, consumer, id, run);
    } catch (err) {
      /* a client whose ROLLBACK failed may be unusable: do not pool it */
      broken = transactionStatus(client) !== "I";
      throw err;
    } finally {
      client.release(broken);
    }
  }
  if (typeof tx === "function") {
    return consumeInTransaction(tx, consumer, id, run);
  }
  const client = /** @type {Client} */ (tx);
  const status = transactionStatus(client);
  if (status === "T") {
    return consumeInTransaction(client, consumer, id, run);
  }
  if (status === "I") {
    return consumeInOwnTransaction(client, consumer, id, run);
  }
  if (status === "E") {
    throw new Error("consumeOnce: the transaction has failed; roll it back first");
  }
  /* opening a transaction inside the caller's would commit the caller's work */
  throw new TypeError(
    "consumeOnce cannot tell whether this client is inside a transaction (no getTransactionStatus): pass the Pool",
  );
}

/**
 * consume_once and the effect inside a transaction that is already open.
 *
 * @param {Query | Client} tx
 * @param {string} consumer
 * @param {string} id
 * @param {(tx: Query | Client) => unknown} effect
 * @returns {Promise<boolean>}
 */
async function consumeInTransaction(tx, consumer, id, effect) {
  const { rows } = await toQuery(tx, "consumeOnce's tx")(
    "SELECT outbox.consume_once($1, $2::uuid) AS first",
    [consumer, id],
  );
  if (!rows[0].first) {
    return false;
  }
  await effect(tx);
  return true;
}

/**
 * consume_once and the effect in a transaction opened and ended here.
 *
 * @param {Client} client an idle client
 * @param {string} consumer
 * @param {string} id
 * @param {(tx: Query | Client) => unknown} effect
 * @returns {Promise<boolean>}
 */
async function consumeInOwnTransaction(client, consumer, id, effect) {
  await client.query("BEGIN");
  let ran;
  try {
    ran = await consumeInTransaction(client, consumer, id, effect);
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {
      /* the connection is gone or broken: the server rolls back by itself */
    });
    throw err;
  }
  /*
   * An effect that caught an error of its own statement leaves a failed
   * transaction, which COMMIT silently rolls back: say so rather than
   * report an effect that did not happen.
   */
  const commit = await client.query("COMMIT");
  if (commit.command === "ROLLBACK") {
    throw new Error("consumeOnce: the transaction failed and was rolled back, so the effect was not applied");
  }
  return ran;
}
