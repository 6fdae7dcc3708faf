--
-- uuid: generated message ids are UUIDv7 (RFC 9562), carry the time of the
-- call in milliseconds, and strictly increase within a backend, even many
-- in one millisecond
--
SELECT regress.reset();

-- the Unix time in milliseconds of a UUIDv7 (its first 48 bits)
CREATE FUNCTION pg_temp.uuid_ms(u uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || lpad(replace(left(u::text, 13), '-', ''), 16, '0'))::bit(64)::bigint
$$;
CREATE FUNCTION pg_temp.ms(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT floor(extract(epoch FROM t) * 1000)::bigint
$$;

-- 1000 ids in one statement, in call order
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE ids AS
SELECT g.n, outbox.append('uuid', 'evt.uuid.v1', to_jsonb(g.n)) AS id
  FROM generate_series(1, 1000) AS g(n);
SELECT clock_timestamp() AS t1 \gset

SELECT count(*) AS ids,
       count(DISTINCT id) AS distinct_ids,
       -- version 7 and variant 0b10
       count(*) FILTER (WHERE id::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$') AS v7_format,
       count(*) FILTER (WHERE substr(id::text, 15, 1) = '7') AS version_7,
       count(*) FILTER (WHERE substr(id::text, 20, 1) IN ('8', '9', 'a', 'b')) AS variant_rfc
  FROM ids;

-- strictly increasing in call order
SELECT count(*) FILTER (WHERE prev IS NULL OR id > prev) AS increasing,
       count(*) FILTER (WHERE id <= prev) AS not_increasing
  FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM ids) s;

-- their time is the wall clock of the call (ids made faster than the
-- clock ticks may run ahead by a fraction of a millisecond)
SELECT count(*) FILTER (WHERE pg_temp.uuid_ms(id) BETWEEN pg_temp.ms(:'t0') AND pg_temp.ms(:'t1') + 1)
           AS within_call_time
  FROM ids;

-- the ids are stored and ordered like the calls
SELECT count(*) AS stored,
       bool_and(m.payload = to_jsonb(i.n)) AS same_order
  FROM ids i JOIN outbox.message m ON m.id = i.id;

-- across statements and transactions, each new id is greater than all before
SELECT id AS last FROM ids ORDER BY id DESC LIMIT 1 \gset
SELECT outbox.append('uuid', 'evt.uuid.v1', '1') > :'last'::uuid AS greater;
SELECT id AS last FROM outbox.message ORDER BY id DESC LIMIT 1 \gset
BEGIN;
SELECT outbox.append('uuid', 'evt.uuid.v1', '2') AS rolled_back \gset
SELECT :'rolled_back'::uuid > :'last'::uuid AS greater;
ROLLBACK;
-- ids handed out in a transaction that rolled back are not reused
\set last :rolled_back
SELECT bool_and(id > :'last'::uuid) AS greater, count(*)
  FROM outbox.append_batch('uuid', 'evt.uuid.v1', ARRAY['3', '4', '5']::jsonb[]) AS id;
SELECT id AS last FROM outbox.message ORDER BY id DESC LIMIT 1 \gset
SELECT outbox.append('uuid', 'evt.uuid.v1', '6') > :'last'::uuid AS greater;

-- a given id is kept as given, whatever its version
SELECT outbox.append('given', 'evt.uuid.v1', '7', '4a9a3f5e-2a7b-4c1e-9d3f-1b2c3d4e5f60');
SELECT outbox.append('given', 'evt.uuid.v1', '8', '00000000-0000-0000-0000-000000000000');
SELECT id, payload FROM outbox.message WHERE topic = 'given' ORDER BY payload;

DROP TABLE ids;
