--
-- search_path: the functions work under an empty search_path, and objects
-- named like the ones they use, put in front of pg_catalog, change nothing
--
SELECT regress.reset();
SET TimeZone = 'UTC';

--
-- search_path = '': every function, schema-qualified
--
SET search_path = '';
SELECT outbox.append('sp', 'evt.sp.v1', '{"a": 1}', regress.id(1), '2020-01-01 00:00:00+00');
SELECT outbox.append('sp', 'evt.sp.v1', '{"a": 1}', regress.id(1));
SELECT count(*) FROM outbox.append_batch('sp', 'evt.sp.v1', ARRAY['1', '2']::pg_catalog.jsonb[]);
SELECT id, attempts, lease_owner FROM outbox.claim('w', 'sp', 1);
SELECT outbox.extend(regress.id(1), 'w', 30);
SELECT outbox.fail(regress.id(1), 'w', 'first failure');
SELECT outbox.complete(regress.id(1), 'w');
SELECT pg_catalog.count(*) FROM outbox.claim('w', NULL, 2);
SELECT outbox.complete_many(ARRAY(SELECT id FROM outbox.message WHERE id OPERATOR(pg_catalog.<>) regress.id(1)), 'w');
SELECT outbox.retry_dead(regress.id(1));
SELECT outbox.retry_dead_topic('sp');
SELECT outbox.purge('0');
SELECT outbox.consume_once('c', regress.id(1));
SELECT outbox.envelope(m) OPERATOR(pg_catalog.->>) 'occurredAt' IS NOT NULL AS envelope
  FROM outbox.message m WHERE m.id OPERATOR(pg_catalog.=) regress.id(1);
SELECT outbox.envelope_by_id(regress.id(1)) OPERATOR(pg_catalog.->) 'payload' AS payload;
RESET search_path;
SELECT id, attempts, lease_owner, leased_until IS NULL AS no_lease, delivered_at IS NULL AS undelivered,
       available_at > clock_timestamp() AS backing_off, last_error
  FROM outbox.message ORDER BY id;

--
-- hostile objects in public and pg_temp, named like what the functions use,
-- each one doing the wrong thing if it were used
--
SELECT regress.reset();
CREATE TABLE public.message (LIKE outbox.message);
CREATE TABLE public.processed (LIKE outbox.processed);
CREATE TEMP TABLE message (LIKE outbox.message);
CREATE TEMP TABLE processed (LIKE outbox.processed);
INSERT INTO public.message (id, topic, event_type, payload, created_at, available_at, attempts, seq, deferred, ordering_key)
VALUES (regress.id(1), 'h', 'evt.decoy.v1', '"decoy"', '2000-01-01', '2000-01-01', 0, 1, false, NULL);
INSERT INTO pg_temp.message SELECT * FROM public.message;

CREATE FUNCTION public.evil_true(uuid, uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.evil_true(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.evil_true(jsonb, jsonb) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.evil_true(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.evil_true(integer, integer) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.evil_plus(integer, integer) RETURNS integer LANGUAGE sql AS 'SELECT 100';
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.evil_true);
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_true);
CREATE OPERATOR public.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = public.evil_true);
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.evil_true);
CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.evil_true);
CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_true);
CREATE OPERATOR public.+ (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_plus);
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.coalesce(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.format(text, text, integer, integer) RETURNS text LANGUAGE sql AS $$SELECT 'hostile'$$;
CREATE FUNCTION public.unnest(uuid[]) RETURNS SETOF uuid LANGUAGE sql AS $$SELECT '00000000-0000-0000-0000-000000000000'::uuid$$;
CREATE FUNCTION public.unnest(jsonb[]) RETURNS SETOF jsonb LANGUAGE sql AS $$SELECT '"hostile"'::jsonb$$;

SET search_path = public, pg_catalog;
-- they are in force for plain SQL
SELECT 'a'::text = 'b'::text AS hostile_text_eq, 1 + 1 AS hostile_plus, now() AS hostile_now,
       coalesce(NULL::timestamptz, now()) AS hostile_coalesce,
       count(*) AS hostile_message_rows FROM message;

-- the same calls as above, in front of them
SELECT outbox.append('h', 'evt.h.v1', '{"a": 1}', regress.id(1), '2020-01-01 00:00:00+00');
SELECT outbox.append('h', 'evt.h.v1', '{"a": 1}', regress.id(1));
SELECT regress.err($$SELECT outbox.append('h', 'evt.h.v1', '{"a": 2}', regress.id(1))$$);
SELECT outbox.append('h', 'evt.h.v1', '{"future": true}', regress.id(2), '2999-01-01 00:00:00+00');
SELECT count(*) FROM outbox.append_batch('h', 'evt.h.v1', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[]);
SELECT id, attempts, lease_owner FROM outbox.claim('w', 'h', 1);
SELECT outbox.complete(regress.id(1), 'intruder') AS intruder_complete;
SELECT outbox.extend(regress.id(1), 'w', 30);
SELECT outbox.fail(regress.id(1), 'w', 'first failure');
SELECT outbox.complete(regress.id(1), 'w') AS complete_after_fail;
SELECT count(*) FROM outbox.claim('w', 'h', 2);
SELECT outbox.complete_many(ARRAY[regress.id(2)], 'w') AS not_claimed;
SELECT outbox.retry_dead(regress.id(2)) AS not_dead;
SELECT outbox.retry_dead_topic('h') AS none_dead;
SELECT outbox.purge('1 hour') AS nothing_old;
SELECT outbox.consume_once('c', regress.id(1)) AS first, outbox.consume_once('c', regress.id(1)) AS second;
SELECT outbox.envelope_by_id(regress.id(2)) - 'occurredAt' AS envelope_without_time;
RESET search_path;

-- the outbox is exactly as it would be without them: 1 backing off after
-- its failure, 2 waiting for 2999, the batch leased to w
SELECT CASE WHEN id::text LIKE '00000000-%' THEN id::text ELSE 'new id' END AS id,
       topic, payload, attempts, lease_owner, leased_until IS NULL AS no_lease,
       delivered_at, dead_at, available_at > clock_timestamp() AS not_due, last_error
  FROM outbox.message m ORDER BY m.id;
SELECT consumer, message_id FROM outbox.processed;
-- and the decoys were not touched
SELECT id, payload, attempts, delivered_at FROM public.message;
SELECT id, payload, attempts, delivered_at FROM pg_temp.message;
SELECT count(*) FROM public.processed;
SELECT count(*) FROM pg_temp.processed;

DROP TABLE pg_temp.message, pg_temp.processed;
DROP TABLE public.message, public.processed;
DROP OPERATOR public.= (uuid, uuid), public.= (text, text), public.= (jsonb, jsonb),
              public.<= (timestamptz, timestamptz), public.< (timestamptz, timestamptz),
              public.>= (integer, integer), public.+ (integer, integer);
DROP FUNCTION public.evil_true(uuid, uuid), public.evil_true(text, text),
              public.evil_true(jsonb, jsonb), public.evil_true(timestamptz, timestamptz),
              public.evil_true(integer, integer), public.evil_plus(integer, integer);
DROP FUNCTION public.now(), public.clock_timestamp(), public.coalesce(timestamptz, timestamptz),
              public.format(text, text, integer, integer), public.unnest(uuid[]), public.unnest(jsonb[]);

RESET TimeZone;
