--
-- subscription_leases (1.5): a claim of a named subscription leases the
-- fresh messages without an ordering key it reads as one row of
-- outbox.subscription_lease; completions shrink and delete it; a failure,
-- an extension or a lease that ran out turns it into state rows first,
-- and from then on the rules of state rows hold.
--
SET TimeZone = 'UTC';

-- (helpers in a schema of their own: the looks for leases that ran out
-- need new sessions, \c, at most one look a second per session)
CREATE SCHEMA sl;

-- The lease rows: owner, how many messages each holds, and their n.
CREATE FUNCTION sl.leases()
RETURNS TABLE (lease_owner text, held integer, ns text)
LANGUAGE sql AS $$
    SELECT l.lease_owner, cardinality(l.seqs),
           (SELECT string_agg(m.payload->>'n', ',' ORDER BY m.seq)
              FROM outbox.message m WHERE m.seq = ANY (l.seqs))
      FROM outbox.subscription_lease l ORDER BY l.first_seq
$$;

-- The state rows: n, attempts, owner, whether leased now, dead.
CREATE FUNCTION sl.states()
RETURNS TABLE (n text, attempts integer, lease_owner text, leased boolean, dead boolean)
LANGUAGE sql AS $$
    SELECT m.payload->>'n', x.attempts, x.lease_owner,
           coalesce(x.leased_until > clock_timestamp(), false), x.dead_at IS NOT NULL
      FROM outbox.subscription_state x JOIN outbox.message m ON m.id = x.id
     ORDER BY x.seq
$$;

SELECT regress.reset();
SELECT outbox.subscribe('rl', 's');
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(1, 4) AS n;
SELECT outbox.append('rl', 'evt.rl.v1', '{"n": 5}', regress.id(5), NULL, 'k5');

-- one claim: all five in one lease row, the keyed one's key in a row of
-- outbox.subscription_key; every one returned with attempt 1 and the
-- owner's lease
SELECT payload->>'n' AS n, attempts, lease_owner, leased_until > now() AS leased
  FROM outbox.claim('w', 'rl', 10, 60, 's') ORDER BY seq;
SELECT * FROM sl.leases();
SELECT * FROM sl.states();
SELECT ordering_key, seq = (SELECT seq FROM outbox.message WHERE id = regress.id(5)) AS its_seq
  FROM outbox.subscription_key;
SELECT pending, in_flight FROM outbox.subscription_stats WHERE subscription = 's';

-- completion by another owner: nothing
SELECT outbox.complete(regress.id(1), 'other', 's') AS by_other;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2)], 'other', 's') AS many_by_other;
-- by the owner: the row keeps the rest, then goes
SELECT outbox.complete(regress.id(1), 'w', 's') AS completed;
SELECT outbox.complete(regress.id(1), 'w', 's') AS again;
SELECT * FROM sl.leases();
SELECT outbox.complete_many(ARRAY[regress.id(2), regress.id(5), regress.id(2)], 'w', 's') AS completed_many;
SELECT * FROM sl.leases();
SELECT count(*) AS key_rows FROM outbox.subscription_key;
SELECT * FROM sl.states();
SELECT pending, in_flight FROM outbox.subscription_stats WHERE subscription = 's';

-- a failure turns the row into state rows: the failed message backs off,
-- the other keeps its lease
SELECT outbox.fail(regress.id(3), 'w', 'boom', 's') AS failed;
SELECT * FROM sl.leases();
SELECT * FROM sl.states();
SELECT outbox.complete(regress.id(4), 'w', 's') AS completed_from_state;
SELECT * FROM sl.states();

-- extend: the same, the lease pushed
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(6, 7) AS n;
SELECT count(*) AS claimed FROM outbox.claim('w', 'rl', 10, 60, 's');
SELECT outbox.extend(regress.id(6), 'w', 600, 's') AS extended;
SELECT outbox.extend(regress.id(7), 'other', 600, 's') AS extended_by_other;
SELECT * FROM sl.leases();
SELECT * FROM sl.states();
SELECT x.leased_until > now() + interval '590 s' AS pushed
  FROM outbox.subscription_state x WHERE x.id = regress.id(6);
SELECT count(*) FILTER (WHERE outbox.complete(m.id, 'w', 's')) AS completed
  FROM outbox.message m WHERE m.id IN (regress.id(6), regress.id(7));

-- a lease by range that ran out: the next claim takes it over, attempt 2
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(8, 9) AS n;
SELECT count(*) AS claimed FROM outbox.claim('w', 'rl', 10, 60, 's');
UPDATE outbox.subscription_lease SET leased_until = now() - interval '1 s';
\c -
SET TimeZone = 'UTC';
SELECT payload->>'n' AS n, attempts, lease_owner FROM outbox.claim('w2', 'rl', 10, 60, 's') ORDER BY seq;
SELECT * FROM sl.leases();
SELECT * FROM sl.states();
-- the first owner's completion comes too late
SELECT outbox.complete(regress.id(8), 'w', 's') AS late;
SELECT count(*) FILTER (WHERE outbox.complete(m.id, 'w2', 's')) AS completed
  FROM outbox.message m WHERE m.id IN (regress.id(8), regress.id(9));

-- after the last allowed attempt, a lease by range that ran out is dead
SET outbox.max_attempts = 1;
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', 10), regress.id(10)));
SELECT count(*) AS claimed FROM outbox.claim('w', 'rl', 10, 60, 's');
UPDATE outbox.subscription_lease SET leased_until = now() - interval '1 s';
\c -
SET TimeZone = 'UTC';
SET outbox.max_attempts = 1;
SELECT count(*) AS claimed_again FROM outbox.claim('w2', 'rl', 10, 60, 's');
SELECT * FROM sl.leases();
SELECT n, attempts, lease_owner, leased, dead FROM sl.states();
SELECT last_error FROM outbox.subscription_state ORDER BY seq;
RESET outbox.max_attempts;
SELECT outbox.retry_dead_topic('rl', 's') AS revived;

-- purge keeps a message a lease by range holds; unsubscribe drops the row
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', 11), regress.id(11)));
SELECT count(*) AS claimed FROM outbox.claim('w', 'rl', 10, 60, 's');
SELECT outbox.unsubscribe('rl', NULL) AS default_dropped;
SELECT outbox.purge('0 s') >= 0 AS purged;
SELECT payload->>'n' AS n FROM outbox.message ORDER BY seq;
SELECT outbox.unsubscribe('rl', 's') AS unsubscribed;
SELECT count(*) AS lease_rows FROM outbox.subscription_lease;
SELECT outbox.subscribe('rl', NULL) AS default_back;

-- a completion in the session of the claim goes to the lease row the
-- claim wrote, by the row's key; a row changed since (here its lease's
-- end, by hand) is looked up as from any other session
SELECT outbox.subscribe('rl', 's2');
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(12, 15) AS n;
SELECT count(*) AS claimed FROM outbox.claim('w', 'rl', 10, 60, 's2');
SELECT outbox.complete(regress.id(12), 'other', 's2') AS by_other;
SELECT outbox.complete(regress.id(12), 'w', 's2') AS completed;
SELECT outbox.complete(regress.id(12), 'w', 's2') AS again;
SELECT * FROM sl.leases();
UPDATE outbox.subscription_lease SET leased_until = leased_until + interval '1 s';
SELECT outbox.complete_many(ARRAY[regress.id(13), regress.id(12)], 'w', 's2') AS completed_many;
SELECT * FROM sl.leases();
SELECT outbox.complete_many(ARRAY[regress.id(14), regress.id(15)], 'w', 's2') AS completed_rest;
SELECT count(*) AS lease_rows FROM outbox.subscription_lease;
SELECT pending, in_flight FROM outbox.subscription_stats WHERE subscription = 's2';
SELECT outbox.unsubscribe('rl', 's2') AS unsubscribed;

-- a key whose head a lease row holds blocks the key's later messages (state
-- rows, blocked); the head's completion unblocks the next one, which is
-- then handed out by the due read
SELECT outbox.subscribe('rl', 's3');
SELECT outbox.append('rl', 'evt.rl.v1', '{"n": 16}', regress.id(16), NULL, 'k16');
SELECT payload->>'n' AS n FROM outbox.claim('w', 'rl', 10, 60, 's3');
SELECT ordering_key FROM outbox.subscription_key;
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n),
                           NULL, 'k16'))
  FROM generate_series(17, 18) AS n;
SELECT count(*) AS claimed_behind_head FROM outbox.claim('w', 'rl', 10, 60, 's3');
SELECT n, x.blocked FROM sl.states() JOIN outbox.subscription_state x
    ON x.id = regress.id(n::int) ORDER BY n;
SELECT outbox.complete(regress.id(16), 'w', 's3') AS head_completed;
SELECT count(*) AS key_rows FROM outbox.subscription_key;
SELECT payload->>'n' AS n, attempts FROM outbox.claim('w', 'rl', 10, 60, 's3');
SELECT outbox.fail(regress.id(17), 'w', 'boom', 's3') AS failed;
SELECT s.n, s.attempts, s.leased, x.blocked FROM sl.states() s JOIN outbox.subscription_state x
    ON x.id = regress.id(s.n::int) ORDER BY s.n;

-- from another session, which does not know the row: looked up, the key's
-- row goes under the key's lock; a failure turns a keyed head leased by
-- range into its state row, which holds the key from then on
SELECT outbox.append('rl', 'evt.rl.v1', '{"n": 19}', regress.id(19), NULL, 'k19');
SELECT outbox.append('rl', 'evt.rl.v1', '{"n": 20}', regress.id(20), NULL, 'k20');
SELECT payload->>'n' AS n FROM outbox.claim('w', 'rl', 10, 60, 's3') ORDER BY seq;
SELECT ordering_key FROM outbox.subscription_key ORDER BY ordering_key;
\c -
SELECT outbox.complete(regress.id(19), 'w', 's3') AS completed_elsewhere;
SELECT outbox.fail(regress.id(20), 'w', 'boom', 's3') AS failed_elsewhere;
SELECT ordering_key FROM outbox.subscription_key;
SELECT * FROM sl.leases();
SELECT n, attempts, leased FROM sl.states();
SELECT outbox.unsubscribe('rl', 's3') AS unsubscribed;
SELECT count(*) AS key_rows FROM outbox.subscription_key;

-- from another session, the rows of the messages are read as one range of
-- the subscription's rows: batches of two owners side by side, and one
-- call with messages of both of a's rows and one of b's, which stays b's
SELECT outbox.subscribe('rl', 's4');
SELECT count(outbox.append('rl', 'evt.rl.v1', jsonb_build_object('n', n), regress.id(n)))
  FROM generate_series(21, 26) AS n;
SELECT string_agg(payload->>'n', ',' ORDER BY seq) AS a1 FROM outbox.claim('a', 'rl', 2, 60, 's4');
SELECT string_agg(payload->>'n', ',' ORDER BY seq) AS b1 FROM outbox.claim('b', 'rl', 2, 60, 's4');
SELECT string_agg(payload->>'n', ',' ORDER BY seq) AS a2 FROM outbox.claim('a', 'rl', 2, 60, 's4');
\c -
SELECT outbox.complete_many(ARRAY[regress.id(21), regress.id(23), regress.id(26), regress.id(22)],
                            'a', 's4') AS completed_across_rows;
SELECT l.lease_owner, (SELECT string_agg(m.payload->>'n', ',' ORDER BY m.seq)
                         FROM outbox.message m WHERE m.seq = ANY (l.seqs)) AS ns
  FROM outbox.subscription_lease l JOIN outbox.subscription s USING (sub_id)
 WHERE s.name = 's4' ORDER BY l.first_seq;
SELECT outbox.complete_many(ARRAY[regress.id(24), regress.id(23)], 'b', 's4') AS completed_by_b;
SELECT outbox.complete(regress.id(25), 'a', 's4') AS completed_last;
SELECT pending, in_flight FROM outbox.subscription_stats WHERE subscription = 's4';
SELECT outbox.unsubscribe('rl', 's4') AS unsubscribed;

SELECT regress.reset();
DROP SCHEMA sl CASCADE;
RESET TimeZone;
