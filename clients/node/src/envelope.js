// @ts-check
/**
 * The wire envelope shared by krizaka_outbox and its TypeScript and Java
 * twins: a JSON object with exactly the keys id, type, occurredAt and
 * payload.  outbox.envelope(m) builds it in the database.  A NOTIFY route
 * sends an envelope too long for a notification (7999 bytes) in its
 * truncated form: id, type, occurredAt and "truncated": true, without the
 * payload; outbox.envelope_by_id(id) gives the whole one.  This file owns
 * the zod schemas of both forms and the helpers that read them.
 */
import { z } from "zod";

import { toQuery } from "./query.js";

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
export function isIsoTimestamp(s) {
  const date = new Date(s);
  return !Number.isNaN(date.getTime()) && date.toISOString() === s;
}

/* The keys both forms share. */
const head = {
  id: z.guid(),
  type: z.string(),
  occurredAt: z.string().refine(isIsoTimestamp, {
    message: "occurredAt must be a UTC date in the format of Date.prototype.toISOString",
  }),
};

/**
 * The envelope schema.  Strict: a key other than the four is an error.  The
 * id is any uuid PostgreSQL prints (a caller may append with an id of any
 * uuid variant, not only RFC 9562 ones), and the payload any JSON value,
 * null included.
 */
export const envelopeSchema = z.strictObject({ ...head, payload: z.json() });

/**
 * The truncated form a NOTIFY route sends when the whole envelope does not
 * fit in a notification: exactly id, type, occurredAt and truncated (true),
 * no payload.
 */
export const truncatedEnvelopeSchema = z.strictObject({ ...head, truncated: z.literal(true) });

/** What a notification of a NOTIFY route carries: either form. */
export const notifiedEnvelopeSchema = z.union([envelopeSchema, truncatedEnvelopeSchema]);

/**
 * A JSON value: what a payload is on the wire, and the payload's type of an
 * Envelope when none is given.
 *
 * @typedef {z.infer<typeof envelopeSchema>["payload"]} JsonValue
 */

/**
 * The whole envelope.  P is the payload's type: JsonValue unless the caller
 * says what the topic carries (a promise of the caller; nothing checks it
 * beyond its being JSON).
 *
 * @template [P=JsonValue]
 * @typedef {{ id: string, type: string, occurredAt: string, payload: P }} Envelope
 */
/** @typedef {z.infer<typeof truncatedEnvelopeSchema>} TruncatedEnvelope */

/**
 * JSON.parse for text, the value itself otherwise.
 *
 * @param {unknown} value
 * @returns {unknown}
 */
function fromJson(value) {
  return typeof value === "string" ? JSON.parse(value) : value;
}

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
export function parseEnvelope(value) {
  return /** @type {Envelope<P> | TruncatedEnvelope} */ (notifiedEnvelopeSchema.parse(fromJson(value)));
}

/**
 * Is this the truncated form (no payload)?
 *
 * @template P
 * @param {Envelope<P> | TruncatedEnvelope} envelope
 * @returns {envelope is TruncatedEnvelope}
 */
export function isTruncated(envelope) {
  return "truncated" in envelope && envelope.truncated === true;
}

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
export async function readEnvelope(query, value) {
  const envelope = /** @type {Envelope<P> | TruncatedEnvelope} */ (parseEnvelope(value));
  if (!isTruncated(envelope)) {
    return envelope;
  }
  const { rows } = await toQuery(query, "query")("SELECT outbox.envelope_by_id($1::uuid) AS envelope", [
    envelope.id,
  ]);
  const whole = rows[0]?.envelope;
  if (whole === null || whole === undefined) {
    throw new Error(
      `envelope ${envelope.id} was truncated and outbox.envelope_by_id finds no such message: purged, or not visible to this role`,
    );
  }
  return /** @type {Envelope<P>} */ (envelopeSchema.parse(fromJson(whole)));
}
