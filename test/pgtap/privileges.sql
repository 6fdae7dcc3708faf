-- The privilege contract: nothing is open to PUBLIC, and the README's
-- recipe of writer, worker and operator roles gives each role exactly what
-- it needs through EXECUTE alone (the functions are SECURITY DEFINER).
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS krizaka_outbox;

SELECT plan(358);

--
-- nothing for PUBLIC: not the schema, not the tables, not one function
--
SELECT is_empty($$SELECT a.privilege_type FROM pg_namespace n,
                          aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) AS a
                   WHERE n.nspname = 'outbox' AND a.grantee = 0$$,
                'PUBLIC has no privilege on schema outbox');
SELECT is_empty($$SELECT c.relname, a.privilege_type FROM pg_class c,
                          aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) AS a
                   WHERE c.relnamespace = 'outbox'::regnamespace AND a.grantee = 0$$,
                'PUBLIC has no privilege on any table of outbox');
SELECT is_empty($$SELECT p.oid::regprocedure, a.privilege_type FROM pg_proc p,
                          aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                   WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee = 0$$,
                'PUBLIC may execute no function of outbox');
-- and nobody but the owner has anything after CREATE EXTENSION by a superuser
SELECT is_empty($$SELECT c.relname, a.grantee::regrole FROM pg_class c,
                          aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) AS a
                   WHERE c.relnamespace = 'outbox'::regnamespace AND a.grantee <> c.relowner$$,
                'no role but the owner has a privilege on the tables');
SELECT is_empty($$SELECT p.oid::regprocedure, a.grantee::regrole FROM pg_proc p,
                          aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                   WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee <> p.proowner$$,
                'no role but the owner may execute a function');

--
-- the README recipe
--
CREATE ROLE outbox_test_writer NOLOGIN;
CREATE ROLE outbox_test_worker NOLOGIN;
CREATE ROLE outbox_test_operator NOLOGIN;
CREATE ROLE outbox_test_nobody NOLOGIN;

-- a server for remote routes, pointing nowhere (routes make no connection)
CREATE EXTENSION IF NOT EXISTS dblink;
CREATE SERVER outbox_test_server FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'x');

GRANT USAGE ON SCHEMA outbox TO outbox_test_writer, outbox_test_worker, outbox_test_operator;
GRANT EXECUTE ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text),
                          outbox.append_batch(text, text, jsonb[], text),
                          outbox.consume_once(text, uuid)
      TO outbox_test_writer;
GRANT EXECUTE ON FUNCTION outbox.claim(text, text, integer, integer, text),
                          outbox.extend(uuid, text, integer, text),
                          outbox.complete(uuid, text, text),
                          outbox.complete_many(uuid[], text, text),
                          outbox.complete_and_claim(uuid[], text, text, integer, integer, text),
                          outbox.fail(uuid, text, text, text),
                          outbox.envelope(outbox.message),
                          outbox.envelope_by_id(uuid)
      TO outbox_test_worker;
GRANT EXECUTE ON FUNCTION outbox.route_notify(text, text),
                          outbox.route_remote(text, name, text),
                          outbox.check_route(text),
                          outbox.unroute(text),
                          outbox.route_notify(text, text, text),
                          outbox.route_remote(text, name, text, text),
                          outbox.check_route(text, text),
                          outbox.unroute(text, text),
                          outbox.retry_dead(uuid, text),
                          outbox.retry_dead_topic(text, text),
                          outbox.purge(interval, bigint),
                          outbox.drain_once(text),
                          outbox.worker_status(),
                          outbox.route_http(text, text, text, jsonb, text),
                          outbox.rotate_http_secret(text, text, interval),
                          outbox.route_http(text, text, text, jsonb, text, text),
                          outbox.rotate_http_secret(text, text, interval, text),
                          outbox.webhook_signature(text, text, bigint, text),
                          outbox.subscribe(text, text, timestamptz),
                          outbox.unsubscribe(text, text),
                          outbox.pause(text, text, timestamptz),
                          outbox.resume(text, text)
      TO outbox_test_operator;
GRANT SELECT ON outbox.routes, outbox.topic_stats, outbox.route_http_stats, outbox.subscription_stats
      TO outbox_test_operator;

-- what each role holds: exactly its grants
SELECT schema_privs_are('outbox', r, CASE WHEN r = 'outbox_test_nobody' THEN '{}'::text[] ELSE ARRAY['USAGE'] END,
                        format('%s: %s on schema outbox', r,
                               CASE WHEN r = 'outbox_test_nobody' THEN 'no privilege' ELSE 'USAGE' END))
  FROM unnest(ARRAY['outbox_test_writer', 'outbox_test_worker', 'outbox_test_operator',
                    'outbox_test_nobody']::name[]) AS r;
SELECT table_privs_are('outbox', t, r, '{}'::text[], format('%s: no privilege on outbox.%s', r, t))
  FROM unnest(ARRAY['outbox_test_writer', 'outbox_test_worker', 'outbox_test_operator',
                    'outbox_test_nobody']::name[]) AS r,
       unnest(ARRAY['message', 'processed', 'route_secrets', 'subscription', 'subscription_state',
                    'subscription_frontier', 'subscription_lease', 'subscription_key',
                    'claim_position']::name[]) AS t;
-- the routes and the statistics: SELECT for the operator, nothing for the others
SELECT table_privs_are('outbox', t, r,
                       CASE WHEN r = 'outbox_test_operator' THEN ARRAY['SELECT'] ELSE '{}'::text[] END,
                       format('%s: %s on outbox.%s', r,
                              CASE WHEN r = 'outbox_test_operator' THEN 'SELECT' ELSE 'no privilege' END, t))
  FROM unnest(ARRAY['outbox_test_writer', 'outbox_test_worker', 'outbox_test_operator',
                    'outbox_test_nobody']::name[]) AS r,
       unnest(ARRAY['routes', 'topic_stats', 'route_http_stats', 'subscription_stats']::name[]) AS t;

CREATE TEMP TABLE recipe (fn name, args name[], role name) ON COMMIT DROP;
INSERT INTO recipe VALUES
    ('append', '{text,text,jsonb,uuid,timestamp with time zone,text}', 'outbox_test_writer'),
    ('append_batch', '{text,text,jsonb[],text}', 'outbox_test_writer'),
    ('consume_once', '{text,uuid}', 'outbox_test_writer'),
    ('claim', '{text,text,integer,integer,text}', 'outbox_test_worker'),
    ('extend', '{uuid,text,integer,text}', 'outbox_test_worker'),
    ('complete', '{uuid,text,text}', 'outbox_test_worker'),
    ('complete_many', '{uuid[],text,text}', 'outbox_test_worker'),
    ('complete_and_claim', '{uuid[],text,text,integer,integer,text}', 'outbox_test_worker'),
    ('fail', '{uuid,text,text,text}', 'outbox_test_worker'),
    ('envelope', '{outbox.message}', 'outbox_test_worker'),
    ('envelope_by_id', '{uuid}', 'outbox_test_worker'),
    ('route_notify', '{text,text}', 'outbox_test_operator'),
    ('route_remote', '{text,name,text}', 'outbox_test_operator'),
    ('check_route', '{text}', 'outbox_test_operator'),
    ('unroute', '{text}', 'outbox_test_operator'),
    ('route_notify', '{text,text,text}', 'outbox_test_operator'),
    ('route_remote', '{text,name,text,text}', 'outbox_test_operator'),
    ('check_route', '{text,text}', 'outbox_test_operator'),
    ('unroute', '{text,text}', 'outbox_test_operator'),
    ('retry_dead', '{uuid,text}', 'outbox_test_operator'),
    ('retry_dead_topic', '{text,text}', 'outbox_test_operator'),
    ('purge', '{interval,bigint}', 'outbox_test_operator'),
    ('drain_once', '{text}', 'outbox_test_operator'),
    ('worker_status', '{}', 'outbox_test_operator'),
    ('route_http', '{text,text,text,jsonb,text}', 'outbox_test_operator'),
    ('rotate_http_secret', '{text,text,interval}', 'outbox_test_operator'),
    ('route_http', '{text,text,text,jsonb,text,text}', 'outbox_test_operator'),
    ('rotate_http_secret', '{text,text,interval,text}', 'outbox_test_operator'),
    ('webhook_signature', '{text,text,bigint,text}', 'outbox_test_operator'),
    ('subscribe', '{text,text,timestamp with time zone}', 'outbox_test_operator'),
    ('unsubscribe', '{text,text}', 'outbox_test_operator'),
    ('pause', '{text,text,timestamp with time zone}', 'outbox_test_operator'),
    ('resume', '{text,text}', 'outbox_test_operator');
-- the recipe names every function of the extension
SELECT set_eq($$SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace$$,
              $$SELECT fn FROM recipe$$,
              'the recipe covers every function of outbox');
SELECT function_privs_are('outbox', f.fn, f.args, r,
                          CASE WHEN f.role = r THEN ARRAY['EXECUTE'] ELSE '{}'::text[] END,
                          format('%s: %s outbox.%s', r,
                                 CASE WHEN f.role = r THEN 'may execute' ELSE 'may not execute' END, f.fn))
  FROM recipe f,
       unnest(ARRAY['outbox_test_writer', 'outbox_test_worker', 'outbox_test_operator',
                    'outbox_test_nobody']::name[]) AS r
 ORDER BY r, f.fn;

--
-- and what each role can really do
--

-- Run stmt as role r; 'ok', or the SQLSTATE of the error.
CREATE FUNCTION pg_temp.as_role(r name, stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE stmt;
    RESET ROLE;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;

TRUNCATE outbox.message, outbox.processed;

-- the writer appends and marks, and does nothing else
SELECT is(pg_temp.as_role('outbox_test_writer', $$SELECT outbox.append('t', 'evt.t.v1', '{}', '00000000-0000-7000-8000-000000000001')$$),
          'ok', 'writer: append');
SELECT is(pg_temp.as_role('outbox_test_writer', $$SELECT outbox.append('t', 'evt.t.v1', '{"new": true}')$$),
          'ok', 'writer: append with a new id');
SELECT is(pg_temp.as_role('outbox_test_writer', $$SELECT outbox.append_batch('t', 'evt.t.v1', ARRAY['1', '2']::jsonb[])$$),
          'ok', 'writer: append_batch');
SELECT is(pg_temp.as_role('outbox_test_writer', $$SELECT outbox.consume_once('c', '00000000-0000-7000-8000-000000000001')$$),
          'ok', 'writer: consume_once');
SELECT is((SELECT count(*) FROM outbox.message WHERE id = '00000000-0000-7000-8000-000000000001'), 1::bigint,
          'the writer''s message is stored');
SELECT is((SELECT count(*) FROM outbox.message WHERE payload = '{"new": true}'), 1::bigint,
          'the writer''s message with a new id is stored');
SELECT is((SELECT count(*) FROM outbox.processed), 1::bigint, 'the writer''s marker is stored');
SELECT is(pg_temp.as_role('outbox_test_writer', v.stmt), '42501', 'writer: ' || v.what)
  FROM (VALUES ('cannot read outbox.message', $$SELECT count(*) FROM outbox.message$$),
               ('cannot read outbox.processed', $$SELECT count(*) FROM outbox.processed$$),
               ('cannot insert into outbox.message', $$INSERT INTO outbox.message (id, topic, event_type, payload) VALUES (gen_random_uuid(), 't', 'e', '{}')$$),
               ('cannot claim', $$SELECT * FROM outbox.claim('writer')$$),
               ('cannot complete', $$SELECT outbox.complete('00000000-0000-7000-8000-000000000001', 'writer')$$),
               ('cannot read an envelope by id', $$SELECT outbox.envelope_by_id('00000000-0000-7000-8000-000000000001')$$),
               ('cannot purge', $$SELECT outbox.purge()$$),
               ('cannot route to a channel', $$SELECT outbox.route_notify('t', 'writer_events')$$),
               ('cannot route to a server', $$SELECT outbox.route_remote('t', 'outbox_test_server', 'SELECT $1')$$),
               ('cannot unroute', $$SELECT outbox.unroute('t')$$),
               ('cannot drain', $$SELECT outbox.drain_once()$$),
               ('cannot read outbox.routes', $$SELECT count(*) FROM outbox.routes$$),
               ('cannot write outbox.routes', $$INSERT INTO outbox.routes (topic, target, channel) VALUES ('t', 'notify', 'w')$$),
               ('cannot read outbox.topic_stats', $$SELECT count(*) FROM outbox.topic_stats$$),
               ('cannot read outbox.subscription', $$SELECT count(*) FROM outbox.subscription$$),
               ('cannot read outbox.subscription_state', $$SELECT count(*) FROM outbox.subscription_state$$),
               ('cannot subscribe', $$SELECT outbox.subscribe('t', 'writer')$$)) AS v(what, stmt);

-- the worker claims, extends, completes and fails, and reads envelopes of
-- what it claimed; it cannot write or read the tables otherwise
DO $$
BEGIN
    PERFORM outbox.append('w', 'evt.w.v1', '{}', '00000000-0000-7000-8000-000000000011', '2020-01-01 00:00:00+00');
    PERFORM outbox.append('w', 'evt.w.v1', '{}', '00000000-0000-7000-8000-000000000012', '2020-01-01 00:00:01+00');
END
$$;
SELECT is(pg_temp.as_role('outbox_test_worker', v.stmt), 'ok', 'worker: ' || v.what)
  FROM (VALUES ('claim and build the envelopes', $$SELECT outbox.envelope(c) FROM outbox.claim('worker', 'w', 2) AS c$$),
               ('extend', $$SELECT outbox.extend('00000000-0000-7000-8000-000000000011', 'worker', 30)$$),
               ('complete', $$SELECT outbox.complete('00000000-0000-7000-8000-000000000011', 'worker')$$),
               ('complete_many', $$SELECT outbox.complete_many(ARRAY['00000000-0000-7000-8000-000000000011'::uuid], 'worker')$$),
               ('complete_and_claim', $$SELECT count(*) FROM outbox.complete_and_claim(ARRAY['00000000-0000-7000-8000-000000000011'::uuid], 'worker', 'w', 1)$$),
               ('fail', $$SELECT outbox.fail('00000000-0000-7000-8000-000000000012', 'worker', 'boom')$$),
               ('envelope_by_id', $$SELECT outbox.envelope_by_id('00000000-0000-7000-8000-000000000011')$$)) AS v(what, stmt);
SELECT is((SELECT count(*) FROM outbox.message WHERE lease_owner = 'worker'), 2::bigint,
          'the worker''s claim leased two messages');
SELECT is((SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '00000000-0000-7000-8000-000000000011'),
          true, 'the worker''s complete delivered the message');
SELECT is((SELECT last_error FROM outbox.message WHERE id = '00000000-0000-7000-8000-000000000012'),
          'boom', 'the worker''s fail recorded the error');
SELECT is(pg_temp.as_role('outbox_test_worker', v.stmt), '42501', 'worker: ' || v.what)
  FROM (VALUES ('cannot read outbox.message', $$SELECT count(*) FROM outbox.message$$),
               ('cannot update outbox.message', $$UPDATE outbox.message SET attempts = 0$$),
               ('cannot append', $$SELECT outbox.append('t', 'evt.t.v1', '{}')$$),
               ('cannot append_batch', $$SELECT outbox.append_batch('t', 'evt.t.v1', ARRAY['1']::jsonb[])$$),
               ('cannot consume_once', $$SELECT outbox.consume_once('c', '00000000-0000-7000-8000-000000000002')$$),
               ('cannot purge', $$SELECT outbox.purge()$$),
               ('cannot retry_dead', $$SELECT outbox.retry_dead('00000000-0000-7000-8000-000000000001')$$),
               ('cannot route to a channel', $$SELECT outbox.route_notify('w', 'worker_events')$$),
               ('cannot route to a server', $$SELECT outbox.route_remote('w', 'outbox_test_server', 'SELECT $1')$$),
               ('cannot unroute', $$SELECT outbox.unroute('w')$$),
               ('cannot drain', $$SELECT outbox.drain_once('w')$$),
               ('cannot read outbox.routes', $$SELECT count(*) FROM outbox.routes$$),
               ('cannot delete from outbox.routes', $$DELETE FROM outbox.routes$$),
               ('cannot read outbox.topic_stats', $$SELECT count(*) FROM outbox.topic_stats$$),
               ('cannot read outbox.subscription', $$SELECT count(*) FROM outbox.subscription$$),
               ('cannot read outbox.subscription_state', $$SELECT count(*) FROM outbox.subscription_state$$),
               ('cannot read outbox.subscription_stats', $$SELECT count(*) FROM outbox.subscription_stats$$),
               ('cannot subscribe', $$SELECT outbox.subscribe('w', 'worker')$$),
               ('cannot pause a subscription', $$SELECT outbox.pause('w', 'worker')$$)) AS v(what, stmt);

-- the operator revives and purges, sets and removes routes, drains, and
-- reads the routes and the statistics; it does nothing else.  A remote
-- route needs USAGE on the server and a password in the operator's user
-- mapping, as for any role that is not a superuser; no connection is made.
SELECT is(pg_temp.as_role('outbox_test_operator', v.stmt), 'ok', 'operator: ' || v.what)
  FROM (VALUES ('retry_dead', $$SELECT outbox.retry_dead('00000000-0000-7000-8000-000000000012')$$),
               ('retry_dead_topic', $$SELECT outbox.retry_dead_topic('t')$$),
               ('purge', $$SELECT outbox.purge('0')$$)) AS v(what, stmt);
SELECT is((SELECT count(*) FROM outbox.message WHERE id = '00000000-0000-7000-8000-000000000011'), 0::bigint,
          'the operator''s purge deleted the delivered message');

DO $$
BEGIN
    PERFORM outbox.append('ops', 'evt.ops.v1', '{"secret": 1}', '00000000-0000-7000-8000-000000000021', '2020-01-01 00:00:00+00');
    PERFORM outbox.append('ops', 'evt.ops.v1', '{"secret": 2}', '00000000-0000-7000-8000-000000000022', '2020-01-01 00:00:01+00');
END
$$;
GRANT USAGE ON FOREIGN SERVER outbox_test_server TO outbox_test_operator;
CREATE USER MAPPING FOR outbox_test_operator SERVER outbox_test_server OPTIONS (user 'someone', password 'secret');
SELECT is(pg_temp.as_role('outbox_test_operator', v.stmt), 'ok', 'operator: ' || v.what)
  FROM (VALUES ('route_notify', $$SELECT outbox.route_notify('ops', 'ops_events')$$),
               ('route_remote', $$SELECT outbox.route_remote('ops_remote', 'outbox_test_server', 'SELECT $1')$$),
               ('read outbox.routes', $$SELECT count(*) FROM outbox.routes$$),
               ('read outbox.topic_stats', $$SELECT count(*) FROM outbox.topic_stats$$),
               ('check_route', $$SELECT * FROM outbox.check_route('ops')$$),
               ('drain_once', $$SELECT outbox.drain_once('ops')$$),
               ('unroute', $$SELECT outbox.unroute('ops_remote')$$),
               ('route_notify for a subscription', $$SELECT outbox.route_notify('ops', 'ops_dash', 'dashboard')$$),
               ('unroute a subscription', $$SELECT outbox.unroute('ops', 'dashboard')$$)) AS v(what, stmt);
SELECT results_eq($$SELECT topic, target, created_by FROM outbox.routes ORDER BY topic$$,
                  $$VALUES ('ops'::text, 'notify'::text, 'outbox_test_operator'::name)$$,
                  'the operator''s routes are its own, and the one it removed is gone');
SELECT is((SELECT count(*) FROM outbox.message WHERE topic = 'ops' AND delivered_at IS NOT NULL), 2::bigint,
          'the operator''s drain delivered the topic');
SELECT isnt(pg_temp.as_role('outbox_test_operator', $$SELECT * FROM outbox.worker_status()$$), '42501',
            'operator: may call worker_status (it needs the preloaded worker to answer)');

-- Run query as role r and return its only value as text.
CREATE FUNCTION pg_temp.value_as(r name, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE query INTO v;
    RESET ROLE;
    RETURN v;
END
$$;
SELECT is(pg_temp.value_as('outbox_test_operator',
                           $$SELECT format('%s/%s/%s/%s/%s', due, delayed, leased, dead, delivered) FROM outbox.topic_stats WHERE topic = 'ops'$$),
          '0/0/0/0/2', 'operator: topic_stats counts the topic''s messages');

-- the operator manages the named subscriptions and reads their statistics;
-- the worker claims for one of them with its grant of claim alone
SELECT is(pg_temp.as_role('outbox_test_operator', v.stmt), 'ok', 'operator: ' || v.what)
  FROM (VALUES (1, 'subscribe', $$SELECT outbox.subscribe('w', 'audit')$$),
               (2, 'pause', $$SELECT outbox.pause('w', 'audit')$$),
               (3, 'resume', $$SELECT outbox.resume('w', 'audit')$$),
               (4, 'read outbox.subscription_stats', $$SELECT count(*) FROM outbox.subscription_stats$$)) AS v(n, what, stmt)
 ORDER BY v.n;
SELECT is(pg_temp.value_as('outbox_test_operator',
                           $$SELECT string_agg(format('%s/%s', subscription, state), ' ') FROM outbox.subscription_stats
                              WHERE topic = 'w' AND subscription IS NOT NULL$$),
          'audit/active', 'operator: subscription_stats shows the subscription, resumed');
SELECT is(pg_temp.as_role('outbox_test_worker', $$SELECT count(*) FROM outbox.claim('worker', 'w', 10, NULL, 'audit')$$),
          'ok', 'worker: claim for a named subscription');
SELECT is(pg_temp.as_role('outbox_test_operator', $$SELECT outbox.unsubscribe('w', 'audit')$$),
          'ok', 'operator: unsubscribe');

SELECT is(pg_temp.as_role('outbox_test_operator', v.stmt), '42501', 'operator: ' || v.what)
  FROM (VALUES ('cannot read outbox.message', $$SELECT count(*) FROM outbox.message$$),
               ('cannot read outbox.processed', $$SELECT count(*) FROM outbox.processed$$),
               ('cannot delete from outbox.message', $$DELETE FROM outbox.message$$),
               ('cannot append', $$SELECT outbox.append('t', 'evt.t.v1', '{}')$$),
               ('cannot claim', $$SELECT * FROM outbox.claim('operator')$$),
               ('cannot read an envelope by id', $$SELECT outbox.envelope_by_id('00000000-0000-7000-8000-000000000021')$$),
               ('cannot insert into outbox.routes', $$INSERT INTO outbox.routes (topic, target, channel) VALUES ('x', 'notify', 'x')$$),
               ('cannot update outbox.routes', $$UPDATE outbox.routes SET channel = 'elsewhere'$$),
               ('cannot delete from outbox.routes', $$DELETE FROM outbox.routes$$),
               ('cannot read the secrets of HTTP routes', $$SELECT secret FROM outbox.route_secrets$$),
               ('cannot write the counters of HTTP routes', $$DELETE FROM outbox.route_http_stats$$),
               ('cannot read outbox.subscription', $$SELECT count(*) FROM outbox.subscription$$),
               ('cannot read outbox.subscription_state', $$SELECT count(*) FROM outbox.subscription_state$$),
               ('cannot delete from outbox.subscription', $$DELETE FROM outbox.subscription$$)) AS v(what, stmt);

-- what the operator may read holds no payload: counts and routes only
SELECT is_empty($$SELECT a.attrelid::regclass, a.attname FROM pg_attribute a
                   WHERE a.attrelid IN ('outbox.topic_stats'::regclass, 'outbox.routes'::regclass,
                                        'outbox.subscription_stats'::regclass)
                     AND a.attnum > 0 AND NOT a.attisdropped
                     AND (a.atttypid IN ('jsonb'::regtype, 'json'::regtype, 'uuid'::regtype)
                          OR a.attname IN ('payload', 'event_type', 'last_error', 'id'))$$,
                'outbox.routes, outbox.topic_stats and outbox.subscription_stats show no message id, type, payload or error');

-- a role with no grant can do nothing at all
SELECT is(pg_temp.as_role('outbox_test_nobody', format('SELECT outbox.%I(%s)', f.fn,
                                                       (SELECT coalesce(string_agg('NULL', ', '), '')
                                                          FROM unnest(f.args)))),
          '42501', 'nobody: cannot call outbox.' || f.fn)
  FROM recipe f ORDER BY f.fn;
SELECT is(pg_temp.as_role('outbox_test_nobody', v.stmt), '42501', 'nobody: ' || v.what)
  FROM (VALUES ('cannot read outbox.message', $$SELECT count(*) FROM outbox.message$$),
               ('cannot read outbox.processed', $$SELECT count(*) FROM outbox.processed$$)) AS v(what, stmt);
-- every relation of outbox, whatever its kind, is closed to a role without
-- grants: the routes and topic_stats too
SELECT is(pg_temp.as_role('outbox_test_nobody', format('SELECT 1 FROM %s LIMIT 1', c.oid::regclass)), '42501',
          format('nobody: cannot read relation %s (every relation of outbox)', c.oid::regclass))
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
 ORDER BY c.relname;

--
-- a database owner who is not a superuser: CREATE EXTENSION gives it every
-- function and the readable tables and views, each with the grant option,
-- the objects of subscriptions too; PUBLIC still nothing
--
CREATE ROLE outbox_test_dbowner NOLOGIN;
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I OWNER TO outbox_test_dbowner', current_database());
END
$$;
DROP EXTENSION krizaka_outbox;
CREATE EXTENSION krizaka_outbox;
SELECT set_eq(
    $$SELECT x.o, x.p, x.go FROM (
        SELECT 'schema outbox' AS o, a.grantee, a.privilege_type AS p, a.is_grantable AS go
          FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname = 'outbox'
        UNION ALL
        SELECT c.oid::regclass::text, a.grantee, a.privilege_type, a.is_grantable
          FROM pg_class c, aclexplode(c.relacl) a WHERE c.relnamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT p.oid::regprocedure::text, a.grantee, a.privilege_type, a.is_grantable
          FROM pg_proc p, aclexplode(p.proacl) a WHERE p.pronamespace = 'outbox'::regnamespace) x
       WHERE x.grantee = 'outbox_test_dbowner'::regrole$$,
    $$SELECT 'schema outbox' AS o, 'USAGE' AS p, true AS go
      UNION ALL
      SELECT t, 'SELECT', true
        FROM unnest(ARRAY['outbox.message', 'outbox.processed', 'outbox.routes', 'outbox.topic_stats',
                          'outbox.route_http_stats', 'outbox.subscription', 'outbox.subscription_state',
                          'outbox.subscription_frontier', 'outbox.subscription_lease', 'outbox.subscription_key',
                          'outbox.subscription_stats', 'outbox.claim_position']) AS t
      UNION ALL
      SELECT p.oid::regprocedure::text, 'EXECUTE', true FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace$$,
    'database owner: USAGE, SELECT on the readable tables and views, EXECUTE on every function, all with the grant option');
SELECT function_privs_are('outbox', f.fn, f.args, 'outbox_test_dbowner', ARRAY['EXECUTE'],
                          format('database owner: may execute outbox.%s(%s)', f.fn, array_to_string(f.args, ', ')))
  FROM recipe f
 WHERE f.fn IN ('claim', 'complete', 'complete_many', 'complete_and_claim', 'fail', 'extend', 'retry_dead',
                'retry_dead_topic', 'subscribe', 'unsubscribe', 'pause', 'resume')
 ORDER BY f.fn;
SELECT table_privs_are('outbox', t, 'outbox_test_dbowner', ARRAY['SELECT'],
                       format('database owner: SELECT on outbox.%s', t))
  FROM unnest(ARRAY['subscription', 'subscription_state', 'subscription_frontier', 'subscription_lease',
                    'subscription_key', 'subscription_stats', 'claim_position']::name[]) AS t;
SELECT sequence_privs_are('outbox', 'subscription_id_seq', 'outbox_test_dbowner', '{}'::text[],
                          'database owner: no privilege on outbox.subscription_id_seq');
SELECT is_empty($$SELECT c.relname, a.privilege_type FROM pg_class c, aclexplode(c.relacl) AS a
                   WHERE c.relnamespace = 'outbox'::regnamespace AND a.grantee = 0
                  UNION ALL
                  SELECT p.proname, a.privilege_type FROM pg_proc p, aclexplode(p.proacl) AS a
                   WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee = 0$$,
                'database owner''s database: still nothing for PUBLIC');
SELECT is(pg_temp.as_role('outbox_test_dbowner', v.stmt), 'ok', 'database owner: ' || v.what)
  FROM (VALUES (1, 'grants subscribe on', $$GRANT EXECUTE ON FUNCTION outbox.subscribe(text, text, timestamptz) TO outbox_test_nobody$$),
               (2, 'grants SELECT on outbox.subscription_stats on', $$GRANT SELECT ON outbox.subscription_stats TO outbox_test_nobody$$)) AS v(n, what, stmt)
 ORDER BY v.n;

SELECT * FROM finish();
ROLLBACK;
