--
-- claim: which messages are due, in which order, what a lease sets, the
-- batch size and lease length, and the death of a message whose last
-- allowed lease expired
--
SELECT regress.reset();
SET TimeZone = 'UTC';

-- fixed ids; claim order is (available_at, id)
SELECT outbox.append(v.topic, 'evt.claim.v1', jsonb_build_object('n', v.n), regress.id(v.n), v.at)
  FROM (VALUES (1, 'a', timestamptz '2020-01-01 00:00:03+00'),
               (2, 'a', '2020-01-01 00:00:01+00'),
               (3, 'b', '2020-01-01 00:00:02+00'),
               (4, 'a', '2020-01-01 00:00:01+00'),
               (5, 'b', '2999-01-01 00:00:00+00'),   -- not yet due
               (6, 'a', '2020-01-01 00:00:00+00'),   -- delivered below
               (7, 'a', '2020-01-01 00:00:00+00')    -- dead below
       ) AS v(n, topic, at)
 ORDER BY v.n;
UPDATE outbox.message SET delivered_at = '2020-01-02 00:00:00+00' WHERE id = regress.id(6);
UPDATE outbox.message SET dead_at = '2020-01-02 00:00:00+00', attempts = 8 WHERE id = regress.id(7);

-- the two oldest due messages of any topic, ties broken by id; the rows come
-- back as updated (attempts 1, the lease), in claim order
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE c AS
SELECT * FROM outbox.claim('w1', NULL, 2) WITH ORDINALITY;
SELECT clock_timestamp() AS t1 \gset
SELECT ordinality, id, topic, event_type, payload, available_at, attempts, lease_owner,
       delivered_at, dead_at, last_error,
       leased_until BETWEEN timestamptz :'t0' + interval '60 s'
                        AND timestamptz :'t1' + interval '60 s' AS leased_for_60s
  FROM c ORDER BY ordinality;
-- the table agrees with what claim returned
SELECT m.id, m.attempts, m.lease_owner, m.leased_until = c.leased_until AS same_lease
  FROM outbox.message m JOIN c USING (id) ORDER BY m.id;
DROP TABLE c;

-- a topic: only its due messages; leased, future, delivered and dead
-- messages are never claimed
SELECT id, topic, attempts, lease_owner FROM outbox.claim('w2', 'b');
SELECT id, topic, attempts, lease_owner FROM outbox.claim('w2', 'a');
SELECT id FROM outbox.claim('w3');
SELECT id FROM outbox.claim('w3', 'a', 500);
SELECT id FROM outbox.claim('w3', 'no such topic');

-- once due, it is claimed
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE id = regress.id(5);
SELECT id, attempts, lease_owner FROM outbox.claim('w3');

-- a lease is exclusive while valid; once expired, anyone may claim again and
-- attempts counts the claims
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 s'
 WHERE id IN (regress.id(2), regress.id(4));
SELECT id, attempts, lease_owner FROM outbox.claim('w4', 'a', 1);
SELECT id, attempts, lease_owner FROM outbox.claim('w1', 'a', 1);
SELECT id FROM outbox.claim('w5');
SELECT id, attempts, lease_owner, leased_until IS NOT NULL AS leased
  FROM outbox.message ORDER BY id;

--
-- batch size and lease length: the arguments, or the settings when NULL
--
SELECT regress.reset();
SELECT count(outbox.append('bulk', 'evt.claim.v1', to_jsonb(i))) FROM generate_series(1, 600) AS i;
SELECT count(*) AS default_batch FROM outbox.claim('w');
SET outbox.batch_size = 3;
SELECT count(*) AS batch_setting FROM outbox.claim('w');
SELECT count(*) AS batch_setting FROM outbox.claim('w', NULL, NULL);
SELECT count(*) AS batch_1 FROM outbox.claim('w', NULL, 1);
SELECT count(*) AS batch_500 FROM outbox.claim('w', 'bulk', 500);
RESET outbox.batch_size;
-- the oldest came first: every leased message is older than every other one
SELECT count(*) FILTER (WHERE attempts = 1) AS leased,
       count(*) FILTER (WHERE attempts = 0) AS left
  FROM outbox.message;
SELECT (SELECT max(payload::int) FROM outbox.message WHERE attempts = 1)
     < (SELECT min(payload::int) FROM outbox.message WHERE attempts = 0) AS oldest_first;
SELECT count(*) AS rest FROM outbox.claim('w', 'bulk', 500);

UPDATE outbox.message SET attempts = 0, leased_until = NULL, lease_owner = NULL;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM outbox.claim('default', NULL, 1);
SELECT count(*) FROM outbox.claim('min', NULL, 1, 10);
SELECT count(*) FROM outbox.claim('max', NULL, 1, 3600);
SET outbox.lease_seconds = 15;
SELECT count(*) FROM outbox.claim('setting', NULL, 1);
SELECT count(*) FROM outbox.claim('setting null', NULL, 1, NULL);
RESET outbox.lease_seconds;
SELECT clock_timestamp() AS t1 \gset
SELECT lease_owner,
       leased_until - timestamptz :'t1' <= v.secs * interval '1 s'
       AND leased_until - timestamptz :'t0' >= v.secs * interval '1 s' AS leased_for
  FROM outbox.message
  JOIN (VALUES ('default', 60), ('min', 10), ('max', 3600), ('setting', 15), ('setting null', 15))
       AS v(owner, secs) ON v.owner = lease_owner
 ORDER BY v.secs, lease_owner;

-- out of range: 22023, nothing claimed
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.claim('w', NULL, 0)$$),
               ($$SELECT outbox.claim('w', NULL, -1)$$),
               ($$SELECT outbox.claim('w', NULL, 501)$$),
               ($$SELECT outbox.claim('w', NULL, 2147483647)$$),
               ($$SELECT outbox.claim('w', NULL, 1, 9)$$),
               ($$SELECT outbox.claim('w', NULL, 1, 0)$$),
               ($$SELECT outbox.claim('w', NULL, 1, -60)$$),
               ($$SELECT outbox.claim('w', NULL, 1, 3601)$$),
               ($$SELECT outbox.claim('w', 'bulk', 0, 3601)$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged;

--
-- a message whose lease expired on its last allowed attempt is dead, not
-- claimed again, and the claim goes on to fill its batch
--
SELECT regress.reset();
SELECT outbox.append('d', 'evt.claim.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
  FROM generate_series(1, 8) AS n
 ORDER BY n;
-- 1, 2, 3: last attempt (8 of 8), lease expired
UPDATE outbox.message SET attempts = 8, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s'
 WHERE id IN (regress.id(1), regress.id(2), regress.id(3));
-- 4: last attempt, lease still valid: neither claimed nor dead
UPDATE outbox.message SET attempts = 8, lease_owner = 'old', leased_until = clock_timestamp() + interval '1 h'
 WHERE id = regress.id(4);
-- 5: attempt 7 of 8, lease expired: claimed for its last attempt
UPDATE outbox.message SET attempts = 7, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s'
 WHERE id = regress.id(5);
-- 6, 7, 8: never claimed

SELECT clock_timestamp() AS t0 \gset
SELECT id, attempts, lease_owner FROM outbox.claim('new', 'd', 2);
SELECT clock_timestamp() AS t1 \gset
SELECT id, attempts, lease_owner, leased_until IS NULL AS no_lease,
       dead_at BETWEEN :'t0' AND :'t1' AS dead_now, last_error
  FROM outbox.message ORDER BY id;
-- the dead are never claimed again
SELECT id, attempts, lease_owner FROM outbox.claim('new', 'd', 500);
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 s' WHERE dead_at IS NOT NULL;
SELECT id FROM outbox.claim('new', NULL, 500);
SELECT count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead FROM outbox.message;

-- the same among deferred messages (appended for later, then fallen due):
-- found through the deferred messages, not the stream
SELECT regress.reset();
SELECT outbox.append('dd', 'evt.claim.v1', to_jsonb(n), regress.id(n), clock_timestamp() + interval '1 h')
  FROM generate_series(1, 4) AS n
 ORDER BY n;
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00'::timestamptz + seq * interval '1 s';
UPDATE outbox.message SET attempts = 8, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s'
 WHERE id = regress.id(1);
SELECT id, attempts, lease_owner FROM outbox.claim('new', 'dd', 2);
SELECT id, deferred, attempts, lease_owner, dead_at IS NOT NULL AS dead, last_error
  FROM outbox.message ORDER BY id;

-- the last allowed attempt follows outbox.max_attempts at the time of the claim
SELECT regress.reset();
SELECT outbox.append('m', 'evt.claim.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
  FROM generate_series(1, 3) AS n
 ORDER BY n;
UPDATE outbox.message SET attempts = id_n.a, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s'
  FROM (VALUES (1, 2), (2, 3), (3, 9)) AS id_n(n, a)
 WHERE id = regress.id(id_n.n);
SET outbox.max_attempts = 3;
SELECT id, attempts FROM outbox.claim('new', 'm');
SELECT id, attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message ORDER BY id;
RESET outbox.max_attempts;

-- with one attempt allowed, a message is dead as soon as its first lease
-- expires
SET outbox.max_attempts = 1;
SELECT outbox.append('one', 'evt.claim.v1', '{}', regress.id(10), '2020-01-01 00:00:00+00');
SELECT id, attempts FROM outbox.claim('first', 'one');
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 s' WHERE id = regress.id(10);
SELECT id FROM outbox.claim('second', 'one');
SELECT attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message WHERE id = regress.id(10);
RESET outbox.max_attempts;

-- the death happens only in the topics the claim is for
SELECT regress.reset();
SELECT outbox.append(v.topic, 'evt.claim.v1', '{}', regress.id(v.n), '2020-01-01 00:00:00+00'::timestamptz + v.n * interval '1 s')
  FROM (VALUES (1, 'x'), (2, 'y')) AS v(n, topic)
 ORDER BY v.n;
UPDATE outbox.message SET attempts = 8, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s';
SELECT id FROM outbox.claim('new', 'x');
SELECT id, dead_at IS NOT NULL AS dead FROM outbox.message ORDER BY id;

-- such a message dies when a claim reaches it, in the claim's order: one
-- after the batch a claim leases stays as it was (no claim reads the whole
-- topic for them), and the next claim that reaches it makes it dead
SELECT regress.reset();
SELECT outbox.append('e', 'evt.claim.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
  FROM generate_series(1, 3) AS n
 ORDER BY n;
UPDATE outbox.message SET attempts = 8, lease_owner = 'old', leased_until = clock_timestamp() - interval '1 s'
 WHERE id = regress.id(3);
SELECT id, attempts FROM outbox.claim('new', 'e', 1);
SELECT id, attempts, lease_owner, dead_at IS NOT NULL AS dead FROM outbox.message ORDER BY id;
SELECT id, attempts FROM outbox.claim('new', 'e', 5);
SELECT id, attempts, lease_owner, dead_at IS NOT NULL AS dead, last_error FROM outbox.message ORDER BY id;

RESET TimeZone;
