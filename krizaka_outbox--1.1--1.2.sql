/* krizaka_outbox--1.1--1.2.sql: from 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.2'" to load this file. \quit

/*
 * topic_stats gains the age of the oldest undelivered message in seconds,
 * as a new last column so that the view keeps its grants.
 */
CREATE OR REPLACE VIEW outbox.topic_stats AS
WITH pending AS (
    SELECT m.topic,
           pg_catalog.count(*) FILTER (
               WHERE m.available_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND (m.leased_until IS NULL
                      OR m.leased_until OPERATOR(pg_catalog.<=) pg_catalog.now())) AS due,
           pg_catalog.count(*) FILTER (
               WHERE m.available_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS delayed,
           pg_catalog.count(*) FILTER (
               WHERE m.available_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND m.leased_until OPERATOR(pg_catalog.>) pg_catalog.now()) AS leased,
           pg_catalog.min(m.created_at) AS oldest_created_at
      FROM outbox.message m
     WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
     GROUP BY m.topic
), dead AS (
    SELECT m.topic, pg_catalog.count(*) AS dead
      FROM outbox.message m
     WHERE m.dead_at IS NOT NULL
     GROUP BY m.topic
), delivered AS (
    SELECT m.topic, pg_catalog.count(*) AS delivered
      FROM outbox.message m
     WHERE m.delivered_at IS NOT NULL
     GROUP BY m.topic
)
SELECT t.topic,
       COALESCE(p.due, 0) AS due,
       COALESCE(p.delayed, 0) AS delayed,
       COALESCE(p.leased, 0) AS leased,
       COALESCE(d.dead, 0) AS dead,
       COALESCE(v.delivered, 0) AS delivered,
       CASE WHEN pg_catalog.isfinite(p.oldest_created_at)
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) p.oldest_created_at
       END AS oldest_undelivered_age,
       r.paused_until,
       CASE WHEN pg_catalog.isfinite(p.oldest_created_at)
            THEN pg_catalog.date_part('epoch',
                     pg_catalog.now() OPERATOR(pg_catalog.-) p.oldest_created_at)
       END AS oldest_undelivered_age_seconds
  FROM (SELECT topic FROM pending UNION SELECT topic FROM dead
        UNION SELECT topic FROM delivered) t
  LEFT JOIN pending p ON p.topic OPERATOR(pg_catalog.=) t.topic
  LEFT JOIN dead d ON d.topic OPERATOR(pg_catalog.=) t.topic
  LEFT JOIN delivered v ON v.topic OPERATOR(pg_catalog.=) t.topic
  LEFT JOIN outbox.routes r ON r.topic OPERATOR(pg_catalog.=) t.topic;

COMMENT ON VIEW outbox.topic_stats IS
    'Per topic: messages due, delayed, leased, dead and delivered, the age of the oldest undelivered one, the pause of its route, and that age in seconds.';
