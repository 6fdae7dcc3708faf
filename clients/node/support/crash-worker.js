// @ts-check
/**
 * A worker process for the crash test: runs runWorker on one topic and
 * reports each delivery to its parent over the IPC channel.  The delivery of
 * message number KRIZAKA_STUCK_AT (1-based) never ends, so that the parent
 * can kill the process while it is delivering.
 *
 * Environment: PGHOST, PGPORT (libpq's), KRIZAKA_DB, KRIZAKA_USER,
 * KRIZAKA_OWNER, KRIZAKA_TOPIC, KRIZAKA_STUCK_AT.
 */
import pg from "pg";

import { runWorker } from "../src/index.js";

const env = process.env;
const send = (/** @type {object} */ message) => {
  if (process.send) {
    process.send(message);
  }
};

const pool = new pg.Pool({ database: env.KRIZAKA_DB, user: env.KRIZAKA_USER, max: 2 });
const stuckAt = Number(env.KRIZAKA_STUCK_AT);
let started = 0;

await runWorker({
  query: pool,
  owner: env.KRIZAKA_OWNER ?? "crash-worker",
  topic: env.KRIZAKA_TOPIC,
  leaseSeconds: 60,
  signal: new AbortController().signal,
  sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)),
  idleSeconds: 0.05,
  deliver: async (message) => {
    started++;
    send({ event: "delivering", id: message.id });
    if (started === stuckAt) {
      send({ event: "stuck", id: message.id });
      await new Promise(() => {
        setInterval(() => {}, 1000); // keeps the process alive until it is killed
      });
    }
  },
});
