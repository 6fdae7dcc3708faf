--
-- subscription_routes (1.5): a route per subscription.  A topic's default
-- subscription and each named one have routes of their own, delivered side
-- by side; a route for a named subscription that does not exist makes it;
-- a named subscription with a route is claimed only by its deliveries and
-- cannot be dropped; unroute of it leaves the subscription to pull workers.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

\getenv abs_builddir PG_ABS_BUILDDIR
\set notes :abs_builddir '/results/subscription_routes_notifications.txt'
-- the channel of each notification written to the file (\o), and how many
CREATE FUNCTION pg_temp.channels(path text) RETURNS TABLE (channel text, notifications bigint)
LANGUAGE sql AS $$
    SELECT substring(line from 'notification "([^"]+)"'), count(*)
      FROM regexp_split_to_table(rtrim(pg_read_file(path), E'\n'), E'\n') AS line
     WHERE line LIKE 'Asynchronous notification%'
     GROUP BY 1 ORDER BY 1
$$;

-- appended before the named subscription exists: only the default one reads it
SELECT outbox.append('sr', 'evt.sr.v1', '{"n": 0}', regress.id(100)) IS NOT NULL AS appended;

-- a route for a subscription that does not exist makes it, reading from now on
SELECT outbox.route_notify('sr', 'sr_dash', 'dashboard');
SELECT name, start_seq IS NOT NULL AS started FROM outbox.subscription WHERE topic = 'sr';
-- the default subscription has a route of its own beside it
SELECT outbox.route_notify('sr', 'sr_default');
-- set again: replaced, not added
SELECT outbox.route_notify('sr', 'sr_dash2', 'dashboard');
-- and route_notify(topic, channel, NULL) is the default one's
SELECT outbox.route_notify('sr', 'sr_default', NULL);
SELECT topic, subscription, target, channel FROM outbox.routes ORDER BY topic, subscription NULLS FIRST;

SELECT count(outbox.append('sr', 'evt.sr.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(1, 3) AS n;

-- a routed subscription is not for pull workers, and cannot be dropped
SELECT regress.err($$SELECT outbox.claim('w', 'sr', 10, 30, 'dashboard')$$);
SELECT regress.err($$SELECT outbox.unsubscribe('sr', 'dashboard')$$);
-- the default subscription is claimed beside its route when the claim
-- names the topic, as before; the claim across all topics skips a topic
-- whose default subscription has a route (its messages would never reach
-- the route), and takes the others
BEGIN;
SELECT count(*) AS default_claimed FROM outbox.claim('w', 'sr', 10, 30);
ROLLBACK;
SELECT outbox.append('sr_unrouted', 'evt.sr.v1', '{}') IS NOT NULL AS appended;
BEGIN;
SELECT topic, count(*) AS claimed_across FROM outbox.claim('w', NULL, 10, 30) GROUP BY topic;
ROLLBACK;
BEGIN;
SELECT topic, count(*) AS claimed_across FROM outbox.complete_and_claim('{}', 'w', NULL, 10, 30) GROUP BY topic;
ROLLBACK;

-- one drain delivers both routes: the default one its 4 messages, the
-- dashboard the 3 appended since it subscribed; the notifications leave at commit
LISTEN sr_dash2;
LISTEN sr_default;
BEGIN;
SELECT outbox.drain_once('sr') AS delivered;
\o :notes
COMMIT;
\o
UNLISTEN *;
SELECT * FROM pg_temp.channels(:'notes');
SELECT subscription, pending, in_flight, dead FROM outbox.subscription_stats
 WHERE topic = 'sr' ORDER BY subscription NULLS FIRST;
SELECT count(*) AS dashboard_state_rows FROM outbox.subscription_state;
-- the topic is shown once, with its default route's pause
SELECT topic, due, delivered, paused_until FROM outbox.topic_stats WHERE topic = 'sr';

-- a drain that rolls back delivers nothing to either
SELECT count(outbox.append('sr', 'evt.sr.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(4, 5) AS n;
BEGIN;
SELECT outbox.drain_once('sr') AS delivered;
ROLLBACK;
SELECT subscription, pending FROM outbox.subscription_stats
 WHERE topic = 'sr' ORDER BY subscription NULLS FIRST;
SELECT outbox.drain_once() AS delivered;

-- check_route per subscription
SELECT step, ok FROM outbox.check_route('sr', 'dashboard');
SELECT step, ok FROM outbox.check_route('sr', NULL);
SELECT regress.err($$SELECT * FROM outbox.check_route('sr', 'reports')$$);

-- unroute of the named subscription: it stays, for pull workers
SELECT outbox.unroute('sr', 'dashboard') AS removed;
SELECT outbox.unroute('sr', 'dashboard') AS removed_again;
SELECT count(outbox.append('sr', 'evt.sr.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(6, 7) AS n;
SELECT payload->>'n' AS n FROM outbox.claim('w', 'sr', 10, 30, 'dashboard') ORDER BY seq;
SELECT topic, subscription FROM outbox.routes ORDER BY topic, subscription NULLS FIRST;

-- unroute(topic), as in 1.4, removes the default subscription's route only
SELECT outbox.route_notify('sr', 'sr_dash', 'dashboard');
SELECT outbox.unroute('sr') AS removed;
SELECT topic, subscription FROM outbox.routes ORDER BY topic, subscription NULLS FIRST;
SELECT outbox.unroute('sr', 'dashboard') AS removed;

-- a dropped default subscription cannot get a route; a named one can
SELECT outbox.unsubscribe('sr2', NULL);
SELECT regress.err($$SELECT outbox.route_notify('sr2', 'sr2_default')$$);
SELECT regress.err($$SELECT outbox.route_notify('sr2', 'sr2_default', NULL)$$);
SELECT outbox.route_notify('sr2', 'sr2_audit', 'audit');
SELECT outbox.unroute('sr2', 'audit') AS removed;
SELECT outbox.subscribe('sr2', NULL);

-- a topic whose named subscription has a route may drop its default one
SELECT outbox.route_notify('sr3', 'sr3_dash', 'dashboard');
SELECT outbox.unsubscribe('sr3', NULL) AS dropped_default;
SELECT outbox.subscribe('sr3', NULL) AS restored_default;
SELECT outbox.unroute('sr3', 'dashboard') AS removed;

-- bad input: the subscription must be a name; nothing is written
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.route_notify('sr', 'c', '')$$),
               ($$SELECT outbox.route_notify('sr', 'c', '   ')$$),
               ($$SELECT outbox.route_notify('sr', 'c', repeat('x', 201))$$),
               ($$SELECT outbox.unroute('sr', E'a\nb')$$),
               ($$SELECT * FROM outbox.check_route('sr', '')$$),
               ($$SELECT outbox.route_remote('sr', 'nosuch', 'SELECT 1', '')$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged,
       (SELECT count(*) FROM outbox.routes) AS routes;

SELECT outbox.unsubscribe(topic, name) FROM outbox.subscription WHERE name IS NOT NULL;
SELECT regress.reset();
RESET TimeZone;
