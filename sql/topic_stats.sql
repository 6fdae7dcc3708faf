--
-- topic_stats: per topic, the messages due, delayed, leased, dead and
-- delivered, and the age of the oldest message not yet delivered (NULL when
-- there is none), as an interval and in seconds; every topic with a message
-- appears, whatever its state
--
SELECT regress.reset();
SET TimeZone = 'UTC';

-- nothing stored: no rows
SELECT * FROM outbox.topic_stats;

-- Append message n to topic and force it into state; created_at is
-- 2020-01-01 plus n seconds, and messages that are not delayed became
-- available at that time.
CREATE FUNCTION pg_temp.put(topic text, n integer, state text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s';
BEGIN
    PERFORM outbox.append(topic, 'evt.stats.v1', jsonb_build_object('n', n), regress.id(n), at);
    UPDATE outbox.message SET created_at = at WHERE id = regress.id(n);
    CASE state
        WHEN 'due' THEN
            NULL;
        WHEN 'lease expired' THEN
            UPDATE outbox.message SET attempts = 1, lease_owner = 'w', leased_until = at + interval '60 s'
             WHERE id = regress.id(n);
        WHEN 'delayed' THEN
            UPDATE outbox.message SET available_at = '2999-01-01 00:00:00+00' WHERE id = regress.id(n);
        WHEN 'backing off' THEN
            UPDATE outbox.message SET attempts = 1, lease_owner = 'w', last_error = 'boom',
                   available_at = clock_timestamp() + interval '1 h'
             WHERE id = regress.id(n);
        WHEN 'leased' THEN
            UPDATE outbox.message SET attempts = 1, lease_owner = 'w',
                   leased_until = clock_timestamp() + interval '1 h'
             WHERE id = regress.id(n);
        WHEN 'dead' THEN
            UPDATE outbox.message SET attempts = 8, lease_owner = 'w', last_error = 'boom',
                   dead_at = at + interval '1 h'
             WHERE id = regress.id(n);
        WHEN 'delivered' THEN
            UPDATE outbox.message SET attempts = 1, lease_owner = 'w', delivered_at = at + interval '1 s'
             WHERE id = regress.id(n);
    END CASE;
END
$$;

-- the oldest message of each topic is the first one put; dead and
-- delivered messages older than every pending one do not count for the age
SELECT pg_temp.put(v.topic, v.n, v.state)
  FROM (VALUES ('mixed', 1, 'dead'),
               ('mixed', 2, 'delivered'),
               ('mixed', 3, 'leased'),
               ('mixed', 4, 'due'),
               ('mixed', 5, 'due'),
               ('mixed', 6, 'lease expired'),
               ('mixed', 7, 'delayed'),
               ('mixed', 8, 'backing off'),
               ('mixed', 9, 'leased'),
               ('mixed', 10, 'leased'),
               ('mixed', 11, 'delivered'),
               ('mixed', 12, 'delivered'),
               ('mixed', 13, 'delivered'),
               ('only dead', 21, 'dead'),
               ('only dead', 22, 'dead'),
               ('only delivered', 31, 'delivered'),
               ('only delivered', 32, 'delivered'),
               ('only delivered', 33, 'delivered'),
               ('dead and delivered', 41, 'delivered'),
               ('dead and delivered', 42, 'dead'),
               ('only delayed', 51, 'delayed'),
               ('only leased', 61, 'leased'),
               ('only due', 71, 'due'),
               ('due after dead', 81, 'dead'),
               ('due after dead', 82, 'due')) AS v(topic, n, state)
 ORDER BY v.n;

SELECT topic, due, delayed, leased, dead, delivered,
       oldest_undelivered_age IS NULL AS no_age,
       oldest_undelivered_age > interval '0' AS positive_age,
       oldest_undelivered_age_seconds IS NULL AS no_seconds,
       oldest_undelivered_age_seconds > 0 AS positive_seconds
  FROM outbox.topic_stats ORDER BY topic;

-- the age is now() minus the created_at of the oldest pending message; the
-- seconds are that interval's, to the microsecond
SELECT s.topic, s.oldest_undelivered_age = now() - o.created_at AS exact,
       s.oldest_undelivered_age_seconds
           = extract(epoch FROM now() - o.created_at)::double precision AS exact_seconds,
       o.n AS oldest
  FROM outbox.topic_stats s
  LEFT JOIN LATERAL (SELECT m.created_at, (m.payload->>'n')::int AS n
                       FROM outbox.message m
                      WHERE m.topic = s.topic AND m.delivered_at IS NULL AND m.dead_at IS NULL
                      ORDER BY m.created_at LIMIT 1) o ON true
 ORDER BY s.topic;

-- the columns, and their types
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'outbox.topic_stats'::regclass AND attnum > 0
 ORDER BY attnum;

-- the counts follow the messages: a claim, a completion, a failure, a
-- revived dead message, a purge
SELECT id FROM outbox.claim('w2', 'only due');
SELECT topic, due, leased FROM outbox.topic_stats WHERE topic = 'only due';
SELECT outbox.complete(regress.id(71), 'w2');
SELECT topic, due, leased, delivered, oldest_undelivered_age IS NULL AS no_age
  FROM outbox.topic_stats WHERE topic = 'only due';
SELECT outbox.retry_dead_topic('only dead');
SELECT topic, due, dead, oldest_undelivered_age IS NULL AS no_age
  FROM outbox.topic_stats WHERE topic = 'only dead';
SELECT outbox.purge('0');
SELECT topic, due, delayed, leased, dead, delivered FROM outbox.topic_stats ORDER BY topic;

-- a lease that just expired makes its message due again; a delayed message
-- whose time came is due
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 s' WHERE topic = 'only leased';
UPDATE outbox.message SET available_at = clock_timestamp() - interval '1 s' WHERE topic = 'only delayed';
SELECT topic, due, delayed, leased FROM outbox.topic_stats
 WHERE topic IN ('only leased', 'only delayed') ORDER BY topic;

--
-- the plan: one pass over the table, whatever its history (no index holds
-- the delivered messages, so that completing one is a HOT update)
--
SELECT regress.reset();
INSERT INTO outbox.message (id, topic, event_type, payload, created_at, available_at, attempts,
                            lease_owner, delivered_at, dead_at)
SELECT gen_random_uuid(), 'topic ' || (n % 10), 'evt.stats.v1', '{}', now() - interval '1 d', now() - interval '1 d',
       1, 'w', CASE WHEN n % 50 <> 0 THEN now() END, CASE WHEN n % 50 = 0 THEN now() END
  FROM generate_series(1, 20000) AS n;
INSERT INTO outbox.message (id, topic, event_type, payload)
SELECT gen_random_uuid(), 'topic ' || (n % 10), 'evt.stats.v1', '{}'
  FROM generate_series(1, 20) AS n;
VACUUM ANALYZE outbox.message;

-- How a plan of the view reads outbox.message: one line per scan, the
-- index it uses, or "Seq Scan" if it reads the whole table.
CREATE FUNCTION pg_temp.scans() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    line text;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) SELECT * FROM outbox.topic_stats' LOOP
        IF line ~ 'Seq Scan on message' THEN
            RETURN NEXT 'Seq Scan';
        ELSIF line ~ 'Index (Only )?Scan using \S+ on message' THEN
            RETURN NEXT substring(line FROM 'using (\S+)');
        ELSIF line ~ 'Bitmap Index Scan on' THEN
            RETURN NEXT substring(line FROM 'Scan on (\S+)');
        END IF;
    END LOOP;
END
$$;
SELECT scan, count(*) FROM pg_temp.scans() AS scan GROUP BY scan ORDER BY 1;
SELECT sum(due) AS due, sum(dead) AS dead, sum(delivered) AS delivered FROM outbox.topic_stats;

SELECT regress.reset();
RESET TimeZone;
