/* krizaka_outbox--1.1--1.2.sql: from 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.2'" to load this file. \quit

/*
 * The queue engine: every message gets a position in its topic's stream
 * (seq), and the messages read by their available_at instead are marked
 * deferred (see krizaka_outbox--1.2.sql).  Messages in place are numbered
 * in their claim order of 1.1; those already attempted or not yet due
 * become deferred.
 */
CREATE SEQUENCE outbox.message_seq;

ALTER TABLE outbox.message
    ADD COLUMN seq bigint,
    ADD COLUMN deferred boolean NOT NULL DEFAULT false;

UPDATE outbox.message m
   SET seq = o.n,
       deferred = (m.delivered_at IS NULL AND m.dead_at IS NULL
                   AND (m.attempts OPERATOR(pg_catalog.>) 0
                        OR m.available_at OPERATOR(pg_catalog.>) pg_catalog.now()))
  FROM (SELECT i.id, pg_catalog.row_number() OVER (ORDER BY i.available_at, i.id) AS n
          FROM outbox.message i) o
 WHERE o.id OPERATOR(pg_catalog.=) m.id;

SELECT pg_catalog.setval('outbox.message_seq',
    COALESCE((SELECT pg_catalog.max(seq) FROM outbox.message), 0) OPERATOR(pg_catalog.+) 1,
    false);

ALTER TABLE outbox.message
    ALTER COLUMN seq SET DEFAULT pg_catalog.nextval('outbox.message_seq'::pg_catalog.regclass),
    ALTER COLUMN seq SET NOT NULL;

CREATE INDEX message_stream_idx ON outbox.message (topic, seq);
CREATE INDEX message_deferred_idx ON outbox.message (topic, available_at, id)
    WHERE deferred AND delivered_at IS NULL AND dead_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('outbox.message_seq', '');

/*
 * Claims find expired leases in the stream and among the deferred
 * messages; without an index on leased_until, a claim's update of a
 * message stays on its page with no new index entry (a HOT update).
 */
DROP INDEX outbox.message_leased_idx;
