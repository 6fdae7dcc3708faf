/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").Client} Client */
/** @typedef {import("./query.js").Pool} Pool */
/**
 * True when s is a date written exactly as Date.prototype.toISOString writes
 * it: UTC, milliseconds, a trailing Z (and +YYYYYY/-YYYYYY outside years
 * 0000-9999).  Parsing and printing it again must give the same text.
 *
 * @param {string} s
 * @returns {boolean}
 */
export function isIsoTimestamp(s: string): boolean;
/**
 * Parses an envelope in either form: the object a driver returns for a
 * jsonb column, or JSON text (a NOTIFY payload, a remote inbox row read as
 * text).  A truncated one has `truncated: true` and no payload (see
 * isTruncated; readEnvelope fetches the whole one).  Throws a ZodError when
 * it is neither form, a SyntaxError when the text is not JSON.
 *
 * @template [P=JsonValue]
 * @param {unknown} value
 * @returns {Envelope<P> | TruncatedEnvelope}
 */
export function parseEnvelope<P = z.core.util.JSONType>(value: unknown): Envelope<P> | TruncatedEnvelope;
/**
 * Is this the truncated form (no payload)?
 *
 * @template P
 * @param {Envelope<P> | TruncatedEnvelope} envelope
 * @returns {envelope is TruncatedEnvelope}
 */
export function isTruncated<P>(envelope: Envelope<P> | TruncatedEnvelope): envelope is TruncatedEnvelope;
/**
 * Reads an envelope and returns the whole one: a truncated envelope is
 * replaced by outbox.envelope_by_id(id), read through `query` (a role with
 * EXECUTE on envelope_by_id: the listeners' grant of the README); a whole
 * one is returned as parsed, without a statement.  Throws when the message
 * is gone (purged) or hidden from this role (envelope_by_id gives a role
 * that may not read outbox.message only the envelopes of topics routed to a
 * NOTIFY channel).
 *
 * @template [P=JsonValue]
 * @param {Query | Client | Pool} query
 * @param {unknown} value a notification's payload text, or a parsed envelope
 * @returns {Promise<Envelope<P>>}
 */
export function readEnvelope<P = z.core.util.JSONType>(query: Query | Client | Pool, value: unknown): Promise<Envelope<P>>;
/**
 * The envelope schema.  Strict: a key other than the four is an error.  The
 * id is any uuid PostgreSQL prints (a caller may append with an id of any
 * uuid variant, not only RFC 9562 ones), and the payload any JSON value,
 * null included.
 */
export const envelopeSchema: z.ZodObject<{
    payload: z.ZodJSONSchema;
    id: z.ZodGUID;
    type: z.ZodString;
    occurredAt: z.ZodString;
}, z.core.$strict>;
/**
 * The truncated form a NOTIFY route sends when the whole envelope does not
 * fit in a notification: exactly id, type, occurredAt and truncated (true),
 * no payload.
 */
export const truncatedEnvelopeSchema: z.ZodObject<{
    truncated: z.ZodLiteral<true>;
    id: z.ZodGUID;
    type: z.ZodString;
    occurredAt: z.ZodString;
}, z.core.$strict>;
/** What a notification of a NOTIFY route carries: either form. */
export const notifiedEnvelopeSchema: z.ZodUnion<readonly [z.ZodObject<{
    payload: z.ZodJSONSchema;
    id: z.ZodGUID;
    type: z.ZodString;
    occurredAt: z.ZodString;
}, z.core.$strict>, z.ZodObject<{
    truncated: z.ZodLiteral<true>;
    id: z.ZodGUID;
    type: z.ZodString;
    occurredAt: z.ZodString;
}, z.core.$strict>]>;
export type Query = import("./query.js").Query;
export type Client = import("./query.js").Client;
export type Pool = import("./query.js").Pool;
/**
 * A JSON value: what a payload is on the wire, and the payload's type of an
 * Envelope when none is given.
 */
export type JsonValue = z.infer<typeof envelopeSchema>["payload"];
/**
 * The whole envelope.  P is the payload's type: JsonValue unless the caller
 * says what the topic carries (a promise of the caller; nothing checks it
 * beyond its being JSON).
 */
export type Envelope<P = z.core.util.JSONType> = {
    id: string;
    type: string;
    occurredAt: string;
    payload: P;
};
export type TruncatedEnvelope = z.infer<typeof truncatedEnvelopeSchema>;
import { z } from "zod";
