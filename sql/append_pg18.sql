--
-- append_pg18: what PostgreSQL 18 adds to a table, on outbox.message.  An
-- append does not test a NOT ENFORCED CHECK constraint, as an INSERT does
-- not, and tests it again once it is enforced; a virtual generated column
-- (taken by the INSERT path) reads its value, for appends and claims.
-- Majors before 18 have neither and end here (append_pg18_1.out).
--
SELECT current_setting('server_version_num')::integer >= 180000 AS pg18 \gset
\if :pg18
\else
\echo 'before PostgreSQL 18: no NOT ENFORCED constraints, no virtual generated columns'
\quit
\endif
SELECT regress.reset();
\set VERBOSITY terse

-- a NOT ENFORCED CHECK constraint: the row it would refuse is appended,
-- alone and in a batch
ALTER TABLE outbox.message ADD CONSTRAINT not_b CHECK (payload <> '"b"') NOT ENFORCED;
SELECT outbox.append('pg18', 'evt.a.v1', '"b"') IS NOT NULL AS appended;
SELECT count(*) AS appended FROM outbox.append_batch('pg18', 'evt.a.v1', ARRAY['"a"', '"b"']::jsonb[]);
SELECT payload FROM outbox.message WHERE topic = 'pg18' ORDER BY seq;

-- the same constraint enforced (for new rows): the append gets the
-- INSERT's error and changes nothing
ALTER TABLE outbox.message DROP CONSTRAINT not_b;
ALTER TABLE outbox.message ADD CONSTRAINT not_b CHECK (payload <> '"b"') NOT VALID;
SELECT regress.state() AS before \gset
SELECT outbox.append('pg18', 'evt.a.v1', '"b"');
SELECT regress.state() = :'before' AS unchanged;
SELECT outbox.append('pg18', 'evt.a.v1', '"c"') IS NOT NULL AS appended;
ALTER TABLE outbox.message DROP CONSTRAINT not_b;

-- a virtual generated column: computed when read, for appends and claims
ALTER TABLE outbox.message ADD COLUMN topic_length integer
    GENERATED ALWAYS AS (length(topic)) VIRTUAL;
SELECT outbox.append('pg18-virtual', 'evt.a.v1', '"d"') IS NOT NULL AS appended;
SELECT payload, topic_length FROM outbox.message WHERE topic = 'pg18-virtual';
SELECT payload, topic_length FROM outbox.claim('w', 'pg18-virtual', 1);
ALTER TABLE outbox.message DROP COLUMN topic_length;

-- and the table as the extension made it again
SELECT outbox.append('pg18', 'evt.a.v1', '"e"') IS NOT NULL AS appended;
SELECT count(*) AS messages FROM outbox.message WHERE topic = 'pg18';
