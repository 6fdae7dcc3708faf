--
-- plans: the saved statements read through their indexes even when they
-- were planned on an empty queue whose statistics say it is empty (after a
-- TRUNCATE and a VACUUM, or a VACUUM of a drained queue).  A plan that
-- reads the whole table would stay until the next ANALYZE while the queue
-- grows, and every claim would read every row.
--
SELECT regress.reset();
TRUNCATE outbox.message, outbox.processed;
VACUUM ANALYZE outbox.message;
VACUUM ANALYZE outbox.processed;
SELECT relname, relpages, reltuples FROM pg_class
 WHERE oid IN ('outbox.message'::regclass, 'outbox.processed'::regclass) ORDER BY relname;

-- a new session: its statements are planned now, on the empty tables
\c
SELECT count(*) FROM outbox.claim('w', 'plans', 10);
SELECT count(*) FROM outbox.claim('w', NULL, 10);
SELECT outbox.complete('00000000-0000-0000-0000-000000000001', 'w');
SELECT outbox.complete_many(ARRAY['00000000-0000-0000-0000-000000000001'::uuid], 'w');
SELECT outbox.fail('00000000-0000-0000-0000-000000000001', 'w', 'boom');
SELECT outbox.extend('00000000-0000-0000-0000-000000000001', 'w');
SELECT outbox.retry_dead('00000000-0000-0000-0000-000000000001');
SELECT outbox.retry_dead_topic('plans');
SELECT outbox.envelope_by_id('00000000-0000-0000-0000-000000000001');
SELECT outbox.consume_once('c', '00000000-0000-0000-0000-000000000001');
SELECT outbox.purge();

-- the queue fills, in one transaction so that no ANALYZE comes between
BEGIN;
SELECT count(*) FROM (
  SELECT outbox.append('plans', 'evt.plans.v1', jsonb_build_object('n', n), regress.id(n))
    FROM generate_series(1, 2000) n) s;
SELECT count(*) FROM (
  SELECT outbox.append('plans', 'evt.plans.v1', jsonb_build_object('n', n), regress.id(n))
    FROM generate_series(1, 10) n) s;
CREATE TEMP TABLE c AS SELECT id FROM outbox.claim('w', 'plans', 10);
INSERT INTO c SELECT id FROM outbox.claim('w', NULL, 10);
SELECT count(*) FROM c;
SELECT outbox.complete(regress.id(1), 'w');
SELECT outbox.complete_many(ARRAY[regress.id(2), regress.id(3)], 'w');
SELECT outbox.fail(regress.id(4), 'w', 'boom');
SELECT outbox.extend(regress.id(5), 'w');
SELECT outbox.retry_dead(regress.id(6));
SELECT outbox.retry_dead_topic('plans');
SELECT outbox.envelope_by_id(regress.id(7)) ->> 'type';
SELECT outbox.consume_once('c', regress.id(8));
SELECT outbox.purge();
-- not one of those statements read the whole queue (purge reads the
-- markers whole: no index orders them by age)
SELECT relname, seq_scan, idx_scan > 0 AS by_index FROM pg_stat_xact_user_tables
 WHERE relid = 'outbox.message'::regclass;
ROLLBACK;

-- A named subscription: its statements planned on an empty state table,
-- then run over a full one
TRUNCATE outbox.message, outbox.subscription, outbox.subscription_state;
SELECT outbox.subscribe('plans', 'sub');
VACUUM ANALYZE outbox.message;
VACUUM ANALYZE outbox.subscription_state;
\c
SELECT count(*) FROM outbox.claim('w', 'plans', 10, NULL, 'sub');
SELECT outbox.complete('00000000-0000-0000-0000-000000000001', 'w', 'sub');
SELECT outbox.complete_many(ARRAY['00000000-0000-0000-0000-000000000001'::uuid], 'w', 'sub');
SELECT outbox.fail('00000000-0000-0000-0000-000000000001', 'w', 'boom', 'sub');
SELECT outbox.extend('00000000-0000-0000-0000-000000000001', 'w', NULL, 'sub');
SELECT outbox.retry_dead('00000000-0000-0000-0000-000000000001', 'sub');
SELECT outbox.retry_dead_topic('plans', 'sub');
SELECT outbox.purge();
SELECT count(*) FROM (
  SELECT outbox.append('plans', 'evt.plans.v1', jsonb_build_object('n', n), regress.id(n),
                       ordering_key => CASE WHEN n % 10 = 0 THEN 'k' END)
    FROM generate_series(1, 2000) n) s;
BEGIN;
SELECT count(*) FROM outbox.claim('w', 'plans', 500, NULL, 'sub');
SELECT count(*) FROM outbox.claim('w', 'plans', 500, NULL, 'sub');
SELECT outbox.complete(regress.id(1), 'w', 'sub');
SELECT outbox.complete_many(ARRAY[regress.id(2), regress.id(10)], 'w', 'sub');
SELECT outbox.fail(regress.id(4), 'w', 'boom', 'sub');
SELECT outbox.extend(regress.id(5), 'w', NULL, 'sub');
SELECT outbox.retry_dead(regress.id(6), 'sub');
SELECT outbox.retry_dead_topic('plans', 'sub');
SELECT outbox.purge();
-- not one of them read the whole log or the subscription's whole state
SELECT relname, seq_scan FROM pg_stat_xact_user_tables
 WHERE relid IN ('outbox.message'::regclass, 'outbox.subscription_state'::regclass)
 ORDER BY relname;
ROLLBACK;
