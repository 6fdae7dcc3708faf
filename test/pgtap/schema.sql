-- The schema contract: the extension, its tables, columns, keys and indexes.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS krizaka_outbox;

SELECT plan(251);

-- the extension: version 1.5, fixed in schema outbox
SELECT has_extension('krizaka_outbox', 'krizaka_outbox is installed');
SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'krizaka_outbox'), '1.5', 'version 1.5');
SELECT is((SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'krizaka_outbox'),
          'pg_catalog', 'recorded in pg_catalog, its objects in its own schema outbox (as pg_cron does)');
SELECT ok(NOT (SELECT extrelocatable FROM pg_extension WHERE extname = 'krizaka_outbox'), 'not relocatable');
SELECT has_schema('outbox', 'schema outbox exists');

-- the tables, and nothing else that holds rows
SELECT tables_are('outbox', ARRAY['message', 'processed', 'routes', 'route_secrets', 'route_http_stats',
                                  'subscription', 'subscription_frontier', 'subscription_state', 'subscription_lease',
                                  'subscription_key', 'claim_position'],
                  'outbox has exactly the tables message, processed, routes, route_secrets, route_http_stats, subscription, subscription_frontier, subscription_state, subscription_lease, subscription_key and claim_position');
SELECT is_empty($$SELECT c.relname FROM pg_class c
                   WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('m', 'f', 'p')$$,
                'outbox has no materialized views, foreign or partitioned tables');
SELECT sequences_are('outbox', ARRAY['message_seq', 'subscription_id_seq'],
                     'outbox has exactly the sequences message_seq (stream positions) and subscription_id_seq');

-- columns: names, order, types, nullability and defaults in one statement ...
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.message'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('id', 'uuid', true, NULL::text),
             ('topic', 'text', true, NULL),
             ('event_type', 'text', true, NULL),
             ('payload', 'jsonb', true, NULL),
             ('created_at', 'timestamp with time zone', true, 'now()'),
             ('available_at', 'timestamp with time zone', true, 'now()'),
             ('attempts', 'integer', true, '0'),
             ('leased_until', 'timestamp with time zone', false, NULL),
             ('lease_owner', 'text', false, NULL),
             ('delivered_at', 'timestamp with time zone', false, NULL),
             ('dead_at', 'timestamp with time zone', false, NULL),
             ('last_error', 'text', false, NULL),
             ('seq', 'bigint', true, 'nextval(''outbox.message_seq''::regclass)'),
             ('deferred', 'boolean', true, 'false'),
             ('ordering_key', 'text', false, NULL)$$,
    'outbox.message: columns in order, with types, NOT NULL and defaults');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.processed'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('consumer', 'text', true, NULL::text),
             ('message_id', 'uuid', true, NULL),
             ('processed_at', 'timestamp with time zone', true, 'now()')$$,
    'outbox.processed: columns in order, with types, NOT NULL and defaults');

-- ... and column by column
SELECT columns_are('outbox', 'message',
                   ARRAY['id', 'topic', 'event_type', 'payload', 'created_at', 'available_at', 'attempts',
                         'leased_until', 'lease_owner', 'delivered_at', 'dead_at', 'last_error',
                         'seq', 'deferred', 'ordering_key'],
                   'outbox.message has exactly its fifteen columns');
SELECT columns_are('outbox', 'processed', ARRAY['consumer', 'message_id', 'processed_at'],
                   'outbox.processed has exactly its three columns');

CREATE TEMP TABLE col (tab name, col name, typ text, not_null boolean, dflt text) ON COMMIT DROP;
INSERT INTO col VALUES
    ('message', 'id', 'uuid', true, NULL),
    ('message', 'topic', 'text', true, NULL),
    ('message', 'event_type', 'text', true, NULL),
    ('message', 'payload', 'jsonb', true, NULL),
    ('message', 'created_at', 'timestamp with time zone', true, 'now()'),
    ('message', 'available_at', 'timestamp with time zone', true, 'now()'),
    ('message', 'attempts', 'integer', true, '0'),
    ('message', 'leased_until', 'timestamp with time zone', false, NULL),
    ('message', 'lease_owner', 'text', false, NULL),
    ('message', 'delivered_at', 'timestamp with time zone', false, NULL),
    ('message', 'dead_at', 'timestamp with time zone', false, NULL),
    ('message', 'last_error', 'text', false, NULL),
    ('message', 'seq', 'bigint', true, 'nextval(''outbox.message_seq''::regclass)'),
    ('message', 'deferred', 'boolean', true, 'false'),
    ('message', 'ordering_key', 'text', false, NULL),
    ('processed', 'consumer', 'text', true, NULL),
    ('processed', 'message_id', 'uuid', true, NULL),
    ('processed', 'processed_at', 'timestamp with time zone', true, 'now()'),
    ('subscription', 'sub_id', 'integer', true, 'nextval(''outbox.subscription_id_seq''::regclass)'),
    ('subscription', 'topic', 'text', true, NULL),
    ('subscription', 'name', 'text', false, NULL),
    ('subscription', 'start_seq', 'bigint', true, NULL),
    ('subscription', 'created_at', 'timestamp with time zone', true, 'now()'),
    ('subscription', 'paused_until', 'timestamp with time zone', false, NULL),
    ('subscription', 'expired_at', 'timestamp with time zone', false, NULL),
    ('subscription_frontier', 'sub_id', 'integer', true, NULL),
    ('subscription_frontier', 'next_seq', 'bigint', true, NULL),
    ('subscription_frontier', 'claimed_at', 'timestamp with time zone', false, NULL),
    ('subscription_frontier', 'from_seq', 'bigint', false, NULL),
    ('subscription_state', 'sub_id', 'integer', true, NULL),
    ('subscription_state', 'seq', 'bigint', true, NULL),
    ('subscription_state', 'id', 'uuid', true, NULL),
    ('subscription_state', 'ordering_key', 'text', false, NULL),
    ('subscription_state', 'available_at', 'timestamp with time zone', true, NULL),
    ('subscription_state', 'blocked', 'boolean', true, 'false'),
    ('subscription_state', 'hole', 'boolean', true, 'false'),
    ('subscription_state', 'attempts', 'integer', true, '0'),
    ('subscription_state', 'leased_until', 'timestamp with time zone', false, NULL),
    ('subscription_state', 'lease_owner', 'text', false, NULL),
    ('subscription_state', 'dead_at', 'timestamp with time zone', false, NULL),
    ('subscription_state', 'last_error', 'text', false, NULL);

SELECT col_type_is('outbox', tab, col, typ, format('outbox.%s.%s is %s', tab, col, typ))
  FROM col ORDER BY tab, col;
SELECT is((SELECT c.collname::text FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
            WHERE a.attrelid = 'outbox.message'::regclass AND a.attname = 'ordering_key'),
          'C', 'outbox.message.ordering_key compares byte by byte (collation "C")');
SELECT is((SELECT c.collname::text FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
            WHERE a.attrelid = 'outbox.subscription_state'::regclass AND a.attname = 'ordering_key'),
          'C', 'outbox.subscription_state.ordering_key compares byte by byte (collation "C")');
SELECT CASE WHEN not_null
            THEN col_not_null('outbox', tab, col, format('outbox.%s.%s is NOT NULL', tab, col))
            ELSE col_is_null('outbox', tab, col, format('outbox.%s.%s may be NULL', tab, col))
       END
  FROM col ORDER BY tab, col;
SELECT CASE WHEN dflt IS NULL
            THEN col_hasnt_default('outbox', tab, col, format('outbox.%s.%s has no default', tab, col))
            ELSE col_has_default('outbox', tab, col, format('outbox.%s.%s has a default', tab, col))
       END
  FROM col ORDER BY tab, col;

-- primary keys
SELECT col_is_pk('outbox', 'message', 'id', 'outbox.message: primary key (id)');
SELECT col_is_pk('outbox', 'processed', ARRAY['consumer', 'message_id'],
                 'outbox.processed: primary key (consumer, message_id)');
SELECT index_is_primary('outbox', 'message', 'message_pkey', 'message_pkey is the primary key of outbox.message');
SELECT index_is_primary('outbox', 'processed', 'processed_pkey', 'processed_pkey is the primary key of outbox.processed');
-- no other constraint than the keys and NOT NULL (catalogued as
-- constraints, contype n, from PostgreSQL 18), no trigger, no rule, no policy
SELECT is_empty($$SELECT conname FROM pg_constraint
                   WHERE conrelid IN ('outbox.message'::regclass, 'outbox.processed'::regclass)
                     AND contype NOT IN ('p', 'n')$$,
                'no check, unique, foreign key or exclusion constraints');
SELECT is_empty($$SELECT tgname FROM pg_trigger
                   WHERE tgrelid IN ('outbox.message'::regclass, 'outbox.processed'::regclass)$$,
                'no triggers');
SELECT is_empty($$SELECT rulename FROM pg_rules WHERE schemaname = 'outbox'$$, 'no rules');
SELECT is_empty($$SELECT relname FROM pg_class
                   WHERE relnamespace = 'outbox'::regnamespace AND relrowsecurity$$,
                'no row level security');

-- indexes: the key, the streams (which purge reads too), the deferred
-- messages and the ordering keys claims read, and the dead ones, exactly;
-- none on the lease or on delivered_at, so that a claim's update and a
-- completion are HOT updates, and none by age, so that an append writes
-- two entries
SELECT indexes_are('outbox', 'message', ARRAY['message_pkey', 'message_dead_idx',
                                              'message_stream_idx', 'message_deferred_idx', 'message_key_idx',
                                              'message_key_deferred_idx'],
                   'outbox.message has exactly its six indexes');
SELECT indexes_are('outbox', 'processed', ARRAY['processed_pkey', 'processed_at_idx'],
                   'outbox.processed has exactly its primary key index and the one purge reads');
SELECT is(pg_get_indexdef('outbox.message_pkey'::regclass),
          'CREATE UNIQUE INDEX message_pkey ON outbox.message USING btree (id)',
          'message_pkey definition');
SELECT is(pg_get_indexdef('outbox.message_dead_idx'::regclass),
          'CREATE INDEX message_dead_idx ON outbox.message USING btree (dead_at) INCLUDE (topic) WHERE (dead_at IS NOT NULL)',
          'message_dead_idx: dead messages, with their topic');
SELECT is(pg_get_indexdef('outbox.message_stream_idx'::regclass),
          'CREATE INDEX message_stream_idx ON outbox.message USING btree (topic, seq)',
          'message_stream_idx: the stream of each topic');
SELECT is(pg_get_indexdef('outbox.message_deferred_idx'::regclass),
          'CREATE INDEX message_deferred_idx ON outbox.message USING btree (topic, available_at, id) WHERE (deferred AND (dead_at IS NULL))',
          'message_deferred_idx: deferred messages not dead, by topic and available_at');
SELECT is(pg_get_indexdef('outbox.message_key_idx'::regclass),
          'CREATE INDEX message_key_idx ON outbox.message USING btree (topic, ordering_key, seq) WHERE (ordering_key IS NOT NULL)',
          'message_key_idx: the messages of each ordering key in stream order');
SELECT is(pg_get_indexdef('outbox.message_key_deferred_idx'::regclass),
          'CREATE INDEX message_key_deferred_idx ON outbox.message USING btree (topic, ordering_key, seq) WHERE (deferred AND (ordering_key IS NOT NULL) AND (dead_at IS NULL))',
          'message_key_deferred_idx: the deferred messages of each ordering key not dead');
SELECT is_empty(
    $$SELECT i.indexrelid::regclass FROM pg_index i
       WHERE i.indrelid = 'outbox.message'::regclass
         AND pg_get_indexdef(i.indexrelid) ~ '(delivered_at|leased_until|lease_owner|attempts|last_error)'$$,
    'no index of outbox.message holds a column that a claim or a completion writes (HOT updates)');
SELECT is(pg_get_indexdef('outbox.processed_pkey'::regclass),
          'CREATE UNIQUE INDEX processed_pkey ON outbox.processed USING btree (consumer, message_id)',
          'processed_pkey definition');
SELECT is(pg_get_indexdef('outbox.processed_at_idx'::regclass),
          'CREATE INDEX processed_at_idx ON outbox.processed USING brin (processed_at)',
          'processed_at_idx: the markers by insert time, for purge');

--
-- outbox.routes: one route per topic, to a NOTIFY channel or to a command
-- on a foreign server
--
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.routes'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('topic', 'text', true, NULL::text),
             ('target', 'text', true, NULL),
             ('channel', 'text', false, NULL),
             ('server', 'name', false, NULL),
             ('command', 'text', false, NULL),
             ('created_by', 'name', true, 'CURRENT_USER'),
             ('created_at', 'timestamp with time zone', true, 'now()'),
             ('paused_until', 'timestamp with time zone', false, NULL),
             ('consecutive_failures', 'integer', true, '0'),
             ('last_failure', 'text', false, NULL),
             ('created_by_role', 'regrole', false, NULL),
             ('url', 'text', false, NULL),
             ('ca_file', 'text', false, NULL),
             ('secret_fingerprint', 'text', false, NULL),
             ('subscription', 'text', false, NULL)$$,
    'outbox.routes: columns in order, with types, NOT NULL and defaults');
SELECT columns_are('outbox', 'routes', ARRAY['topic', 'target', 'channel', 'server', 'command', 'created_by', 'created_at',
                                             'paused_until', 'consecutive_failures', 'last_failure',
                                             'created_by_role', 'url', 'ca_file', 'secret_fingerprint',
                                             'subscription'],
                   'outbox.routes has exactly its fifteen columns');
SELECT hasnt_pk('outbox', 'routes', 'outbox.routes: no primary key (subscription is NULL for the default subscription)');
SELECT is((SELECT relreplident::text FROM pg_class WHERE oid = 'outbox.routes'::regclass), 'f',
          'outbox.routes: logical replication identifies a route by all of its columns');
SELECT indexes_are('outbox', 'routes', ARRAY['routes_topic_subscription_key'],
                   'outbox.routes has exactly its unique index on (topic, subscription)');
SELECT is(pg_get_indexdef('outbox.routes_topic_subscription_key'::regclass),
          'CREATE UNIQUE INDEX routes_topic_subscription_key ON outbox.routes USING btree (topic, subscription) NULLS NOT DISTINCT',
          'routes_topic_subscription_key definition: one route per topic and subscription, NULL (the default one) included');
SELECT results_eq($$SELECT conname::text COLLATE "default", contype::text COLLATE "default" FROM pg_constraint
                     WHERE conrelid = 'outbox.routes'::regclass AND contype <> 'n' ORDER BY conname$$,
                  $$VALUES ('routes_target_check', 'c'), ('routes_topic_subscription_key', 'u')$$,
                  'outbox.routes: the unique key and the check of the target, no other constraint');
SELECT is_empty($$SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox.routes'::regclass$$,
                'outbox.routes has no triggers');

-- the check: a NOTIFY route has a channel and nothing else, a remote route
-- a server and a command and no channel, an HTTP route a url alone
SELECT lives_ok($$INSERT INTO outbox.routes (topic, target, channel) VALUES ('schema n', 'notify', 'ch')$$,
                'outbox.routes takes a NOTIFY route: target notify and a channel');
SELECT lives_ok($$INSERT INTO outbox.routes (topic, target, server, command) VALUES ('schema r', 'remote', 's', 'SELECT $1')$$,
                'outbox.routes takes a remote route: target remote, a server and a command');
SELECT lives_ok($$INSERT INTO outbox.routes (topic, target, url) VALUES ('schema h', 'http', 'https://example.com/')$$,
                'outbox.routes takes an HTTP route: target http and a url');
SELECT results_eq($$SELECT created_by, created_at FROM outbox.routes WHERE topic = 'schema n'$$,
                  $$VALUES (current_user::name, now())$$,
                  'created_by and created_at default to the current role and the transaction''s time');
SELECT throws_ok(format('INSERT INTO outbox.routes (topic, target, channel, server, command) VALUES (%L, %s)', v.topic, v.vals),
                 '23514', NULL, 'outbox.routes refuses ' || v.what)
  FROM (VALUES ('a NOTIFY route without channel', 'c1', $$'notify', NULL, NULL, NULL$$),
               ('a NOTIFY route with a server', 'c2', $$'notify', 'ch', 's', NULL$$),
               ('a NOTIFY route with a command', 'c3', $$'notify', 'ch', NULL, 'SELECT $1'$$),
               ('a remote route without server', 'c4', $$'remote', NULL, NULL, 'SELECT $1'$$),
               ('a remote route without command', 'c5', $$'remote', NULL, 's', NULL$$),
               ('a remote route with a channel', 'c6', $$'remote', 'ch', 's', 'SELECT $1'$$),
               ('another target', 'c7', $$'webhook', 'ch', NULL, NULL$$),
               ('an HTTP route without url', 'c9', $$'http', NULL, NULL, NULL$$),
               ('an HTTP route with a channel', 'c10', $$'http', 'ch', NULL, NULL$$),
               ('a target in upper case', 'c8', $$'NOTIFY', 'ch', NULL, NULL$$)) AS v(what, topic, vals);
SELECT throws_ok($$INSERT INTO outbox.routes (topic, target, channel) VALUES ('schema n', 'notify', 'other')$$,
                 '23505', NULL, 'outbox.routes refuses a second route for a topic');
SELECT throws_ok($$INSERT INTO outbox.routes (topic, target, channel) VALUES (NULL, 'notify', 'ch')$$,
                 '23502', NULL, 'outbox.routes refuses a NULL topic');
SELECT throws_ok($$INSERT INTO outbox.routes (topic, target, channel, url) VALUES ('c11', 'notify', 'ch', 'https://example.com/')$$,
                 '23514', NULL, 'outbox.routes refuses a NOTIFY route with a url');
DELETE FROM outbox.routes WHERE topic IN ('schema n', 'schema r', 'schema h');

--
-- outbox.route_secrets and outbox.route_http_stats: the secrets and headers
-- of HTTP routes, and their counters
--
SELECT columns_are('outbox', 'route_secrets',
                   ARRAY['topic', 'secret', 'previous_secret', 'previous_until', 'headers', 'subscription'],
                   'outbox.route_secrets has exactly its six columns');
SELECT is(pg_get_indexdef('outbox.route_secrets_topic_subscription_key'::regclass),
          'CREATE UNIQUE INDEX route_secrets_topic_subscription_key ON outbox.route_secrets USING btree (topic, subscription) NULLS NOT DISTINCT',
          'route_secrets_topic_subscription_key: one row per route, per topic and subscription');
SELECT columns_are('outbox', 'route_http_stats',
                   ARRAY['topic', 'calls_2xx', 'calls_3xx', 'calls_4xx', 'calls_5xx', 'calls_failed',
                         'latency_seconds_total', 'last_status', 'last_latency_ms', 'last_call_at',
                         'subscription'],
                   'outbox.route_http_stats has exactly its eleven columns');
SELECT is(pg_get_indexdef('outbox.route_http_stats_topic_subscription_key'::regclass),
          'CREATE UNIQUE INDEX route_http_stats_topic_subscription_key ON outbox.route_http_stats USING btree (topic, subscription) NULLS NOT DISTINCT',
          'route_http_stats_topic_subscription_key: one row per route, per topic and subscription');
SELECT ok((SELECT pg_catalog.array_position(e.extconfig, 'outbox.route_secrets'::regclass) IS NOT NULL
                  AND pg_catalog.array_position(e.extconfig, 'outbox.route_http_stats'::regclass) IS NULL
             FROM pg_extension e WHERE e.extname = 'krizaka_outbox'),
          'pg_dump keeps the secrets of HTTP routes, not their counters');

--
-- outbox.subscription and outbox.subscription_state: the named
-- subscriptions of a topic, and what each has read and is not done with
--
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.subscription'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('sub_id', 'integer', true, 'nextval(''outbox.subscription_id_seq''::regclass)'::text),
             ('topic', 'text', true, NULL),
             ('name', 'text', false, NULL),
             ('start_seq', 'bigint', true, NULL),
             ('created_at', 'timestamp with time zone', true, 'now()'),
             ('paused_until', 'timestamp with time zone', false, NULL),
             ('expired_at', 'timestamp with time zone', false, NULL)$$,
    'outbox.subscription: columns in order, with types, NOT NULL and defaults');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.subscription_frontier'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('sub_id', 'integer', true, NULL::text),
             ('next_seq', 'bigint', true, NULL),
             ('claimed_at', 'timestamp with time zone', false, NULL),
             ('from_seq', 'bigint', false, NULL)$$,
    'outbox.subscription_frontier: columns in order, with types, NOT NULL and defaults');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.subscription_state'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('sub_id', 'integer', true, NULL::text),
             ('seq', 'bigint', true, NULL),
             ('id', 'uuid', true, NULL),
             ('ordering_key', 'text', false, NULL),
             ('available_at', 'timestamp with time zone', true, NULL),
             ('blocked', 'boolean', true, 'false'),
             ('hole', 'boolean', true, 'false'),
             ('attempts', 'integer', true, '0'),
             ('leased_until', 'timestamp with time zone', false, NULL),
             ('lease_owner', 'text', false, NULL),
             ('dead_at', 'timestamp with time zone', false, NULL),
             ('last_error', 'text', false, NULL)$$,
    'outbox.subscription_state: columns in order, with types, NOT NULL and defaults');
SELECT columns_are('outbox', 'subscription',
                   ARRAY['sub_id', 'topic', 'name', 'start_seq', 'created_at', 'paused_until', 'expired_at'],
                   'outbox.subscription has exactly its seven columns');
SELECT columns_are('outbox', 'subscription_frontier', ARRAY['sub_id', 'next_seq', 'claimed_at', 'from_seq'],
                   'outbox.subscription_frontier has exactly its four columns');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.subscription_lease'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('sub_id', 'integer', true, NULL::text),
             ('first_seq', 'bigint', true, NULL),
             ('lease_owner', 'text', true, NULL),
             ('leased_until', 'timestamp with time zone', true, NULL),
             ('seqs', 'bigint[]', true, NULL)$$,
    'outbox.subscription_lease: columns in order, with types, NOT NULL and defaults');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             co.collname::text COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation
       WHERE a.attrelid = 'outbox.subscription_key'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('sub_id', 'integer', true, NULL::text),
             ('ordering_key', 'text', true, 'C'),
             ('seq', 'bigint', true, NULL)$$,
    'outbox.subscription_key: columns in order, with types, NOT NULL and collations (the key in "C")');
SELECT columns_are('outbox', 'subscription_state',
                   ARRAY['sub_id', 'seq', 'id', 'ordering_key', 'available_at', 'blocked', 'hole', 'attempts',
                         'leased_until', 'lease_owner', 'dead_at', 'last_error'],
                   'outbox.subscription_state has exactly its twelve columns');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'outbox.subscription'::regclass),
          ARRAY['fillfactor=50'], 'outbox.subscription leaves room on its pages (fillfactor 50): claims update its rows');
SELECT is((SELECT format('%s %s', s.seqtypid::regtype, d.refobjid::regclass || '.' || a.attname)
             FROM pg_sequence s
             JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                             AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'a'
             JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE s.seqrelid = 'outbox.subscription_id_seq'::regclass),
          'integer outbox.subscription.sub_id',
          'outbox.subscription_id_seq is an integer sequence owned by outbox.subscription.sub_id');

-- keys: a subscription by its id, and by its topic and name, once (name
-- NULL, once per topic: the topic's default subscription was dropped)
SELECT col_is_pk('outbox', 'subscription', 'sub_id', 'outbox.subscription: primary key (sub_id)');
SELECT col_is_unique('outbox', 'subscription', ARRAY['topic', 'name'],
                     'outbox.subscription: a name once per topic (unique (topic, name), NULLs not distinct)');
SELECT col_is_pk('outbox', 'subscription_state', ARRAY['sub_id', 'seq'],
                 'outbox.subscription_state: primary key (sub_id, seq)');
SELECT col_is_pk('outbox', 'subscription_frontier', ARRAY['sub_id', 'next_seq'],
                 'outbox.subscription_frontier: primary key (sub_id, next_seq)');
SELECT index_is_primary('outbox', 'subscription_frontier', 'subscription_frontier_pkey',
                        'subscription_frontier_pkey is the primary key of outbox.subscription_frontier');
SELECT index_is_primary('outbox', 'subscription', 'subscription_pkey',
                        'subscription_pkey is the primary key of outbox.subscription');
SELECT index_is_primary('outbox', 'subscription_state', 'subscription_state_pkey',
                        'subscription_state_pkey is the primary key of outbox.subscription_state');
SELECT results_eq($$SELECT conrelid::regclass::text COLLATE "default", conname::text COLLATE "default",
                           pg_get_constraintdef(oid) COLLATE "default"
                      FROM pg_constraint
                     WHERE conrelid IN ('outbox.subscription'::regclass, 'outbox.subscription_state'::regclass,
                                        'outbox.subscription_frontier'::regclass,
                                        'outbox.subscription_lease'::regclass,
                                        'outbox.subscription_key'::regclass)
                       AND contype <> 'n' ORDER BY 1, 2$$,
                  $$VALUES ('outbox.subscription', 'subscription_pkey', 'PRIMARY KEY (sub_id)'),
                           ('outbox.subscription', 'subscription_topic_name_key', 'UNIQUE NULLS NOT DISTINCT (topic, name)'),
                           ('outbox.subscription_frontier', 'subscription_frontier_pkey', 'PRIMARY KEY (sub_id, next_seq)'),
                           ('outbox.subscription_key', 'subscription_key_pkey', 'PRIMARY KEY (ordering_key, sub_id)'),
                           ('outbox.subscription_lease', 'subscription_lease_pkey', 'PRIMARY KEY (sub_id, first_seq)'),
                           ('outbox.subscription_state', 'subscription_state_pkey', 'PRIMARY KEY (sub_id, seq)')$$,
                  'outbox.subscription, outbox.subscription_frontier, outbox.subscription_lease, outbox.subscription_key and outbox.subscription_state: their keys, no other constraint');
SELECT is_empty($$SELECT tgname FROM pg_trigger
                   WHERE tgrelid IN ('outbox.subscription'::regclass, 'outbox.subscription_state'::regclass,
                                     'outbox.subscription_frontier'::regclass,
                                     'outbox.subscription_lease'::regclass, 'outbox.subscription_key'::regclass)$$,
                'outbox.subscription, outbox.subscription_frontier, outbox.subscription_lease, outbox.subscription_key and outbox.subscription_state have no triggers');
SELECT indexes_are('outbox', 'subscription_frontier', ARRAY['subscription_frontier_pkey'],
                   'outbox.subscription_frontier has exactly its primary key index');
SELECT indexes_are('outbox', 'subscription_lease', ARRAY['subscription_lease_pkey', 'subscription_lease_until_idx'],
                   'outbox.subscription_lease has exactly its primary key index and that of the leases'' ends');
SELECT indexes_are('outbox', 'subscription_key', ARRAY['subscription_key_pkey'],
                   'outbox.subscription_key has exactly its primary key index (by key first: a completion finds its keys'' rows by an array of keys)');
SELECT indexes_are('outbox', 'subscription', ARRAY['subscription_pkey', 'subscription_topic_name_key'],
                   'outbox.subscription has exactly the indexes of its keys');
SELECT indexes_are('outbox', 'subscription_state',
                   ARRAY['subscription_state_pkey', 'subscription_state_id_idx', 'subscription_state_due_idx',
                         'subscription_state_hole_idx', 'subscription_state_key_idx', 'subscription_state_lease_idx',
                         'subscription_state_dead_idx'],
                   'outbox.subscription_state has exactly its seven indexes');
SELECT is(pg_get_indexdef(format('outbox.%I', v.idx)::regclass), v.def, v.idx || ': ' || v.what)
  FROM (VALUES ('subscription_topic_name_key',
                'CREATE UNIQUE INDEX subscription_topic_name_key ON outbox.subscription USING btree (topic, name) NULLS NOT DISTINCT',
                'a subscription by topic and name'),
               ('subscription_state_pkey',
                'CREATE UNIQUE INDEX subscription_state_pkey ON outbox.subscription_state USING btree (sub_id, seq)',
                'a message of a subscription by position'),
               ('subscription_state_id_idx',
                'CREATE UNIQUE INDEX subscription_state_id_idx ON outbox.subscription_state USING btree (id, sub_id)',
                'a message of a subscription by id'),
               ('subscription_state_due_idx',
                'CREATE INDEX subscription_state_due_idx ON outbox.subscription_state USING btree (sub_id, available_at) WHERE ((dead_at IS NULL) AND (NOT blocked) AND (NOT hole) AND (leased_until IS NULL))',
                'what a claim may lease, by when it is due (leased rows are found by their lease)'),
               ('subscription_state_hole_idx',
                'CREATE INDEX subscription_state_hole_idx ON outbox.subscription_state USING btree (sub_id, seq) WHERE hole',
                'the appends a claim passed over while they were in progress'),
               ('subscription_state_key_idx',
                'CREATE INDEX subscription_state_key_idx ON outbox.subscription_state USING btree (sub_id, ordering_key, seq) WHERE ((ordering_key IS NOT NULL) AND (dead_at IS NULL))',
                'the messages of each ordering key not dead, in stream order'),
               ('subscription_state_lease_idx',
                'CREATE INDEX subscription_state_lease_idx ON outbox.subscription_state USING btree (leased_until, sub_id) WHERE ((leased_until IS NOT NULL) AND (dead_at IS NULL))',
                'the leases, for those that run out on their last attempt'),
               ('subscription_state_dead_idx',
                'CREATE INDEX subscription_state_dead_idx ON outbox.subscription_state USING btree (dead_at, sub_id) WHERE (dead_at IS NOT NULL)',
                'the dead messages'),
               ('subscription_lease_until_idx',
                'CREATE INDEX subscription_lease_until_idx ON outbox.subscription_lease USING btree (leased_until, sub_id)',
                'the leases by range, for those that run out')) AS v(idx, def, what)
 ORDER BY v.idx;

--
-- outbox.subscription_stats: counts per topic and subscription
--
SELECT has_view('outbox', 'subscription_stats', 'outbox.subscription_stats is a view');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default"
        FROM pg_attribute a
       WHERE a.attrelid = 'outbox.subscription_stats'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('topic', 'text'),
             ('subscription', 'text'),
             ('pending', 'bigint'),
             ('in_flight', 'bigint'),
             ('dead', 'bigint'),
             ('oldest_pending_age', 'interval'),
             ('last_claim_at', 'timestamp with time zone'),
             ('paused_until', 'timestamp with time zone'),
             ('state', 'text')$$,
    'outbox.subscription_stats: columns in order, with types');
SELECT columns_are('outbox', 'subscription_stats',
                   ARRAY['topic', 'subscription', 'pending', 'in_flight', 'dead', 'oldest_pending_age',
                         'last_claim_at', 'paused_until', 'state'],
                   'outbox.subscription_stats has exactly its nine columns');

--
-- outbox.topic_stats: a view of counts per topic, no message content
--
SELECT has_view('outbox', 'topic_stats', 'outbox.topic_stats is a view');
SELECT views_are('outbox', ARRAY['topic_stats', 'subscription_stats'],
                 'outbox has exactly the views topic_stats and subscription_stats');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default"
        FROM pg_attribute a
       WHERE a.attrelid = 'outbox.topic_stats'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('topic', 'text'),
             ('due', 'bigint'),
             ('delayed', 'bigint'),
             ('leased', 'bigint'),
             ('dead', 'bigint'),
             ('delivered', 'bigint'),
             ('oldest_undelivered_age', 'interval'),
             ('paused_until', 'timestamp with time zone'),
             ('oldest_undelivered_age_seconds', 'double precision')$$,
    'outbox.topic_stats: columns in order, with types');
SELECT columns_are('outbox', 'topic_stats',
                   ARRAY['topic', 'due', 'delayed', 'leased', 'dead', 'delivered', 'oldest_undelivered_age', 'paused_until',
                         'oldest_undelivered_age_seconds'],
                   'outbox.topic_stats has exactly its nine columns');

-- outbox.claim_position: a floor of each topic's claim position, saved by
-- the searches; updated in place, found by topic only
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", format_type(a.atttypid, a.atttypmod) COLLATE "default", a.attnotnull,
             pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE a.attrelid = 'outbox.claim_position'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('topic', 'text', true, NULL::text),
             ('position', 'bigint', true, NULL),
             ('saved_at', 'timestamp with time zone', true, NULL)$$,
    'outbox.claim_position: columns in order, with types, NOT NULL and no defaults');
SELECT col_is_pk('outbox', 'claim_position', 'topic', 'outbox.claim_position: primary key (topic)');
SELECT indexes_are('outbox', 'claim_position', ARRAY['claim_position_pkey'],
                   'outbox.claim_position has exactly its primary key index');
SELECT is_empty($$SELECT conname FROM pg_constraint
                   WHERE conrelid = 'outbox.claim_position'::regclass AND contype NOT IN ('p', 'n')$$,
                'outbox.claim_position has no other constraint');
SELECT is_empty($$SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox.claim_position'::regclass$$,
                'outbox.claim_position has no triggers');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'outbox.claim_position'::regclass),
          ARRAY['fillfactor=50'], 'outbox.claim_position leaves room on its pages (fillfactor 50): searches update its rows');

-- pg_dump keeps the rows of the nine tables and the two sequences (not
-- the saved claim positions: lost, the searches find them again)
SELECT is(ARRAY(SELECT c::regclass::text FROM pg_extension e, unnest(e.extconfig) AS c
                 WHERE e.extname = 'krizaka_outbox' ORDER BY 1),
          ARRAY['outbox.message', 'outbox.message_seq', 'outbox.processed', 'outbox.route_secrets', 'outbox.routes',
                'outbox.subscription', 'outbox.subscription_frontier', 'outbox.subscription_id_seq',
                'outbox.subscription_key', 'outbox.subscription_lease', 'outbox.subscription_state'],
          'the nine tables, the sequence of positions and that of subscriptions are registered with pg_extension_config_dump');
SELECT is((SELECT extcondition FROM pg_extension WHERE extname = 'krizaka_outbox'),
          ARRAY['', '', '', '', '', '', '', '', '', '', ''],
          'with no condition: every row is dumped');

-- everything in the schema belongs to the extension; the schema does not
SELECT is_empty($$SELECT c.oid::regclass FROM pg_class c
                   WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'
                     AND NOT EXISTS (SELECT FROM pg_depend d
                                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                        AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')$$,
                'every table is a member of the extension');
SELECT ok(EXISTS (SELECT FROM pg_depend d
                   WHERE d.classid = 'pg_class'::regclass AND d.objid = 'outbox.topic_stats'::regclass
                     AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'),
          'the view topic_stats is a member of the extension');
SELECT ok(EXISTS (SELECT FROM pg_depend d
                   WHERE d.classid = 'pg_class'::regclass AND d.objid = 'outbox.subscription_stats'::regclass
                     AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'),
          'the view subscription_stats is a member of the extension');
SELECT is_empty($$SELECT c.oid::regclass FROM pg_class c
                   WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'S'
                     AND NOT EXISTS (SELECT FROM pg_depend d
                                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                        AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')$$,
                'every sequence is a member of the extension');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'outbox'::regnamespace
                     AND NOT EXISTS (SELECT FROM pg_depend d
                                      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                        AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')$$,
                'every function is a member of the extension');
SELECT isnt_empty($$SELECT FROM pg_depend d
                   WHERE d.classid = 'pg_namespace'::regclass AND d.objid = 'outbox'::regnamespace
                     AND d.deptype = 'e'$$,
                'the schema is a member of the extension (DROP EXTENSION removes it)');

-- documented in the catalog
SELECT isnt(obj_description('outbox.message'::regclass, 'pg_class'), NULL, 'outbox.message has a comment');
SELECT isnt(obj_description('outbox.processed'::regclass, 'pg_class'), NULL, 'outbox.processed has a comment');
SELECT isnt(obj_description('outbox.routes'::regclass, 'pg_class'), NULL, 'outbox.routes has a comment');
SELECT isnt(obj_description('outbox.topic_stats'::regclass, 'pg_class'), NULL, 'outbox.topic_stats has a comment');
SELECT isnt(obj_description('outbox.subscription'::regclass, 'pg_class'), NULL, 'outbox.subscription has a comment');
SELECT isnt(obj_description('outbox.subscription_state'::regclass, 'pg_class'), NULL,
            'outbox.subscription_state has a comment');
SELECT isnt(obj_description('outbox.subscription_frontier'::regclass, 'pg_class'), NULL,
            'outbox.subscription_frontier has a comment');
SELECT isnt(obj_description('outbox.subscription_lease'::regclass, 'pg_class'), NULL,
            'outbox.subscription_lease has a comment');
SELECT isnt(obj_description('outbox.subscription_key'::regclass, 'pg_class'), NULL,
            'outbox.subscription_key has a comment');
SELECT isnt(obj_description('outbox.subscription_stats'::regclass, 'pg_class'), NULL,
            'outbox.subscription_stats has a comment');
SELECT isnt(obj_description('outbox.claim_position'::regclass, 'pg_class'), NULL,
            'outbox.claim_position has a comment');

SELECT * FROM finish();
ROLLBACK;
