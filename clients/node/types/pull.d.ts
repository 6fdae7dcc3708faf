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
export function toNumber(value: unknown, column: string): number;
/**
 * Claims a batch and tells how long its leases were when the claim
 * returned (seconds, by the database's clock).
 *
 * @param {Query | Pool} query
 * @param {ClaimOptions} options
 * @returns {Promise<{ messages: OutboxMessage<any>[], leaseLeft: number }>}
 */
export function claimBatch(query: Query | Pool, options: ClaimOptions): Promise<{
    messages: OutboxMessage<any>[];
    leaseLeft: number;
}>;
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
export function claim<P = unknown>(query: Query | Pool, options: ClaimOptions): Promise<OutboxMessage<P>[]>;
/**
 * Marks a message delivered; false when `owner` does not hold its lease
 * (another worker took it) or it is already delivered or dead.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @param {string} owner
 * @returns {Promise<boolean>}
 */
export function complete(query: Query | Pool, id: string, owner: string): Promise<boolean>;
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
export function completeMany(query: Query | Pool, ids: string[], owner: string): Promise<number>;
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
export function completeAndClaim<P = unknown>(query: Query | Pool, ids: string[], options: ClaimOptions): Promise<OutboxMessage<P>[]>;
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
export function fail(query: Query | Pool, id: string, owner: string, error: unknown): Promise<boolean>;
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
export function extend(query: Query | Pool, id: string, owner: string, leaseSeconds?: number): Promise<boolean>;
/**
 * Gives a dead message another life (attempts 0, available now); false when
 * the message is not dead.  Needs the operators' grant of retry_dead.
 *
 * @param {Query | Pool} query
 * @param {string} id
 * @returns {Promise<boolean>}
 */
export function retryDead(query: Query | Pool, id: string): Promise<boolean>;
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
export function purge(query: Query | Pool, options?: {
    olderThanSeconds?: number;
    maxRows?: number;
}): Promise<number>;
/**
 * The text to store for a failed delivery: the error's message, or its
 * String() form; never empty (outbox.fail refuses an empty text) and
 * without NUL characters (PostgreSQL text cannot hold them).
 *
 * @param {unknown} err
 * @returns {string}
 */
export function errorText(err: unknown): string;
export type Query = import("./query.js").Query;
export type Pool = import("./query.js").Pool;
export type Envelope<P = import("zod").JSONType> = import("./envelope.js").Envelope<P>;
/**
 * A claimed message, as `deliver` receives it: every column of
 * outbox.message (the row outbox.claim returns), in camelCase, with the
 * envelope.  `event_type` is `type`, the envelope's name for it.  P is the
 * payload's type: a promise of the caller (see claim), not a check.
 */
export type OutboxMessage<P = unknown> = {
    /**
     * the message id (uuid)
     */
    id: string;
    topic: string;
    /**
     * the event type (routing key): the column event_type
     */
    type: string;
    /**
     * the JSON payload
     */
    payload: P;
    /**
     * when it was appended (created_at)
     */
    createdAt: Date;
    /**
     * when it became claimable (available_at): the append's availableAt, or after a failure the end of its backoff
     */
    availableAt: Date;
    /**
     * claims so far, this one included
     */
    attempts: number;
    /**
     * lease expiry given by the claim (leased_until)
     */
    leasedUntil: Date;
    /**
     * the owner that holds the lease: the claim's owner (lease_owner)
     */
    leaseOwner: string;
    /**
     * when it was delivered (delivered_at): null for a claimed message
     */
    deliveredAt: Date | null;
    /**
     * when it became dead (dead_at): null for a claimed message
     */
    deadAt: Date | null;
    /**
     * the error text of the last failed attempt, null if none failed (last_error)
     */
    lastError: string | null;
    /**
     * its position in the stream (seq, bigint; extension 1.2)
     */
    seq: number;
    /**
     * whether it waits outside the stream, after a backoff or a delayed append (extension 1.2)
     */
    deferred: boolean;
    /**
     * the append's ordering key, null without one (ordering_key; extension 1.2)
     */
    orderingKey: string | null;
    /**
     * the wire envelope, as outbox.envelope built it
     */
    envelope: unknown extends P ? Envelope : Envelope<P>;
};
export type ClaimOptions = {
    /**
     * the lease owner, unique per worker process
     */
    owner: string;
    /**
     * the topic to claim from; all topics when omitted
     */
    topic?: string | undefined;
    /**
     * claim size (default: the setting outbox.batch_size)
     */
    batchSize?: number | undefined;
    /**
     * lease length (default: the setting outbox.lease_seconds)
     */
    leaseSeconds?: number | undefined;
};
