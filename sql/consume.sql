--
-- consume_once: a marker per (consumer, message id), in the caller's
-- transaction: true the first time, false after; it commits or rolls back
-- with the caller's work
--
SELECT regress.reset();
SET TimeZone = 'UTC';

SELECT clock_timestamp() AS t0 \gset
SELECT outbox.consume_once('credits', regress.id(1)) AS first;
SELECT clock_timestamp() AS t1 \gset
SELECT consumer, message_id, processed_at BETWEEN :'t0' AND :'t1' AS processed_now
  FROM outbox.processed;
SELECT outbox.consume_once('credits', regress.id(1)) AS second;
SELECT outbox.consume_once('credits', regress.id(1)) AS third;
-- another consumer, another message: their own markers
SELECT outbox.consume_once('mail', regress.id(1)) AS other_consumer;
SELECT outbox.consume_once('credits', regress.id(2)) AS other_message;
-- consumer names are compared exactly
SELECT outbox.consume_once('Credits', regress.id(1)) AS other_case;
SELECT outbox.consume_once('credits ', regress.id(1)) AS trailing_space;
-- the message need not exist in this outbox (it may come from another one)
SELECT outbox.consume_once('credits', 'ffffffff-ffff-7fff-bfff-ffffffffffff') AS foreign_id;
SELECT count(*) AS markers FROM outbox.processed;
SELECT count(*) AS messages FROM outbox.message;

-- rolled back with the caller's work: the marker is gone, the next call is
-- the first again
BEGIN;
SELECT outbox.consume_once('rollback', regress.id(1)) AS in_transaction;
SELECT outbox.consume_once('rollback', regress.id(1)) AS same_transaction;
ROLLBACK;
SELECT count(*) FROM outbox.processed WHERE consumer = 'rollback';
SELECT outbox.consume_once('rollback', regress.id(1)) AS after_rollback;
BEGIN;
SAVEPOINT effect;
SELECT outbox.consume_once('savepoint', regress.id(1)) AS in_savepoint;
ROLLBACK TO SAVEPOINT effect;
SELECT outbox.consume_once('savepoint', regress.id(1)) AS after_savepoint;
COMMIT;
SELECT outbox.consume_once('savepoint', regress.id(1)) AS after_commit;

-- NULL 22004, a bad consumer 22023; no marker
SELECT regress.state() AS before \gset
SELECT regress.err($$SELECT outbox.consume_once('credits', NULL)$$);
SELECT regress.err($$SELECT outbox.consume_once(NULL, regress.id(3))$$);
SELECT regress.err($$SELECT outbox.consume_once('', regress.id(3))$$);
SELECT regress.state() = :'before' AS unchanged;

RESET TimeZone;
