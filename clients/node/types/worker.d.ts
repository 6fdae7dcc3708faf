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
export function drainOnce<P = unknown>(options: DrainOptions<P>): Promise<DrainCounts>;
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
export function runWorker<P = unknown>(options: WorkerOptions<P>): Promise<DrainCounts>;
export type Query = import("./query.js").Query;
export type Pool = import("./query.js").Pool;
export type OutboxMessage<P = unknown> = import("./pull.js").OutboxMessage<P>;
/**
 * The options of a round.  P is the payload's type the topic carries, as
 * `deliver` receives it (a promise of the caller: nothing checks it).
 * Durations are in seconds, as the extension's settings are, and named so.
 */
export type DrainOptions<P = unknown> = {
    /**
     * where to claim and record outcomes: a pool-level Query (pool.query.bind(pool)) or the Pool
     */
    query: Query | Pool;
    /**
     * the twin's outbox object; this package's createOutbox() (optional)
     */
    outbox?: Readonly<{
        append: typeof import("./outbox.js").append;
        claim: typeof import("./pull.js").claim;
        complete: typeof complete;
        fail: typeof fail;
        extend: typeof extend;
        retryDead: typeof import("./pull.js").retryDead;
        purge: typeof import("./pull.js").purge;
    }> | undefined;
    /**
     * the lease owner, unique per worker process
     */
    owner: string;
    /**
     * the topic to drain; all topics when omitted
     */
    topic?: string | undefined;
    /**
     * claim size (default: outbox.batch_size)
     */
    batchSize?: number | undefined;
    /**
     * lease length (default: outbox.lease_seconds)
     */
    leaseSeconds?: number | undefined;
    /**
     * delivers one message; throws to retry it later
     */
    deliver: (message: OutboxMessage<P>) => unknown;
    /**
     * when aborted, the message being delivered is finished and no other is started
     */
    signal?: AbortSignal | undefined;
    /**
     * how often to extend the lease while deliver runs (default: a third of the lease)
     */
    heartbeatSeconds?: number | undefined;
};
/**
 * The options of runWorker: those of drainOnce, with a signal to stop it
 * and the wait between rounds that found nothing.
 */
export type WorkerOptions<P = unknown> = {
    query: Query | Pool;
    outbox?: Readonly<{
        append: typeof import("./outbox.js").append;
        claim: typeof import("./pull.js").claim;
        complete: typeof complete;
        fail: typeof fail;
        extend: typeof extend;
        retryDead: typeof import("./pull.js").retryDead;
        purge: typeof import("./pull.js").purge;
    }> | undefined;
    owner: string;
    topic?: string | undefined;
    batchSize?: number | undefined;
    leaseSeconds?: number | undefined;
    deliver: (message: OutboxMessage<P>) => unknown;
    heartbeatSeconds?: number | undefined;
    /**
     * stops the worker
     */
    signal: AbortSignal;
    /**
     * waits between rounds that found nothing; receives idleSeconds, in seconds (default: a timer of the package, ended by the signal)
     */
    sleep?: ((seconds: number) => Promise<unknown>) | undefined;
    /**
     * how long to wait after a round that found nothing, in seconds (default 1)
     */
    idleSeconds?: number | undefined;
    /**
     * reports a failed round (database unreachable...) and keeps the worker going; without it the error ends runWorker
     */
    onError?: ((err: unknown) => unknown) | undefined;
};
/**
 * What a round did.
 */
export type DrainCounts = {
    /**
     * messages leased by the claim
     */
    claimed: number;
    /**
     * delivered and completed
     */
    delivered: number;
    /**
     * deliver threw: recorded with outbox.fail (back off, or dead)
     */
    failed: number;
    /**
     * lease taken by another owner: not delivered, or outcome not recorded
     */
    lost: number;
    /**
     * not started because the signal aborted; handed back with the shortest lease
     */
    skipped: number;
};
import { complete } from "./pull.js";
import { fail } from "./pull.js";
import { extend } from "./pull.js";
