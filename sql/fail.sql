--
-- fail: the error text, the backoff delay min(backoff_seconds *
-- 2^(attempts - 1), backoff_max_seconds), and death after max_attempts
--
SELECT regress.reset();
SET TimeZone = 'UTC';
SELECT outbox.append('backoff', 'evt.fail.v1', '{}', regress.id(1), '2020-01-01 00:00:00+00');

-- Make message 1 due with n - 1 attempts and claim it, so that it is on
-- attempt n and leased to "w".
CREATE FUNCTION pg_temp.arm(n integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    claimed integer;
BEGIN
    UPDATE outbox.message
       SET attempts = n - 1, available_at = '2020-01-01 00:00:00+00', leased_until = NULL,
           lease_owner = NULL, dead_at = NULL, last_error = NULL
     WHERE id = regress.id(1);
    SELECT count(*) INTO claimed FROM outbox.claim('w', 'backoff', 1);
    IF claimed <> 1 THEN
        RAISE EXCEPTION 'message 1 was not claimed';
    END IF;
END
$$;

-- Fail attempt n of message 1 and report what fail did: the whole seconds
-- of the delay, whether available_at is exactly the call's time plus that
-- delay, and whether the message died at the time of the call.
CREATE FUNCTION pg_temp.fail_attempt(n integer,
                                     OUT attempts integer, OUT delay_s bigint,
                                     OUT exact boolean, OUT dead boolean,
                                     OUT lease_cleared boolean, OUT last_error text)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    t1 timestamptz;
    before_at timestamptz;
    m outbox.message;
BEGIN
    PERFORM pg_temp.arm(n);
    SELECT available_at INTO before_at FROM outbox.message WHERE id = regress.id(1);
    t0 := clock_timestamp();
    IF NOT outbox.fail(regress.id(1), 'w', 'failure ' || n) THEN
        RAISE EXCEPTION 'fail returned false';
    END IF;
    t1 := clock_timestamp();
    SELECT * INTO m FROM outbox.message WHERE id = regress.id(1);
    attempts := m.attempts;
    dead := m.dead_at IS NOT NULL;
    lease_cleared := m.leased_until IS NULL;
    last_error := m.last_error;
    IF dead THEN
        -- dead now, available_at left alone
        exact := m.dead_at BETWEEN t0 AND t1 AND m.available_at = before_at;
    ELSE
        delay_s := floor(extract(epoch FROM m.available_at - t0));
        exact := m.available_at BETWEEN t0 + delay_s * interval '1 s'
                                    AND t1 + delay_s * interval '1 s';
    END IF;
END
$$;

-- the defaults: 30 s doubling, dead on the 8th failure
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 8) AS n;
-- the dead message is never claimed again
SELECT id FROM outbox.claim('w', 'backoff');
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE id = regress.id(1);
SELECT id FROM outbox.claim('w', 'backoff');
SELECT attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message WHERE id = regress.id(1);

-- the cap of 3600 s from attempt 8 on, when more attempts are allowed
SET outbox.max_attempts = 50;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(6, 10) AS n;
SELECT n, (pg_temp.fail_attempt(n)).* FROM (VALUES (49), (50)) AS v(n);

-- other settings: a small base and cap
SET outbox.backoff_seconds = 1;
SET outbox.backoff_max_seconds = 10;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 6) AS n;
-- a base above the cap gives the cap at once
SET outbox.backoff_seconds = 3600;
SET outbox.backoff_max_seconds = 60;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 2) AS n;
-- the largest values; doubling never overflows
SET outbox.backoff_seconds = 3600;
SET outbox.backoff_max_seconds = 86400;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 7) AS n;
SET outbox.backoff_seconds = 1;
SELECT n, (pg_temp.fail_attempt(n)).* FROM (VALUES (17), (18), (33), (40), (49)) AS v(n);
RESET outbox.backoff_seconds;
RESET outbox.backoff_max_seconds;

-- fewer attempts
SET outbox.max_attempts = 3;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 3) AS n;
SET outbox.max_attempts = 1;
SELECT n, (pg_temp.fail_attempt(n)).* FROM generate_series(1, 1) AS n;
-- the setting at the time of fail counts: claimed as attempt 2 of 8, then
-- failed with max_attempts 2
RESET outbox.max_attempts;
SELECT pg_temp.arm(2);
SET outbox.max_attempts = 2;
SELECT outbox.fail(regress.id(1), 'w', 'lowered');
SELECT attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message WHERE id = regress.id(1);
RESET outbox.max_attempts;

--
-- the error text: required, not empty, stored up to 4096 bytes cut on a
-- character boundary
--
SELECT pg_temp.arm(1);
SELECT regress.state() AS before \gset
SELECT regress.err($$SELECT outbox.fail(regress.id(1), 'w', NULL)$$);
SELECT regress.err($$SELECT outbox.fail(regress.id(1), 'w', '')$$);
-- bad arguments are reported even when the caller holds nothing
SELECT regress.err($$SELECT outbox.fail(regress.id(1), 'nobody', NULL)$$);
SELECT regress.err($$SELECT outbox.fail(regress.id(999), 'w', '')$$);
SELECT regress.state() = :'before' AS unchanged;

CREATE TEMP TABLE errors (label text, err text);
INSERT INTO errors VALUES
    ('one space', ' '),
    ('lines and tabs', E'first line\n\tsecond line'),
    ('4096 x', repeat('x', 4096)),
    ('4097 x', repeat('x', 4097)),
    ('x + 2048 e-acute (4097 bytes)', 'x' || repeat('é', 2048)),
    ('2048 e-acute (4096 bytes)', repeat('é', 2048)),
    ('1366 euro (4098 bytes)', repeat('€', 1366)),
    ('1025 emoji (4100 bytes)', repeat(U&'\+01F600', 1025)),
    ('xx + 1024 emoji (4098 bytes)', 'xx' || repeat(U&'\+01F600', 1024)),
    ('1 MB', repeat('0123456789abcdef', 65536));
-- (fail and the read of last_error run as two statements of a function, so
-- that the read sees what fail wrote)
CREATE FUNCTION pg_temp.stored_error(err text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    stored text;
BEGIN
    PERFORM pg_temp.arm(1);
    IF NOT outbox.fail(regress.id(1), 'w', err) THEN
        RAISE EXCEPTION 'fail returned false';
    END IF;
    SELECT last_error INTO stored FROM outbox.message WHERE id = regress.id(1);
    RETURN stored;
END
$$;
SELECT e.label, octet_length(e.err) AS given_bytes,
       octet_length(s.stored) AS stored_bytes, length(s.stored) AS stored_chars,
       s.stored = left(e.err, length(s.stored)) AS prefix,
       s.stored = e.err AS whole
  FROM errors e, LATERAL pg_temp.stored_error(e.err) AS s(stored)
 ORDER BY e.label;
DROP TABLE errors;

-- A later successful delivery clears last_error: complete, complete_many,
-- and the claim of a NOTIFY route that marks its messages delivered.
SELECT pg_temp.arm(1);
SELECT outbox.fail(regress.id(1), 'w', 'first try failed');
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE id = regress.id(1);
SELECT count(*) AS claimed FROM outbox.claim('w', 'backoff', 1);
SELECT outbox.complete(regress.id(1), 'w');
SELECT delivered_at IS NOT NULL AS delivered, last_error FROM outbox.message WHERE id = regress.id(1);
UPDATE outbox.message SET delivered_at = NULL, deferred = true WHERE id = regress.id(1);
SELECT pg_temp.arm(1);
SELECT outbox.fail(regress.id(1), 'w', 'second try failed');
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00' WHERE id = regress.id(1);
SELECT count(*) AS claimed FROM outbox.claim('w', 'backoff', 1);
SELECT outbox.complete_many(ARRAY[regress.id(1)], 'w');
SELECT delivered_at IS NOT NULL AS delivered, last_error FROM outbox.message WHERE id = regress.id(1);
UPDATE outbox.message SET delivered_at = NULL, deferred = true WHERE id = regress.id(1);
SELECT pg_temp.arm(1);
SELECT outbox.fail(regress.id(1), 'w', 'third try failed');
UPDATE outbox.message SET available_at = '2020-01-01 00:00:00+00', deferred = true WHERE id = regress.id(1);
SELECT outbox.route_notify('backoff', 'regress_fail_channel');
SELECT outbox.drain_once('backoff');
SELECT delivered_at IS NOT NULL AS delivered, attempts, last_error FROM outbox.message WHERE id = regress.id(1);
SELECT outbox.unroute('backoff');

RESET TimeZone;
