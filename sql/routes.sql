--
-- routes: route_notify, route_remote and unroute check every argument and
-- keep one route per topic in outbox.routes.  A refused route stores
-- nothing; what a route carries (topic, channel, command) is kept as data
-- and never run here.  No connection is made when a remote route is set.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

-- (left over only by an interrupted earlier run)
SET client_min_messages = warning;
DROP TABLE IF EXISTS regress_victim;
DROP FUNCTION IF EXISTS regress_boom(jsonb);
DROP SERVER IF EXISTS regress_nowhere, regress_nowhere_pg, regress_other CASCADE;
DROP FOREIGN DATA WRAPPER IF EXISTS regress_other_fdw;
DROP EXTENSION IF EXISTS dblink, postgres_fdw CASCADE;
RESET client_min_messages;

-- The routes as stored, without created_at (the time of the transaction);
-- the role running the tests is shown as <me>.
CREATE TEMP VIEW r AS
SELECT topic, target, channel, server, command,
       CASE WHEN created_by = session_user THEN '<me>' ELSE created_by END AS created_by
  FROM outbox.routes;

-- A fingerprint of outbox.routes, created_at included.
CREATE FUNCTION pg_temp.routes_state() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r.topic), '')) FROM outbox.routes r
$$;

--
-- route_notify
--
SELECT outbox.route_notify('orders', 'orders_events');
SELECT * FROM r ORDER BY topic;

-- the route is made by the session's role at the transaction's time
BEGIN;
SELECT outbox.route_notify('orders', 'orders_events');
SELECT created_by = current_user AS by_me, created_at = now() AS made_now
  FROM outbox.routes WHERE topic = 'orders';
COMMIT;

-- setting a route again replaces it: still one row per topic
SELECT outbox.route_notify('orders', 'orders_v2');
SELECT * FROM r ORDER BY topic;
SELECT count(*) FROM outbox.routes;

-- bad topics and channels: 22004 for NULL, 22023 for the rest, nothing
-- stored and the existing route left as it was
SELECT pg_temp.routes_state() AS before \gset
SELECT v.label, regress.err(format('SELECT outbox.route_notify(%s, %s)',
                                   quote_nullable(v.topic), quote_nullable(v.channel)))
  FROM (VALUES ('topic NULL', NULL, 'ok'),
               ('topic empty', '', 'ok'),
               ('topic spaces', '   ', 'ok'),
               ('topic 201 characters', repeat('é', 201), 'ok'),
               ('topic tab', E'or\tders', 'ok'),
               ('topic U+0085', 'orders' || chr(133), 'ok'),
               ('channel NULL', 'orders', NULL),
               ('channel empty', 'orders', ''),
               ('channel spaces', 'orders', '  '),
               ('channel 201 characters', 'orders', repeat('a', 201)),
               ('channel newline', 'orders', E'orders\n'),
               ('channel U+007F', 'orders', 'orders' || chr(127)),
               ('channel upper case', 'orders', 'Orders'),
               ('channel all upper case', 'orders', 'ORDERS'),
               ('channel leading digit', 'orders', '1orders'),
               ('channel leading dollar', 'orders', '$orders'),
               ('channel dash', 'orders', 'orders-events'),
               ('channel space', 'orders', 'orders events'),
               ('channel leading space', 'orders', ' orders'),
               ('channel double quotes', 'orders', '"orders"'),
               ('channel single quote', 'orders', 'orders''s'),
               ('channel dot', 'orders', 'public.orders'),
               ('channel not ASCII', 'orders', 'commandés'),
               ('channel 64 bytes', 'orders', repeat('a', 64)),
               ('channel 32 characters, 64 bytes', 'orders', repeat('é', 32)),
               ('channel 200 characters', 'orders', repeat('a', 200)),
               ('channel injection', 'orders', 'x; DROP TABLE outbox.message'),
               ('channel injection with quotes', 'orders', $$x'); DELETE FROM outbox.routes; --$$)
       ) AS v(label, topic, channel);
SELECT pg_temp.routes_state() = :'before' AS unchanged;

-- what is a valid channel: LISTEN without quotes receives it
CREATE TEMP TABLE good_channel (label text, channel text);
INSERT INTO good_channel VALUES
    ('one letter', 'o'),
    ('leading underscore', '_orders'),
    ('digits and dollars', 'orders_2$v1'),
    ('63 bytes', repeat('a', 63));
SELECT label, regress.err(format('SELECT outbox.route_notify(%L, %L)', 'ch ' || label, channel)) AS result
  FROM good_channel ORDER BY label;
SELECT g.label, r.channel = g.channel AS stored
  FROM good_channel g LEFT JOIN outbox.routes r ON r.topic = 'ch ' || g.label
 ORDER BY g.label;
DROP TABLE good_channel;

-- topics at the limit, and topics that look like SQL, are stored as they are
SELECT outbox.route_notify(repeat('é', 200), 'long_topic');
SELECT outbox.route_notify($$orders'); DELETE FROM outbox.routes; --$$, 'quoted_topic');
SELECT outbox.route_notify('orders"; DROP TABLE outbox.message; --', 'dquoted_topic');
SELECT length(topic) AS chars, channel FROM outbox.routes WHERE channel LIKE '%topic' ORDER BY channel;
SELECT topic FROM outbox.routes WHERE channel IN ('quoted_topic', 'dquoted_topic') ORDER BY topic;
SELECT count(*) AS routes, (SELECT count(*) FROM outbox.message) AS messages FROM outbox.routes;

--
-- unroute: true when a route was removed, false when there was none
--
SELECT outbox.unroute('orders');
SELECT outbox.unroute('orders');
SELECT outbox.unroute('no such topic');
SELECT outbox.unroute($$orders'); DELETE FROM outbox.routes; --$$);
SELECT outbox.unroute(repeat('é', 200));
SELECT pg_temp.routes_state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.unroute(NULL)$$),
               ($$SELECT outbox.unroute('')$$),
               ($$SELECT outbox.unroute(' ')$$),
               ($$SELECT outbox.unroute(repeat('x', 201))$$),
               ($$SELECT outbox.unroute(E'ch\x01')$$)) AS v(stmt);
SELECT pg_temp.routes_state() = :'before' AS unchanged;
TRUNCATE outbox.routes;

--
-- route_remote, to servers that point nowhere: nothing connects to them
-- while routes are set
--
CREATE EXTENSION dblink;
CREATE EXTENSION postgres_fdw;
CREATE SERVER regress_nowhere FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'x');
CREATE SERVER regress_nowhere_pg FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'x');
CREATE FOREIGN DATA WRAPPER regress_other_fdw;
CREATE SERVER regress_other FOREIGN DATA WRAPPER regress_other_fdw;

-- A local table and function that a command would change if it were run
-- here.
CREATE TABLE regress_victim (env jsonb);
CREATE FUNCTION regress_boom(jsonb) RETURNS void
LANGUAGE sql AS $$ INSERT INTO regress_victim VALUES ($1) $$;

SELECT outbox.route_remote('credits', 'regress_nowhere',
    'INSERT INTO inbox.event (id, body, topic) VALUES (($1->>''id'')::uuid, $1, $2) ON CONFLICT (id) DO NOTHING');
SELECT outbox.route_remote('credits_pg', 'regress_nowhere_pg', 'SELECT $1');
SELECT * FROM r ORDER BY topic;

-- replacing: remote by NOTIFY and NOTIFY by remote, one row per topic, the
-- other target's columns cleared
SELECT outbox.route_notify('credits', 'credits_events');
SELECT outbox.route_remote('credits_pg', 'regress_nowhere', 'CALL inbox.take($1, $2)');
SELECT * FROM r ORDER BY topic;
SELECT outbox.route_remote('credits', 'regress_nowhere_pg', 'SELECT inbox.take($1)');
SELECT * FROM r ORDER BY topic;

-- every command that is one statement with $1 (and perhaps $2) is accepted
-- and stored exactly as given
CREATE TEMP TABLE good_command (n integer, command text);
INSERT INTO good_command VALUES
               (1, 'SELECT $1'),
               (2, 'SELECT $1;'),
               (3, E'  select\n$1::text  ;  '),
               (4, 'INSERT INTO t (body, topic) VALUES ($1, $2)'),
               (5, 'UPDATE t SET body = $1 WHERE topic = $2'),
               (6, 'DELETE FROM t WHERE id = ($1->>''id'')::uuid'),
               (7, 'MERGE INTO t USING (SELECT $1 AS b) s ON false WHEN NOT MATCHED THEN INSERT VALUES (s.b)'),
               (8, 'CALL p($1)'),
               (9, 'WITH e AS (SELECT $1 AS b) INSERT INTO t SELECT b FROM e'),
               (10, 'SELECT $2, $1'),
               (11, 'SELECT $1, ''a; DROP TABLE outbox.message''  -- a; b'),
               (12, 'SELECT $1 /* ; DROP TABLE outbox.message; */'),
               (13, 'SELECT regress_boom($1)'),
               (14, 'INSERT INTO regress_victim VALUES ($1)');
SELECT n, regress.err(format('SELECT outbox.route_remote(%L, %L, %L)', 'cmd ' || n, 'regress_nowhere', command))
  FROM good_command ORDER BY n;
SELECT g.n, r.command = g.command AS stored, r.server
  FROM good_command g LEFT JOIN outbox.routes r ON r.topic = 'cmd ' || g.n
 ORDER BY g.n;
DROP TABLE good_command;

-- refused commands, servers and values: nothing stored, nothing run here
SELECT pg_temp.routes_state() AS before \gset
SELECT v.label, regress.err(format('SELECT outbox.route_remote(%s, %s, %s)', quote_nullable(v.topic),
                                   quote_nullable(v.server), quote_nullable(v.command)))
  FROM (VALUES ('topic NULL', NULL, 'regress_nowhere', 'SELECT $1'),
               ('topic empty', '', 'regress_nowhere', 'SELECT $1'),
               ('topic 201 characters', repeat('x', 201), 'regress_nowhere', 'SELECT $1'),
               ('topic control character', E'credits\r', 'regress_nowhere', 'SELECT $1'),
               ('server NULL', 'credits', NULL, 'SELECT $1'),
               ('server empty', 'credits', '', 'SELECT $1'),
               ('server unknown', 'credits', 'regress_no_such_server', 'SELECT $1'),
               ('server injection', 'credits', 'regress_nowhere; DROP TABLE outbox.message', 'SELECT $1'),
               ('server of another wrapper', 'credits', 'regress_other', 'SELECT $1'),
               ('command NULL', 'credits', 'regress_nowhere', NULL),
               ('command empty', 'credits', 'regress_nowhere', ''),
               ('command blank', 'credits', 'regress_nowhere', E' \t\n '),
               ('command only a comment', 'credits', 'regress_nowhere', '-- SELECT $1'),
               ('command only a semicolon', 'credits', 'regress_nowhere', ';'),
               ('command not SQL', 'credits', 'regress_nowhere', 'INSRT INTO t VALUES ($1)'),
               ('command unterminated string', 'credits', 'regress_nowhere', 'SELECT $1, ''abc'),
               ('command two statements', 'credits', 'regress_nowhere', 'SELECT $1; SELECT $1'),
               ('command injection', 'credits', 'regress_nowhere', 'SELECT $1; DROP TABLE outbox.message'),
               ('command injection, hidden', 'credits', 'regress_nowhere', E'SELECT $1 --\n; DELETE FROM outbox.routes'),
               ('command without $1', 'credits', 'regress_nowhere', 'INSERT INTO t VALUES ($2)'),
               ('command without parameters', 'credits', 'regress_nowhere', 'SELECT 1'),
               ('command $1 in a string', 'credits', 'regress_nowhere', 'SELECT ''$1'''),
               ('command $1 in a quoted name', 'credits', 'regress_nowhere', 'SELECT "$1" FROM t'),
               ('command $3', 'credits', 'regress_nowhere', 'INSERT INTO t VALUES ($1, $3)'),
               ('command $10', 'credits', 'regress_nowhere', 'SELECT $1, $10'),
               ('command $2147483648', 'credits', 'regress_nowhere', 'SELECT $1, $2147483648'),
               ('command $4294967297', 'credits', 'regress_nowhere', 'SELECT $4294967297'),
               ('command COPY', 'credits', 'regress_nowhere', 'COPY t FROM STDIN'),
               ('command COPY with $1', 'credits', 'regress_nowhere', 'COPY (SELECT $1) TO STDOUT'),
               ('command BEGIN', 'credits', 'regress_nowhere', 'BEGIN'),
               ('command START TRANSACTION', 'credits', 'regress_nowhere', 'START TRANSACTION'),
               ('command COMMIT', 'credits', 'regress_nowhere', 'COMMIT'),
               ('command ROLLBACK', 'credits', 'regress_nowhere', 'ROLLBACK'),
               ('command SAVEPOINT', 'credits', 'regress_nowhere', 'SAVEPOINT s'),
               ('command PREPARE TRANSACTION', 'credits', 'regress_nowhere', 'PREPARE TRANSACTION ''x'''),
               ('command SET', 'credits', 'regress_nowhere', 'SET search_path = evil'),
               ('command DO', 'credits', 'regress_nowhere', 'DO $$BEGIN PERFORM $1; END$$'),
               ('command CREATE TABLE', 'credits', 'regress_nowhere', 'CREATE TABLE t AS SELECT $1'),
               ('command SELECT INTO', 'credits', 'regress_nowhere', 'SELECT $1 INTO t'),
               ('command DROP', 'credits', 'regress_nowhere', 'DROP TABLE outbox.message'),
               ('command EXPLAIN', 'credits', 'regress_nowhere', 'EXPLAIN SELECT $1'),
               ('command PREPARE', 'credits', 'regress_nowhere', 'PREPARE p AS SELECT $1'),
               ('command VACUUM', 'credits', 'regress_nowhere', 'VACUUM')) AS v(label, topic, server, command);
SELECT pg_temp.routes_state() = :'before' AS unchanged;

-- $0 is no parameter either; the error names the one the command uses
SELECT regress.err($$SELECT outbox.route_remote('credits', 'regress_nowhere', 'SELECT $0, $1')$$);
SELECT pg_temp.routes_state() = :'before' AS unchanged;

-- nothing of any route ran here, and the outbox tables are all there
SELECT count(*) AS victim_rows FROM regress_victim;
SELECT to_regclass('outbox.message') IS NOT NULL AS message_table,
       (SELECT count(*) FROM outbox.message) AS messages;

-- a route that is not a superuser's: USAGE on the server and a password in
-- the user mapping are needed, and the route is the role's own, stored
-- without any right on outbox.routes (all in a transaction rolled back at
-- the end, so that the role and its grants leave no trace)
BEGIN;
CREATE ROLE regress_outbox_router NOLOGIN;
GRANT USAGE ON SCHEMA outbox, regress TO regress_outbox_router;
GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text) TO regress_outbox_router;
SET ROLE regress_outbox_router;
SELECT regress.err($$SELECT outbox.route_remote('router', 'regress_nowhere', 'SELECT $1')$$);
RESET ROLE;
GRANT USAGE ON FOREIGN SERVER regress_nowhere TO regress_outbox_router;
CREATE USER MAPPING FOR regress_outbox_router SERVER regress_nowhere
    OPTIONS (user 'someone', password 'secret');
SET ROLE regress_outbox_router;
SELECT outbox.route_remote('router', 'regress_nowhere', 'SELECT $1');
SELECT regress.err('SELECT count(*) FROM outbox.routes');
RESET ROLE;
SELECT * FROM r WHERE topic = 'router';

-- route_notify runs as the extension's owner, but the route is the
-- session role's
GRANT EXECUTE ON FUNCTION outbox.route_notify(text, text) TO regress_outbox_router;
SET ROLE regress_outbox_router;
SELECT outbox.route_notify('router_n', 'router_events');
RESET ROLE;
SELECT * FROM r WHERE topic = 'router_n';

-- check_route: one row per step, up to the first that fails.  A NOTIFY
-- route has nothing remote to check; a remote route's server and mapping
-- are checked as the creator's, and the connection is tried (these servers
-- refuse it: port 1)
SELECT step, ok, sqlstate, message FROM outbox.check_route('router_n');
-- (no user mapping of the superuser that made this one)
SELECT step, ok, sqlstate, replace(message, current_user, '<me>') AS message
  FROM outbox.check_route('credits');
SET ROLE regress_outbox_router;
SELECT regress.err($$SELECT * FROM outbox.check_route('router')$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox.check_route(text) TO regress_outbox_router;
SET ROLE regress_outbox_router;
SELECT step, ok, sqlstate,
       CASE WHEN step = 'connect' AND message LIKE 'could not connect to server "regress_nowhere": %Connection refused%'
            THEN 'could not connect ... Connection refused' ELSE message END AS message
  FROM outbox.check_route('router');
-- a topic without a route, and a NULL topic
SELECT regress.err($$SELECT * FROM outbox.check_route('router_none')$$);
SELECT regress.err($$SELECT * FROM outbox.check_route(NULL)$$);
-- another role's route, even with EXECUTE: only its creator, a superuser or
-- a member of the extension's owner may check it
SELECT regress.err($$SELECT * FROM outbox.check_route('credits')$$);
RESET ROLE;
-- the creator's mapping is gone: the server step fails, nothing connects
DROP USER MAPPING FOR regress_outbox_router SERVER regress_nowhere;
SELECT * FROM outbox.check_route('router');
-- a host given by name: a note that the worker looks it up, blocking
CREATE SERVER regress_named FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host 'localhost', port '1', dbname 'x');
CREATE USER MAPPING FOR CURRENT_USER SERVER regress_named;
SELECT outbox.route_remote('router_named', 'regress_named', 'SELECT $1');
SELECT step, ok, sqlstate, replace(message, current_user, '<me>') AS message
  FROM outbox.check_route('router_named') WHERE step IN ('route', 'server');
ALTER SERVER regress_named OPTIONS (ADD hostaddr '127.0.0.1');
SELECT step, ok, sqlstate, replace(message, current_user, '<me>') AS message
  FROM outbox.check_route('router_named') WHERE step IN ('route', 'server');
SELECT outbox.unroute('router_named');

-- a route made by one role and replaced by another belongs to the other
SELECT outbox.route_notify('router', 'router_events');
SELECT * FROM r WHERE topic LIKE 'router%' ORDER BY topic;

ROLLBACK;
SELECT count(*) AS routes FROM outbox.routes WHERE topic LIKE 'router%';
TRUNCATE outbox.routes;
DROP SERVER regress_nowhere, regress_nowhere_pg, regress_other;
DROP FOREIGN DATA WRAPPER regress_other_fdw;
DROP FUNCTION regress_boom(jsonb);
DROP TABLE regress_victim;
DROP VIEW r;
DROP EXTENSION dblink, postgres_fdw;
RESET TimeZone;
