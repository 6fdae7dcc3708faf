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
export function topicStats(query: Query | Pool, options?: {
    topic?: string;
}): Promise<TopicStats[]>;
export type Query = import("./query.js").Query;
export type Pool = import("./query.js").Pool;
/**
 * One row of outbox.topic_stats, its columns in camelCase.
 */
export type TopicStats = {
    topic: string;
    /**
     * undelivered, not dead, available and not leased: what a claim would take now
     */
    due: number;
    /**
     * undelivered, not dead, available later (a backoff, or an append's availableAt)
     */
    delayed: number;
    /**
     * undelivered, not dead, available and leased
     */
    leased: number;
    dead: number;
    delivered: number;
    /**
     * the age of the oldest message neither delivered nor dead, in seconds; null when there is none (the view's oldest_undelivered_age, and oldest_undelivered_age_seconds of 1.2)
     */
    oldestUndeliveredAgeSeconds: number | null;
    /**
     * until when the circuit breaker of the topic's route pauses it; null when it does not
     */
    pausedUntil: Date | null;
};
