// @ts-check
/**
 * Test databases for the example's tests: each test file gets a database of
 * its own with the extension, a writer role and a worker role holding
 * exactly the grants of the project README, and drops all of it afterwards.
 *
 * The connection comes from the libpq environment (PGHOST, PGPORT, PGUSER),
 * which must name a superuser of a cluster where krizaka_outbox is
 * installed: test/run exports it for the throwaway cluster of `make test`.
 */
import pg from "pg";

import { append } from "../src/index.js";

/**
 * @typedef {object} TestDatabase
 * @property {string} name the database
 * @property {import("pg").Pool} admin superuser connections to the database
 * @property {string} writerRole may append and consume_once
 * @property {string} workerRole may claim, extend, complete, fail and build envelopes
 * @property {string} listenerRole may read envelopes by id (listeners of NOTIFY routes)
 * @property {(extra?: import("pg").PoolConfig) => import("pg").Pool} writerPool
 * @property {(extra?: import("pg").PoolConfig) => import("pg").Pool} workerPool
 * @property {(extra?: import("pg").PoolConfig) => import("pg").Pool} listenerPool
 * @property {() => Promise<void>} drop closes every pool and drops the database and roles
 */

/**
 * Runs statements as superuser on the maintenance database.
 *
 * @param {string[]} statements
 */
async function onMaintenanceDb(statements) {
  const client = new pg.Client({ database: "postgres" });
  await client.connect();
  try {
    for (const sql of statements) {
      await client.query(sql);
    }
  } finally {
    await client.end();
  }
}

/**
 * Waits until no session is connected to the database.  Pool.end() returns
 * once it has asked its connections to close, not once they have: dropping
 * the database WITH (FORCE) at that moment would terminate them under the
 * pool, which reports it as an uncaught error.
 *
 * @param {string} name
 */
async function waitForNoSessions(name) {
  const client = new pg.Client({ database: "postgres" });
  await client.connect();
  try {
    await waitFor(async () => {
      const { rows } = await client.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1",
        [name],
      );
      return rows[0].n === 0;
    }, `the sessions of ${name} to end`);
  } finally {
    await client.end();
  }
}

/**
 * Creates the database `krizaka_node_<suffix>` with the extension and the
 * writer, worker and listener roles, after dropping what a previous run may have left.
 *
 * @param {string} suffix
 * @returns {Promise<TestDatabase>}
 */
export async function createTestDatabase(suffix) {
  const name = `krizaka_node_${suffix}`;
  const writerRole = `${name}_writer`;
  const workerRole = `${name}_worker`;
  const listenerRole = `${name}_listener`;
  const id = pg.escapeIdentifier;
  const dropAll = [
    `DROP DATABASE IF EXISTS ${id(name)} WITH (FORCE)`,
    `DROP ROLE IF EXISTS ${id(writerRole)}`,
    `DROP ROLE IF EXISTS ${id(workerRole)}`,
    `DROP ROLE IF EXISTS ${id(listenerRole)}`,
  ];
  await onMaintenanceDb([
    ...dropAll,
    `CREATE DATABASE ${id(name)}`,
    `CREATE ROLE ${id(writerRole)} LOGIN`,
    `CREATE ROLE ${id(workerRole)} LOGIN`,
    `CREATE ROLE ${id(listenerRole)} LOGIN`,
  ]);

  /** @type {import("pg").Pool[]} */
  const pools = [];
  /** @param {import("pg").PoolConfig} config */
  const pool = (config) => {
    const p = new pg.Pool({ database: name, max: 4, ...config });
    pools.push(p);
    return p;
  };

  const admin = pool({});
  await admin.query(`CREATE EXTENSION krizaka_outbox;
    GRANT USAGE ON SCHEMA outbox TO ${id(writerRole)}, ${id(workerRole)}, ${id(listenerRole)};
    GRANT EXECUTE ON FUNCTION
        outbox.append(text, text, jsonb, uuid, timestamptz, text),
        outbox.append_batch(text, text, jsonb[], text),
        outbox.consume_once(text, uuid)
      TO ${id(writerRole)};
    GRANT EXECUTE ON FUNCTION
        outbox.claim(text, text, integer, integer, text),
        outbox.extend(uuid, text, integer, text),
        outbox.complete(uuid, text, text),
        outbox.complete_many(uuid[], text, text),
        outbox.complete_and_claim(uuid[], text, text, integer, integer, text),
        outbox.fail(uuid, text, text, text),
        outbox.envelope(outbox.message)
      TO ${id(workerRole)};
    GRANT EXECUTE ON FUNCTION outbox.envelope_by_id(uuid) TO ${id(listenerRole)};`);

  return {
    name,
    admin,
    writerRole,
    workerRole,
    listenerRole,
    writerPool: (extra = {}) => pool({ ...extra, user: writerRole }),
    workerPool: (extra = {}) => pool({ ...extra, user: workerRole }),
    listenerPool: (extra = {}) => pool({ ...extra, user: listenerRole }),
    drop: async () => {
      await Promise.all(pools.map((p) => p.end()));
      await waitForNoSessions(name);
      await onMaintenanceDb(dropAll);
    },
  };
}

/**
 * Polls `check` until it returns a truthy value, and returns that value;
 * throws after `timeoutMs`.
 *
 * @template T
 * @param {() => Promise<T> | T} check
 * @param {string} what said in the error on time-out
 * @param {number} [timeoutMs]
 * @returns {Promise<T>}
 */
export async function waitFor(check, what, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Runs fn on a client of the pool inside BEGIN and ends with `end` (COMMIT
 * or ROLLBACK); ROLLBACK when fn throws.
 *
 * @template T
 * @param {import("pg").Pool} pool
 * @param {"COMMIT" | "ROLLBACK"} end
 * @param {(client: import("pg").PoolClient) => Promise<T>} fn
 * @returns {Promise<T>}
 */
export async function inTransaction(pool, end, fn) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const value = await fn(client);
    await client.query(end);
    return value;
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Appends messages in one committed transaction of the writer role and
 * returns their ids in order.
 *
 * @param {import("pg").Pool} writer
 * @param {string} topic
 * @param {unknown[]} payloads
 * @returns {Promise<string[]>}
 */
export async function appendCommitted(writer, topic, payloads) {
  return inTransaction(writer, "COMMIT", async (client) => {
    const ids = [];
    for (const payload of payloads) {
      ids.push(await append(client, { topic, type: "evt.test.appended.v1", payload }));
    }
    return ids;
  });
}
