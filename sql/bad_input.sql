--
-- bad_input: every SQL function, every argument, every kind of bad value.
-- Each call either fails with an SQLSTATE or does what the README says; a
-- failed call leaves every table as it was; nothing crashes the backend.
-- Hostile search_path objects and SQL hidden in topics, channels and route
-- commands are data: stored or refused, never run.
--
-- One line per call: function, argument, value, outcome.  An outcome is
--   "error SQLSTATE: message"            the call failed (message cut at 120
--                                        characters, with its length)
--   "ok: result, rows changed|no change" the call returned (long results
--                                        cut the same way; new ids shown as
--                                        <new id>)
-- Each call runs in a subtransaction that is rolled back afterwards, so the
-- calls do not depend on each other; a fingerprint of the outbox tables
-- (and of a victim table the injections aim at) is taken before and after,
-- and "STATE CHANGED" would flag a call that left anything behind.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

-- (left over only by an interrupted earlier run)
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS bad_input CASCADE;
DROP SERVER IF EXISTS bad_input_srv CASCADE;
DROP EXTENSION IF EXISTS dblink CASCADE;
RESET client_min_messages;

-- the backend and the postmaster at the start, to compare at the end
SELECT pg_backend_pid() AS pid, pg_postmaster_start_time() AS postmaster_started,
       (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS backend_started
\gset

CREATE SCHEMA bad_input;

-- a table that an injected statement would fill or drop if it ever ran
CREATE TABLE bad_input.victim (note text);
INSERT INTO bad_input.victim VALUES ('untouched');

-- A fingerprint of everything stored: messages, markers, routes,
-- subscriptions, victim.
CREATE FUNCTION bad_input.state() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(m::text, '|' ORDER BY m.id) FROM outbox.message m), '')
               || '#' || coalesce((SELECT string_agg(p::text, '|' ORDER BY p.consumer, p.message_id)
                                     FROM outbox.processed p), '')
               || '#' || coalesce((SELECT string_agg(r::text, '|' ORDER BY r.topic) FROM outbox.routes r), '')
               || '#' || coalesce((SELECT string_agg(s::text, '|' ORDER BY s.topic) FROM outbox.route_secrets s), '')
               || '#' || coalesce((SELECT string_agg(u::text, '|' ORDER BY u.sub_id) FROM outbox.subscription u), '')
               || '#' || coalesce((SELECT string_agg(x::text, '|' ORDER BY x.sub_id, x.seq) FROM outbox.subscription_state x), '')
               || '#' || coalesce((SELECT string_agg(l::text, '|' ORDER BY l.sub_id, l.first_seq) FROM outbox.subscription_lease l), '')
               || '#' || coalesce((SELECT string_agg(v::text, '|' ORDER BY v.note) FROM bad_input.victim v), ''))
$$;

-- A result or message as printed: NULL as NULL, ids generated during the
-- call as <new id>, anything over 120 characters cut, with its length.
CREATE FUNCTION bad_input.show(t text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN t IS NULL THEN 'NULL'
        WHEN length(t) > 120 THEN left(t, 120) || '... (' || length(t) || ' characters)'
        ELSE regexp_replace(t, '(?!00000000-0000-)[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}',
                            '<new id>', 'g')
    END
$$;

-- Run one call (a statement returning one value) and an optional probe
-- after it in a subtransaction, report the outcome, and undo the call.
CREATE FUNCTION bad_input.try(stmt text, probe text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    before text := bad_input.state();
    result text;
    probed text;
    changed boolean;
    outcome text;
    st text;
    msg text;
BEGIN
    BEGIN
        EXECUTE stmt INTO result;
        changed := bad_input.state() <> before;
        IF probe IS NOT NULL THEN
            EXECUTE probe INTO probed;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'ZZ000';    -- undo the call
    EXCEPTION
        WHEN SQLSTATE 'ZZ000' THEN
            outcome := 'ok: ' || bad_input.show(result)
                || CASE WHEN changed THEN ', rows changed' ELSE ', no change' END
                || coalesce('; ' || probed, '');
        WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            outcome := 'error ' || st || ': ' || bad_input.show(msg);
    END;
    IF bad_input.state() <> before THEN
        outcome := outcome || ' -- STATE CHANGED';
    END IF;
    RETURN outcome;
END
$$;

--
-- The fixture the calls act on (ids 00000000-0000-7000-8000-00000000b00n):
--   b001 topic bi_leased, leased to "w"       (complete, fail, extend)
--   b002 topic bi_dead, dead                  (retry_dead, retry_dead_topic)
--   b003 topic bi_done, delivered             (purge)
--   b004 topic bi, due                        (claim)
--   b005 topic routed, due, routed to NOTIFY  (drain_once)
--   a marker of consumer "c" for b001         (consume_once)
--   a foreign server for remote routes, never connected to
--   an HTTP route of topic bi_http, with a secret (rotate_http_secret)
--   a subscription "bs" of topics bi_leased, bi_dead and bi, which reads
--   them from their start: b001 leased to "w" and b002 dead in it, b004
--   not read yet
--
CREATE FUNCTION bad_input.id(n integer) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT ('00000000-0000-7000-8000-00000000b' || lpad(n::text, 3, '0'))::uuid
$$;
SELECT outbox.append('bi_leased', 'evt.bi.v1', '{"n": 1}', bad_input.id(1));
SELECT outbox.append('bi_dead', 'evt.bi.v1', '{"n": 2}', bad_input.id(2));
SELECT outbox.append('bi_done', 'evt.bi.v1', '{"n": 3}', bad_input.id(3));
SELECT outbox.append('bi', 'evt.bi.v1', '{"n": 4}', bad_input.id(4));
SELECT outbox.append('routed', 'evt.bi.v1', '{"n": 5}', bad_input.id(5));
SELECT id, attempts FROM outbox.claim('w', 'bi_leased');
SET outbox.max_attempts = 1;
SELECT id, attempts FROM outbox.claim('w', 'bi_dead');
SELECT outbox.fail(bad_input.id(2), 'w', 'boom');
RESET outbox.max_attempts;
SELECT id, attempts FROM outbox.claim('w', 'bi_done');
SELECT outbox.complete(bad_input.id(3), 'w');
SELECT outbox.consume_once('c', bad_input.id(1));
SELECT outbox.route_notify('routed', 'routed_events');
SELECT outbox.route_http('bi_http', 'https://hooks.example.com/bi', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
UPDATE outbox.message SET created_at = '2024-01-02 03:04:05.678+00';
SELECT t AS topic, outbox.subscribe(t, 'bs', '-infinity') AS subscribed
  FROM unnest(ARRAY['bi_leased', 'bi_dead', 'bi']) AS t;
SELECT id FROM outbox.claim('w', 'bi_leased', NULL, NULL, 'bs');
SET outbox.max_attempts = 1;
SELECT id FROM outbox.claim('w', 'bi_dead', NULL, NULL, 'bs');
SELECT outbox.fail(bad_input.id(2), 'w', 'boom', 'bs');
RESET outbox.max_attempts;
CREATE EXTENSION dblink;
CREATE SERVER bad_input_srv FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'nowhere');
CREATE USER MAPPING FOR CURRENT_USER SERVER bad_input_srv OPTIONS (user 'nobody');
SELECT id, topic, attempts, leased_until IS NOT NULL AS leased, lease_owner,
       delivered_at IS NOT NULL AS delivered, dead_at IS NOT NULL AS dead
  FROM outbox.message ORDER BY id;
SELECT s.topic, s.name, x.id, x.attempts, x.leased_until IS NOT NULL AS leased, x.lease_owner,
       x.dead_at IS NOT NULL AS dead
  FROM regress.held() x JOIN outbox.subscription s USING (sub_id)
 ORDER BY x.id;
SELECT bad_input.state() AS fixture \gset

--
-- The values, by kind, as SQL expressions.  Untyped literals ('' and
-- '   ') are what a driver sends for any parameter: the type's input
-- function meets them before the extension does.
--
CREATE TABLE bad_input.val (kind text, n integer, label text, expr text);
INSERT INTO bad_input.val VALUES
    -- names (topic, type, owner, consumer, channel) and other text
    ('text', 1, 'NULL', 'NULL'),
    ('text', 2, 'empty', $$''$$),
    ('text', 3, 'spaces', $$'   '$$),
    ('text', 4, '1 MB ASCII', $$repeat('x', 1048576)$$),
    ('text', 5, '1 MB two-byte characters', $$repeat('é', 524288)$$),
    ('text', 6, 'invalid UTF-8 (convert_from of bytea)', $$convert_from('\xc328'::bytea, 'UTF8')$$),
    ('text', 7, 'invalid UTF-8 (escape in a literal)', $$E'ab\xffcd'$$),
    ('text', 8, 'invalid UTF-8 (SQL_ASCII bytes)', $$convert_from('\xff'::bytea, 'SQL_ASCII')$$),
    ('text', 9, 'NUL character', $$chr(0)$$),
    ('text', 10, 'injection: quote', $$'x''); DELETE FROM outbox.message; --'$$),
    ('text', 11, 'injection: double quote', $$'x"; DROP TABLE bad_input.victim; --'$$),
    ('text', 12, 'injection: dollar quote', $v$'$$; TRUNCATE bad_input.victim; $$'$v$),
    ('text', 13, 'format directives', $$'%s%n%x%%'$$),
    ('text', 14, '1 MB three-byte characters', $$repeat('€', 349526)$$),
    ('text', 15, 'U+00A0 U+200B U+FEFF (nothing shows)', $$chr(160) || chr(8203) || chr(65279)$$),
    -- the subscription of the fixture
    ('subscription', 16, 'subscription bs', $$'bs'$$),
    -- uuid
    ('uuid', 1, 'NULL', 'NULL'),
    ('uuid', 2, 'empty', $$''$$),
    ('uuid', 3, 'spaces', $$'   '$$),
    ('uuid', 4, 'malformed', $$'not-a-uuid'$$),
    ('uuid', 5, '1 MB string', $$repeat('0', 1048576)::uuid$$),
    ('uuid', 6, 'nil uuid', $$'00000000-0000-0000-0000-000000000000'$$),
    ('uuid', 7, 'max uuid', $$'ffffffff-ffff-ffff-ffff-ffffffffffff'$$),
    ('uuid', 8, 'unknown id', $$'00000000-0000-7000-8000-00000000ffff'$$),
    -- ids of the fixture: the calls as they are meant to be made
    ('fixture_id', 9, 'b001 (leased to w)', $$bad_input.id(1)$$),
    ('fixture_id', 10, 'b002 (dead)', $$bad_input.id(2)$$),
    ('fixture_id', 11, 'b004 (due)', $$bad_input.id(4)$$),
    -- integer
    ('int', 1, 'NULL', 'NULL'),
    ('int', 2, 'empty', $$''$$),
    ('int', 3, 'spaces', $$'   '$$),
    ('int', 4, 'zero', '0'),
    ('int', 5, 'negative', '-1'),
    ('int', 6, 'int4 minimum', '-2147483648'),
    ('int', 7, 'int4 maximum', '2147483647'),
    ('int', 8, 'int4 maximum + 1 (literal)', $$'2147483648'$$),
    ('int', 9, 'bigint', '9999999999'),
    ('int', 10, 'fraction', $$'1.5'$$),
    -- the ends of the batch_size and lease_seconds ranges
    ('batch_size', 11, 'range minimum (1)', '1'),
    ('batch_size', 12, 'range maximum (500)', '500'),
    ('batch_size', 13, 'range maximum + 1', '501'),
    ('lease_seconds', 11, 'range minimum - 1', '9'),
    ('lease_seconds', 12, 'range minimum (10)', '10'),
    ('lease_seconds', 13, 'range maximum (3600)', '3600'),
    ('lease_seconds', 14, 'range maximum + 1', '3601'),
    -- bigint
    ('bigint', 1, 'NULL', 'NULL'),
    ('bigint', 2, 'empty', $$''$$),
    ('bigint', 3, 'spaces', $$'   '$$),
    ('bigint', 4, 'zero', '0'),
    ('bigint', 5, 'negative', '-1'),
    ('bigint', 6, 'one', '1'),
    ('bigint', 7, 'int8 minimum', '-9223372036854775808'),
    ('bigint', 8, 'int8 maximum', '9223372036854775807'),
    ('bigint', 9, 'int8 maximum + 1 (literal)', $$'9223372036854775808'$$),
    -- interval
    ('interval', 1, 'NULL', 'NULL'),
    ('interval', 2, 'empty', $$''$$),
    ('interval', 3, 'spaces', $$'   '$$),
    ('interval', 4, 'zero', $$'0'$$),
    ('interval', 5, 'one microsecond', $$'1 microsecond'$$),
    ('interval', 6, 'negative', $$'-1 second'$$),
    ('interval', 7, 'infinity', $$'infinity'$$),
    ('interval', 8, 'months minus more days', $$'1 mon -31 days'$$),
    ('interval', 9, '1 million years', $$'1000000 years'$$),
    ('interval', 10, 'minus 1 million years', $$'-1000000 years'$$),
    ('interval', 11, 'maximum of every field', $$'178956970 years 7 months 2147483647 days 2562047788 hours'$$),
    -- now - 300000 years + 292277 years lies before 4714 BC: a horizon
    -- before the beginning of time, which keeps everything (README, purge)
    ('interval', 12, 'huge months, huge negative time', $$'300000 years -2562047787 hours'$$),
    -- timestamptz
    ('timestamptz', 1, 'NULL', 'NULL'),
    ('timestamptz', 2, 'empty', $$''$$),
    ('timestamptz', 3, 'spaces', $$'   '$$),
    ('timestamptz', 4, 'infinity', $$'infinity'$$),
    ('timestamptz', 5, '-infinity', $$'-infinity'$$),
    ('timestamptz', 6, 'earliest (4714 BC)', $$'4714-11-24 00:00:00+00 BC'$$),
    ('timestamptz', 7, 'latest (294276 AD)', $$'294276-12-31 23:59:59.999999+00'$$),
    ('timestamptz', 8, 'after the latest', $$'294277-01-01 00:00:00+00'$$),
    ('timestamptz', 9, 'Unix epoch', $$'epoch'$$),
    -- jsonb (a payload may be any JSON value)
    ('jsonb', 1, 'NULL', 'NULL'),
    ('jsonb', 2, 'empty', $$''$$),
    ('jsonb', 3, 'spaces', $$'   '$$),
    ('jsonb', 4, 'JSON null', $$'null'$$),
    ('jsonb', 5, 'number', $$'-1.5e300'$$),
    ('jsonb', 6, 'string', $$'"s"'$$),
    ('jsonb', 7, 'boolean', $$'false'$$),
    ('jsonb', 8, 'array', $$'[1, "two", null, [3]]'$$),
    ('jsonb', 9, 'nested 5000 deep', $$(repeat('[', 5000) || repeat(']', 5000))::jsonb$$),
    ('jsonb', 10, '1 MB string', $$to_jsonb(repeat('x', 1048576))$$),
    ('jsonb', 11, 'malformed', $$'{"a": '$$),
    ('jsonb', 12, 'escaped NUL', $$'"\u0000"'$$),
    ('jsonb', 13, 'lone surrogate', $$'"\ud800"'$$),
    ('jsonb', 14, 'number beyond numeric', $$'1e1000000'$$),
    -- jsonb[]
    ('jsonb[]', 1, 'NULL', 'NULL'),
    ('jsonb[]', 2, 'empty', $$''$$),
    ('jsonb[]', 3, 'spaces', $$'   '$$),
    ('jsonb[]', 4, 'empty array', $$'{}'$$),
    ('jsonb[]', 5, 'one NULL element', $$ARRAY[NULL]::jsonb[]$$),
    ('jsonb[]', 6, 'NULL among elements', $$ARRAY['1', NULL, '3']::jsonb[]$$),
    ('jsonb[]', 7, 'JSON null elements', $$ARRAY['null', 'null']::jsonb[]$$),
    ('jsonb[]', 8, 'every JSON type', $$ARRAY['1', '"s"', 'true', '[]', '{}', 'null']::jsonb[]$$),
    ('jsonb[]', 9, 'two-dimensional', $$ARRAY[['1', '2'], ['3', '4']]::jsonb[]$$),
    ('jsonb[]', 10, 'three-dimensional', $$'{{{1}}}'::jsonb[]$$),
    ('jsonb[]', 11, 'lower bound 5', $$'[5:6]={1,2}'::jsonb[]$$),
    ('jsonb[]', 12, '100000 elements', $$array_fill('{}'::jsonb, ARRAY[100000])$$),
    ('jsonb[]', 13, 'a 1 MB element', $$ARRAY[to_jsonb(repeat('x', 1048576))]$$),
    ('jsonb[]', 14, 'malformed', $$'{1,'$$),
    -- uuid[] (b001 is leased to "w")
    ('uuid[]', 1, 'NULL', 'NULL'),
    ('uuid[]', 2, 'empty', $$''$$),
    ('uuid[]', 3, 'spaces', $$'   '$$),
    ('uuid[]', 4, 'empty array', $$'{}'$$),
    ('uuid[]', 5, 'one NULL element', $$ARRAY[NULL]::uuid[]$$),
    ('uuid[]', 6, 'NULL among elements', $$ARRAY[bad_input.id(1), NULL]$$),
    ('uuid[]', 7, 'the same id twice', $$ARRAY[bad_input.id(1), bad_input.id(1)]$$),
    ('uuid[]', 8, 'two-dimensional', $$ARRAY[[bad_input.id(1)], [bad_input.id(4)]]$$),
    ('uuid[]', 9, 'lower bound 5', $$array_fill(bad_input.id(1), ARRAY[1], ARRAY[5])$$),
    ('uuid[]', 10, '1000000 elements', $$ARRAY(SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid
                                                FROM generate_series(1, 999999) g) || bad_input.id(1)$$),
    ('uuid[]', 11, 'malformed', $$'{x}'$$),
    -- name (a foreign server)
    ('name', 1, 'NULL', 'NULL'),
    ('name', 2, 'empty', $$''$$),
    ('name', 3, 'spaces', $$'   '$$),
    ('name', 4, '1 MB string', $$repeat('x', 1048576)$$),
    ('name', 5, 'invalid UTF-8 (convert_from of bytea)', $$convert_from('\xc328'::bytea, 'UTF8')$$),
    ('name', 6, 'injection: double quote', $$'bad_input_srv"; DROP TABLE bad_input.victim; --'$$),
    ('name', 7, 'unknown server', $$'no_such_server'$$),
    -- outbox.message rows, as a caller can build them
    ('message', 1, 'NULL', 'NULL'),
    ('message', 2, 'NULL id', $$ROW(NULL, 't', 'evt', '{}', '2024-01-02 03:04:05.678+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 3, 'NULL type', $$ROW(bad_input.id(9), 't', NULL, '{}', '2024-01-02 03:04:05.678+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 4, 'NULL created_at', $$ROW(bad_input.id(9), 't', 'evt', '{}', NULL, now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 5, 'NULL payload', $$ROW(bad_input.id(9), 't', 'evt', NULL, '2024-01-02 03:04:05.678+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 6, 'JSON null payload', $$ROW(bad_input.id(9), 't', 'evt', 'null', '2024-01-02 03:04:05.678+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 7, 'created_at infinity', $$ROW(bad_input.id(9), 't', 'evt', '{}', 'infinity', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 8, 'created_at -infinity', $$ROW(bad_input.id(9), 't', 'evt', '{}', '-infinity', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 9, 'created_at 4714 BC', $$ROW(bad_input.id(9), 't', 'evt', '{}', '4714-11-24 00:00:00+00 BC', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 10, 'created_at 294276 AD', $$ROW(bad_input.id(9), 't', 'evt', '{}', '294276-12-31 23:59:59+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 11, 'created_at last JavaScript instant', $$ROW(bad_input.id(9), 't', 'evt', '{}', '275760-09-13 00:00:00+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 12, 'created_at after the last JavaScript instant', $$ROW(bad_input.id(9), 't', 'evt', '{}', '275760-09-13 00:00:00.001+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 13, '1 MB type', $$ROW(bad_input.id(9), 't', repeat('x', 1048576), '{}', '2024-01-02 03:04:05.678+00', now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message$$),
    ('message', 14, 'from a JSON object', $$jsonb_populate_record(NULL::outbox.message, '{"id": "00000000-0000-7000-8000-00000000b009", "event_type": "evt"}')$$),
    ('message', 15, 'a jsonb instead', $$'{"id": "00000000-0000-7000-8000-00000000b009"}'::jsonb$$),
    ('message', 16, 'an anonymous record', $$ROW(bad_input.id(9), 'evt')$$),
    ('message', 17, 'a stored message', $$(SELECT m FROM outbox.message m WHERE id = bad_input.id(5))$$);

-- remote commands: refused, or stored as they are and never run here
INSERT INTO bad_input.val VALUES
    ('command', 1, 'NULL', 'NULL'),
    ('command', 2, 'empty', $$''$$),
    ('command', 3, 'spaces', $$'   '$$),
    ('command', 4, 'white space of every kind', $$E' \t\r\n\f' || chr(11)$$),
    ('command', 5, '1 MB of garbage', $$repeat('x', 1048576)$$),
    ('command', 6, '1 MB comment in a valid command', $$'SELECT $1 /* ' || repeat('x', 1048576) || ' */'$$),
    ('command', 7, 'invalid UTF-8 (convert_from of bytea)', $$convert_from('\xc328'::bytea, 'UTF8')$$),
    ('command', 8, 'an insert into the victim', $$'INSERT INTO bad_input.victim VALUES ($1)'$$),
    ('command', 9, 'a second statement', $$'SELECT $1; DROP TABLE bad_input.victim'$$),
    ('command', 10, 'a second statement after a comment', $$E'SELECT $1 -- x\n; DROP TABLE bad_input.victim'$$),
    ('command', 11, 'a statement inside a string', $$'SELECT $1, ''; DROP TABLE bad_input.victim; --'''$$),
    ('command', 12, 'a statement inside a dollar quote', $$'SELECT $1, $x$; DROP TABLE bad_input.victim; $x$'$$),
    ('command', 13, 'unterminated string', $$'SELECT $1, ''oops'$$),
    ('command', 14, 'DROP TABLE', $$'DROP TABLE bad_input.victim'$$),
    ('command', 15, 'DO block', $$'DO $x$ BEGIN DROP TABLE bad_input.victim; END $x$'$$),
    ('command', 16, 'COPY TO PROGRAM', $$'COPY (SELECT $1) TO PROGRAM ''rm -rf /'''$$),
    ('command', 17, 'SELECT INTO', $$'SELECT $1 INTO bad_input.copied'$$),
    ('command', 18, 'SET ROLE', $$'SET ROLE postgres'$$),
    ('command', 19, 'BEGIN', $$'BEGIN'$$),
    ('command', 20, 'EXPLAIN ANALYZE', $$'EXPLAIN ANALYZE DELETE FROM bad_input.victim WHERE $1 IS NOT NULL'$$),
    ('command', 21, 'no $1', $$'SELECT $2'$$),
    ('command', 22, '$0', $$'SELECT $1, $0'$$),
    ('command', 23, '$3', $$'SELECT $1, $3'$$),
    ('command', 24, '$1 in a string only', $$'SELECT ''$1'''$$),
    ('command', 25, 'a sleep', $$'SELECT $1 FROM pg_sleep(3600)'$$),
    ('command', 26, 'CALL', $$'CALL bad_input.nothing($1)'$$),
    ('command', 27, 'a data-modifying CTE', $$'WITH d AS (DELETE FROM bad_input.victim RETURNING 1) SELECT $1'$$);

--
-- The calls: every argument of every function, with %v for the value and
-- the other arguments valid.  A probe, where given, shows what the call
-- stored.
--
CREATE TABLE bad_input.call (fn text, n integer, arg text, kinds text, stmt text, probe text);
INSERT INTO bad_input.call VALUES
    ('append', 1, 'topic', 'text', $$SELECT outbox.append(%v, 'evt.bi.v1', '{}')$$, NULL),
    ('append', 2, 'type', 'text', $$SELECT outbox.append('bi', %v, '{}')$$, NULL),
    ('append', 3, 'payload', 'jsonb', $$SELECT outbox.append('bi', 'evt.bi.v1', %v)$$,
     $$SELECT 'stored ' || jsonb_typeof(payload) || ' of ' || octet_length(payload::text) || ' bytes' FROM outbox.message WHERE topic = 'bi' AND id <> bad_input.id(4)$$),
    ('append', 4, 'id', 'uuid fixture_id', $$SELECT outbox.append('bi', 'evt.bi.v1', '{"n": 4}', %v)$$,
     $$SELECT 'messages: ' || count(*) FROM outbox.message$$),
    ('append', 5, 'available_at', 'timestamptz', $$SELECT outbox.append('bi', 'evt.bi.v1', '{}', bad_input.id(8), %v)$$,
     $$SELECT 'available_at ' || CASE WHEN available_at > clock_timestamp() THEN 'later' ELSE 'due' END FROM outbox.message WHERE id = bad_input.id(8)$$),
    ('append', 6, 'ordering_key', 'text', $$SELECT outbox.append('bi', 'evt.bi.v1', '{}', bad_input.id(7), NULL, %v)$$,
     $$SELECT 'ordering_key ' || bad_input.show(ordering_key) FROM outbox.message WHERE id = bad_input.id(7)$$),
    ('append_batch', 1, 'topic', 'text', $$SELECT count(*) FROM outbox.append_batch(%v, 'evt.bi.v1', ARRAY['{}'::jsonb])$$, NULL),
    ('append_batch', 2, 'type', 'text', $$SELECT count(*) FROM outbox.append_batch('bi', %v, ARRAY['{}'::jsonb])$$, NULL),
    ('append_batch', 3, 'payloads', 'jsonb[]', $$SELECT count(*) FROM outbox.append_batch('bi', 'evt.bi.v1', %v)$$, NULL),
    ('append_batch', 4, 'ordering_key', 'text', $$SELECT count(*) FROM outbox.append_batch('bi', 'evt.bi.v1', ARRAY['{}'::jsonb], %v)$$, NULL),
    ('claim', 1, 'owner', 'text', $$SELECT count(*) FROM outbox.claim(%v, 'bi')$$,
     $$SELECT 'lease_owner ' || bad_input.show(lease_owner) FROM outbox.message WHERE id = bad_input.id(4)$$),
    ('claim', 2, 'topic', 'text', $$SELECT count(*) FROM outbox.claim('w2', %v)$$, NULL),
    ('claim', 3, 'batch_size', 'int batch_size', $$SELECT count(*) FROM outbox.claim('w2', NULL, %v)$$, NULL),
    ('claim', 4, 'lease_seconds', 'int lease_seconds', $$SELECT count(*) FROM outbox.claim('w2', 'bi', 1, %v)$$,
     $$SELECT 'lease ' || ceil(extract(epoch FROM leased_until - clock_timestamp())) || ' s' FROM outbox.message WHERE id = bad_input.id(4)$$),
    ('claim', 5, 'subscription', 'text subscription', $$SELECT count(*) FROM outbox.claim('w2', 'bi', 1, NULL, %v)$$, NULL),
    ('complete', 1, 'id', 'uuid fixture_id', $$SELECT outbox.complete(%v, 'w')$$, NULL),
    ('complete', 2, 'owner', 'text', $$SELECT outbox.complete(bad_input.id(1), %v)$$, NULL),
    ('complete', 3, 'subscription', 'text subscription', $$SELECT outbox.complete(bad_input.id(1), 'w', %v)$$, NULL),
    ('complete_many', 1, 'ids', 'uuid[]', $$SELECT outbox.complete_many(%v, 'w')$$, NULL),
    ('complete_many', 2, 'owner', 'text', $$SELECT outbox.complete_many(ARRAY[bad_input.id(1)], %v)$$, NULL),
    ('complete_many', 3, 'subscription', 'text subscription', $$SELECT outbox.complete_many(ARRAY[bad_input.id(1)], 'w', %v)$$, NULL),
    ('complete_and_claim', 1, 'ids', 'uuid[]', $$SELECT count(*) FROM outbox.complete_and_claim(%v, 'w', 'bi', 1)$$, NULL),
    ('complete_and_claim', 2, 'owner', 'text', $$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[bad_input.id(1)], %v, 'bi', 1)$$, NULL),
    ('complete_and_claim', 3, 'topic', 'text', $$SELECT count(*) FROM outbox.complete_and_claim('{}', 'w2', %v, 1)$$, NULL),
    ('complete_and_claim', 4, 'batch_size', 'int batch_size', $$SELECT count(*) FROM outbox.complete_and_claim('{}', 'w2', NULL, %v)$$, NULL),
    ('complete_and_claim', 5, 'lease_seconds', 'int lease_seconds', $$SELECT count(*) FROM outbox.complete_and_claim('{}', 'w2', 'bi', 1, %v)$$, NULL),
    ('complete_and_claim', 6, 'subscription', 'text subscription', $$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[bad_input.id(1)], 'w', 'bi_leased', 1, NULL, %v)$$, NULL),
    ('fail', 1, 'id', 'uuid fixture_id', $$SELECT outbox.fail(%v, 'w', 'boom')$$, NULL),
    ('fail', 2, 'owner', 'text', $$SELECT outbox.fail(bad_input.id(1), %v, 'boom')$$, NULL),
    ('fail', 3, 'error', 'text', $$SELECT outbox.fail(bad_input.id(1), 'w', %v)$$,
     $$SELECT 'last_error of ' || length(last_error) || ' characters, ' || octet_length(last_error) || ' bytes' FROM outbox.message WHERE id = bad_input.id(1)$$),
    ('fail', 4, 'subscription', 'text subscription', $$SELECT outbox.fail(bad_input.id(1), 'w', 'boom', %v)$$, NULL),
    ('extend', 1, 'id', 'uuid fixture_id', $$SELECT outbox.extend(%v, 'w')$$, NULL),
    ('extend', 2, 'owner', 'text', $$SELECT outbox.extend(bad_input.id(1), %v)$$, NULL),
    ('extend', 3, 'lease_seconds', 'int lease_seconds', $$SELECT outbox.extend(bad_input.id(1), 'w', %v)$$,
     $$SELECT 'lease ' || ceil(extract(epoch FROM leased_until - clock_timestamp())) || ' s' FROM outbox.message WHERE id = bad_input.id(1)$$),
    ('extend', 4, 'subscription', 'text subscription', $$SELECT outbox.extend(bad_input.id(1), 'w', NULL, %v)$$, NULL),
    ('retry_dead', 1, 'id', 'uuid fixture_id', $$SELECT outbox.retry_dead(%v)$$, NULL),
    ('retry_dead', 2, 'subscription', 'text subscription', $$SELECT outbox.retry_dead(bad_input.id(2), %v)$$, NULL),
    ('retry_dead_topic', 1, 'topic', 'text', $$SELECT outbox.retry_dead_topic(%v)$$, NULL),
    ('retry_dead_topic', 2, 'subscription', 'text subscription', $$SELECT outbox.retry_dead_topic('bi_dead', %v)$$, NULL),
    ('subscribe', 1, 'topic', 'text', $$SELECT outbox.subscribe(%v, 'bs2')$$, NULL),
    ('subscribe', 2, 'subscription', 'text subscription', $$SELECT outbox.subscribe('bi', %v)$$, NULL),
    ('subscribe', 3, 'since', 'timestamptz', $$SELECT outbox.subscribe('bi', 'bs2', %v)$$,
     $$SELECT 'claims ' || count(*) FROM outbox.claim('w3', 'bi', 500, NULL, 'bs2')$$),
    ('unsubscribe', 1, 'topic', 'text', $$SELECT outbox.unsubscribe(%v, 'bs')$$, NULL),
    ('unsubscribe', 2, 'subscription', 'text subscription', $$SELECT outbox.unsubscribe('bi_leased', %v)$$, NULL),
    ('pause', 1, 'topic', 'text', $$SELECT outbox.pause(%v, 'bs')$$, NULL),
    ('pause', 2, 'subscription', 'text subscription', $$SELECT outbox.pause('bi', %v)$$, NULL),
    ('pause', 3, 'until', 'timestamptz', $$SELECT outbox.pause('bi', 'bs', %v)$$,
     $$SELECT 'claims ' || count(*) FROM outbox.claim('w3', 'bi', 500, NULL, 'bs')$$),
    ('resume', 1, 'topic', 'text', $$SELECT outbox.resume(%v, 'bs')$$, NULL),
    ('resume', 2, 'subscription', 'text subscription', $$SELECT outbox.resume('bi', %v)$$, NULL),
    ('purge', 1, 'older_than', 'interval', $$SELECT outbox.purge(%v)$$, NULL),
    ('purge', 2, 'max_rows', 'bigint', $$SELECT outbox.purge('0', %v)$$, NULL),
    ('consume_once', 1, 'consumer', 'text', $$SELECT outbox.consume_once(%v, bad_input.id(1))$$, NULL),
    ('consume_once', 2, 'message_id', 'uuid fixture_id', $$SELECT outbox.consume_once('c', %v)$$, NULL),
    ('envelope', 1, 'm', 'message',
     $$SELECT format('keys %s, occurredAt %s, payload %s, type of %s characters',
                     (SELECT string_agg(k, ',' ORDER BY k) FROM jsonb_object_keys(e) k),
                     e ->> 'occurredAt', left((e -> 'payload')::text, 20), length(e ->> 'type'))
        FROM (SELECT outbox.envelope(%v) AS e) s$$, NULL),
    ('envelope_by_id', 1, 'id', 'uuid fixture_id', $$SELECT outbox.envelope_by_id(%v) - 'occurredAt'$$, NULL),
    ('route_notify', 1, 'topic', 'text', $$SELECT outbox.route_notify(%v, 'bi_events')$$, NULL),
    ('route_notify', 2, 'channel', 'text', $$SELECT outbox.route_notify('bi', %v)$$, NULL),
    ('route_remote', 1, 'topic', 'text', $$SELECT outbox.route_remote(%v, 'bad_input_srv', 'SELECT $1')$$, NULL),
    ('route_remote', 2, 'server', 'name', $$SELECT outbox.route_remote('bi', %v, 'SELECT $1')$$, NULL),
    ('route_remote', 3, 'command', 'command', $$SELECT outbox.route_remote('bi', 'bad_input_srv', %v)$$,
     $$SELECT 'stored ' || length(command) || ' characters' FROM outbox.routes WHERE topic = 'bi'$$),
    ('route_http', 1, 'topic', 'text', $$SELECT outbox.route_http(%v, 'https://hooks.example.com/in')$$, NULL),
    ('route_http', 2, 'url', 'text', $$SELECT outbox.route_http('bi', %v)$$,
     $$SELECT 'stored ' || bad_input.show(url) FROM outbox.routes WHERE topic = 'bi'$$),
    ('route_http', 3, 'secret', 'text', $$SELECT outbox.route_http('bi', 'https://hooks.example.com/in', %v)$$, NULL),
    ('route_http', 4, 'headers', 'jsonb', $$SELECT outbox.route_http('bi', 'https://hooks.example.com/in', NULL, %v)$$,
     $$SELECT 'headers ' || bad_input.show(headers::text) FROM outbox.route_secrets WHERE topic = 'bi'$$),
    ('route_http', 5, 'ca_file', 'text', $$SELECT outbox.route_http('bi', 'https://hooks.example.com/in', NULL, NULL, %v)$$, NULL),
    ('rotate_http_secret', 1, 'topic', 'text', $$SELECT outbox.rotate_http_secret(%v, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')$$, NULL),
    ('rotate_http_secret', 2, 'new_secret', 'text', $$SELECT outbox.rotate_http_secret('bi_http', %v)$$, NULL),
    ('rotate_http_secret', 3, 'keep_old_for', 'interval', $$SELECT outbox.rotate_http_secret('bi_http', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', %v)$$,
     $$SELECT 'old secret kept ' || CASE WHEN previous_until > now() THEN 'a while' ELSE 'not at all' END FROM outbox.route_secrets WHERE topic = 'bi_http'$$),
    ('webhook_signature', 1, 'secret', 'text', $$SELECT outbox.webhook_signature(%v, 'msg_1', 1614265330, '{}')$$, NULL),
    ('webhook_signature', 2, 'msg_id', 'text', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', %v, 1614265330, '{}')$$, NULL),
    ('webhook_signature', 3, 'ts', 'bigint', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_1', %v, '{}')$$, NULL),
    ('webhook_signature', 4, 'body', 'text', $$SELECT outbox.webhook_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_1', 1614265330, %v)$$, NULL),
    ('route_notify', 3, 'subscription', 'text subscription', $$SELECT outbox.route_notify('bi_sr', 'bi_events', %v)$$,
     $$SELECT 'routes ' || string_agg(coalesce(subscription, '(default)'), ',' ORDER BY subscription NULLS FIRST) FROM outbox.routes WHERE topic = 'bi_sr'$$),
    ('route_remote', 4, 'subscription', 'text subscription', $$SELECT outbox.route_remote('bi_sr', 'bad_input_srv', 'SELECT $1', %v)$$, NULL),
    ('route_http', 6, 'subscription', 'text subscription', $$SELECT outbox.route_http('bi_sr', 'https://hooks.example.com/in', NULL, NULL, NULL, %v)$$,
     $$SELECT 'http routes ' || string_agg(coalesce(subscription, '(default)'), ',' ORDER BY subscription NULLS FIRST) FROM outbox.routes WHERE topic = 'bi_sr' AND target = 'http'$$),
    ('rotate_http_secret', 4, 'subscription', 'text subscription', $$SELECT outbox.rotate_http_secret('bi_http', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '1 hour', %v)$$, NULL),
    ('unroute', 1, 'topic', 'text', $$SELECT outbox.unroute(%v)$$, NULL),
    ('unroute', 2, 'subscription', 'text subscription', $$SELECT outbox.unroute('bi_sr', %v)$$, NULL),
    ('check_route', 1, 'topic', 'text', $$SELECT count(*) FROM outbox.check_route(%v)$$, NULL),
    ('check_route', 2, 'subscription', 'text subscription', $$SELECT count(*) FROM outbox.check_route('bi_sr', %v)$$, NULL),
    ('drain_once', 1, 'topic', 'text', $$SELECT outbox.drain_once(%v)$$, NULL);

-- every function of the extension has its calls (worker_status has no
-- argument and is called below)
SELECT p.proname
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND p.proname NOT IN (SELECT fn FROM bad_input.call)
 ORDER BY 1;
SELECT p.oid::regprocedure AS argument_without_calls, a.name
  FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS a(name, n)
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND coalesce(p.proargmodes[a.n], 'i') = 'i'
   AND NOT EXISTS (SELECT FROM bad_input.call c WHERE c.fn = p.proname AND c.arg = a.name)
 ORDER BY 1, 2;

--
-- The matrix.  Notices are silenced: the parser warns about 1 MB
-- identifiers by repeating them.
--
SET client_min_messages = warning;
CREATE TABLE bad_input.outcome AS
SELECT c.fn, c.arg, v.label, bad_input.try(replace(c.stmt, '%v', v.expr), c.probe) AS outcome,
       c.n AS cn, v.n AS vn
  FROM bad_input.call c JOIN bad_input.val v ON v.kind = ANY (string_to_array(c.kinds, ' '));
RESET client_min_messages;

SELECT fn AS function, arg AS argument, label AS value, outcome
  FROM bad_input.outcome
 ORDER BY fn, cn, vn;

-- summary: no call left anything behind, every error has a proper SQLSTATE
-- (none of class XX, internal)
SELECT count(*) AS calls,
       count(*) FILTER (WHERE outcome LIKE 'error %') AS errors,
       count(*) FILTER (WHERE outcome LIKE '%STATE CHANGED%') AS left_changes,
       count(*) FILTER (WHERE outcome LIKE 'error XX%') AS internal_errors
  FROM bad_input.outcome;
SELECT bad_input.state() = :'fixture' AS fixture_unchanged;

-- worker_status takes no argument; without workers configured it has no rows
SELECT bad_input.try('SELECT count(*) FROM outbox.worker_status()') AS worker_status;

--
-- SQL in topics, types, owners, consumers and errors is data: stored and
-- matched as it is
--
BEGIN;
SELECT outbox.append($$x'); DELETE FROM outbox.message; --$$, $$evt"; DROP TABLE bad_input.victim; --$$,
                     '{"sql": "DROP TABLE outbox.message"}', bad_input.id(10));
SELECT id, attempts FROM outbox.claim($$w'); UPDATE outbox.message SET dead_at = now(); --$$,
                                      $$x'); DELETE FROM outbox.message; --$$);
SELECT outbox.fail(bad_input.id(10), $$w'); UPDATE outbox.message SET dead_at = now(); --$$,
                   $$'); DELETE FROM outbox.message; --$$);
SELECT outbox.consume_once($$c'); DELETE FROM outbox.processed; --$$, bad_input.id(10));
SELECT topic, event_type, lease_owner, last_error FROM outbox.message WHERE id = bad_input.id(10);
SELECT consumer FROM outbox.processed WHERE message_id = bad_input.id(10);
SELECT count(*) AS messages FROM outbox.message;
SELECT * FROM bad_input.victim;
ROLLBACK;

--
-- Hostile objects in front of pg_catalog (public, and pg_temp first) for
-- the functions that search_path.sql does not cover: routes, unroute,
-- drain_once, envelope_by_id and worker_status.  Each decoy would leave a
-- mark in bad_input.victim, or change what is read or written, if used.
--
CREATE TABLE public.routes (LIKE outbox.routes INCLUDING DEFAULTS);
CREATE TEMP TABLE routes (LIKE outbox.routes INCLUDING DEFAULTS);
CREATE TEMP TABLE message (LIKE outbox.message);
CREATE FUNCTION public.mark(what text) RETURNS void LANGUAGE sql
    AS $$INSERT INTO bad_input.victim VALUES ('used: ' || what)$$;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE sql
    AS $$SELECT public.mark('pg_notify')$$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql
    AS $$SELECT public.mark('now'); SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$SELECT public.mark('clock_timestamp'); SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.text_eq(text, text) RETURNS boolean LANGUAGE sql
    AS $$SELECT public.mark('text ='); SELECT true$$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.text_eq);
CREATE FUNCTION public.lower(text) RETURNS text LANGUAGE sql
    AS $$SELECT public.mark('lower'); SELECT 'hostile'$$;
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE sql
    AS $$SELECT public.mark('format'); SELECT 'hostile'$$;
CREATE FUNCTION public.jsonb_build_object(text, text) RETURNS jsonb LANGUAGE sql
    AS $$SELECT public.mark('jsonb_build_object'); SELECT '{}'::jsonb$$;
INSERT INTO public.routes (topic, target, channel, created_by, created_at)
VALUES ('routed', 'notify', 'decoy_events', 'decoy', '2000-01-01 00:00:00+00');
INSERT INTO pg_temp.routes SELECT * FROM public.routes;

SELECT bad_input.state() AS before_hostile \gset
BEGIN;
SET LOCAL search_path = pg_temp, public, pg_catalog;
-- in force for plain SQL
SELECT 'a'::text = 'b'::text AS hostile_eq, (SELECT count(*) FROM routes) AS hostile_routes;
-- (the decoy = just left its mark: clear it)
DELETE FROM bad_input.victim WHERE note LIKE 'used:%';
SELECT outbox.route_notify('hostile', 'hostile_events');
SELECT outbox.route_remote('hostile_remote', 'bad_input_srv', 'INSERT INTO bad_input.victim VALUES ($1)');
SELECT outbox.unroute('hostile_remote');
SELECT outbox.drain_once('routed');
SELECT outbox.drain_once('routed');
SELECT outbox.envelope_by_id(bad_input.id(5)) - 'occurredAt' AS envelope;
SELECT count(*) AS workers FROM outbox.worker_status();
RESET search_path;
-- the real tables changed as the calls say, and no decoy was used
SELECT topic, target, channel, server, command FROM outbox.routes ORDER BY topic;
SELECT id, delivered_at IS NOT NULL AS delivered, attempts FROM outbox.message WHERE topic = 'routed';
SELECT * FROM bad_input.victim;
SELECT count(*) AS decoy_routes FROM public.routes;
SELECT count(*) AS decoy_temp_routes FROM pg_temp.routes;
SELECT count(*) AS decoy_temp_messages FROM pg_temp.message;
ROLLBACK;
SELECT bad_input.state() = :'before_hostile' AS unchanged;

-- and the same functions with no search_path at all
BEGIN;
SET LOCAL search_path = '';
SELECT outbox.route_notify('empty_path', 'empty_path_events');
SELECT outbox.route_remote('empty_path_remote', 'bad_input_srv', 'SELECT $1');
SELECT outbox.unroute('empty_path_remote');
SELECT outbox.drain_once('routed');
SELECT outbox.envelope_by_id(bad_input.id(5)) OPERATOR(pg_catalog.-) 'occurredAt' AS envelope;
SELECT pg_catalog.count(*) AS workers FROM outbox.worker_status();
RESET search_path;
SELECT topic, target, channel, server, command FROM outbox.routes ORDER BY topic;
SELECT * FROM bad_input.victim;
ROLLBACK;
SELECT bad_input.state() = :'before_hostile' AS unchanged;

DROP TABLE public.routes, pg_temp.routes, pg_temp.message;
DROP OPERATOR public.= (text, text);
DROP FUNCTION public.text_eq(text, text), public.pg_notify(text, text), public.now(),
              public.clock_timestamp(), public.lower(text), public.format(text, text),
              public.jsonb_build_object(text, text);
DROP FUNCTION public.mark(text);

--
-- The same backend and the same postmaster as at the start: no call
-- crashed anything
--
SELECT pg_backend_pid() = :pid AS same_backend,
       pg_postmaster_start_time() = :'postmaster_started' AS same_postmaster,
       (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) = :'backend_started'
           AS same_session;

DROP SCHEMA bad_input CASCADE;
DROP USER MAPPING FOR CURRENT_USER SERVER bad_input_srv;
DROP SERVER bad_input_srv;
DROP EXTENSION dblink;
TRUNCATE outbox.routes;
SELECT count(outbox.unsubscribe(topic, name)) AS unsubscribed FROM outbox.subscription;
SELECT regress.reset();
RESET TimeZone;
