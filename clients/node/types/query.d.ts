/**
 * What this package needs of a driver, and how it tells the kinds of
 * target apart.  The shapes are structural, so that a node-postgres Pool,
 * Client or PoolClient fits them, and so does the twin's Query: a function
 * with pg's query(text, values) signature, such as pool.query.bind(pool) or
 * the Query a transaction helper hands out.
 *
 * Glossary: Query = such a function; Client = an object with query() that
 * may report its transaction status; Pool = an object that hands out
 * clients (connect) and counts them (totalCount).
 */
/**
 * What a statement returns, as far as this package reads it.
 *
 * @typedef {object} QueryResult
 * @property {any[]} rows
 * @property {string | null} [command] the command tag (COMMIT reports ROLLBACK when the transaction had failed)
 */
/**
 * The twin's Query: runs one statement with parameters ($1, $2...).
 *
 * @typedef {(text: string, values?: unknown[]) => Promise<QueryResult>} Query
 */
/**
 * A connection: a pg Client or PoolClient.  getTransactionStatus (pg 8.21
 * and later) says "I" (idle), "T" (in a transaction) or "E" (in a failed
 * one); without it, append trusts the client to be in a transaction and
 * consumeOnce refuses it (it could not tell whether to open one).
 *
 * @typedef {{
 *   query(text: string, values?: unknown[]): Promise<QueryResult>,
 *   getTransactionStatus?(): string | null,
 * }} Client
 */
/**
 * A client taken from a pool, to be released.
 *
 * @typedef {Client & { release(err?: boolean | Error): void }} PoolClient
 */
/**
 * A pg Pool: runs each statement on some connection, hands out clients.
 *
 * @typedef {{
 *   query(text: string, values?: unknown[]): Promise<QueryResult>,
 *   connect(): Promise<PoolClient>,
 *   totalCount: number,
 * }} Pool
 */
/**
 * Is this a Pool rather than a client?  A Pool hands out clients and counts
 * them; a Client or PoolClient does not.
 *
 * @param {unknown} target
 * @returns {target is Pool}
 */
export function isPool(target: unknown): target is Pool;
/**
 * The Query of a target: the function itself, or the query method of a
 * Pool or Client bound to it.
 *
 * @param {Query | Client | Pool} target
 * @param {string} what named in the error when target runs no statements
 * @returns {Query}
 */
export function toQuery(target: Query | Client | Pool, what: string): Query;
/**
 * The transaction status of a client as the server last reported it: "I"
 * idle, "T" in a transaction, "E" in a failed transaction, or null when it
 * cannot tell (a Query function, pg's native client).
 *
 * @param {Query | Client} target
 * @returns {string | null}
 */
export function transactionStatus(target: Query | Client): string | null;
/**
 * What a statement returns, as far as this package reads it.
 */
export type QueryResult = {
    rows: any[];
    /**
     * the command tag (COMMIT reports ROLLBACK when the transaction had failed)
     */
    command?: string | null | undefined;
};
/**
 * The twin's Query: runs one statement with parameters ($1, $2...).
 */
export type Query = (text: string, values?: unknown[]) => Promise<QueryResult>;
/**
 * A connection: a pg Client or PoolClient.  getTransactionStatus (pg 8.21
 * and later) says "I" (idle), "T" (in a transaction) or "E" (in a failed
 * one); without it, append trusts the client to be in a transaction and
 * consumeOnce refuses it (it could not tell whether to open one).
 */
export type Client = {
    query(text: string, values?: unknown[]): Promise<QueryResult>;
    getTransactionStatus?(): string | null;
};
/**
 * A client taken from a pool, to be released.
 */
export type PoolClient = Client & {
    release(err?: boolean | Error): void;
};
/**
 * A pg Pool: runs each statement on some connection, hands out clients.
 */
export type Pool = {
    query(text: string, values?: unknown[]): Promise<QueryResult>;
    connect(): Promise<PoolClient>;
    totalCount: number;
};
