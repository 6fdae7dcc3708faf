// @ts-check
/**
 * The wire envelope shared by krizaka_outbox and its TypeScript and Java
 * twins: a JSON object with exactly the keys id, type, occurredAt and
 * payload.  outbox.envelope(m) builds it in the database; this file owns the
 * zod schema that reads it and a parsing helper.
 */
import { z } from "zod";

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

/**
 * The envelope schema.  Strict: a key other than the four is an error.  The
 * id is any uuid PostgreSQL prints (a caller may append with an id of any
 * uuid variant, not only RFC 9562 ones), and the payload any JSON value,
 * null included.
 */
export const envelopeSchema = z.strictObject({
  id: z.guid(),
  type: z.string(),
  occurredAt: z.string().refine(isIsoTimestamp, {
    message: "occurredAt must be a UTC date in the format of Date.prototype.toISOString",
  }),
  payload: z.json(),
});

/** @typedef {z.infer<typeof envelopeSchema>} Envelope */

/**
 * Parses an envelope: the object a driver returns for a jsonb column, or
 * its JSON text (a NOTIFY payload, a remote inbox row read as text).
 * Throws a ZodError when it is not an envelope, a SyntaxError when the text
 * is not JSON.
 *
 * @param {unknown} value
 * @returns {Envelope}
 */
export function parseEnvelope(value) {
  return envelopeSchema.parse(typeof value === "string" ? JSON.parse(value) : value);
}
