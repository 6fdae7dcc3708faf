--
-- ordering keys: a keyed message is handed out only when the message before
-- it of the same topic and key is delivered or dead; keys do not wait for
-- each other; messages without a key are unchanged
--
SELECT regress.reset();

-- two keys and one message without a key, appended interleaved
SELECT outbox.append('k', 'evt.k.v1', jsonb_build_object('n', v.n), regress.id(v.n), NULL, v.key)
  FROM (VALUES (1, 'account:1'), (2, 'account:2'), (3, 'account:1'), (4, NULL),
               (5, 'account:2'), (6, 'account:1')) AS v(n, key)
 ORDER BY v.n;
SELECT payload->>'n' AS n, ordering_key, seq > 0 AS has_seq FROM outbox.message ORDER BY seq;

-- a claim takes the head of each key, and the message without a key
SELECT payload->>'n' AS n, ordering_key FROM outbox.claim('w', 'k', 10) ORDER BY seq;
-- while the heads are leased, nothing more of their keys
SELECT count(*) AS claimed FROM outbox.claim('w2', 'k', 10);

-- account:1's head delivered: its next message comes; account:2's head
-- fails: its key waits for the retry, the other key goes on
SELECT outbox.complete(regress.id(1), 'w');
SELECT outbox.fail(regress.id(2), 'w', 'boom');
SELECT payload->>'n' AS n FROM outbox.claim('w', 'k', 10) ORDER BY seq;
SELECT outbox.complete(regress.id(3), 'w');
SELECT payload->>'n' AS n FROM outbox.claim('w', 'k', 10) ORDER BY seq;
SELECT outbox.complete(regress.id(6), 'w');

-- the failed head comes back when due, then the rest of its key in order
UPDATE outbox.message SET available_at = now() WHERE id = regress.id(2);
SELECT payload->>'n' AS n, attempts FROM outbox.claim('w', 'k', 10) ORDER BY seq;
SELECT outbox.complete(regress.id(2), 'w');
SELECT payload->>'n' AS n, attempts FROM outbox.claim('w', 'k', 10) ORDER BY seq;
SELECT outbox.complete(regress.id(5), 'w');
SELECT outbox.complete(regress.id(4), 'w');

-- a dead head unblocks its key
SELECT regress.reset();
SELECT outbox.append('d', 'evt.d.v1', jsonb_build_object('n', n), regress.id(n), NULL, 'order:9')
  FROM generate_series(1, 2) n ORDER BY n;
SET outbox.max_attempts = 1;
SELECT id = regress.id(1) AS head FROM outbox.claim('w', 'd');
SELECT outbox.fail(regress.id(1), 'w', 'poison');
RESET outbox.max_attempts;
SELECT payload->>'n' AS n FROM outbox.claim('w', 'd');
SELECT payload->>'n' AS n, dead_at IS NOT NULL AS dead, delivered_at IS NOT NULL AS delivered
  FROM outbox.message ORDER BY seq;

-- reviving the dead head makes the rest of its key not yet handed out wait
-- for it again: 3 comes only after the revived 1
SELECT regress.reset();
SELECT outbox.append('r', 'evt.r.v1', jsonb_build_object('n', n), regress.id(n), NULL, 'order:7')
  FROM generate_series(1, 3) n ORDER BY n;
SET outbox.max_attempts = 1;
SELECT payload->>'n' AS n FROM outbox.claim('w', 'r');
SELECT outbox.fail(regress.id(1), 'w', 'poison');
RESET outbox.max_attempts;
SELECT payload->>'n' AS n FROM outbox.claim('w', 'r');
SELECT outbox.complete(regress.id(2), 'w');
SELECT outbox.retry_dead(regress.id(1));
SELECT payload->>'n' AS n, deferred FROM outbox.claim('w', 'r');
SELECT count(*) AS while_revived_is_leased FROM outbox.claim('w', 'r');
SELECT outbox.complete(regress.id(1), 'w');
SELECT payload->>'n' AS n FROM outbox.claim('w', 'r');

-- append_batch: one key for the whole batch, handed out one by one in order
SELECT regress.reset();
SELECT count(*) FROM outbox.append_batch('b', 'evt.b.v1', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[], 'cart:5');
SELECT count(*) FROM outbox.append_batch('b', 'evt.b.v1', ARRAY['{"n": 4}']::jsonb[]);
SELECT payload->>'n' AS n, ordering_key FROM outbox.claim('w', 'b') ORDER BY seq;

-- a key held back at the front of the stream does not starve the keys
-- behind it: with a claim of 3, the three messages after the failed head
-- are all of its key, and the claim reaches past them
SELECT regress.reset();
SELECT count(outbox.append('s', 'evt.s.v1', jsonb_build_object('n', v.n), regress.id(v.n), NULL, v.key))
  FROM (VALUES (1, 'long'), (2, 'long'), (3, 'long'), (4, 'long'), (5, 'long'),
               (6, 'a'), (7, 'long'), (8, NULL), (9, 'b')) AS v(n, key);
SELECT payload->>'n' AS n FROM outbox.claim('w', 's', 1);
SELECT outbox.fail(regress.id(1), 'w', 'boom');
SELECT payload->>'n' AS n, ordering_key FROM outbox.claim('w2', 's', 3) ORDER BY seq;
SELECT count(*) AS while_held_back FROM outbox.claim('w3', 's', 3);

-- a claim across all topics follows the rule in every topic: the heads of
-- each topic's keys, never the message after a pending one of its key, and
-- a failed head holds its key back in its own topic only
SELECT regress.reset();
SELECT count(outbox.append(t, 'evt.x.v1', jsonb_build_object('n', n), NULL, NULL, 'k'))
  FROM unnest(ARRAY['x1', 'x2']) t, generate_series(1, 3) n;
SELECT topic, payload->>'n' AS n FROM outbox.claim('w', NULL, 10) ORDER BY topic, seq;
SELECT count(*) AS while_heads_are_leased FROM outbox.claim('w', NULL, 10);
SELECT outbox.complete(id, 'w') FROM outbox.message WHERE topic = 'x1' AND payload->>'n' = '1';
SELECT outbox.fail(id, 'w', 'boom') FROM outbox.message WHERE topic = 'x2' AND payload->>'n' = '1';
SELECT topic, payload->>'n' AS n FROM outbox.claim('w', NULL, 10) ORDER BY topic, seq;

-- the same rule for drain_once to a NOTIFY route: one message of a key per
-- batch, the next in the next batch
SELECT regress.reset();
SELECT outbox.route_notify('kn', 'regress_kn');
SELECT count(outbox.append('kn', 'evt.kn.v1', jsonb_build_object('n', n), NULL, NULL, 'k'))
  FROM generate_series(1, 3) n;
SELECT outbox.drain_once('kn');
SELECT outbox.drain_once('kn');
SELECT payload->>'n' AS n, delivered_at IS NOT NULL AS delivered FROM outbox.message ORDER BY seq;
SELECT outbox.unroute('kn');

-- a key is a name: checked like one, NULL means no key
SELECT regress.reset();
SELECT regress.err($$SELECT outbox.append('k', 'e', '{}', NULL, NULL, '')$$);
SELECT regress.err($$SELECT outbox.append('k', 'e', '{}', NULL, NULL, repeat('x', 201))$$);
SELECT regress.err($$SELECT outbox.append('k', 'e', '{}', NULL, NULL, E'a\nb')$$);
SELECT regress.err($$SELECT outbox.append_batch('k', 'e', ARRAY['{}']::jsonb[], '   ')$$);
-- a key that shows nothing is refused as one of spaces is: white space of
-- any kind, zero width characters, a byte order mark
SELECT v.what, regress.err(format($$SELECT outbox.append('k', 'e', '{}', NULL, NULL, %L)$$, v.val))
  FROM (VALUES ('U+00A0', chr(160)),
               ('U+200B', chr(8203)),
               ('U+FEFF', chr(65279)),
               ('U+2060 U+180E', chr(8288) || chr(6158)),
               ('U+3000 U+2028 U+2029', chr(12288) || chr(8232) || chr(8233)),
               ('spaces, U+00A0, U+200B, U+202F', '  ' || chr(160) || chr(8203) || chr(8239))) AS v(what, val);
SELECT regress.err(format($$SELECT count(*) FROM outbox.append_batch('k', 'e', ARRAY['{}']::jsonb[], %L)$$,
                          chr(160) || chr(8203) || chr(65279)));
-- beside a visible character they are part of a key
SELECT outbox.append('k', 'e', '{}', NULL, NULL, 'a' || chr(160) || 'b') IS NOT NULL AS appended_nbsp_key,
       outbox.append('k', 'e', '{}', NULL, NULL, chr(65279) || 'c') IS NOT NULL AS appended_bom_key;
SELECT outbox.append('k', 'e', '{}', NULL, NULL, NULL) IS NOT NULL AS appended_without_key;
SELECT count(*) AS messages, count(ordering_key) AS keyed FROM outbox.message;
