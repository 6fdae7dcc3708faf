/**
 * Makes the outbox object.  It takes no options: an option of the twin
 * (clock, settings) is refused with the reason, so that a product that
 * switches stores learns where that setting now lives rather than losing
 * it silently.
 *
 * @param {Record<string, never>} [options]
 * @returns {Outbox}
 */
export function createOutbox(options?: Record<string, never>): Outbox;
/**
 * Did createOutbox make this object?
 *
 * @param {unknown} value
 * @returns {boolean}
 */
export function isOutbox(value: unknown): boolean;
export type Outbox = Readonly<{
    append: typeof append;
    claim: typeof claim;
    complete: typeof complete;
    fail: typeof fail;
    extend: typeof extend;
    retryDead: typeof retryDead;
    purge: typeof purge;
}>;
import { append } from "./outbox.js";
import { claim } from "./pull.js";
import { complete } from "./pull.js";
import { fail } from "./pull.js";
import { extend } from "./pull.js";
import { retryDead } from "./pull.js";
import { purge } from "./pull.js";
