--
-- subscriptions (1.4): named subscriptions of a topic, each reading every
-- message of the topic on its own, with its own leases, attempts, backoff,
-- dead letters, per-key order and pause; the default subscription
-- (subscription NULL) is the 1.3 behaviour and is independent of them
--
SET TimeZone = 'UTC';

-- Start from empty tables: no message, no named subscription.
CREATE FUNCTION pg_temp.reset() RETURNS void
LANGUAGE sql AS $$
    SELECT outbox.unsubscribe(topic, name) FROM outbox.subscription;
    SELECT regress.reset();
$$;

-- Claim in a subscription and show the payloads' n of what came, in
-- order, as one text ('' when nothing).
CREATE FUNCTION pg_temp.claimed(owner text, topic text, sub text, batch integer DEFAULT 10)
RETURNS text
LANGUAGE sql AS $$
    SELECT coalesce(string_agg(c.payload->>'n', ',' ORDER BY (c.payload->>'n')::int), '')
      FROM outbox.claim(owner, topic, batch, NULL, sub) c
$$;

-- What a named subscription holds of message n: attempts, lease owner,
-- whether leased now, dead, last error.
-- (no row: it holds nothing of it)
CREATE FUNCTION pg_temp.held(t text, s text, n integer)
RETURNS TABLE (attempts integer, lease_owner text, leased boolean, dead boolean, last_error text)
LANGUAGE sql AS $$
    SELECT x.attempts, x.lease_owner, coalesce(x.leased_until > clock_timestamp(), false),
           x.dead_at IS NOT NULL, x.last_error
      FROM regress.held() x
      JOIN outbox.subscription sub ON sub.sub_id = x.sub_id
     WHERE sub.topic = t AND sub.name = s AND x.id = regress.id(n)
$$;

-- Append message n (payload {"n": n}) to topic t, with an ordering key.
CREATE FUNCTION pg_temp.put(t text, n integer, k text DEFAULT NULL) RETURNS void
LANGUAGE sql AS $$
    SELECT outbox.append(t, 'evt.sub.v1', jsonb_build_object('n', n), regress.id(n), NULL, k);
$$;

SELECT pg_temp.reset();

--
-- subscribe: true when created, false when it exists (the default one
-- always exists); the start of the subscription
--
SELECT pg_temp.put('t', n) FROM generate_series(1, 3) n;
SELECT outbox.subscribe('t', 'a') AS created;
SELECT outbox.subscribe('t', 'a') AS created_again;
SELECT outbox.subscribe('t', 'a', '-infinity') AS created_again_since;
SELECT outbox.subscribe('t', NULL) AS default_created;
SELECT outbox.subscribe('t', 'A') AS other_case_created;
SELECT topic, name, paused_until FROM outbox.subscription ORDER BY name COLLATE "C";
-- since NULL: the messages appended before are not for it, those after are
SELECT pg_temp.claimed('wa', 't', 'a') AS a_before_new;
SELECT pg_temp.put('t', n) FROM generate_series(4, 5) n;
SELECT pg_temp.claimed('wa', 't', 'a') AS a_after_new;
-- (the repeated subscribe with since '-infinity' moved nothing back)
SELECT pg_temp.claimed('wa2', 't', 'a') AS a_again;
-- since '-infinity': every message still kept
SELECT outbox.subscribe('t', 'all', '-infinity') AS created;
SELECT pg_temp.claimed('w', 't', 'all') AS all_kept;
-- since a time: the messages created at or after it
UPDATE outbox.message SET created_at = '2020-01-01 00:00:00+00'::timestamptz + (payload->>'n')::int * interval '1 s';
SELECT outbox.subscribe('t', 'mid', '2020-01-01 00:00:03+00') AS created;
SELECT pg_temp.put('t', 6);
SELECT pg_temp.claimed('w', 't', 'mid') AS from_3;
-- (since 'infinity' would be a subscription that never reads anything; the
-- contract does not name it, the implementation refuses it)
SELECT regress.err($$SELECT outbox.subscribe('t', 'future', 'infinity')$$);
-- a purged message is not kept: since '-infinity' starts after it
SELECT pg_temp.claimed('wd', 't', NULL) AS default_claims;
SELECT outbox.complete(regress.id(1), 'wd') AS completed_in_default;
-- (a and A have read past message 1 without it, mid never had it: only
-- "all" still holds it)
SELECT outbox.complete(regress.id(1), 'w', 'all') AS completed_in_all;
SELECT outbox.purge('0') AS purged;
SELECT outbox.subscribe('t', 'after_purge', '-infinity') AS created;
SELECT pg_temp.claimed('w', 't', 'after_purge') AS kept_only;
-- a topic without messages can be subscribed to
SELECT outbox.subscribe('empty topic', 'a') AS created;
SELECT pg_temp.claimed('w', 'empty topic', 'a') AS nothing;
-- the longest names
SELECT outbox.subscribe(repeat('é', 200), repeat('é', 200)) AS created;
SELECT pg_temp.claimed(repeat('é', 200), repeat('é', 200), repeat('é', 200)) AS nothing;
SELECT count(*) AS subscriptions FROM outbox.subscription;

--
-- every subscription gets every message once: two named ones and the
-- default one, each with its own lease owner
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('t', 'a'), outbox.subscribe('t', 'b');
SELECT pg_temp.put('t', n) FROM generate_series(1, 4) n;
SELECT pg_temp.claimed('wa', 't', 'a') AS a;
SELECT pg_temp.claimed('wb', 't', 'b', 3) AS b_three;
SELECT pg_temp.claimed('wd', 't', NULL) AS default_sub;
-- claimed, a message is not handed out again in its subscription
SELECT pg_temp.claimed('wa2', 't', 'a') AS a_again;
SELECT pg_temp.claimed('wb2', 't', 'b') AS b_the_rest;
SELECT pg_temp.claimed('wd2', 't', NULL) AS default_again;
SELECT pg_temp.claimed('wd2', NULL, NULL) AS default_all_topics;
-- the same message in each: its own lease owner and attempts
SELECT s.name, h.* FROM (VALUES ('a'), ('b')) s(name), pg_temp.held('t', s.name, 1) h ORDER BY 1;
SELECT attempts, lease_owner, leased_until > now() AS leased FROM outbox.message WHERE id = regress.id(1);

-- complete: only the lease owner, in its own subscription
SELECT outbox.complete(regress.id(1), 'wb', 'a') AS other_owner,
       outbox.complete(regress.id(1), 'wa') AS owner_of_a_in_default,
       outbox.complete(regress.id(1), 'wa', 'b') AS owner_of_a_in_b,
       outbox.complete(regress.id(999), 'wa', 'a') AS unknown_id;
SELECT outbox.complete(regress.id(1), 'wa', 'a') AS completed;
SELECT outbox.complete(regress.id(1), 'wa', 'a') AS completed_again;
-- completed in a, still pending in b and in the default subscription
SELECT h.* FROM pg_temp.held('t', 'a', 1) h;
SELECT h.* FROM pg_temp.held('t', 'b', 1) h;
SELECT delivered_at IS NULL AS not_delivered FROM outbox.message WHERE id = regress.id(1);
SELECT pg_temp.claimed('wa', 't', 'a') AS a_nothing_new;
-- complete_many: the messages the owner holds in that subscription
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3), regress.id(999)], 'wa', 'a') AS a_completed;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3), regress.id(4)], 'wb', 'b') AS b_completed;
SELECT outbox.complete_many(ARRAY[regress.id(4)], 'wb2', 'b') AS b_completed;
SELECT outbox.complete_many(ARRAY[regress.id(4)], 'wa', 'a') AS a_completed;
SELECT outbox.complete_many(ARRAY[regress.id(4)], 'wa2', 'a') AS a_completed;
SELECT outbox.complete_many('{}', 'wa', 'a') AS none;
SELECT count(*) AS state_rows FROM regress.held();
SELECT count(*) FILTER (WHERE delivered_at IS NULL) AS default_undelivered FROM outbox.message;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3)], 'wd', NULL) AS default_completed;

-- complete_and_claim: completes in the subscription, then claims from it
SELECT pg_temp.put('t', n) FROM generate_series(5, 6) n;
SELECT coalesce(string_agg(c.payload->>'n', ',' ORDER BY c.payload->>'n'), '') AS first
  FROM outbox.complete_and_claim('{}', 'wa', 't', 1, NULL, 'a') c;
SELECT coalesce(string_agg(c.payload->>'n', ',' ORDER BY c.payload->>'n'), '') AS next
  FROM outbox.complete_and_claim(ARRAY[regress.id(5)], 'wa', 't', 10, NULL, 'a') c;
SELECT h.* FROM pg_temp.held('t', 'a', 5) h;
SELECT h.* FROM pg_temp.held('t', 'a', 6) h;
SELECT h.* FROM pg_temp.held('t', 'b', 5) h;

-- extend: the owner's lease in its subscription
SELECT outbox.extend(regress.id(6), 'wa', 600, 'a') AS extended,
       outbox.extend(regress.id(6), 'wb', 600, 'a') AS other_owner,
       outbox.extend(regress.id(6), 'wa', 600, 'b') AS not_claimed_in_b,
       outbox.extend(regress.id(6), 'wa', 600) AS not_in_default;
SELECT leased_until > clock_timestamp() + interval '590 s' AS leased_600s
  FROM outbox.subscription_state WHERE id = regress.id(6);
SELECT outbox.complete(regress.id(6), 'wa', 'a') AS completed;
SELECT outbox.extend(regress.id(6), 'wa', 600, 'a') AS after_complete;

--
-- fail: backoff, then dead after outbox.max_attempts, in the subscription
-- only; retry_dead and retry_dead_topic for the subscription
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('f', 'a'), outbox.subscribe('f', 'b');
SELECT pg_temp.put('f', 1);
SELECT pg_temp.claimed('wa', 'f', 'a') AS a, pg_temp.claimed('wb', 'f', 'b') AS b;
SELECT outbox.fail(regress.id(1), 'wb', 'wrong owner', 'a') AS other_owner,
       outbox.fail(regress.id(1), 'wa', 'not here', 'b') AS owner_of_a_in_b,
       outbox.fail(regress.id(1), 'wa', 'not here') AS owner_of_a_in_default;
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.fail(regress.id(1), 'wa', 'first failure', 'a') AS failed;
SELECT clock_timestamp() AS t1 \gset
SELECT h.* FROM pg_temp.held('f', 'a', 1) h;
-- the backoff of a first failure: outbox.backoff_seconds (30 s)
SELECT available_at BETWEEN timestamptz :'t0' + interval '30 s' AND timestamptz :'t1' + interval '30 s' AS backoff_30s
  FROM outbox.subscription_state x JOIN outbox.subscription s USING (sub_id)
 WHERE s.name = 'a' AND x.id = regress.id(1);
-- b keeps its lease, the default subscription has the message due
SELECT h.* FROM pg_temp.held('f', 'b', 1) h;
SELECT pg_temp.claimed('wa', 'f', 'a') AS a_backing_off;
SELECT pg_temp.claimed('wd', 'f', NULL) AS default_due;
-- the retry, when due, is attempt 2; with max_attempts 2 its failure is death
UPDATE outbox.subscription_state x SET available_at = now() - interval '1 s'
  FROM outbox.subscription s WHERE s.sub_id = x.sub_id AND s.name = 'a';
SELECT pg_temp.claimed('wa', 'f', 'a') AS a_retried;
SET outbox.max_attempts = 2;
SELECT outbox.fail(regress.id(1), 'wa', 'second failure', 'a') AS failed;
RESET outbox.max_attempts;
SELECT h.* FROM pg_temp.held('f', 'a', 1) h;
SELECT h.* FROM pg_temp.held('f', 'b', 1) h;
SELECT attempts, dead_at IS NOT NULL AS dead, lease_owner FROM outbox.message WHERE id = regress.id(1);
-- dead: never claimed again, nor completed, failed or extended
UPDATE outbox.subscription_state x SET available_at = now() - interval '1 s'
  FROM outbox.subscription s WHERE s.sub_id = x.sub_id AND s.name = 'a';
SELECT pg_temp.claimed('wa', 'f', 'a') AS a_dead;
SELECT outbox.complete(regress.id(1), 'wa', 'a') AS complete_dead,
       outbox.fail(regress.id(1), 'wa', 'again', 'a') AS fail_dead,
       outbox.extend(regress.id(1), 'wa', 60, 'a') AS extend_dead;
-- retry_dead: only where it is dead
SELECT outbox.retry_dead(regress.id(1), 'b') AS in_b,
       outbox.retry_dead(regress.id(1)) AS in_default,
       outbox.retry_dead(regress.id(999), 'a') AS unknown_id;
SELECT outbox.retry_dead(regress.id(1), 'a') AS revived;
SELECT outbox.retry_dead(regress.id(1), 'a') AS revived_again;
SELECT h.* FROM pg_temp.held('f', 'a', 1) h;
SELECT pg_temp.claimed('wa', 'f', 'a') AS a_revived;
SELECT h.* FROM pg_temp.held('f', 'a', 1) h;
SELECT h.* FROM pg_temp.held('f', 'b', 1) h;

-- retry_dead_topic: the subscription's dead messages of the topic only
SELECT pg_temp.reset();
SELECT outbox.subscribe('f', 'a'), outbox.subscribe('f', 'b'), outbox.subscribe('g', 'a');
SELECT pg_temp.put('f', n) FROM generate_series(1, 3) n;
SELECT pg_temp.put('g', 4);
SET outbox.max_attempts = 1;
SELECT pg_temp.claimed('wa', 'f', 'a') AS f_a, pg_temp.claimed('wa', 'g', 'a') AS g_a,
       pg_temp.claimed('wb', 'f', 'b') AS f_b, pg_temp.claimed('wd', 'f', NULL) AS f_default;
SELECT outbox.fail(regress.id(n), 'wa', 'boom ' || n, 'a') FROM generate_series(1, 2) n;
SELECT outbox.fail(regress.id(4), 'wa', 'boom 4', 'a');
SELECT outbox.fail(regress.id(3), 'wb', 'boom 3', 'b');
SELECT outbox.fail(regress.id(3), 'wd', 'boom 3');
RESET outbox.max_attempts;
SELECT s.topic, s.name, count(*) FILTER (WHERE x.dead_at IS NOT NULL) AS dead
  FROM outbox.subscription s LEFT JOIN regress.held() x USING (sub_id)
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT outbox.retry_dead_topic('f', 'a') AS f_a;
SELECT outbox.retry_dead_topic('f', 'a') AS f_a_again;
SELECT s.topic, s.name, count(*) FILTER (WHERE x.dead_at IS NOT NULL) AS dead
  FROM outbox.subscription s LEFT JOIN regress.held() x USING (sub_id)
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT count(*) FILTER (WHERE dead_at IS NOT NULL) AS default_dead FROM outbox.message;
SELECT pg_temp.claimed('wa', 'f', 'a') AS f_a_revived;
SELECT outbox.retry_dead_topic('g', 'a') AS g_a, outbox.retry_dead_topic('f', 'b') AS f_b,
       outbox.retry_dead_topic('f') AS f_default;
SELECT count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead_left FROM regress.held();

--
-- ordering keys: per subscription, independent across subscriptions
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('k', 'a'), outbox.subscribe('k', 'b');
SELECT pg_temp.put('k', v.n, v.key)
  FROM (VALUES (1, 'acct:1'), (2, 'acct:2'), (3, 'acct:1'), (4, NULL), (5, 'acct:1')) v(n, key)
 ORDER BY v.n;
-- the heads of the keys, and the message without one
SELECT pg_temp.claimed('wa', 'k', 'a') AS a;
-- while the heads are leased in a, nothing more of their keys in a
SELECT pg_temp.claimed('wa2', 'k', 'a') AS a_while_leased;
-- the keys held in a are free in b, and in the default subscription
SELECT pg_temp.claimed('wb', 'k', 'b') AS b;
SELECT pg_temp.claimed('wd', 'k', NULL) AS default_sub;
-- a's head of acct:1 done: its next message comes in a, not in b
SELECT outbox.complete(regress.id(1), 'wa', 'a');
SELECT pg_temp.claimed('wa', 'k', 'a') AS a_next;
SELECT pg_temp.claimed('wb', 'k', 'b') AS b_still_held;
-- a failed head keeps its key waiting in b
SELECT outbox.fail(regress.id(1), 'wb', 'boom', 'b');
UPDATE outbox.subscription_state x SET available_at = now() - interval '1 s'
  FROM outbox.subscription s WHERE s.sub_id = x.sub_id AND s.name = 'b' AND x.id = regress.id(1);
SELECT pg_temp.claimed('wb', 'k', 'b') AS b_head_again;
-- a dead head frees its key
SET outbox.max_attempts = 2;
SELECT outbox.fail(regress.id(1), 'wb', 'poison', 'b');
RESET outbox.max_attempts;
SELECT h.dead FROM pg_temp.held('k', 'b', 1) h;
SELECT pg_temp.claimed('wb', 'k', 'b') AS b_after_dead_head;
-- complete_and_claim hands out the next of the key in the same call
SELECT coalesce(string_agg(c.payload->>'n', ','), '') AS a_next
  FROM outbox.complete_and_claim(ARRAY[regress.id(3)], 'wa', 'k', 10, NULL, 'a') c;
SELECT outbox.complete_many(ARRAY[regress.id(2), regress.id(4), regress.id(5)], 'wa', 'a') AS a_completed;
SELECT pg_temp.claimed('wa', 'k', 'a') AS a_nothing_left;

--
-- pause and resume
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('p', 'a'), outbox.subscribe('p', 'b');
SELECT pg_temp.put('p', n) FROM generate_series(1, 2) n;
SELECT pg_temp.claimed('wa', 'p', 'a', 1) AS a_one;
SELECT outbox.pause('p', 'a') AS paused;
SELECT outbox.pause('p', 'a') AS paused_again;
SELECT outbox.pause('p', 'nope') AS unknown;
SELECT outbox.pause('nope', 'a') AS unknown_topic;
SELECT name, coalesce(paused_until > now(), false) AS paused FROM outbox.subscription ORDER BY name;
-- paused: claims take nothing; other subscriptions go on; what was claimed
-- before can still be completed
SELECT pg_temp.claimed('wa', 'p', 'a') AS a_paused;
SELECT pg_temp.claimed('wb', 'p', 'b') AS b;
SELECT pg_temp.claimed('wd', 'p', NULL) AS default_sub;
SELECT outbox.complete(regress.id(1), 'wa', 'a') AS completed_while_paused;
SELECT outbox.resume('p', 'a') AS resumed;
SELECT outbox.resume('p', 'a') AS resumed_again;
SELECT outbox.resume('p', 'nope') AS unknown;
SELECT name, coalesce(paused_until > now(), false) AS paused FROM outbox.subscription ORDER BY name;
SELECT pg_temp.claimed('wa', 'p', 'a') AS a_resumed;
-- a pause until a time: until then, nothing; a time in the past pauses nothing
SELECT pg_temp.put('p', 3);
SELECT outbox.pause('p', 'a', '2999-01-01 00:00:00+00') AS paused_until_2999;
SELECT pg_temp.claimed('wa', 'p', 'a') AS a_paused;
SELECT name, paused_until FROM outbox.subscription ORDER BY name;
SELECT outbox.pause('p', 'a', '2020-01-01 00:00:00+00') AS paused_in_the_past;
SELECT pg_temp.claimed('wa', 'p', 'a') AS a_not_paused;

--
-- subscription_stats: one row per topic with messages for the default
-- subscription, one per named subscription
--
SELECT pg_temp.reset();
SELECT * FROM outbox.subscription_stats;
SELECT outbox.subscribe('s', 'a'), outbox.subscribe('s', 'b'), outbox.subscribe('s', 'idle'),
       outbox.subscribe('quiet', 'q');
SELECT pg_temp.put('s', n) FROM generate_series(1, 5) n;
SELECT pg_temp.put('other', 6);
SELECT pg_temp.claimed('wa', 's', 'a', 3) AS a_three;
SELECT outbox.complete(regress.id(1), 'wa', 'a');
SET outbox.max_attempts = 1;
SELECT outbox.fail(regress.id(2), 'wa', 'boom', 'a');
RESET outbox.max_attempts;
SELECT pg_temp.claimed('wb', 's', 'b', 5) AS b_all;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3), regress.id(4), regress.id(5)], 'wb', 'b');
SELECT outbox.pause('s', 'idle');
SELECT pg_temp.claimed('wd', 's', NULL, 2) AS default_two;
SELECT topic, subscription, pending, in_flight, dead,
       oldest_pending_age IS NOT NULL AS has_age, last_claim_at IS NOT NULL AS claimed,
       paused_until, state
  FROM outbox.subscription_stats ORDER BY topic, subscription NULLS FIRST;
-- the age is that of the oldest pending message
UPDATE outbox.message SET created_at = '2020-01-01 00:00:00+00'::timestamptz + (payload->>'n')::int * interval '1 s';
SELECT subscription, oldest_pending_age = now() - '2020-01-01 00:00:00+00'::timestamptz
                                               - (CASE subscription WHEN 'a' THEN 3 ELSE 1 END) * interval '1 s' AS age_of_oldest
  FROM outbox.subscription_stats WHERE topic = 's' AND subscription IS DISTINCT FROM 'b'
 ORDER BY subscription NULLS FIRST;
-- the columns, and their types
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'outbox.subscription_stats'::regclass AND attnum > 0
 ORDER BY attnum;

--
-- unsubscribe: the subscription and everything it held go
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('u', 'a'), outbox.subscribe('u', 'b');
SELECT pg_temp.put('u', n) FROM generate_series(1, 2) n;
SELECT pg_temp.claimed('wa', 'u', 'a') AS a, pg_temp.claimed('wb', 'u', 'b') AS b;
SELECT outbox.unsubscribe('u', 'a') AS dropped;
SELECT outbox.unsubscribe('u', 'a') AS dropped_again;
SELECT outbox.unsubscribe('u', 'nope') AS unknown;
SELECT name FROM outbox.subscription ORDER BY name;
SELECT count(*) AS state_rows_of_b FROM regress.held();
-- the old lease owner's calls find nothing
SELECT outbox.complete(regress.id(1), 'wa', 'a') AS complete,
       outbox.fail(regress.id(2), 'wa', 'boom', 'a') AS fail,
       outbox.extend(regress.id(2), 'wa', 60, 'a') AS extend,
       outbox.complete_many(ARRAY[regress.id(1), regress.id(2)], 'wa', 'a') AS complete_many;
-- b is untouched
SELECT outbox.complete(regress.id(1), 'wb', 'b') AS b_complete;
-- the name can be used again: a new subscription, from now on
SELECT outbox.subscribe('u', 'a') AS created;
SELECT pg_temp.claimed('wa', 'u', 'a') AS a_new;
SELECT pg_temp.put('u', 3);
SELECT pg_temp.claimed('wa', 'u', 'a') AS a_new;

--
-- purge: a message goes when the default subscription finished it and
-- every named subscription of its topic is done with it
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('pu', 'a');
SELECT pg_temp.put('pu', n) FROM generate_series(1, 3) n;
-- subscribed after them: "late" is done with them
SELECT outbox.subscribe('pu', 'late');
SELECT pg_temp.claimed('wd', 'pu', NULL) AS default_sub;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3)], 'wd') AS default_completed;
-- not read by a yet
SELECT outbox.purge('0') AS purged;
-- read and leased by a
SELECT pg_temp.claimed('wa', 'pu', 'a') AS a;
SELECT outbox.purge('0') AS purged;
-- done by a: 1; dead in a: 2 (its dead row goes too); leased: 3 stays
SELECT outbox.complete(regress.id(1), 'wa', 'a');
SET outbox.max_attempts = 1;
SELECT outbox.fail(regress.id(2), 'wa', 'poison', 'a');
RESET outbox.max_attempts;
SELECT outbox.purge('0') AS purged \gset first_
SELECT :first_purged + outbox.purge('0') AS purged;
SELECT payload->>'n' AS n FROM outbox.message ORDER BY seq;
SELECT count(*) AS state_rows, count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead_rows
  FROM regress.held();
-- a dead row younger than the horizon is kept, and so is its message
SELECT outbox.complete(regress.id(3), 'wa', 'a');
SELECT outbox.purge('0') AS purged;
SELECT pg_temp.put('pu', 4);
SELECT pg_temp.claimed('wd', 'pu', NULL) AS default_sub, pg_temp.claimed('wa', 'pu', 'a') AS a;
SELECT outbox.complete(regress.id(4), 'wd');
SET outbox.max_attempts = 1;
SELECT outbox.fail(regress.id(4), 'wa', 'poison', 'a');
RESET outbox.max_attempts;
UPDATE outbox.message SET delivered_at = clock_timestamp() - interval '2 days' WHERE id = regress.id(4);
SELECT outbox.purge('1 day') AS purged;
SELECT count(*) AS messages FROM outbox.message;
SELECT count(*) AS dead_rows FROM regress.held() WHERE dead_at IS NOT NULL;

--
-- errors
--
SELECT pg_temp.reset();
SELECT outbox.subscribe('e', 'a');
SELECT pg_temp.put('e', 1);
SELECT pg_temp.claimed('wd', 'e', NULL) AS default_sub;
SELECT regress.state() AS before \gset
SELECT md5(string_agg(s::text, '|' ORDER BY s.sub_id)) AS subs_before FROM outbox.subscription s \gset
-- unknown subscription: 42704 (a claim across topics: sql/subscription_across.sql)
SELECT regress.err($$SELECT outbox.claim('w', 'e', 1, NULL, 'x')$$);
SELECT regress.err($$SELECT outbox.claim('w', 'nope', 1, NULL, 'a')$$);
SELECT regress.err($$SELECT outbox.complete_and_claim('{}', 'w', 'e', 1, NULL, 'x')$$);
-- the default subscription can be dropped: its claims are refused (55000),
-- a second drop says false, subscribe brings it back; a routed topic keeps it
SELECT outbox.unsubscribe('e', NULL) AS default_dropped;
SELECT outbox.unsubscribe('e', NULL) AS default_dropped_again;
SELECT regress.err($$SELECT outbox.claim('w', 'e')$$);
SELECT regress.err($$SELECT outbox.complete_and_claim('{}', 'w', 'e')$$);
SELECT regress.err($$SELECT outbox.route_notify('e', 'e_channel')$$);
SELECT count(*) AS subscription_stats_default_rows
  FROM outbox.subscription_stats WHERE topic = 'e' AND subscription IS NULL;
SELECT outbox.subscribe('e', NULL) AS default_back;
SELECT outbox.subscribe('e', NULL) AS default_back_again;
SELECT outbox.route_notify('e_routed', 'e_channel');
SELECT regress.err($$SELECT outbox.unsubscribe('e_routed', NULL)$$);
SELECT outbox.unroute('e_routed');
-- the default subscription can be paused (1.5; here each call is rolled
-- back: sql/subscription_pause.sql follows a pause through)
SELECT regress.err($$SELECT outbox.pause('e', NULL)$$);
SELECT regress.err($$SELECT outbox.pause('e', NULL, '2020-01-01 00:00:00+00')$$);
SELECT regress.err($$SELECT outbox.resume('e', NULL)$$);
-- until NULL: 22004
SELECT regress.err($$SELECT outbox.pause('e', 'a', NULL)$$);
-- a named subscription's claim under REPEATABLE READ or SERIALIZABLE: 0A000
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress.err($$SELECT outbox.claim('w', 'e', 1, NULL, 'a')$$);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT regress.err($$SELECT outbox.claim('w', 'e', 1, NULL, 'a')$$);
ROLLBACK;
-- subscription names follow the rules of topic names: NULL topic 22004,
-- bad names 22023 (a NULL subscription is the default one)
CREATE TEMP TABLE bad_sub (label text, val text);
INSERT INTO bad_sub VALUES
    ('empty', ''),
    ('spaces', '   '),
    ('201 x', repeat('x', 201)),
    ('201 e-acute (402 bytes)', repeat('é', 201)),
    ('newline', E'a\n'),
    ('U+00A0 no-break space', chr(160));
CREATE TEMP TABLE sub_arg (fn text, stmt text);
INSERT INTO sub_arg VALUES
    ('subscribe',          $$SELECT outbox.subscribe('e', %s)$$),
    ('unsubscribe',        $$SELECT outbox.unsubscribe('e', %s)$$),
    ('pause',              $$SELECT outbox.pause('e', %s)$$),
    ('resume',             $$SELECT outbox.resume('e', %s)$$),
    ('claim',              $$SELECT outbox.claim('w', 'e', 1, NULL, %s)$$),
    ('complete',           $$SELECT outbox.complete(regress.id(1), 'w', %s)$$),
    ('complete_many',      $$SELECT outbox.complete_many(ARRAY[regress.id(1)], 'w', %s)$$),
    ('complete_and_claim', $$SELECT outbox.complete_and_claim('{}', 'w', 'e', 1, NULL, %s)$$),
    ('fail',               $$SELECT outbox.fail(regress.id(1), 'w', 'boom', %s)$$),
    ('extend',             $$SELECT outbox.extend(regress.id(1), 'w', NULL, %s)$$),
    ('retry_dead',         $$SELECT outbox.retry_dead(regress.id(1), %s)$$),
    ('retry_dead_topic',   $$SELECT outbox.retry_dead_topic('e', %s)$$);
SELECT b.label, regress.err(format(a.stmt, quote_nullable(b.val)))
  FROM bad_sub b, sub_arg a
 WHERE a.fn = 'subscribe'
 ORDER BY b.label;
SELECT a.fn, b.label, left(regress.err(format(a.stmt, quote_nullable(b.val))), 5) AS sqlstate
  FROM bad_sub b, sub_arg a
 WHERE a.fn <> 'subscribe'
 ORDER BY a.fn, b.label;
SELECT v.stmt, left(regress.err(v.stmt), 5) AS sqlstate
  FROM (VALUES ($$SELECT outbox.subscribe(NULL, 'a')$$),
               ($$SELECT outbox.subscribe('', 'a')$$),
               ($$SELECT outbox.unsubscribe(NULL, 'a')$$),
               ($$SELECT outbox.pause(NULL, 'a')$$),
               ($$SELECT outbox.resume(NULL, 'a')$$),
               ($$SELECT outbox.resume('   ', 'a')$$)) AS v(stmt);
-- nothing was written by any of them
SELECT regress.state() = :'before' AS unchanged,
       (SELECT md5(string_agg(s::text, '|' ORDER BY s.sub_id)) FROM outbox.subscription s) = :'subs_before'
           AS subscriptions_unchanged;
DROP TABLE bad_sub, sub_arg;

-- the keys' locks: a transaction holds at most 128.  A claim of 300
-- messages of 300 keys stops before the 129th key; a transaction that
-- completes them one by one takes the subscription's lock of all keys
-- past 128 of them; the lock table never holds more of this backend.
SELECT pg_temp.reset();
SELECT outbox.subscribe('kl', 's') AS subscribed;
SELECT count(outbox.append('kl', 'evt.kl.v1', to_jsonb(n), NULL, NULL, 'k' || n))
  FROM generate_series(1, 300) AS n;
CREATE FUNCTION pg_temp.key_locks() RETURNS TABLE (keys bigint, subscription text)
LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE objsubid = 19275),
         string_agg(mode, ',' ORDER BY mode) FILTER (WHERE objsubid = 19276)
    FROM pg_catalog.pg_locks
   WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND granted
$$;
BEGIN;
SELECT count(*) AS claimed, min((payload)::int) AS first, max((payload)::int) AS last
  FROM outbox.claim('w', 'kl', 500, 60, 's');
SELECT * FROM pg_temp.key_locks();
COMMIT;
SELECT count(*) AS claimed FROM outbox.claim('w', 'kl', 500, 60, 's');
SELECT count(*) AS claimed FROM outbox.claim('w', 'kl', 500, 60, 's');
BEGIN;
SELECT count(*) FILTER (WHERE outbox.complete(x.id, 'w', 's')) AS completed
  FROM regress.held() x;
SELECT * FROM pg_temp.key_locks();
COMMIT;
SELECT count(*) AS state_rows FROM regress.held();

-- A failure in the default subscription moves the message's available_at
-- to its next attempt there; a named subscription that reads the message
-- afterwards does not wait for that: it was due when first claimed.
SELECT pg_temp.reset();
SELECT outbox.subscribe('df', 's') AS subscribed;
SELECT count(outbox.append('df', 'evt.df.v1', to_jsonb(n), NULL, NULL, k))
  FROM generate_series(1, 2) AS n, (VALUES (NULL), ('k')) AS v(k);
SELECT count(*) FILTER (WHERE outbox.fail(c.id, 'd', 'later', NULL::text)) AS failed_in_default
  FROM outbox.claim('d', 'df', 10, 60) c;
SELECT count(*) AS due_later FROM outbox.message
 WHERE topic = 'df' AND available_at > now() + interval '1 second';
SELECT count(*) AS claimed, count(*) FILTER (WHERE available_at <= now()) AS due_now
  FROM outbox.claim('w', 'df', 10, 60, 's');
-- The same due time comes back when the message is handed out later, as a
-- key's next message (the due read): the default subscription completed
-- the key's head and failed the next one before 's' read them.
SELECT outbox.subscribe('dg', 's') AS subscribed;
SELECT count(outbox.append('dg', 'evt.dg.v1', to_jsonb(n), NULL, NULL, 'k'))
  FROM generate_series(1, 2) AS n;
SELECT count(*) FILTER (WHERE outbox.complete(c.id, 'd')) AS head_done_in_default
  FROM outbox.claim('d', 'dg', 10, 60) c;
SELECT count(*) FILTER (WHERE outbox.fail(c.id, 'd', 'later', NULL::text)) AS failed_in_default
  FROM outbox.claim('d', 'dg', 10, 60) c;
SELECT count(*) FILTER (WHERE outbox.complete(c.id, 'w', 's')) AS head_done
  FROM outbox.claim('w', 'dg', 10, 60, 's') c;
SELECT count(*) AS claimed, count(*) FILTER (WHERE available_at <= now()) AS due_now,
       count(*) FILTER (WHERE available_at = created_at) AS at_created
  FROM outbox.claim('w', 'dg', 10, 60, 's');

SELECT pg_temp.reset();
SELECT count(*) AS subscriptions FROM outbox.subscription;
SELECT count(*) AS state_rows FROM regress.held();
RESET TimeZone;
