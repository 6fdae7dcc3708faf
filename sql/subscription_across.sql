--
-- subscription_across (1.5): claim(owner, NULL, ..., subscription) takes
-- from every subscription of that name, whatever its topic: each message
-- once, at most batch_size in all, topics in turn; a paused, expired or
-- routed subscription of that name gives nothing, and the other
-- subscriptions and the default ones are untouched.
--
SELECT regress.reset();
TRUNCATE outbox.routes;

SELECT outbox.subscribe(t, 'search') FROM unnest(ARRAY['xa', 'xb', 'xc', 'xd']) AS t;
SELECT outbox.subscribe('xa', 'email');
SELECT count(outbox.append(t, 'evt.x.v1', jsonb_build_object('t', t, 'n', n)))
  FROM unnest(ARRAY['xa', 'xb', 'xc', 'xd', 'xe']) AS t, generate_series(1, 3) AS n;
-- xc paused, xd delivered by a route: their messages stay
SELECT outbox.pause('xc', 'search');
SELECT outbox.route_notify('xd', 'xd_events', 'search');

-- a batch of 4: xa's 3, then one of xb; the next claim starts after the
-- subscription served last
SELECT topic, count(*) FROM outbox.claim('w', NULL, 4, 30, 'search') GROUP BY topic ORDER BY topic;
-- the rest of them, then nothing
SELECT topic, count(*) FROM outbox.claim('w', NULL, 10, 30, 'search') GROUP BY topic ORDER BY topic;
SELECT count(*) AS nothing_left FROM outbox.claim('w', NULL, 10, 30, 'search');
SELECT count(*) AS search_leases, count(DISTINCT x.id) AS messages
  FROM regress.held() x JOIN outbox.subscription s USING (sub_id)
 WHERE s.name = 'search' AND x.leased_until IS NOT NULL;

-- complete_and_claim across topics: completes, then claims what a resume brings
SELECT outbox.resume('xc', 'search');
SELECT count(*) AS claimed_after_resume
  FROM outbox.complete_and_claim(ARRAY(SELECT x.id FROM regress.held() x
                                         JOIN outbox.subscription s USING (sub_id)
                                        WHERE s.name = 'search' AND s.topic IN ('xa', 'xb')),
                                 'w', NULL, 10, 30, 'search');
SELECT s.topic, count(x.*) AS state_rows
  FROM outbox.subscription s LEFT JOIN regress.held() x USING (sub_id)
 WHERE s.name = 'search' GROUP BY s.topic ORDER BY s.topic;

-- the other subscription, and the default ones, were not touched
SELECT count(*) AS email_claimed FROM outbox.claim('w', NULL, 10, 30, 'email');
SELECT count(*) AS default_claimed FROM outbox.claim('w', NULL, 100, 30);

-- a name no topic has: nothing, no error; a claim across topics still
-- needs READ COMMITTED
SELECT count(*) AS unknown_name FROM outbox.claim('w', NULL, 10, 30, 'nobody');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress.err($$SELECT outbox.claim('w', NULL, 10, 30, 'search')$$);
ROLLBACK;

SELECT outbox.unroute('xd', 'search');
SELECT count(outbox.unsubscribe(topic, name)) FROM outbox.subscription WHERE name IS NOT NULL;
SELECT regress.reset();
