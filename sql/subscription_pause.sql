--
-- subscription_pause (1.5): the default subscription of a topic can be
-- paused and resumed, as a named one can.  While paused, its claims (of the
-- topic, and across topics) and its route take nothing, leases already
-- held can still be completed, purge still waits for it, and the stats say
-- so; a dropped default subscription cannot be paused.
--
SELECT regress.reset();
TRUNCATE outbox.routes;
SET TimeZone = 'UTC';

SELECT count(outbox.append(t, 'evt.p.v1', jsonb_build_object('n', n), regress.id(n + o)))
  FROM (VALUES ('pd', 0), ('po', 10)) AS v(t, o), generate_series(1, 3) AS n;
SELECT count(*) AS leased_before FROM outbox.claim('w', 'pd', 1, 30);

SELECT outbox.pause('pd', NULL) AS paused;
SELECT count(*) AS claimed_while_paused FROM outbox.claim('w', 'pd', 10, 30);
SELECT count(*) AS complete_and_claim_while_paused
  FROM outbox.complete_and_claim('{}', 'w', 'pd', 10, 30);
-- the claim across topics skips it, and takes the other topic's
SELECT topic, count(*) FROM outbox.claim('w', NULL, 10, 30) GROUP BY topic ORDER BY topic;
-- the lease held before still completes
SELECT outbox.complete(regress.id(1), 'w') AS completed;
SELECT subscription, pending, state, paused_until = 'infinity' AS until_resumed
  FROM outbox.subscription_stats WHERE topic = 'pd';
SELECT topic, due FROM outbox.topic_stats WHERE topic = 'pd';
-- purge still waits for it
SELECT outbox.purge('0 seconds') AS purged_while_paused;
SELECT count(*) AS kept FROM outbox.message WHERE topic = 'pd';

-- a route of the paused default subscription delivers nothing
SELECT outbox.route_notify('pd', 'pd_events');
SELECT outbox.drain_once('pd') AS delivered_while_paused;

-- paused again, until a time: replaced; subscribe(topic, NULL) does not resume it
SELECT outbox.pause('pd', NULL, now() + interval '1 hour') AS paused_again;
SELECT outbox.subscribe('pd', NULL) AS brought_back;
SELECT count(*) AS claimed FROM outbox.claim('w', 'pd', 10, 30);

-- resumed: claims and the route take its messages again
SELECT outbox.resume('pd', NULL) AS resumed;
SELECT outbox.resume('pd', NULL) AS resumed_again;
SELECT outbox.drain_once('pd') AS delivered;
SELECT subscription, pending, state FROM outbox.subscription_stats WHERE topic = 'pd';
SELECT outbox.unroute('pd');

-- a pause that ended already holds nothing back
SELECT outbox.append('pd', 'evt.p.v1', '{"n": 4}', regress.id(4)) IS NOT NULL AS appended;
SELECT outbox.pause('pd', NULL, '2020-01-01 00:00:00+00') AS paused_in_the_past;
SELECT count(*) AS claimed_after_the_pause FROM outbox.claim('w', 'pd', 10, 30);
SELECT outbox.resume('pd', NULL) AS resumed;

-- dropped while paused: dropped; a dropped one cannot be paused
SELECT outbox.pause('pd', NULL) AS paused;
SELECT outbox.unsubscribe('pd', NULL) AS dropped;
SELECT regress.err($$SELECT outbox.pause('pd', NULL)$$);
SELECT outbox.resume('pd', NULL) AS resumed_a_dropped_one;
SELECT regress.err($$SELECT outbox.claim('w', 'pd', 10, 30)$$);
SELECT outbox.subscribe('pd', NULL) AS brought_back;
SELECT count(*) AS subscription_rows FROM outbox.subscription;

SELECT regress.reset();
RESET TimeZone;
