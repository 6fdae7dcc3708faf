--
-- purge: deletes delivered and dead messages finished before now -
-- older_than (default outbox.retention_days), at most max_rows of them, and
-- the consume_once markers older than that; never anything undelivered
--
SELECT regress.reset();
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';

-- Put back the fixed set of messages and markers; finished times are set
-- relative to the wall clock.
CREATE FUNCTION pg_temp.fill() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM regress.reset();
    PERFORM outbox.append('purge', 'evt.purge.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00')
       FROM generate_series(1, 10) AS n;
    UPDATE outbox.message m
       SET delivered_at = clock_timestamp() - v.delivered_ago,
           dead_at = clock_timestamp() - v.dead_ago,
           attempts = v.attempts,
           leased_until = clock_timestamp() + v.lease,
           created_at = '1920-01-01 00:00:00+00'
      FROM (VALUES (1, interval '10 days', NULL::interval, 1, NULL::interval),
                   (2, '25 hours', NULL, 1, NULL),
                   (3, NULL, '10 days', 8, NULL),
                   (4, NULL, '2 hours', 8, NULL),
                   (5, NULL, NULL, 3, '-1 day'),    -- lease expired long ago
                   (6, NULL, NULL, 0, NULL),        -- waiting since 2020
                   (7, NULL, NULL, 1, '1 hour'),    -- leased
                   (8, '6 days 23 hours', NULL, 1, NULL),
                   (9, '8 days', NULL, 2, NULL),
                   (10, NULL, '100 years', 8, NULL)
           ) AS v(n, delivered_ago, dead_ago, attempts, lease)
     WHERE m.id = regress.id(v.n);
    INSERT INTO outbox.processed (consumer, message_id, processed_at)
    VALUES ('c', regress.id(1), clock_timestamp() - interval '10 days'),
           ('c', regress.id(2), clock_timestamp() - interval '25 hours'),
           ('c', regress.id(3), clock_timestamp() - interval '2 hours'),
           ('d', regress.id(1), clock_timestamp() - interval '40 days');
END
$$;

-- what is left
CREATE FUNCTION pg_temp.left_over(OUT messages text, OUT markers text)
LANGUAGE sql AS $$
    SELECT (SELECT string_agg(payload::text, ',' ORDER BY id) FROM outbox.message),
           (SELECT string_agg(consumer || (p.message_id = regress.id(1))::text || substr(p.message_id::text, 36),
                              ',' ORDER BY consumer, message_id)
              FROM outbox.processed p)
$$;

SELECT pg_temp.fill();
SELECT * FROM pg_temp.left_over();

-- the default horizon: outbox.retention_days (7) days
SELECT outbox.purge() AS purged;
SELECT * FROM pg_temp.left_over();
SELECT outbox.purge() AS purged_again;
SELECT outbox.purge(NULL, NULL) AS purged_again;

-- longer and shorter horizons
SELECT outbox.purge('2 days') AS purged;
SELECT * FROM pg_temp.left_over();
SELECT outbox.purge('3 hours') AS purged;
SELECT * FROM pg_temp.left_over();
SELECT outbox.purge('1 hour') AS purged;
SELECT * FROM pg_temp.left_over();
-- zero: everything finished so far; undelivered messages stay, however old
UPDATE outbox.message SET delivered_at = clock_timestamp() WHERE id = regress.id(7);
SELECT outbox.purge('0') AS purged;
SELECT * FROM pg_temp.left_over();
SELECT outbox.purge('0 seconds') AS purged;

-- the setting
SELECT pg_temp.fill();
SET outbox.retention_days = 1;
SELECT outbox.purge() AS purged;
SELECT * FROM pg_temp.left_over();
SET outbox.retention_days = 3650;
SELECT outbox.purge() AS purged;
SELECT * FROM pg_temp.left_over();
RESET outbox.retention_days;

-- months and years count as calendar time
SELECT pg_temp.fill();
SELECT outbox.purge('1 mon') AS purged;
SELECT outbox.purge('99 years') AS purged;
SELECT * FROM pg_temp.left_over();
SELECT outbox.purge('1 year 1 mon 1 day') AS purged;

-- a horizon before the first timestamp keeps everything
SELECT pg_temp.fill();
SELECT regress.state() AS before \gset
SELECT v.older_than, outbox.purge(v.older_than) AS purged
  FROM (VALUES (interval '1000 years'), ('6000 years'), ('10000 years'), ('99999 years'),
               ('100001 years'), ('200000 years'), ('178000000 years'),
               ('2147483647 days'), ('2147483647 mons'),
               ('9223372036854775807 microseconds')) AS v(older_than);
SELECT regress.state() = :'before' AS unchanged;

-- max_rows: at most that many messages per call
SELECT pg_temp.fill();
SELECT outbox.purge('1 hour', 2) AS purged;
SELECT outbox.purge('1 hour', 2) AS purged;
SELECT outbox.purge('1 hour', 2) AS purged;
SELECT outbox.purge('1 hour', 2) AS purged;
SELECT * FROM pg_temp.left_over();
SELECT pg_temp.fill();
SELECT outbox.purge('1 hour', 1) AS purged;
SELECT outbox.purge('1 hour', 1000000) AS purged;
SELECT outbox.purge('1 hour', 9223372036854775807) AS purged;
SELECT * FROM pg_temp.left_over();

-- more rows than one chunk (appended in one transaction a month ago)
SELECT regress.reset();
SELECT count(outbox.append('many', 'evt.purge.v1', to_jsonb(i))) FROM generate_series(1, 2500) AS i;
UPDATE outbox.message SET created_at = clock_timestamp() - interval '31 days';
UPDATE outbox.message SET delivered_at = clock_timestamp() - interval '30 days'
 WHERE (payload #>> '{}')::int % 5 <> 0;
SELECT count(*) AS finished FROM outbox.message WHERE delivered_at IS NOT NULL;
SELECT outbox.purge(NULL, 1500) AS purged;
SELECT outbox.purge(NULL, 1500) AS purged;
SELECT outbox.purge() AS purged;
SELECT count(*) AS left, count(*) FILTER (WHERE delivered_at IS NULL) AS undelivered
  FROM outbox.message;

-- purge reads each topic's stream only up to its first message appended
-- after the horizon: here 10 finished messages of a month ago in two
-- topics, then 2000 fresh ones, of which it reads a few
SELECT regress.reset();
SELECT count(outbox.append(t, 'evt.purge.v1', to_jsonb(i)))
  FROM generate_series(1, 5) AS i, (VALUES ('old1'), ('old2')) AS v(t);
UPDATE outbox.message SET created_at = clock_timestamp() - interval '31 days',
                          delivered_at = clock_timestamp() - interval '30 days';
SELECT count(outbox.append(t, 'evt.purge.v1', to_jsonb(i)))
  FROM generate_series(1, 1000) AS i, (VALUES ('old1'), ('old2')) AS v(t);
BEGIN;
SELECT seq_scan AS seq0, idx_tup_fetch AS fetch0 FROM pg_stat_xact_user_tables
 WHERE relid = 'outbox.message'::regclass \gset
SELECT outbox.purge() AS purged;
SELECT seq_scan - :seq0 AS seq_scans, idx_tup_fetch - :fetch0 < 100 AS read_little
  FROM pg_stat_xact_user_tables WHERE relid = 'outbox.message'::regclass;
COMMIT;
SELECT topic, count(*) FROM outbox.message GROUP BY topic ORDER BY topic;

-- a purged id may be appended again, with any content
SELECT pg_temp.fill();
SELECT outbox.purge() AS purged;
SELECT outbox.append('again', 'evt.purge.v2', '{"new": true}', regress.id(1));
SELECT id, topic, event_type, payload, delivered_at FROM outbox.message WHERE id = regress.id(1);

-- bad arguments: 22023, no change
SELECT pg_temp.fill();
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.purge('-1 second')$$),
               ($$SELECT outbox.purge('-7 days')$$),
               ($$SELECT outbox.purge('1 day -25 hours')$$),
               ($$SELECT outbox.purge('-178000000 years')$$),
               ($$SELECT outbox.purge('1 day', 0)$$),
               ($$SELECT outbox.purge('1 day', -1)$$),
               ($$SELECT outbox.purge(NULL, 0)$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged;

RESET TimeZone;
RESET IntervalStyle;
