--
-- append and append_batch: what a new message looks like, idempotent ids,
-- conflicts, delayed messages, rolled-back appends, batches
--
SELECT regress.reset();
SET TimeZone = 'UTC';

-- a new message: a generated UUIDv7, the transaction's time as created_at,
-- the wall clock of the call as available_at, nothing else set
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 7}') AS id1 \gset
SELECT clock_timestamp() AS t1 \gset
SELECT :'id1'::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS uuidv7,
       topic, event_type, payload,
       created_at = now() AS created_at_is_now,
       created_at < :'t0' AS created_before_call,
       available_at BETWEEN :'t0' AND :'t1' AS available_at_call_time,
       attempts, leased_until, lease_owner, delivered_at, dead_at, last_error
  FROM outbox.message WHERE id = :'id1';
COMMIT;

-- an explicit NULL id and NULL available_at mean the same
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.append('credits', 'evt.a.v1', '[]', NULL, NULL) AS id2 \gset
SELECT clock_timestamp() AS t1 \gset
SELECT :'id2'::uuid > :'id1'::uuid AS later_id,
       available_at BETWEEN :'t0' AND :'t1' AS available_now
  FROM outbox.message WHERE id = :'id2';

-- a given id and a given available_at are stored as given
SELECT outbox.append('credits', 'evt.a.v1', '{"k": "v"}', regress.id(1),
                     '2030-01-02 03:04:05.678901+00');
SELECT id, available_at FROM outbox.message WHERE id = regress.id(1);
SELECT outbox.append('credits', 'evt.a.v1', '{}', regress.id(2), '1999-12-31 23:59:59+00');
SELECT id, available_at FROM outbox.message WHERE id = regress.id(2);
-- named arguments
SELECT outbox.append(topic => 'credits', type => 'evt.a.v1', payload => '1',
                     id => regress.id(3), available_at => '2001-01-01 00:00:00+00');
SELECT id, topic, event_type, payload, available_at FROM outbox.message WHERE id = regress.id(3);

-- an available_at still ahead of the call's clock makes the message
-- deferred (claims find it by its available_at); one that has passed (or
-- the transaction's now()) is due at once: fresh, read in append order as
-- one appended without it.  A claim returns the due ones oldest first.
BEGIN;
SELECT outbox.append('sched', 'evt.a.v1', '1', NULL, clock_timestamp() + interval '1 hour') IS NOT NULL AS ahead;
SELECT outbox.append('sched', 'evt.a.v1', '2', NULL, clock_timestamp() - interval '1 hour') IS NOT NULL AS passed;
SELECT outbox.append('sched', 'evt.a.v1', '3', NULL, now()) IS NOT NULL AS xact_now;
SELECT outbox.append('sched', 'evt.a.v1', '4') IS NOT NULL AS no_schedule;
SELECT payload, deferred, available_at > clock_timestamp() AS ahead
  FROM outbox.message WHERE topic = 'sched' ORDER BY seq;
COMMIT;
SELECT payload, attempts FROM outbox.claim('w', 'sched');

-- any JSON value is a payload, JSON null included
SELECT outbox.append('p', 'evt.p.v1', v.payload, regress.id(100 + v.n)) AS id
  FROM (VALUES (1, 'null'::jsonb), (2, 'true'), (3, '0'), (4, '"text"'), (5, '[]'),
               (6, '{}'), (7, '{"a": [1, {"b": null}], "é": "ü\u00e9"}'),
               (8, '-12.50')) AS v(n, payload)
 ORDER BY v.n;
SELECT id, payload, jsonb_typeof(payload) FROM outbox.message WHERE topic = 'p' ORDER BY id;

-- bad arguments: SQL NULL payload 22004, infinite available_at 22023
SELECT regress.state() AS before \gset
SELECT regress.err($$SELECT outbox.append('t', 'evt.a.v1', NULL)$$);
SELECT regress.err($$SELECT outbox.append('t', 'evt.a.v1', NULL::jsonb, regress.id(9))$$);
SELECT regress.err($$SELECT outbox.append('t', 'evt.a.v1', '{}', NULL, 'infinity')$$);
SELECT regress.err($$SELECT outbox.append('t', 'evt.a.v1', '{}', NULL, '-infinity')$$);
SELECT regress.err($$SELECT outbox.append('t', 'evt.a.v1', '{}', regress.id(9), 'infinity')$$);
SELECT regress.state() = :'before' AS unchanged;

-- the same id again with the same topic, type and payload: the id, no new
-- row, nothing changed, whatever available_at is passed
SELECT outbox.append('credits', 'evt.a.v1', '{"k": "v"}', regress.id(1));
SELECT outbox.append('credits', 'evt.a.v1', '{ "k" :"v" }', regress.id(1), '2040-01-01 00:00:00+00');
SELECT outbox.append('credits', 'evt.a.v1', '{"k": "v"}', regress.id(1), '2000-01-01 00:00:00+00');
SELECT regress.state() = :'before' AS unchanged;
-- also once it has been claimed and delivered
SELECT id FROM outbox.claim('w', 'p', 1);
SELECT outbox.complete(regress.id(101), 'w');
SELECT regress.state() AS before \gset
SELECT outbox.append('p', 'evt.p.v1', 'null', regress.id(101));
SELECT regress.state() = :'before' AS unchanged;

-- the same id with another topic, type or payload: 23505 naming the id,
-- and no change
SELECT v.what, regress.err(v.stmt)
  FROM (VALUES ('topic',   $$SELECT outbox.append('debits', 'evt.a.v1', '{"k": "v"}', regress.id(1))$$),
               ('type',    $$SELECT outbox.append('credits', 'evt.b.v1', '{"k": "v"}', regress.id(1))$$),
               ('payload', $$SELECT outbox.append('credits', 'evt.a.v1', '{"k": "w"}', regress.id(1))$$),
               ('payload with an extra key', $$SELECT outbox.append('credits', 'evt.a.v1', '{"k": "v", "l": 1}', regress.id(1))$$),
               ('payload JSON null',  $$SELECT outbox.append('p', 'evt.p.v1', '{}', regress.id(101))$$),
               ('payload other type', $$SELECT outbox.append('p', 'evt.p.v1', '"0"', regress.id(103))$$)
       ) AS v(what, stmt);
SELECT regress.state() = :'before' AS unchanged;

-- the same id with another ordering key, or a key where the stored message
-- has none, or none where it has one: 23505 naming the stored key, and no
-- change (the message would keep the place of its first key)
SELECT outbox.append('keyed', 'evt.k.v1', '{"k": 1}', regress.id(60), NULL, 'account-1');
SELECT regress.state() AS before \gset
SELECT outbox.append('keyed', 'evt.k.v1', '{"k": 1}', regress.id(60), NULL, 'account-1') AS same_key_again;
SELECT v.what, regress.err(v.stmt)
  FROM (VALUES ('another key', $$SELECT outbox.append('keyed', 'evt.k.v1', '{"k": 1}', regress.id(60), NULL, 'account-2')$$),
               ('no key',      $$SELECT outbox.append('keyed', 'evt.k.v1', '{"k": 1}', regress.id(60))$$),
               ('a key where none was', $$SELECT outbox.append('credits', 'evt.a.v1', '{"k": "v"}', regress.id(1), NULL, 'account-1')$$),
               ('another key and topic', $$SELECT outbox.append('debits', 'evt.k.v1', '{"k": 1}', regress.id(60), NULL, 'account-2')$$)
       ) AS v(what, stmt);
SELECT regress.state() = :'before' AS unchanged;
SELECT id, topic, ordering_key FROM outbox.message WHERE id = regress.id(60);

-- rolled-back appends leave nothing
BEGIN;
SELECT outbox.append('rolled', 'evt.a.v1', '{}') IS NOT NULL AS appended;
SELECT count(*) FROM outbox.append_batch('rolled', 'evt.a.v1', ARRAY['1', '2']::jsonb[]);
SELECT count(*) FROM outbox.message WHERE topic = 'rolled';
ROLLBACK;
SELECT count(*) FROM outbox.message WHERE topic = 'rolled';
BEGIN;
SELECT outbox.append('rolled', 'evt.a.v1', '{}', regress.id(50)) IS NOT NULL AS kept;
SAVEPOINT s;
SELECT outbox.append('rolled', 'evt.a.v1', '{}', regress.id(51)) IS NOT NULL AS appended;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT id FROM outbox.message WHERE topic = 'rolled';
-- an id whose append rolled back is free again, with any content
SELECT outbox.append('other', 'evt.other.v1', '{"x": 1}', regress.id(51));
SELECT id, topic, event_type, payload FROM outbox.message WHERE id = regress.id(51);

--
-- append_batch: one message per element, in array order, with increasing
-- new ids returned in the same order
--
-- (the rows are read by the next statement: a statement does not see the
-- rows written by the functions it calls)
BEGIN;
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE batch AS
SELECT r.id, r.n
  FROM outbox.append_batch('batch', 'evt.batch.v1',
                           ARRAY['{"n": 1}', '"two"', 'null', '{"n": 4}', '[5]']::jsonb[])
       WITH ORDINALITY AS r(id, n);
SELECT clock_timestamp() AS t1 \gset
SELECT b.n, m.payload, m.topic, m.event_type,
       m.created_at = now() AS created_now,
       m.available_at BETWEEN :'t0' AND :'t1' AS available_now,
       m.attempts,
       b.id::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS uuidv7,
       b.id > lag(b.id) OVER (ORDER BY b.n) AS id_increases
  FROM batch b
  JOIN outbox.message m ON m.id = b.id
 ORDER BY b.n;
SELECT count(*) FROM outbox.message WHERE topic = 'batch';
DROP TABLE batch;
COMMIT;

-- 1000 at once
CREATE TEMP TABLE batch AS
SELECT r.id, r.n
  FROM outbox.append_batch('batch1000', 'evt.batch.v1',
                           ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 1000) i))
       WITH ORDINALITY AS r(id, n);
SELECT count(*), count(DISTINCT b.id), min(b.n), max(b.n),
       count(m.id) AS stored,
       bool_and((m.payload ->> 'i')::int = b.n) AS in_array_order
  FROM batch b
  LEFT JOIN outbox.message m ON m.id = b.id;
SELECT count(*) AS increasing
  FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM batch) s
 WHERE prev IS NULL OR id > prev;
DROP TABLE batch;

-- an empty array appends nothing and returns no row
SELECT regress.state() AS before \gset
SELECT count(*) FROM outbox.append_batch('batch', 'evt.batch.v1', ARRAY[]::jsonb[]);
SELECT count(*) FROM outbox.append_batch('batch', 'evt.batch.v1', '{}');
-- NULL array 22004, NULL element 22004, two dimensions 22023
SELECT regress.err($$SELECT outbox.append_batch('batch', 'evt.batch.v1', NULL)$$);
SELECT regress.err($$SELECT outbox.append_batch('batch', 'evt.batch.v1', ARRAY['1', NULL, '3']::jsonb[])$$);
SELECT regress.err($$SELECT outbox.append_batch('batch', 'evt.batch.v1', ARRAY[NULL]::jsonb[])$$);
SELECT regress.err($$SELECT outbox.append_batch('batch', 'evt.batch.v1', ARRAY[['1', '2'], ['3', '4']]::jsonb[])$$);
-- a JSON null element is a payload like any other
SELECT count(*) FROM outbox.append_batch('batchnull', 'evt.batch.v1', ARRAY['null']::jsonb[]);
SELECT payload FROM outbox.message WHERE topic = 'batchnull';
DELETE FROM outbox.message WHERE topic = 'batchnull';
SELECT regress.state() = :'before' AS unchanged;

-- positions: a transaction's first message takes the position recorded for
-- it, so a transaction of one message takes one position; the next
-- messages of the transaction take one each
SELECT last_value AS seq_before FROM outbox.message_seq \gset
SELECT outbox.append('pos', 'evt.pos.v1', '1') IS NOT NULL AS appended;
SELECT outbox.append('pos', 'evt.pos.v1', '2') IS NOT NULL AS appended;
BEGIN;
SELECT outbox.append('pos', 'evt.pos.v1', '3') IS NOT NULL AS appended;
SELECT outbox.append('pos', 'evt.pos.v1', '4', regress.id(900)) IS NOT NULL AS appended;
COMMIT;
SELECT payload, seq - :seq_before AS taken FROM outbox.message WHERE topic = 'pos' ORDER BY seq;
SELECT last_value - :seq_before AS positions_taken FROM outbox.message_seq;
DELETE FROM outbox.message WHERE topic = 'pos';

RESET TimeZone;
