--
-- lease: complete, complete_many, fail and extend act only for the owner of
-- a lease (an expired lease nobody took still counts) on a message that is
-- neither delivered nor dead; otherwise they change nothing
--
SELECT regress.reset();
SET TimeZone = 'UTC';

-- ids 1..9, all claimed by "a" (attempt 1)
SELECT count(*) FROM (
    SELECT outbox.append('l', 'evt.lease.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
      FROM generate_series(1, 9) AS n) s;
SELECT count(*) FROM outbox.claim('a', 'l');

-- complete by the owner: delivered now, lease cleared, owner kept
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.complete(regress.id(1), 'a');
SELECT clock_timestamp() AS t1 \gset
SELECT attempts, lease_owner, leased_until, delivered_at BETWEEN :'t0' AND :'t1' AS delivered_now,
       dead_at, last_error
  FROM outbox.message WHERE id = regress.id(1);

-- nothing else acts on it any more, not even its owner
SELECT regress.state() AS before \gset
SELECT outbox.complete(regress.id(1), 'a') AS complete_again,
       outbox.complete_many(ARRAY[regress.id(1)], 'a') AS complete_many_again,
       outbox.extend(regress.id(1), 'a') AS extend_delivered,
       outbox.fail(regress.id(1), 'a', 'late failure') AS fail_delivered;
SELECT regress.state() = :'before' AS unchanged;

-- another owner, an unknown id, a message never claimed: false, no change
SELECT outbox.append('l', 'evt.lease.v1', '{}', regress.id(20));
SELECT regress.state() AS before \gset
SELECT v.what,
       outbox.complete(v.id, v.owner) AS complete,
       outbox.complete_many(ARRAY[v.id], v.owner) AS complete_many,
       outbox.extend(v.id, v.owner) AS extend,
       outbox.fail(v.id, v.owner, 'boom') AS fail
  FROM (VALUES ('another owner', regress.id(2), 'b'),
               ('owner differs in case', regress.id(2), 'A'),
               ('owner with a trailing space', regress.id(2), 'a '),
               ('unknown id', regress.id(999), 'a'),
               ('never claimed', regress.id(20), 'a')) AS v(what, id, owner);
SELECT regress.state() = :'before' AS unchanged;

-- an expired lease that nobody took still belongs to its owner
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 h'
 WHERE id IN (regress.id(2), regress.id(3), regress.id(4), regress.id(5));
SELECT outbox.complete(regress.id(2), 'a') AS complete_expired;
SELECT outbox.complete_many(ARRAY[regress.id(3)], 'a') AS complete_many_expired;
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.extend(regress.id(4), 'a') AS extend_expired;
SELECT clock_timestamp() AS t1 \gset
SELECT outbox.fail(regress.id(5), 'a', 'boom') AS fail_expired;
SELECT id, lease_owner, delivered_at IS NOT NULL AS delivered, leased_until IS NOT NULL AS leased,
       leased_until BETWEEN timestamptz :'t0' + interval '60 s'
                        AND timestamptz :'t1' + interval '60 s' AS extended_60s,
       last_error
  FROM outbox.message WHERE id IN (regress.id(2), regress.id(3), regress.id(4), regress.id(5))
 ORDER BY id;

-- a lease taken over by another owner: the old owner can do nothing, the new
-- one can
UPDATE outbox.message SET leased_until = clock_timestamp() - interval '1 s'
 WHERE id IN (regress.id(6), regress.id(7));
SELECT id, attempts, lease_owner FROM outbox.claim('b', 'l');
SELECT regress.state() AS before \gset
SELECT outbox.complete(regress.id(6), 'a') AS old_complete,
       outbox.complete_many(ARRAY[regress.id(6), regress.id(7)], 'a') AS old_complete_many,
       outbox.extend(regress.id(6), 'a') AS old_extend,
       outbox.fail(regress.id(6), 'a', 'old owner') AS old_fail;
SELECT regress.state() = :'before' AS unchanged;
SELECT outbox.extend(regress.id(6), 'b') AS new_extend,
       outbox.complete(regress.id(6), 'b') AS new_complete,
       outbox.fail(regress.id(7), 'b', 'new owner') AS new_fail;
SELECT id, attempts, lease_owner, delivered_at IS NOT NULL AS delivered, last_error
  FROM outbox.message WHERE id IN (regress.id(6), regress.id(7)) ORDER BY id;

-- after fail the owner holds nothing: no complete, extend or second fail
SELECT regress.state() AS before \gset
SELECT outbox.complete(regress.id(7), 'b') AS complete_after_fail,
       outbox.complete_many(ARRAY[regress.id(7)], 'b') AS complete_many_after_fail,
       outbox.extend(regress.id(7), 'b') AS extend_after_fail,
       outbox.fail(regress.id(7), 'b', 'again') AS fail_after_fail;
SELECT outbox.complete(regress.id(5), 'a') AS complete_after_fail;
SELECT regress.state() = :'before' AS unchanged;

-- a dead message cannot be completed, extended or failed, even by the owner
-- of its last lease
UPDATE outbox.message SET dead_at = clock_timestamp(), leased_until = clock_timestamp() + interval '1 h'
 WHERE id = regress.id(8);
SELECT regress.state() AS before \gset
SELECT outbox.complete(regress.id(8), 'a') AS complete_dead,
       outbox.complete_many(ARRAY[regress.id(8)], 'a') AS complete_many_dead,
       outbox.extend(regress.id(8), 'a') AS extend_dead,
       outbox.fail(regress.id(8), 'a', 'boom') AS fail_dead;
SELECT regress.state() = :'before' AS unchanged;

--
-- extend: pushes the lease to now + lease_seconds (the argument or
-- outbox.lease_seconds), never changes attempts
--
SELECT outbox.append('x', 'evt.lease.v1', '{}', regress.id(30), '2020-01-01 00:00:00+00');
SELECT id, attempts FROM outbox.claim('x-owner', 'x', 1, 10);
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.extend(regress.id(30), 'x-owner', 3600);
SELECT clock_timestamp() AS t1 \gset
SELECT attempts, leased_until BETWEEN timestamptz :'t0' + interval '3600 s'
                                  AND timestamptz :'t1' + interval '3600 s' AS leased_for_3600s
  FROM outbox.message WHERE id = regress.id(30);
-- shorter is fine too: extend sets the lease, it does not only lengthen it
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.extend(regress.id(30), 'x-owner', 10);
SELECT clock_timestamp() AS t1 \gset
SELECT leased_until BETWEEN timestamptz :'t0' + interval '10 s'
                        AND timestamptz :'t1' + interval '10 s' AS leased_for_10s
  FROM outbox.message WHERE id = regress.id(30);
SET outbox.lease_seconds = 42;
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.extend(regress.id(30), 'x-owner');
SELECT outbox.extend(regress.id(30), 'x-owner', NULL);
SELECT clock_timestamp() AS t1 \gset
SELECT attempts, leased_until BETWEEN timestamptz :'t0' + interval '42 s'
                                  AND timestamptz :'t1' + interval '42 s' AS leased_for_42s
  FROM outbox.message WHERE id = regress.id(30);
RESET outbox.lease_seconds;
-- an extended lease keeps other workers out
SELECT id FROM outbox.claim('other', 'x');

-- bad arguments: 22004 for a NULL id, 22023 for a lease out of range; no change
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.complete(NULL, 'a')$$),
               ($$SELECT outbox.fail(NULL, 'a', 'boom')$$),
               ($$SELECT outbox.extend(NULL, 'a')$$),
               ($$SELECT outbox.extend(regress.id(30), 'x-owner', 9)$$),
               ($$SELECT outbox.extend(regress.id(30), 'x-owner', 3601)$$),
               ($$SELECT outbox.extend(regress.id(30), 'x-owner', 0)$$),
               ($$SELECT outbox.extend(regress.id(30), 'x-owner', -1)$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged;

--
-- complete_many: counts what it marked, only where the owner holds the lease
--
SELECT regress.reset();
SELECT count(*) FROM (
    SELECT outbox.append('cm', 'evt.lease.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
      FROM generate_series(1, 6) AS n) s;
SELECT id, lease_owner FROM outbox.claim('a', 'cm', 3);
SELECT id, lease_owner FROM outbox.claim('b', 'cm', 2);
-- 1, 2, 3 are a's; 4, 5 are b's; 6 is not claimed; 99 does not exist;
-- 1 twice counts once
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(1), regress.id(2), regress.id(4),
                                  regress.id(6), regress.id(99)], 'a');
SELECT clock_timestamp() AS t1 \gset
SELECT id, lease_owner, leased_until IS NOT NULL AS leased,
       delivered_at BETWEEN :'t0' AND :'t1' AS delivered_now
  FROM outbox.message ORDER BY id;
SELECT outbox.complete_many(ARRAY[regress.id(1), regress.id(2), regress.id(3)], 'a');
SELECT outbox.complete_many(ARRAY[regress.id(4), regress.id(5)], 'b');
-- an empty array does nothing
SELECT outbox.complete_many(ARRAY[]::uuid[], 'a');
SELECT outbox.complete_many('{}', 'a');
-- NULL array 22004, NULL element 22004, two dimensions 22023, no change
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT outbox.complete_many(NULL, 'a')$$),
               ($$SELECT outbox.complete_many(ARRAY[regress.id(6), NULL], 'a')$$),
               ($$SELECT outbox.complete_many(ARRAY[NULL]::uuid[], 'a')$$),
               ($$SELECT outbox.complete_many(ARRAY[[regress.id(6)], [regress.id(1)]], 'a')$$),
               ($$SELECT outbox.complete_many(ARRAY[regress.id(6)], NULL)$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged;

--
-- complete_and_claim: complete_many, then claim, in one call
--
SELECT regress.reset();
SELECT count(*) FROM (
    SELECT outbox.append('cc', 'evt.lease.v1', to_jsonb(n), regress.id(n), '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
      FROM generate_series(1, 7) AS n) s;
-- nothing to complete yet: the first call only claims
SELECT id, attempts, lease_owner FROM outbox.complete_and_claim('{}', 'a', 'cc', 2);
SELECT id, lease_owner FROM outbox.claim('b', 'cc', 1);
-- a completes its 1 and 2, not b's 3 nor the unclaimed 4, and leases 4 and 5
-- (its own completions count as done: 1 and 2 are not claimed again)
SELECT clock_timestamp() AS t0 \gset
SELECT id, attempts, lease_owner
  FROM outbox.complete_and_claim(ARRAY[regress.id(1), regress.id(2), regress.id(3), regress.id(4)], 'a', 'cc', 2);
SELECT clock_timestamp() AS t1 \gset
SELECT id, lease_owner, leased_until IS NOT NULL AS leased,
       delivered_at BETWEEN :'t0' AND :'t1' AS delivered_now
  FROM outbox.message ORDER BY id;
-- named arguments, the defaults for the rest: the whole batch of the topic
SELECT count(*) FROM outbox.complete_and_claim(ids => ARRAY[regress.id(4), regress.id(5)], owner => 'a', topic => 'cc');
-- bad arguments: nothing completed, nothing claimed
SELECT regress.state() AS before \gset
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ($$SELECT count(*) FROM outbox.complete_and_claim(NULL, 'a', 'cc')$$),
               ($$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[regress.id(6), NULL], 'a', 'cc')$$),
               ($$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[regress.id(6)], NULL, 'cc')$$),
               ($$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[regress.id(6)], 'a', 'cc', 0)$$),
               ($$SELECT count(*) FROM outbox.complete_and_claim(ARRAY[regress.id(6)], 'a', 'cc', 1, 9)$$)) AS v(stmt);
SELECT regress.state() = :'before' AS unchanged;

-- a message leased for long holds its topic's claim position back only for
-- a second: then a claim makes it deferred (its lease, owner and attempts
-- as they were), the claims of the topic read past it, and a later message
-- of its key still waits for it
SELECT regress.reset();
SELECT count(outbox.append('long', 'evt.lease.v1', to_jsonb(n), regress.id(n), NULL,
                           CASE WHEN n IN (1, 3) THEN 'k' END))
  FROM generate_series(1, 4) AS n;
SELECT id, attempts FROM outbox.claim('sleeper', 'long', 1, 3600);
SELECT id FROM outbox.claim('w', 'long', 1, 30);
SELECT pg_sleep(1.1);
SELECT id FROM outbox.claim('w', 'long', 5, 30);
SELECT id, deferred, lease_owner, attempts, leased_until > now() + interval '59 min' AS long_lease,
       delivered_at IS NOT NULL AS delivered
  FROM outbox.message ORDER BY seq;
-- its owner completes it: the key's next message is handed out
SELECT outbox.complete(regress.id(1), 'sleeper') AS completed;
SELECT id FROM outbox.claim('w', 'long', 5, 30);
SELECT id, deferred, delivered_at IS NOT NULL AS delivered FROM outbox.message WHERE id = regress.id(1);

RESET TimeZone;
