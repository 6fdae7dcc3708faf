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
export function append<P = unknown>(tx: Client | Query, input: AppendInput<P>): Promise<string>;
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
export function consumeOnce<T extends Query | Client | Pool>(tx: T, consumer: string, id: string, effect: (tx: EffectTx<T>) => unknown): Promise<boolean>;
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
export function consumeOnce<T extends Query | Client | Pool>(tx: T, consumer: string, id: string, now: Date, effect: (tx: EffectTx<T>) => unknown): Promise<boolean>;
export type Query = import("./query.js").Query;
export type Client = import("./query.js").Client;
export type Pool = import("./query.js").Pool;
/**
 * What to append.  P is the payload's type (`append<Credit>(tx, ...)`
 * checks the payload against it); any JSON value when not given.
 */
export type AppendInput<P = unknown> = {
    /**
     * the stream a worker drains, e.g. "credits"
     */
    topic: string;
    /**
     * routing key, by convention evt.<module>.<fact>.v<N>
     */
    type: string;
    /**
     * any JSON value (null included, undefined not)
     */
    payload: P;
    /**
     * makes the append idempotent: the same fact twice is one message
     */
    id?: string | undefined;
    /**
     * not claimable before this
     */
    availableAt?: Date | undefined;
    /**
     * delivered in order with the other messages of its topic and key (extension 1.2)
     */
    orderingKey?: string | undefined;
};
/**
 * The effect's argument: the client a Pool lent, or the tx itself.
 */
export type EffectTx<T extends Query | Client | Pool> = T extends Pool ? Client : T;
