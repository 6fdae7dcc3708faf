// @ts-check
/**
 * A pull worker for krizaka_outbox over node-postgres: drainOnce is one
 * round (claim a batch, deliver it in order, record each outcome) and
 * runWorker loops rounds until its AbortSignal aborts.
 *
 * Every statement is a transaction of its own on the query given (a
 * pool-level Query, or the Pool): the claim commits before anything is
 * delivered, so a worker that dies mid-batch leaves leases that expire, and
 * the messages are claimed again (at least once).
 * While `deliver` runs, a heartbeat extends the lease of the message.
 *
 * Glossary: owner = the lease_owner this worker claims as (unique per
 * process, e.g. "host:pid"); lost = the lease went to another owner, so this
 * worker neither delivers the message nor records its outcome.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as delay } from "node:timers/promises";

import { isOutbox } from "./create-outbox.js";
import { claimBatch, complete, extend, fail } from "./pull.js";

/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").Pool} Pool */
/**
 * @template [P=unknown]
 * @typedef {import("./pull.js").OutboxMessage<P>} OutboxMessage
 */

/**
 * The options of a round.  P is the payload's type the topic carries, as
 * `deliver` receives it (a promise of the caller: nothing checks it).
 * Durations are in seconds, as the extension's settings are, and named so.
 *
 * @template [P=unknown]
 * @typedef {object} DrainOptions
 * @property {Query | Pool} query where to claim and record outcomes: a pool-level Query (pool.query.bind(pool)) or the Pool
 * @property {import("./create-outbox.js").Outbox} [outbox] the twin's outbox object; this package's createOutbox() (optional)
 * @property {string} owner the lease owner, unique per worker process
 * @property {string} [topic] the topic to drain; all topics when omitted
 * @property {number} [batchSize] claim size (default: outbox.batch_size)
 * @property {number} [leaseSeconds] lease length (default: outbox.lease_seconds)
 * @property {(message: OutboxMessage<P>) => unknown} deliver delivers one message; throws to retry it later
 * @property {AbortSignal} [signal] when aborted, the message being delivered is finished and no other is started
 * @property {number} [heartbeatSeconds] how often to extend the lease while deliver runs (default: a third of the lease)
 */

/**
 * The options of runWorker: those of drainOnce, with a signal to stop it
 * and the wait between rounds that found nothing.
 *
 * @template [P=unknown]
 * @typedef {object} WorkerOptions
 * @property {Query | Pool} query
 * @property {import("./create-outbox.js").Outbox} [outbox]
 * @property {string} owner
 * @property {string} [topic]
 * @property {number} [batchSize]
 * @property {number} [leaseSeconds]
 * @property {(message: OutboxMessage<P>) => unknown} deliver
 * @property {number} [heartbeatSeconds]
 * @property {AbortSignal} signal stops the worker
 * @property {(seconds: number) => Promise<unknown>} [sleep] waits between rounds that found nothing; receives idleSeconds, in seconds (default: a timer of the package, ended by the signal)
 * @property {number} [idleSeconds] how long to wait after a round that found nothing, in seconds (default 1)
 * @property {(err: unknown) => unknown} [onError] reports a failed round (database unreachable...) and keeps the worker going; without it the error ends runWorker
 */

/**
 * What a round did.
 *
 * @typedef {object} DrainCounts
 * @property {number} claimed messages leased by the claim
 * @property {number} delivered delivered and completed
 * @property {number} failed deliver threw: recorded with outbox.fail (back off, or dead)
 * @property {number} lost lease taken by another owner: not delivered, or outcome not recorded
 * @property {number} skipped not started because the signal aborted; handed back with the shortest lease
 */

/** The shortest lease the extension grants (outbox.lease_seconds is 10-3600). */
const SHORTEST_LEASE_SECONDS = 10;

/**
 * Creates an empty set of counts.
 *
 * @returns {DrainCounts}
 */
function noCounts() {
  return { claimed: 0, delivered: 0, failed: 0, lost: 0, skipped: 0 };
}

/**
 * Checks the options shared by drainOnce and runWorker.
 *
 * @param {DrainOptions<any>} options
 */
function checkDrainOptions(options) {
  if (!options || !(typeof options.query === "function" || typeof options.query?.query === "function")) {
    throw new TypeError("query must be a pool-level Query (pool.query.bind(pool)) or a pg Pool");
  }
  if (options.outbox !== undefined && !isOutbox(options.outbox)) {
    throw new TypeError("outbox must come from this package's createOutbox()");
  }
  if (typeof options.owner !== "string" || options.owner === "") {
    throw new TypeError("owner must be a non-empty string, unique per worker process");
  }
  if (typeof options.deliver !== "function") {
    throw new TypeError("deliver must be a function");
  }
  const hb = options.heartbeatSeconds;
  if (hb !== undefined && !(typeof hb === "number" && Number.isFinite(hb) && hb > 0)) {
    throw new TypeError("heartbeatSeconds must be a positive number");
  }
}

/**
 * Runs deliver for one message while a timer extends its lease every
 * `periodMs`.  Resolves with the error deliver threw, or undefined.  The
 * heartbeat never overlaps itself and is finished before this returns; a
 * heartbeat that fails is ignored, since the worst it can cause is a lease
 * that expires and a message delivered again, which at-least-once allows.
 *
 * @template P
 * @param {DrainOptions<P>} options
 * @param {OutboxMessage<P>} message
 * @param {number} periodMs
 * @returns {Promise<{ error: unknown } | undefined>}
 */
async function deliverWithHeartbeat(options, message, periodMs) {
  /** @type {Promise<void> | null} */
  let beat = null;
  const timer = setInterval(() => {
    if (beat !== null) {
      return;
    }
    beat = extend(options.query, message.id, options.owner, options.leaseSeconds)
      .then(() => {})
      .catch(() => {})
      .finally(() => {
        beat = null;
      });
  }, periodMs);
  try {
    await options.deliver(message);
    return undefined;
  } catch (err) {
    return { error: err };
  } finally {
    clearInterval(timer);
    if (beat !== null) {
      await beat;
    }
  }
}

/**
 * One round: claims a batch, delivers it in order, and records each outcome
 * as it happens (complete after a delivery, fail with the error text when
 * deliver throws), so that a crash redelivers only what was not recorded.
 * A message whose lease has aged past the heartbeat period before its turn
 * is extended first, and skipped when another owner took it.  When the
 * signal aborts, the message being delivered is finished, the rest of the
 * batch is handed back (leases cut to the shortest lease), and the round
 * ends.  Errors of the database are thrown; the claimed messages then come
 * back when their leases expire.
 *
 * @template [P=unknown]
 * @param {DrainOptions<P>} options
 * @returns {Promise<DrainCounts>}
 */
export async function drainOnce(options) {
  checkDrainOptions(options);
  const { query, owner, signal } = options;
  const counts = noCounts();
  if (signal?.aborted) {
    return counts;
  }

  /* leases start during the claim, so their age is counted from before it */
  const claimStart = performance.now();
  const { messages, leaseLeft } = await claimBatch(query, options);
  counts.claimed = messages.length;
  if (messages.length === 0) {
    return counts;
  }

  const leaseSeconds = options.leaseSeconds ?? Math.max(1, Math.round(leaseLeft));
  const periodMs = (options.heartbeatSeconds ?? leaseSeconds / 3) * 1000;

  for (let i = 0; i < messages.length; i++) {
    const message = messages[i];

    if (signal?.aborted) {
      counts.skipped = messages.length - i;
      await handBack(query, owner, messages.slice(i));
      break;
    }

    /*
     * A message that waited for its turn gets a fresh lease before it
     * starts; if another owner took it meanwhile, it is theirs.  The
     * heartbeat then beats once a period, so the lease never ages past two
     * periods (two thirds of it by default).
     */
    if (performance.now() - claimStart >= periodMs &&
        !(await extend(query, message.id, owner, options.leaseSeconds))) {
      counts.lost++;
      continue;
    }

    const outcome = await deliverWithHeartbeat(options, message, periodMs);

    if (outcome === undefined) {
      counts[(await complete(query, message.id, owner)) ? "delivered" : "lost"]++;
    } else {
      counts[(await fail(query, message.id, owner, outcome.error)) ? "failed" : "lost"]++;
    }
  }
  return counts;
}

/**
 * Hands back claimed messages that will not be delivered in this round:
 * their leases are cut to the shortest lease so that any worker claims them
 * again soon, instead of after the whole lease.  The extension has no
 * "release", and this keeps the attempt the claim counted.  Best effort: a
 * lease that cannot be cut simply runs out, so errors are not thrown from
 * a stopping worker.
 *
 * @param {Query | Pool} query
 * @param {string} owner
 * @param {OutboxMessage<unknown>[]} messages
 */
async function handBack(query, owner, messages) {
  for (const message of messages) {
    await extend(query, message.id, owner, SHORTEST_LEASE_SECONDS).catch(() => false);
  }
}

/**
 * Waits until the signal aborts.  Returns the promise and a function that
 * removes the listener.
 *
 * @param {AbortSignal} signal
 * @returns {{ aborted: Promise<void>, dispose: () => void }}
 */
function whenAborted(signal) {
  /** @type {() => void} */
  let listener = () => {};
  const aborted = new Promise((resolve) => {
    listener = () => resolve(undefined);
    signal.addEventListener("abort", listener, { once: true });
  });
  return { aborted, dispose: () => signal.removeEventListener("abort", listener) };
}

/**
 * Waits `seconds` or until the signal aborts: runWorker's wait when the
 * caller passes no sleep of its own.
 *
 * @param {number} seconds
 * @param {AbortSignal} signal
 * @returns {Promise<void>}
 */
async function timerSleep(seconds, signal) {
  await delay(seconds * 1000, undefined, { signal }).catch(() => {
    /* aborted: the worker stops */
  });
}

/**
 * Runs rounds until the signal aborts: drainOnce, then, when a round claimed
 * nothing, a wait of `idleSeconds`: `sleep(idleSeconds)` when a sleep is
 * given (it receives seconds), a timer of the package otherwise.  An abort
 * during a delivery lets that message finish and starts no other; an abort
 * during the wait ends it at once, whether or not the passed sleep listens
 * to the signal.  Resolves with the counts of all rounds once stopped.
 *
 * @template [P=unknown]
 * @param {WorkerOptions<P>} options
 * @returns {Promise<DrainCounts>}
 */
export async function runWorker(options) {
  checkDrainOptions(options);
  const { signal, sleep, onError } = options;
  if (!(signal instanceof AbortSignal)) {
    throw new TypeError("signal must be an AbortSignal: it is how the worker is stopped");
  }
  if (sleep !== undefined && typeof sleep !== "function") {
    throw new TypeError("sleep must be a function (seconds) => Promise, or left out");
  }
  const idleSeconds = options.idleSeconds ?? 1;
  if (!(typeof idleSeconds === "number" && Number.isFinite(idleSeconds) && idleSeconds >= 0)) {
    throw new TypeError("idleSeconds must be a number of seconds, 0 or more");
  }

  const totals = noCounts();
  const stop = whenAborted(signal);
  try {
    while (!signal.aborted) {
      let idle = true;
      try {
        const counts = await drainOnce(options);
        for (const key of /** @type {(keyof DrainCounts)[]} */ (Object.keys(totals))) {
          totals[key] += counts[key];
        }
        idle = counts.claimed === 0;
      } catch (err) {
        if (onError === undefined) {
          throw err;
        }
        onError(err);
      }
      if (idle && !signal.aborted) {
        await Promise.race([
          sleep === undefined ? timerSleep(idleSeconds, signal) : sleep(idleSeconds),
          stop.aborted,
        ]);
      }
    }
  } finally {
    stop.dispose();
  }
  return totals;
}
