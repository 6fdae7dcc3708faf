--
-- subscription_frontier (1.5): a named subscription's frontier is a chain
-- of the ranges its claims read.  A transaction that claims several times
-- and rolls back leaves it as it was, and the session's next claim reads
-- everything from there; the chain ends as one row.
--
SELECT regress.reset();
SELECT outbox.subscribe('fr', 's');
SELECT count(outbox.append('fr', 'evt.f.v1', jsonb_build_object('n', n)))
  FROM generate_series(1, 6) AS n;
BEGIN;
SELECT count(*) AS first FROM outbox.claim('w', 'fr', 2, 30, 's');
SELECT count(*) AS second FROM outbox.claim('w', 'fr', 2, 30, 's');
SELECT count(*) AS third FROM outbox.claim('w', 'fr', 2, 30, 's');
ROLLBACK;
SELECT count(*) AS after_rollback FROM outbox.claim('w', 'fr', 10, 30, 's');
SELECT count(*) AS frontier_rows FROM outbox.subscription_frontier;
-- the row left is the claim's: its range starts where the subscription did
SELECT f.from_seq = s.start_seq AS from_the_start
  FROM outbox.subscription_frontier f JOIN outbox.subscription s USING (sub_id);
SELECT count(outbox.unsubscribe(topic, name)) FROM outbox.subscription WHERE name IS NOT NULL;
SELECT regress.reset();
