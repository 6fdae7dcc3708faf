// @ts-check
/**
 * runWorker: sleeps through the passed sleep when a round found nothing
 * (or waits idleSeconds itself when given none), and stops promptly when its signal aborts: during the sleep at once,
 * during a delivery after finishing that message, without starting another.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { performance } from "node:perf_hooks";

import { runWorker } from "../src/index.js";
import { appendCommitted, createTestDatabase, waitFor } from "../support/db.js";

/** @type {import("../support/db.js").TestDatabase} */
let db;
/** @type {import("pg").Pool} */
let writer;
/** @type {import("pg").Pool} */
let worker;

before(async () => {
  db = await createTestDatabase("stop");
  writer = db.writerPool();
  worker = db.workerPool();
});

after(async () => {
  await db?.drop();
});

/**
 * A sleep that ignores any signal and does not keep the process alive: the
 * worker alone must end the wait when it is stopped.
 *
 * @param {number[]} calls records the seconds of every call
 * @returns {(seconds: number) => Promise<void>}
 */
function deafSleep(calls) {
  return (seconds) => {
    calls.push(seconds);
    return new Promise((resolve) => {
      setTimeout(resolve, seconds * 1000).unref();
    });
  };
}

/**
 * A promise with its resolve function.
 *
 * @returns {{ promise: Promise<void>, resolve: () => void }}
 */
function gate() {
  /** @type {() => void} */
  let resolve = () => {};
  const promise = new Promise((r) => {
    resolve = () => r(undefined);
  });
  return { promise, resolve };
}

describe("runWorker", { timeout: 30000 }, () => {
  it("sleeps when a round found nothing and stops at once on abort", async () => {
    const stop = new AbortController();
    /** @type {number[]} */
    const sleeps = [];
    const running = runWorker({
      query: worker,
      owner: "idle-1",
      topic: "idle",
      deliver: () => assert.fail("nothing to deliver"),
      sleep: deafSleep(sleeps),
      idleSeconds: 30,
      signal: stop.signal,
    });
    await waitFor(() => sleeps.length > 0, "the worker to go to sleep");
    assert.deepEqual(sleeps, [30]);
    const abortedAt = performance.now();
    stop.abort();
    const totals = await running;
    assert.ok(performance.now() - abortedAt < 1000, "stopped within a second");
    assert.deepEqual(totals, { claimed: 0, delivered: 0, failed: 0, lost: 0, skipped: 0 });
  });

  it("delivers what arrives while it runs, then sleeps again", async () => {
    const stop = new AbortController();
    /** @type {number[]} */
    const sleeps = [];
    /** @type {string[]} */
    const delivered = [];
    const running = runWorker({
      query: worker,
      owner: "loop-1",
      topic: "loop",
      deliver: (message) => {
        delivered.push(message.id);
      },
      sleep: (seconds) => {
        sleeps.push(seconds);
        return new Promise((resolve) => setTimeout(resolve, 20));
      },
      idleSeconds: 0.02,
      signal: stop.signal,
    });
    await waitFor(() => sleeps.length > 0, "the first sleep");
    const ids = await appendCommitted(writer, "loop", [{ n: 1 }, { n: 2 }]);
    await waitFor(() => delivered.length === 2, "both messages");
    const sleptBefore = sleeps.length;
    await waitFor(() => sleeps.length > sleptBefore, "a sleep after the round that found them");
    stop.abort();
    const totals = await running;
    assert.deepEqual(delivered, ids);
    assert.equal(totals.delivered, 2);
    assert.equal(totals.claimed, 2);
  });

  it("waits idleSeconds (seconds) by itself when given no sleep, and stops at once on abort", async () => {
    /** @type {number[]} */
    const claims = [];
    /** @type {import("../src/index.js").Query} */
    const counting = (text, values) => {
      if (text.includes("outbox.claim(")) {
        claims.push(performance.now());
      }
      return worker.query(text, values);
    };
    /** @type {string[]} */
    const delivered = [];
    const stop = new AbortController();
    const running = runWorker({
      query: counting,
      owner: "own-wait-1",
      topic: "own-wait",
      idleSeconds: 0.3,
      deliver: (message) => {
        delivered.push(message.id);
      },
      signal: stop.signal,
    });
    await waitFor(() => claims.length >= 3, "three rounds");
    for (let i = 1; i < 3; i++) {
      assert.ok(claims[i] - claims[i - 1] >= 290, `round ${i} came ${claims[i] - claims[i - 1]} ms after the one before`);
    }
    const ids = await appendCommitted(writer, "own-wait", [{ n: 1 }]);
    await waitFor(() => delivered.length === 1, "the message appended while it waits");
    assert.deepEqual(delivered, ids);
    stop.abort();
    assert.equal((await running).delivered, 1);

    /* a long wait ends with the abort */
    const again = new AbortController();
    const before = claims.length;
    const idle = runWorker({
      query: counting, owner: "own-wait-2", topic: "own-wait", idleSeconds: 3600,
      deliver: () => assert.fail("nothing to deliver"), signal: again.signal,
    });
    await waitFor(() => claims.length > before, "the round before the wait");
    const abortedAt = performance.now();
    again.abort();
    await idle;
    assert.ok(performance.now() - abortedAt < 1000, "stopped within a second");
  });

  it("finishes the message being delivered, starts no other, and hands the rest back", async () => {
    const ids = await appendCommitted(writer, "abort", [{ n: 1 }, { n: 2 }, { n: 3 }]);
    const stop = new AbortController();
    const started = gate();
    const release = gate();
    /** @type {string[]} */
    const delivered = [];
    const running = runWorker({
      query: worker,
      owner: "abort-1",
      topic: "abort",
      leaseSeconds: 600,
      deliver: async (message) => {
        delivered.push(message.id);
        started.resolve();
        await release.promise;
      },
      sleep: deafSleep([]),
      signal: stop.signal,
    });
    await started.promise;
    stop.abort();
    release.resolve();
    const totals = await running;
    assert.deepEqual(totals, { claimed: 3, delivered: 1, failed: 0, lost: 0, skipped: 2 });
    assert.deepEqual(delivered, [ids[0]]);

    const { rows } = await db.admin.query(
      `SELECT id, delivered_at IS NOT NULL AS delivered, lease_owner,
              leased_until <= clock_timestamp() + interval '10 seconds' AS handed_back
         FROM outbox.message WHERE topic = 'abort' ORDER BY id`,
    );
    assert.deepEqual(rows, [
      { id: ids[0], delivered: true, lease_owner: "abort-1", handed_back: null },
      { id: ids[1], delivered: false, lease_owner: "abort-1", handed_back: true },
      { id: ids[2], delivered: false, lease_owner: "abort-1", handed_back: true },
    ]);
  });

  it("does not start when the signal has already aborted", async () => {
    await appendCommitted(writer, "never", [{ n: 1 }]);
    const totals = await runWorker({
      query: worker,
      owner: "never-1",
      topic: "never",
      deliver: () => assert.fail("must not deliver"),
      sleep: deafSleep([]),
      signal: AbortSignal.abort(),
    });
    assert.equal(totals.claimed, 0);
  });

  it("ends with the error of a failed round, or reports it to onError and goes on", async () => {
    const broken = db.writerPool(); // a writer may not claim
    const stop = new AbortController();
    await assert.rejects(
      runWorker({
        query: broken,
        owner: "broken-1",
        deliver: () => {},
        sleep: deafSleep([]),
        signal: stop.signal,
      }),
      { code: "42501" },
    );
    /** @type {unknown[]} */
    const errors = [];
    const running = runWorker({
      query: broken,
      owner: "broken-1",
      deliver: () => {},
      sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)),
      idleSeconds: 0.01,
      onError: (err) => errors.push(err),
      signal: stop.signal,
    });
    await waitFor(() => errors.length >= 2, "two failed rounds");
    stop.abort();
    await running;
    assert.equal(/** @type {any} */ (errors[0]).code, "42501");
  });

  it("refuses options it cannot run with", async () => {
    const base = { query: worker, owner: "x", deliver: () => {}, sleep: deafSleep([]) };
    await assert.rejects(runWorker(/** @type {any} */ ({ ...base })), TypeError);
    await assert.rejects(runWorker(/** @type {any} */ ({ ...base, owner: "", signal: new AbortController().signal })), TypeError);
    await assert.rejects(
      runWorker({ ...base, heartbeatSeconds: 0, signal: new AbortController().signal }),
      TypeError,
    );
    await assert.rejects(
      runWorker(/** @type {any} */ ({ ...base, sleep: 1000, signal: new AbortController().signal })),
      { name: "TypeError", message: "sleep must be a function (seconds) => Promise, or left out" },
    );
  });
});
