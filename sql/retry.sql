--
-- retry_dead and retry_dead_topic: a dead message gets another life (not
-- dead, attempts 0, available now, last error kept); nothing else changes
--
SELECT regress.reset();
SET TimeZone = 'UTC';

SELECT count(*) FROM (
    SELECT outbox.append(CASE WHEN n <= 4 THEN 'r' ELSE 's' END, 'evt.retry.v1', to_jsonb(n), regress.id(n),
                         '2020-01-01 00:00:00+00'::timestamptz + n * interval '1 s')
      FROM generate_series(1, 7) AS n) s;
-- 1, 2, 5, 6: dead (1 and 5 failed, 2 and 6 whose last lease expired)
UPDATE outbox.message
   SET attempts = 8, dead_at = '2020-02-01 00:00:00+00', lease_owner = 'w',
       last_error = 'error of ' || (payload #>> '{}')
 WHERE id IN (regress.id(1), regress.id(2), regress.id(5), regress.id(6));
-- 3: delivered, 4: leased, 7: waiting
UPDATE outbox.message SET delivered_at = '2020-02-01 00:00:00+00', attempts = 1, lease_owner = 'w'
 WHERE id = regress.id(3);
UPDATE outbox.message SET leased_until = clock_timestamp() + interval '1 h', attempts = 3, lease_owner = 'w',
       last_error = 'earlier error'
 WHERE id = regress.id(4);

-- one message by id
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.retry_dead(regress.id(1));
SELECT clock_timestamp() AS t1 \gset
SELECT id, attempts, dead_at, leased_until, lease_owner, delivered_at,
       available_at BETWEEN :'t0' AND :'t1' AS available_now, last_error
  FROM outbox.message WHERE id = regress.id(1);
-- it is due again and claimed like a new message
SELECT id, attempts, lease_owner, last_error FROM outbox.claim('again', 'r');

-- not dead, or unknown: false, nothing changes
SELECT regress.state() AS before \gset
SELECT outbox.retry_dead(regress.id(1)) AS revived_twice,
       outbox.retry_dead(regress.id(3)) AS delivered,
       outbox.retry_dead(regress.id(4)) AS leased,
       outbox.retry_dead(regress.id(7)) AS waiting,
       outbox.retry_dead(regress.id(999)) AS unknown;
SELECT regress.state() = :'before' AS unchanged;

-- every dead message of a topic, and only of that topic
SELECT clock_timestamp() AS t0 \gset
SELECT outbox.retry_dead_topic('s');
SELECT clock_timestamp() AS t1 \gset
SELECT id, topic, attempts, dead_at IS NOT NULL AS dead,
       available_at BETWEEN :'t0' AND :'t1' AS available_now, last_error
  FROM outbox.message ORDER BY id;
SELECT outbox.retry_dead_topic('s') AS none_left;
SELECT outbox.retry_dead_topic('no such topic') AS unknown_topic;
SELECT outbox.retry_dead_topic('r') AS one_left;
SELECT outbox.retry_dead_topic('r') AS none_left;

-- revived, the message dies again only after max_attempts more claims
SELECT id, attempts FROM outbox.claim('again', 's');
SELECT outbox.fail(regress.id(5), 'again', 'failed after revival');
SELECT attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message WHERE id = regress.id(5);

-- NULL arguments 22004, bad topics 22023, no change
SELECT regress.state() AS before \gset
SELECT regress.err($$SELECT outbox.retry_dead(NULL)$$);
SELECT regress.err($$SELECT outbox.retry_dead_topic(NULL)$$);
SELECT regress.err($$SELECT outbox.retry_dead_topic('')$$);
SELECT regress.state() = :'before' AS unchanged;

RESET TimeZone;
