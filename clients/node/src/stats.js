// @ts-check
/**
 * Monitoring from Node.js: the rows of the view outbox.topic_stats, with
 * its counts as numbers (PostgreSQL counts are bigint, which pg returns as
 * text) and the age of the oldest undelivered message in seconds (pg reads
 * an interval as an object).
 */
import { toNumber } from "./pull.js";
import { toQuery } from "./query.js";

/** @typedef {import("./query.js").Query} Query */
/** @typedef {import("./query.js").Pool} Pool */

/**
 * One row of outbox.topic_stats, its columns in camelCase.
 *
 * @typedef {object} TopicStats
 * @property {string} topic
 * @property {number} due undelivered, not dead, available and not leased: what a claim would take now
 * @property {number} delayed undelivered, not dead, available later (a backoff, or an append's availableAt)
 * @property {number} leased undelivered, not dead, available and leased
 * @property {number} dead
 * @property {number} delivered
 * @property {number | null} oldestUndeliveredAgeSeconds the age of the oldest message neither delivered nor dead, in seconds; null when there is none (the view's oldest_undelivered_age, and oldest_undelivered_age_seconds of 1.2)
 * @property {Date | null} pausedUntil until when the circuit breaker of the topic's route pauses it; null when it does not
 */

/*
 * The seconds are computed from the interval, which every version has
 * (oldest_undelivered_age_seconds came with 1.2); the view has a row per
 * topic that has messages.
 */
const STATS_SQL = `SELECT s.topic, s.due, s.delayed, s.leased, s.dead, s.delivered,
       pg_catalog.date_part('epoch', s.oldest_undelivered_age) AS age_seconds,
       s.paused_until
  FROM outbox.topic_stats s
 WHERE $1::text IS NULL OR s.topic OPERATOR(pg_catalog.=) $1::text
 ORDER BY s.topic`;

/**
 * Reads outbox.topic_stats: one row per topic that has messages, ordered by
 * topic, or only the row of `topic` (none when it has no messages).  Counts
 * are numbers.  Needs SELECT on the view (the operators' or the monitoring
 * role's grant).
 *
 * @param {Query | Pool} query
 * @param {{ topic?: string }} [options]
 * @returns {Promise<TopicStats[]>}
 */
export async function topicStats(query, options = {}) {
  const topic = options?.topic;
  if (topic !== undefined && typeof topic !== "string") {
    throw new TypeError("topicStats: topic must be a string");
  }
  const { rows } = await toQuery(query, "query")(STATS_SQL, [topic ?? null]);
  return rows.map((row) => ({
    topic: row.topic,
    due: toNumber(row.due, "due"),
    delayed: toNumber(row.delayed, "delayed"),
    leased: toNumber(row.leased, "leased"),
    dead: toNumber(row.dead, "dead"),
    delivered: toNumber(row.delivered, "delivered"),
    oldestUndeliveredAgeSeconds: row.age_seconds === null ? null : Number(row.age_seconds),
    pausedUntil: row.paused_until,
  }));
}
