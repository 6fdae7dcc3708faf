// @ts-check
/**
 * A Node.js client of krizaka_outbox: append in the caller's transaction, a
 * pull worker (drainOnce, runWorker), consumeOnce for idempotent consumers,
 * and the wire envelope's zod schema.
 */
export { append, consumeOnce } from "./outbox.js";
export { drainOnce, errorText, runWorker } from "./worker.js";
export { envelopeSchema, isIsoTimestamp, parseEnvelope } from "./envelope.js";

/** @typedef {import("./outbox.js").AppendInput} AppendInput */
/** @typedef {import("./worker.js").OutboxMessage} OutboxMessage */
/** @typedef {import("./worker.js").DrainOptions} DrainOptions */
/** @typedef {import("./worker.js").WorkerOptions} WorkerOptions */
/** @typedef {import("./worker.js").DrainCounts} DrainCounts */
/** @typedef {import("./envelope.js").Envelope} Envelope */
