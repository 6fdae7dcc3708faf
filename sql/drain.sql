--
-- drain_once: one round of delivery through the routes, in the caller's
-- transaction.  A NOTIFY route completes its messages and notifies when the
-- caller commits; an unreachable remote target fails its messages with the
-- error and a backoff, without raising one; a message that cannot be
-- delivered fails alone while the rest of its batch goes on; a drain that
-- rolls back leaves no trace.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

-- (left over only by an interrupted earlier run)
SET client_min_messages = warning;
DROP TABLE IF EXISTS regress_victim;
DROP SERVER IF EXISTS regress_unreachable, regress_unmapped CASCADE;
DROP EXTENSION IF EXISTS dblink, postgres_fdw CASCADE;
RESET client_min_messages;

-- psql prints a notification with the sender's pid: notifications are
-- written to this file (\o) and read back without the pid.
\getenv abs_builddir PG_ABS_BUILDDIR
\set notes :abs_builddir '/results/drain_notifications.txt'
CREATE FUNCTION pg_temp.notifications(path text) RETURNS SETOF text
LANGUAGE sql AS $$
    SELECT regexp_replace(line, 'server process with PID \d+', 'server process with PID <pid>')
      FROM regexp_split_to_table(rtrim(pg_read_file(path), E'\n'), E'\n') AS line
     WHERE line <> ''
$$;

-- A fingerprint of the routes, to show that a drain leaves them alone.
CREATE FUNCTION pg_temp.routes_state() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r.topic), '')) FROM outbox.routes r
$$;

-- Messages with fixed ids, created_at and available_at, in the order given.
CREATE FUNCTION pg_temp.add(topic text, first integer, last integer) RETURNS void
LANGUAGE sql AS $$
    SELECT outbox.append(topic, 'evt.drain.v1', jsonb_build_object('n', n), regress.id(n),
                         '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
      FROM generate_series(first, last) AS n
     ORDER BY n;
    UPDATE outbox.message SET created_at = '2020-01-01 00:00:00+00'::timestamptz + (payload->>'n')::int * interval '1 s'
     WHERE id IN (SELECT regress.id(n) FROM generate_series(first, last) AS n);
$$;

-- Each message: what a drain did to it.
CREATE TEMP VIEW outcome AS
SELECT (payload->>'n')::int AS n, topic, attempts, delivered_at IS NOT NULL AS delivered,
       leased_until IS NULL AS no_lease, dead_at IS NOT NULL AS dead,
       available_at > clock_timestamp() AS backing_off, last_error
  FROM outbox.message;

--
-- the topic argument: NULL is every route, anything else must be a name
--
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.drain_once('')$$),
               ($$SELECT outbox.drain_once('  ')$$),
               ($$SELECT outbox.drain_once(repeat('x', 201))$$),
               ($$SELECT outbox.drain_once(E'a\nb')$$)) AS v(stmt);

-- without any route nothing is delivered, nothing is touched
SELECT pg_temp.add('n1', 1, 3);
SELECT pg_temp.add('n2', 4, 5);
SELECT pg_temp.add('unrouted', 6, 7);
SELECT regress.state() AS before \gset
SELECT outbox.drain_once();
SELECT outbox.drain_once(NULL);
SELECT outbox.drain_once('n1');
SELECT regress.state() = :'before' AS unchanged;

--
-- NOTIFY routes
--
SELECT outbox.route_notify('n1', 'regress_n1');
SELECT outbox.route_notify('n2', 'regress_n2');
SELECT pg_temp.routes_state() AS routes_before \gset

-- a topic without a route, or unknown, delivers nothing
SELECT outbox.drain_once('unrouted');
SELECT outbox.drain_once('no such topic');
SELECT regress.state() = :'before' AS unchanged;

-- one topic: its messages are complete and notified when the caller
-- commits, and not before
LISTEN regress_n1;
LISTEN regress_n2;
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.drain_once('n1');
SELECT clock_timestamp() AS t1 \gset
SELECT * FROM outcome ORDER BY n;
SELECT count(*) AS delivered_during_the_call FROM outbox.message
 WHERE delivered_at BETWEEN :'t0' AND :'t1';
\o :notes
COMMIT;
\o
SELECT * FROM pg_temp.notifications(:'notes');

-- every routed topic: the other one
BEGIN;
SELECT outbox.drain_once();
\o :notes
COMMIT;
\o
SELECT * FROM pg_temp.notifications(:'notes');
SELECT * FROM outcome ORDER BY n;

-- nothing is due any more
SELECT outbox.drain_once();

-- a drain that rolls back sends nothing and leaves every message as it was
SELECT pg_temp.add('n1', 8, 9);
SELECT regress.state() AS before \gset
BEGIN;
SELECT outbox.drain_once();
\o :notes
ROLLBACK;
\o
SELECT count(*) AS notifications FROM pg_temp.notifications(:'notes');
SELECT regress.state() = :'before' AS unchanged;

-- a message whose envelope cannot be built (created_at infinity) fails with
-- its error, and the others of its batch are delivered and notified
SELECT pg_temp.add('n1', 10, 10);
UPDATE outbox.message SET created_at = 'infinity' WHERE id = regress.id(9);
BEGIN;
SELECT outbox.drain_once('n1');
\o :notes
COMMIT;
\o
SELECT * FROM pg_temp.notifications(:'notes');
SELECT * FROM outcome WHERE n >= 8 ORDER BY n;
UNLISTEN *;

--
-- the batch size: outbox.batch_size messages per route and round, oldest
-- first
--
SELECT regress.reset();
SELECT pg_temp.add('n1', 1, 5);
SELECT pg_temp.add('n2', 6, 10);
SET outbox.batch_size = 2;
SELECT outbox.drain_once('n1');
SELECT n, topic, attempts, delivered FROM outcome ORDER BY n;
SELECT outbox.drain_once();
SELECT n, topic, attempts, delivered FROM outcome ORDER BY n;
SET outbox.batch_size = 500;
SELECT outbox.drain_once();
SELECT count(*) FILTER (WHERE delivered) AS delivered, count(*) FILTER (WHERE attempts = 1) AS once
  FROM outcome;
RESET outbox.batch_size;

--
-- remote routes to a server nobody answers on: the messages fail with the
-- connection error and back off; drain_once itself raises nothing.  (The
-- circuit breaker, which would pause such a route after three failures in
-- a row, is test/t/073_slow_targets.pl's subject: it stays out of the way
-- here.)
--
SELECT regress.reset();
SET outbox.remote_pause_after = 1000;
CREATE EXTENSION dblink;
CREATE EXTENSION postgres_fdw;
CREATE SERVER regress_unreachable FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'x');
CREATE USER MAPPING FOR CURRENT_USER SERVER regress_unreachable OPTIONS (user 'x');
CREATE SERVER regress_unmapped FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '127.0.0.1', port '1', dbname 'x');
-- a local table the command would fill if it ran here
CREATE TABLE regress_victim (env jsonb, topic text);
SELECT outbox.route_remote('r', 'regress_unreachable', 'INSERT INTO regress_victim VALUES ($1, $2)');
SELECT outbox.route_remote('r_unmapped', 'regress_unmapped', 'INSERT INTO regress_victim VALUES ($1, $2)');
SELECT pg_temp.add('r', 1, 2);
SELECT pg_temp.add('r_unmapped', 3, 3);
SELECT pg_temp.add('n1', 4, 4);

SELECT clock_timestamp() AS t0 \gset
SELECT outbox.drain_once();
SELECT clock_timestamp() AS t1 \gset
SELECT (payload->>'n')::int AS n, topic, attempts, delivered_at IS NOT NULL AS delivered,
       leased_until IS NULL AS no_lease, dead_at IS NOT NULL AS dead,
       replace(split_part(last_error, E'\n', 1), format('role "%s"', current_user), 'role "<me>"') AS last_error,
       available_at BETWEEN timestamptz :'t0' + interval '30 s' AND timestamptz :'t1' + interval '30 s' AS backoff_30s
  FROM outbox.message
 ORDER BY 1;
SELECT count(*) AS run_here FROM regress_victim;

-- on the last allowed attempt the failure makes the message dead
SET outbox.max_attempts = 2;
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE topic = 'r';
SELECT outbox.drain_once('r');
SELECT n, attempts, delivered, no_lease, dead, split_part(last_error, E'\n', 1) AS last_error
  FROM outcome WHERE topic = 'r' ORDER BY n;
RESET outbox.max_attempts;
SELECT count(*) AS run_here FROM regress_victim;

-- a server that is gone fails the message with 42704
CREATE SERVER regress_gone FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '1', dbname 'x');
SELECT outbox.route_remote('r_gone', 'regress_gone', 'SELECT $1');
DROP SERVER regress_gone;
SELECT pg_temp.add('r_gone', 5, 5);
SELECT outbox.drain_once('r_gone');
SELECT n, attempts, delivered, no_lease, dead, backing_off, last_error FROM outcome WHERE topic = 'r_gone';

-- a remote route connects with its creator's user mapping (here the caller
-- of drain_once made it): a role that is not a superuser needs USAGE on the
-- server, as dblink requires; without it the message fails and nothing
-- connects (the role and its grants are rolled back at the end)
BEGIN;
CREATE ROLE regress_outbox_drainer NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_drainer;
GRANT EXECUTE ON FUNCTION outbox.drain_once(text), outbox.route_remote(text, name, text) TO regress_outbox_drainer;
GRANT USAGE ON FOREIGN SERVER regress_unreachable TO regress_outbox_drainer;
CREATE USER MAPPING FOR regress_outbox_drainer SERVER regress_unreachable
    OPTIONS (user 'x', password 'secret');
SET ROLE regress_outbox_drainer;
SELECT outbox.route_remote('r_role', 'regress_unreachable', 'SELECT $1');
RESET ROLE;
SELECT pg_temp.add('r_role', 6, 6);
SET ROLE regress_outbox_drainer;
SELECT outbox.drain_once('r_role');
RESET ROLE;
SELECT n, attempts, split_part(last_error, E'\n', 1) AS last_error FROM outcome WHERE topic = 'r_role';
REVOKE USAGE ON FOREIGN SERVER regress_unreachable FROM regress_outbox_drainer;
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE topic = 'r_role';
SET ROLE regress_outbox_drainer;
SELECT outbox.drain_once('r_role');
RESET ROLE;
SELECT n, attempts, split_part(last_error, E'\n', 1) AS last_error FROM outcome WHERE topic = 'r_role';
ROLLBACK;

-- the creator is a role, not a name: a role made later under the name of a
-- dropped creator, with a mapping of its own, gets nothing of its routes
BEGIN;
CREATE ROLE regress_outbox_creator NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_creator;
GRANT EXECUTE ON FUNCTION outbox.route_remote(text, name, text) TO regress_outbox_creator;
GRANT USAGE ON FOREIGN SERVER regress_unreachable TO regress_outbox_creator;
CREATE USER MAPPING FOR regress_outbox_creator SERVER regress_unreachable
    OPTIONS (user 'x', password 'secret');
SET ROLE regress_outbox_creator;
SELECT outbox.route_remote('r_again', 'regress_unreachable', 'SELECT $1');
RESET ROLE;
SELECT created_by, created_by_role::text = created_by::text AS role_of_created_by
  FROM outbox.routes WHERE topic = 'r_again';
DROP USER MAPPING FOR regress_outbox_creator SERVER regress_unreachable;
DROP OWNED BY regress_outbox_creator;
DROP ROLE regress_outbox_creator;
CREATE ROLE regress_outbox_creator NOLOGIN;
GRANT USAGE ON FOREIGN SERVER regress_unreachable TO regress_outbox_creator;
CREATE USER MAPPING FOR regress_outbox_creator SERVER regress_unreachable
    OPTIONS (user 'x', password 'secret');
SELECT pg_temp.add('r_again', 7, 7);
SELECT outbox.drain_once('r_again');
SELECT n, attempts, split_part(last_error, E'\n', 1) AS last_error FROM outcome WHERE topic = 'r_again';
ROLLBACK;

--
-- in a read-only transaction drain_once fails cleanly (25006) and changes
-- nothing
--
SELECT regress.reset();
SELECT pg_temp.add('r', 1, 1);
SELECT pg_temp.add('n1', 2, 2);
SELECT regress.state() AS before \gset
SELECT pg_temp.routes_state() AS routes_before \gset
BEGIN READ ONLY;
SELECT regress.err('SELECT outbox.drain_once()');
SELECT regress.err($$SELECT outbox.drain_once('n1')$$);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT regress.err($$SELECT outbox.drain_once('r')$$);
RESET default_transaction_read_only;
SELECT regress.state() = :'before' AS unchanged,
       pg_temp.routes_state() = :'routes_before' AS routes_unchanged;
-- and the session goes on
SELECT outbox.drain_once('n1');
RESET outbox.remote_pause_after;

TRUNCATE outbox.routes;
DROP TABLE regress_victim;
DROP USER MAPPING FOR CURRENT_USER SERVER regress_unreachable;
DROP SERVER regress_unreachable, regress_unmapped;
DROP EXTENSION dblink, postgres_fdw;
DROP VIEW outcome;
SELECT regress.reset();
RESET TimeZone;
