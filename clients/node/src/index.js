// @ts-check
/**
 * @krizaka/outbox-extension: the Node.js client of the krizaka_outbox
 * PostgreSQL extension, with the names and option shapes of the TypeScript
 * twin @krizaka/outbox: append in the caller's transaction, a pull worker
 * (drainOnce, runWorker), consumeOnce for idempotent consumers, the outbox
 * object (createOutbox), and the wire envelope's zod schemas.
 */
export { append, consumeOnce } from "./outbox.js";
export { createOutbox } from "./create-outbox.js";
export {
  claim,
  complete,
  completeAndClaim,
  completeMany,
  errorText,
  extend,
  fail,
  purge,
  retryDead,
} from "./pull.js";
export { drainOnce, runWorker } from "./worker.js";
export {
  envelopeSchema,
  isIsoTimestamp,
  isTruncated,
  notifiedEnvelopeSchema,
  parseEnvelope,
  readEnvelope,
  truncatedEnvelopeSchema,
} from "./envelope.js";

/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").QueryResult} QueryResult */
/** @typedef {import("./query.js").Client} Client */
/** @typedef {import("./query.js").PoolClient} PoolClient */
/** @typedef {import("./query.js").Pool} Pool */
/** @typedef {import("./outbox.js").AppendInput} AppendInput */
/** @typedef {import("./create-outbox.js").Outbox} Outbox */
/** @typedef {import("./pull.js").OutboxMessage} OutboxMessage */
/** @typedef {import("./pull.js").ClaimOptions} ClaimOptions */
/** @typedef {import("./worker.js").DrainOptions} DrainOptions */
/** @typedef {import("./worker.js").WorkerOptions} WorkerOptions */
/** @typedef {import("./worker.js").DrainCounts} DrainCounts */
/** @typedef {import("./envelope.js").Envelope} Envelope */
/** @typedef {import("./envelope.js").TruncatedEnvelope} TruncatedEnvelope */
