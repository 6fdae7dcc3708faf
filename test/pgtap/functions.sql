-- The function contract: names, signatures with argument names and
-- defaults, return types, SECURITY DEFINER with a fixed search_path,
-- volatility, and one unambiguous function for untyped parameters: a name
-- has one function, but for the routes' forms with a subscription (1.5),
-- which take one more argument than the form beside them, without defaults.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS krizaka_outbox;

SELECT plan(473);

CREATE TEMP TABLE fn (
    name name,
    args name[],            -- argument types
    arguments text,         -- pg_get_function_arguments: names and defaults
    returns text,
    definer boolean,
    config boolean,         -- SET search_path = pg_catalog, pg_temp
    volatility text,
    parallel text,
    required integer        -- arguments without a default
) ON COMMIT DROP;
INSERT INTO fn VALUES
    ('append', '{text,text,jsonb,uuid,timestamp with time zone,text}',
     'topic text, type text, payload jsonb, id uuid DEFAULT NULL::uuid, available_at timestamp with time zone DEFAULT NULL::timestamp with time zone, ordering_key text DEFAULT NULL::text',
     'uuid', false, false, 'volatile', 'u', 3),
    ('append_batch', '{text,text,jsonb[],text}',
     'topic text, type text, payloads jsonb[], ordering_key text DEFAULT NULL::text',
     'setof uuid', true, true, 'volatile', 'u', 3),
    ('claim', '{text,text,integer,integer,text}',
     'owner text, topic text DEFAULT NULL::text, batch_size integer DEFAULT NULL::integer, lease_seconds integer DEFAULT NULL::integer, subscription text DEFAULT NULL::text',
     'setof outbox.message', true, true, 'volatile', 'u', 1),
    ('complete', '{uuid,text,text}',
     'id uuid, owner text, subscription text DEFAULT NULL::text',
     'boolean', true, true, 'volatile', 'u', 2),
    ('complete_many', '{uuid[],text,text}',
     'ids uuid[], owner text, subscription text DEFAULT NULL::text',
     'integer', true, true, 'volatile', 'u', 2),
    ('complete_and_claim', '{uuid[],text,text,integer,integer,text}',
     'ids uuid[], owner text, topic text DEFAULT NULL::text, batch_size integer DEFAULT NULL::integer, lease_seconds integer DEFAULT NULL::integer, subscription text DEFAULT NULL::text',
     'setof outbox.message', true, true, 'volatile', 'u', 2),
    ('fail', '{uuid,text,text,text}',
     'id uuid, owner text, error text, subscription text DEFAULT NULL::text',
     'boolean', true, true, 'volatile', 'u', 3),
    ('extend', '{uuid,text,integer,text}',
     'id uuid, owner text, lease_seconds integer DEFAULT NULL::integer, subscription text DEFAULT NULL::text',
     'boolean', true, true, 'volatile', 'u', 2),
    ('retry_dead', '{uuid,text}',
     'id uuid, subscription text DEFAULT NULL::text',
     'boolean', true, true, 'volatile', 'u', 1),
    ('retry_dead_topic', '{text,text}',
     'topic text, subscription text DEFAULT NULL::text',
     'bigint', true, true, 'volatile', 'u', 1),
    ('subscribe', '{text,text,timestamp with time zone}',
     'topic text, subscription text, since timestamp with time zone DEFAULT NULL::timestamp with time zone',
     'boolean', true, true, 'volatile', 'u', 2),
    ('unsubscribe', '{text,text}',
     'topic text, subscription text',
     'boolean', true, true, 'volatile', 'u', 2),
    ('pause', '{text,text,timestamp with time zone}',
     'topic text, subscription text, until timestamp with time zone DEFAULT ''infinity''::timestamp with time zone',
     'boolean', true, true, 'volatile', 'u', 2),
    ('resume', '{text,text}',
     'topic text, subscription text',
     'boolean', true, true, 'volatile', 'u', 2),
    ('purge', '{interval,bigint}',
     'older_than interval DEFAULT NULL::interval, max_rows bigint DEFAULT NULL::bigint',
     'bigint', true, true, 'volatile', 'u', 0),
    ('consume_once', '{text,uuid}',
     'consumer text, message_id uuid',
     'boolean', true, true, 'volatile', 'u', 2),
    ('envelope', '{outbox.message}',
     'm outbox.message',
     'jsonb', false, false, 'immutable', 's', 1),
    ('envelope_by_id', '{uuid}',
     'id uuid',
     'jsonb', true, true, 'stable', 'u', 1),
    ('route_notify', '{text,text}',
     'topic text, channel text',
     'void', true, true, 'volatile', 'u', 2),
    ('route_notify', '{text,text,text}',
     'topic text, channel text, subscription text',
     'void', true, true, 'volatile', 'u', 3),
    ('route_remote', '{text,name,text}',
     'topic text, server name, command text',
     'void', false, true, 'volatile', 'u', 3),
    ('route_remote', '{text,name,text,text}',
     'topic text, server name, command text, subscription text',
     'void', false, true, 'volatile', 'u', 4),
    ('route_http', '{text,text,text,jsonb,text}',
     'topic text, url text, secret text DEFAULT NULL::text, headers jsonb DEFAULT NULL::jsonb, ca_file text DEFAULT NULL::text',
     'void', true, true, 'volatile', 'u', 2),
    ('rotate_http_secret', '{text,text,interval}',
     'topic text, new_secret text, keep_old_for interval DEFAULT ''24:00:00''::interval',
     'void', true, true, 'volatile', 'u', 2),
    ('route_http', '{text,text,text,jsonb,text,text}',
     'topic text, url text, secret text, headers jsonb, ca_file text, subscription text',
     'void', true, true, 'volatile', 'u', 6),
    ('rotate_http_secret', '{text,text,interval,text}',
     'topic text, new_secret text, keep_old_for interval, subscription text',
     'void', true, true, 'volatile', 'u', 4),
    ('webhook_signature', '{text,text,bigint,text}',
     'secret text, msg_id text, ts bigint, body text',
     'text', false, false, 'immutable', 's', 4),
    ('unroute', '{text}',
     'topic text',
     'boolean', true, true, 'volatile', 'u', 1),
    ('unroute', '{text,text}',
     'topic text, subscription text',
     'boolean', true, true, 'volatile', 'u', 2),
    ('check_route', '{text}',
     'topic text',
     'setof record', false, true, 'volatile', 'u', 1),
    ('check_route', '{text,text}',
     'topic text, subscription text',
     'setof record', false, true, 'volatile', 'u', 2),
    ('drain_once', '{text}',
     'topic text DEFAULT NULL::text',
     'integer', false, true, 'volatile', 'u', 0),
    ('worker_status', '{}',
     'OUT datname name, OUT pid integer, OUT state text, OUT started_at timestamp with time zone, OUT last_round_at timestamp with time zone, OUT delivered bigint, OUT failed bigint, OUT last_error text',
     'setof record', false, false, 'volatile', 'u', 0);

-- exactly these functions, each name once
SELECT functions_are('outbox', ARRAY(SELECT DISTINCT name FROM fn), 'schema outbox has exactly the functions of the contract');
SELECT is_empty($$SELECT proname FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace
                   GROUP BY proname
                  HAVING count(*) > 1 AND (proname NOT IN ('route_notify', 'route_remote', 'unroute', 'check_route',
                                                           'route_http', 'rotate_http_secret')
                                           OR count(*) > 2 OR max(pronargs) - min(pronargs) <> 1
                                           OR (SELECT l.pronargdefaults FROM pg_proc l
                                                WHERE l.pronamespace = 'outbox'::regnamespace
                                                  AND l.proname = pg_proc.proname
                                                ORDER BY l.pronargs DESC LIMIT 1) > 0)$$,
                'no function name is overloaded, but for the routes'' forms with a subscription, one argument longer and without defaults');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace), (SELECT count(*) FROM fn),
          'schema outbox has exactly the signatures of the contract');
-- the signatures of 1.3 that 1.4 gave a last argument subscription are gone
SELECT hasnt_function('outbox', v.name, v.args,
                      format('outbox.%s(%s) of 1.3 no longer exists', v.name, array_to_string(v.args, ', ')))
  FROM (VALUES ('claim'::name, '{text,text,integer,integer}'::name[]),
               ('complete', '{uuid,text}'),
               ('complete_many', '{uuid[],text}'),
               ('complete_and_claim', '{uuid[],text,text,integer,integer}'),
               ('fail', '{uuid,text,text}'),
               ('extend', '{uuid,text,integer}'),
               ('retry_dead', '{uuid}'),
               ('retry_dead_topic', '{text}')) AS v(name, args)
 ORDER BY v.name;

-- signatures and results
SELECT has_function('outbox', name, args, format('outbox.%s(%s) exists', name, array_to_string(args, ', ')))
  FROM fn ORDER BY name;
SELECT is(pg_get_function_arguments(format('outbox.%I(%s)', name, array_to_string(args, ','))::regprocedure),
          arguments, format('outbox.%s: argument names and defaults', name))
  FROM fn ORDER BY name;
SELECT function_returns('outbox', name, args, returns, format('outbox.%s returns %s', name, returns))
  FROM fn ORDER BY name;

-- SECURITY DEFINER with search_path = pg_catalog, pg_temp exactly where the
-- tables are touched; envelope and worker_status run as the caller, and so do
-- route_remote, check_route and drain_once, which need the caller's identity for the
-- remote connection (they keep the fixed search_path); append switches to
-- its owner and pins search_path in its C code (sql/append_identity.sql)
SELECT CASE WHEN definer
            THEN is_definer('outbox', name, args, format('outbox.%s is SECURITY DEFINER', name))
            ELSE isnt_definer('outbox', name, args, format('outbox.%s is not SECURITY DEFINER', name))
       END
  FROM fn ORDER BY name;
SELECT is((SELECT proconfig FROM pg_proc
            WHERE oid = format('outbox.%I(%s)', name, array_to_string(args, ','))::regprocedure),
          CASE WHEN config THEN ARRAY['search_path=pg_catalog, pg_temp'] END,
          format('outbox.%s: %s', name,
                 CASE WHEN config THEN 'search_path = pg_catalog, pg_temp' ELSE 'no settings of its own' END))
  FROM fn ORDER BY name;

-- volatility, parallel safety, language, strictness and C symbol
SELECT volatility_is('outbox', name, args, volatility, format('outbox.%s is %s', name, volatility))
  FROM fn ORDER BY name;
SELECT is((SELECT proparallel::text FROM pg_proc
            WHERE oid = format('outbox.%I(%s)', name, array_to_string(args, ','))::regprocedure),
          parallel, format('outbox.%s is parallel %s', name,
                           CASE parallel WHEN 's' THEN 'safe' ELSE 'unsafe' END))
  FROM fn ORDER BY name;
SELECT function_lang_is('outbox', name, args, 'c', format('outbox.%s is written in C', name))
  FROM fn ORDER BY name;
-- not STRICT: a NULL argument is an error (22004), never a silent NULL
SELECT isnt_strict('outbox', name, args, format('outbox.%s is not STRICT', name))
  FROM fn ORDER BY name;
SELECT is((SELECT prosrc || ' in ' || probin FROM pg_proc
            WHERE oid = format('outbox.%I(%s)', name, array_to_string(args, ','))::regprocedure),
          format('outbox_%s in $libdir/krizaka_outbox', name),
          format('outbox.%s is the C function outbox_%s', name, name))
  FROM fn ORDER BY name;
SELECT isnt(obj_description(format('outbox.%I(%s)', name, array_to_string(args, ','))::regprocedure, 'pg_proc'),
            NULL, format('outbox.%s has a comment', name))
  FROM fn ORDER BY name;

-- a driver that sends every parameter untyped reaches exactly one function,
-- with all arguments and with the required ones only
SELECT lives_ok(format('PREPARE %I AS SELECT * FROM outbox.%I(%s)', 'all_' || name || cardinality(args), name,
                       (SELECT string_agg('$' || i, ', ') FROM generate_series(1, cardinality(args)) AS i)),
                format('outbox.%s with %s untyped parameters resolves', name, cardinality(args)))
  FROM fn ORDER BY name;
SELECT is((SELECT parameter_types::text FROM pg_prepared_statements WHERE name = 'all_' || fn.name || cardinality(fn.args)),
          (SELECT coalesce(array_agg(t::regtype ORDER BY o), '{}')::text
             FROM unnest(fn.args) WITH ORDINALITY AS a(t, o)),
          format('outbox.%s: the untyped parameters take its argument types', name))
  FROM fn ORDER BY name;
SELECT lives_ok(format('PREPARE %I AS SELECT * FROM outbox.%I(%s)', 'req_' || name || cardinality(args), name,
                       (SELECT coalesce(string_agg('$' || i, ', '), '') FROM generate_series(1, required) AS i)),
                format('outbox.%s with its %s required untyped parameters resolves', name, required))
  FROM fn ORDER BY name;

SELECT * FROM finish();
ROLLBACK;
