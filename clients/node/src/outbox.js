// @ts-check
/**
 * Writing and consuming with krizaka_outbox from node-postgres: append a
 * message in the caller's transaction, and apply a consumer's effect once
 * per message id (outbox.consume_once in the effect's transaction).
 */

/** @typedef {import("pg").ClientBase} ClientBase */
/** @typedef {import("pg").Pool} Pool */

/**
 * @typedef {object} AppendInput
 * @property {string} topic the stream a worker drains, e.g. "credits"
 * @property {string} type routing key, by convention evt.<module>.<fact>.v<N>
 * @property {unknown} payload any JSON value (null included, undefined not)
 * @property {string} [id] makes the append idempotent: the same fact twice is one message
 * @property {Date} [availableAt] not claimable before this
 */

/**
 * Is this a pg Pool rather than a client?  A Pool hands out clients and
 * counts them; a Client or PoolClient does not.
 *
 * @param {unknown} target
 * @returns {target is Pool}
 */
function isPool(target) {
  return (
    typeof target === "object" &&
    target !== null &&
    typeof (/** @type {any} */ (target).totalCount) === "number" &&
    typeof (/** @type {any} */ (target).connect) === "function"
  );
}

/**
 * The transaction status of a client as the server last reported it: "I"
 * idle, "T" in a transaction, "E" in a failed transaction, or null when the
 * client cannot tell (pg's native client, a pg without getTransactionStatus).
 *
 * @param {ClientBase} client
 * @param {string} caller
 * @returns {string | null}
 */
function transactionStatus(client, caller) {
  if (isPool(client)) {
    throw new TypeError(`${caller} needs a client, not a pool: take a client with pool.connect()`);
  }
  if (typeof client.getTransactionStatus !== "function") {
    return null;
  }
  return client.getTransactionStatus() ?? null;
}

/**
 * JSON text of a payload.  pg would turn a JavaScript array into a
 * PostgreSQL array, so every payload is sent as JSON text.
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
 * message commits or rolls back with the transaction of `client`, which must
 * be inside one (BEGIN done): outside a transaction the message would commit
 * on its own, apart from the work it reports.
 *
 * @param {ClientBase} client a pg Client or PoolClient inside a transaction
 * @param {AppendInput} input
 * @returns {Promise<string>} the message id (the given one, or a new UUIDv7)
 */
export async function append(client, input) {
  /* a client that cannot tell its status is trusted to be in a transaction */
  const status = transactionStatus(client, "append");
  if (status === "I") {
    throw new Error("append must run inside the caller's transaction: call BEGIN first");
  }
  if (status === "E") {
    throw new Error("append: the transaction has failed; roll it back first");
  }
  const { topic, type, payload, id, availableAt } = input;
  if (availableAt !== undefined && !(availableAt instanceof Date)) {
    throw new TypeError("availableAt must be a Date");
  }
  const result = await client.query(
    "SELECT outbox.append($1, $2, $3::jsonb, $4::uuid, $5::timestamptz) AS id",
    [topic, type, payloadText(payload), id ?? null, availableAt ?? null],
  );
  return result.rows[0].id;
}

/**
 * Runs `effect(client)` and outbox.consume_once(consumer, messageId) in one
 * transaction, so that the marker commits exactly when the effect does: a
 * crash leaves neither, and a redelivered message finds the marker and skips
 * the effect.  The marker comes first: a concurrent redelivery of the same
 * message waits for this transaction and then skips (or runs, if this one
 * rolled back).
 *
 * `target` is a Pool (a client is taken and released), an idle client (its
 * own transaction is opened and committed here), or a client inside the
 * caller's transaction (the marker and the effect join it; the caller
 * commits).  An error of the effect rolls back what this call began and is
 * thrown again.
 *
 * @param {Pool | ClientBase} target
 * @param {string} consumer who applies the effect, e.g. "credits"
 * @param {string} messageId the message (envelope) id
 * @param {(client: ClientBase) => unknown} effect the consumer's work, on the given client
 * @returns {Promise<boolean>} true when the effect ran, false when the marker existed
 */
export async function consumeOnce(target, consumer, messageId, effect) {
  if (typeof effect !== "function") {
    throw new TypeError("consumeOnce needs an effect function");
  }
  if (isPool(target)) {
    const client = await target.connect();
    let broken = false;
    try {
      return await consumeInOwnTransaction(client, consumer, messageId, effect);
    } catch (err) {
      /* a client whose ROLLBACK failed may be unusable: do not pool it */
      broken = transactionStatus(client, "consumeOnce") !== "I";
      throw err;
    } finally {
      client.release(broken);
    }
  }
  const status = transactionStatus(target, "consumeOnce");
  if (status === "T") {
    return consumeInTransaction(target, consumer, messageId, effect);
  }
  if (status === "I") {
    return consumeInOwnTransaction(target, consumer, messageId, effect);
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
 * @param {ClientBase} client
 * @param {string} consumer
 * @param {string} messageId
 * @param {(client: ClientBase) => unknown} effect
 * @returns {Promise<boolean>}
 */
async function consumeInTransaction(client, consumer, messageId, effect) {
  const result = await client.query("SELECT outbox.consume_once($1, $2::uuid) AS first", [
    consumer,
    messageId,
  ]);
  if (!result.rows[0].first) {
    return false;
  }
  await effect(client);
  return true;
}

/**
 * consume_once and the effect in a transaction opened and ended here.
 *
 * @param {ClientBase} client an idle client
 * @param {string} consumer
 * @param {string} messageId
 * @param {(client: ClientBase) => unknown} effect
 * @returns {Promise<boolean>}
 */
async function consumeInOwnTransaction(client, consumer, messageId, effect) {
  await client.query("BEGIN");
  let ran;
  try {
    ran = await consumeInTransaction(client, consumer, messageId, effect);
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
