// @ts-check
/**
 * createOutbox: the twin's outbox object, for code written against
 * `@krizaka/outbox` (`outbox.append(tx, ...)`, `runWorker({ outbox, ... })`).
 * The store is the krizaka_outbox extension in the database the queries
 * reach, so the object holds nothing: its settings are the extension's
 * (outbox.batch_size, outbox.lease_seconds, outbox.max_attempts, ...) and
 * its clock is the database's.
 */
import { append } from "./outbox.js";
import { claim, complete, extend, fail, purge, retryDead } from "./pull.js";

/**
 * @typedef {Readonly<{
 *   append: typeof append,
 *   claim: typeof claim,
 *   complete: typeof complete,
 *   fail: typeof fail,
 *   extend: typeof extend,
 *   retryDead: typeof retryDead,
 *   purge: typeof purge,
 * }>} Outbox
 */

/** Why each option of the twin's createOutbox has no counterpart here. */
const TWIN_OPTIONS = {
  clock:
    "the extension reads the database's clock (created_at, available_at, leases); test with availableAt and the outbox settings instead",
  settings:
    "the settings are the extension's: set outbox.batch_size, outbox.lease_seconds, outbox.max_attempts, outbox.backoff_seconds, outbox.backoff_max_seconds and outbox.retention_days with ALTER ROLE or ALTER DATABASE ... SET",
};

/** The objects createOutbox made. */
const outboxes = new WeakSet();

/**
 * Makes the outbox object.  It takes no options: an option of the twin
 * (clock, settings) is refused with the reason, so that a product that
 * switches stores learns where that setting now lives rather than losing
 * it silently.
 *
 * @param {Record<string, never>} [options]
 * @returns {Outbox}
 */
export function createOutbox(options = {}) {
  for (const key of Object.keys(options ?? {})) {
    const why = /** @type {Record<string, string>} */ (TWIN_OPTIONS)[key] ?? "it takes no options";
    throw new TypeError(`createOutbox: no option "${key}": ${why}`);
  }
  const outbox = Object.freeze({ append, claim, complete, fail, extend, retryDead, purge });
  outboxes.add(outbox);
  return outbox;
}

/**
 * Did createOutbox make this object?
 *
 * @param {unknown} value
 * @returns {boolean}
 */
export function isOutbox(value) {
  return typeof value === "object" && value !== null && outboxes.has(value);
}
