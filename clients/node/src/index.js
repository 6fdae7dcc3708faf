// @ts-check
/**
 * @krizaka/outbox-extension: the Node.js client of the krizaka_outbox
 * PostgreSQL extension, with the names and option shapes of the TypeScript
 * twin @krizaka/outbox: append in the caller's transaction, a pull worker
 * (drainOnce, runWorker), consumeOnce for idempotent consumers, the outbox
 * object (createOutbox), topic_stats with numbers, and the wire envelope's
 * zod schemas.
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
export { topicStats } from "./stats.js";
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
/**
 * @template [P=unknown]
 * @typedef {import("./outbox.js").AppendInput<P>} AppendInput
 */
/** @typedef {import("./create-outbox.js").Outbox} Outbox */
/**
 * @template [P=unknown]
 * @typedef {import("./pull.js").OutboxMessage<P>} OutboxMessage
 */
/** @typedef {import("./pull.js").ClaimOptions} ClaimOptions */
/**
 * @template [P=unknown]
 * @typedef {import("./worker.js").DrainOptions<P>} DrainOptions
 */
/**
 * @template [P=unknown]
 * @typedef {import("./worker.js").WorkerOptions<P>} WorkerOptions
 */
/** @typedef {import("./worker.js").DrainCounts} DrainCounts */
/**
 * @template [P=import("./envelope.js").JsonValue]
 * @typedef {import("./envelope.js").Envelope<P>} Envelope
 */
/** @typedef {import("./envelope.js").JsonValue} JsonValue */
/** @typedef {import("./stats.js").TopicStats} TopicStats */
/** @typedef {import("./envelope.js").TruncatedEnvelope} TruncatedEnvelope */
