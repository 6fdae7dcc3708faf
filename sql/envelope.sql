--
-- envelope and envelope_by_id: exactly id, type, occurredAt and payload;
-- occurredAt is created_at in UTC as JavaScript's toISOString writes it
--
SELECT regress.reset();
SET TimeZone = 'UTC';

SELECT outbox.append('credits', 'evt.coupon.redeemed.v1',
                     '{"redemptionId": 7, "amount": 12345678901234567890.123456789, "tags": ["a", "é"], "nested": {"null": null}}',
                     regress.id(1));
UPDATE outbox.message SET created_at = '2024-05-06 07:08:09.123456+00' WHERE id = regress.id(1);

SELECT outbox.envelope(m) FROM outbox.message m WHERE id = regress.id(1);
SELECT outbox.envelope_by_id(regress.id(1));
SELECT outbox.envelope(m) = outbox.envelope_by_id(m.id) AS same FROM outbox.message m;
-- exactly four keys, of these types; the payload as it was given
SELECT k.key, jsonb_typeof(k.value)
  FROM outbox.message m, jsonb_each(outbox.envelope(m)) AS k
 ORDER BY k.key;
SELECT outbox.envelope(m) -> 'payload' = m.payload AS payload_as_is,
       outbox.envelope(m) ->> 'id' = m.id::text AS id_as_text,
       outbox.envelope(m) ->> 'type' = m.event_type AS type_as_is
  FROM outbox.message m;
-- the lease and delivery state is not part of it
SELECT count(*) FROM outbox.claim('w');
SELECT outbox.complete(regress.id(1), 'w');
SELECT outbox.envelope_by_id(regress.id(1));

-- any payload, JSON null included (the key is still there)
SELECT outbox.append('p', 'evt.p.v1', v.payload, regress.id(10 + v.n))
  FROM (VALUES (1, 'null'::jsonb), (2, '"text"'), (3, '[1, 2]'), (4, '{}'), (5, '-0.5')) AS v(n, payload)
 ORDER BY v.n;
UPDATE outbox.message SET created_at = '2000-01-01 00:00:00+00' WHERE topic = 'p';
SELECT outbox.envelope(m), outbox.envelope(m) ? 'payload' AS has_payload
  FROM outbox.message m WHERE topic = 'p' ORDER BY id;

-- occurredAt of any created_at: a message made of a fixed id, type and
-- payload and the given created_at
CREATE FUNCTION pg_temp.occurred_at(created timestamptz) RETURNS text
LANGUAGE sql AS $$
    SELECT outbox.envelope(ROW(regress.id(1), 't', 'evt.t.v1', '{}'::jsonb, created, created,
                               0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message) ->> 'occurredAt'
$$;

-- UTC whatever the session's time zone and date style
SET TimeZone = 'Asia/Kolkata';
SET DateStyle = 'German, DMY';
SELECT pg_temp.occurred_at('2024-01-01 05:30:00.0005+05:30');
SELECT outbox.envelope_by_id(regress.id(1)) ->> 'occurredAt';
SET TimeZone = 'America/St_Johns';
SET DateStyle = 'SQL, MDY';
SELECT pg_temp.occurred_at('2023-12-31 20:30:00+00');
SELECT outbox.envelope_by_id(regress.id(1)) ->> 'occurredAt';
RESET DateStyle;
SET TimeZone = 'UTC';

-- milliseconds truncated, never rounded (not even into the next year)
SELECT v.created, pg_temp.occurred_at(v.created)
  FROM (VALUES (timestamptz '2024-05-06 07:08:09+00'),
               ('2024-05-06 07:08:09.1+00'),
               ('2024-05-06 07:08:09.000999+00'),
               ('2024-05-06 07:08:09.001+00'),
               ('2024-05-06 07:08:09.0015+00'),
               ('2024-05-06 07:08:09.9999+00'),
               ('2024-02-29 23:59:59.999999+00'),
               ('1999-12-31 23:59:59.999999+00'),
               ('2000-01-01 00:00:00+00'),
               ('2000-01-01 00:00:00.000001+00'),
               ('1970-01-01 00:00:00+00'),
               ('1970-01-01 00:00:00.0009+00'),
               ('1969-12-31 23:59:59.999999+00'),
               ('1969-12-31 23:59:59.0005+00')) AS v(created);

-- years outside 0000..9999 with a sign and six digits, as JavaScript
-- writes them; year 0 is 1 BC
SELECT v.created, pg_temp.occurred_at(v.created)
  FROM (VALUES (timestamptz '0001-01-01 00:00:00+00'),
               ('0001-01-01 00:00:00+00 BC'),
               ('0001-12-31 23:59:59.999999+00 BC'),
               ('0002-06-15 12:00:00.5+00 BC'),
               ('0100-03-01 00:00:00+00 BC'),
               ('4714-11-24 00:00:00+00 BC'),
               ('9999-12-31 23:59:59.999999+00'),
               ('10000-01-01 00:00:00+00'),
               ('123456-07-08 09:10:11.012+00'),
               ('275760-09-13 00:00:00+00')) AS v(created);

-- an instant JavaScript cannot represent: 22008
SELECT v.created, regress.err(format('SELECT pg_temp.occurred_at(%L)', v.created))
  FROM (VALUES (timestamptz 'infinity'),
               ('-infinity'),
               ('275760-09-13 00:00:00.001+00'),
               ('294276-12-31 23:59:59.999999+00')) AS v(created);
-- a stored message with such a created_at
UPDATE outbox.message SET created_at = 'infinity' WHERE id = regress.id(11);
SELECT regress.err($$SELECT outbox.envelope_by_id(regress.id(11))$$);
SELECT regress.err($$SELECT outbox.envelope(m) FROM outbox.message m WHERE id = regress.id(11)$$);

-- no such message: NULL; NULL arguments and incomplete rows: 22004
SELECT outbox.envelope_by_id(regress.id(999)) IS NULL AS unknown_id;
SELECT regress.err($$SELECT outbox.envelope_by_id(NULL)$$);
SELECT regress.err($$SELECT outbox.envelope(NULL)$$);
SELECT regress.err($$SELECT outbox.envelope(NULL::outbox.message)$$);
SELECT regress.err($$SELECT outbox.envelope(ROW(NULL, 't', 'e', '{}', now(), now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message)$$);
SELECT regress.err($$SELECT outbox.envelope(ROW(regress.id(1), 't', NULL, '{}', now(), now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message)$$);
SELECT regress.err($$SELECT outbox.envelope(ROW(regress.id(1), 't', 'e', '{}', NULL, now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message)$$);
SELECT regress.err($$SELECT outbox.envelope(ROW(regress.id(1), 't', 'e', NULL, now(), now(), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message)$$);
-- a row needs only the four columns of the envelope
SELECT outbox.envelope(ROW(regress.id(2), NULL, 'evt.row.v1', '[]', '2020-01-01 00:00:00+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outbox.message);

RESET TimeZone;
