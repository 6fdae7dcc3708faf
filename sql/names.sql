--
-- names: topic, type, owner and consumer are 1 to 200 characters (not
-- bytes), not only characters that show nothing (white space, zero width
-- and other invisible format characters), without control characters;
-- NULL is 22004, anything else wrong is 22023.  A rejected call changes
-- nothing.
--
SELECT regress.reset();

-- one message to act on, claimed by "w", and one marker
SELECT outbox.append('t', 'evt.names.v1', '{}', regress.id(1));
SELECT count(*) FROM outbox.claim('w', 't', 1, 60);
SELECT outbox.consume_once('c', regress.id(1));
SELECT regress.state() AS before \gset

-- the bad values, each with a label
CREATE TEMP TABLE bad_name (label text, val text);
INSERT INTO bad_name VALUES
    ('null', NULL),
    ('empty', ''),
    ('spaces', '   '),
    ('201 x', repeat('x', 201)),
    ('201 e-acute (402 bytes)', repeat('é', 201)),
    ('201 emoji (804 bytes)', repeat(U&'\+01F600', 201)),
    ('U+0000-U+001F: tab', E'a\tb'),
    ('U+0000-U+001F: newline', E'a\n'),
    ('U+0000-U+001F: U+0001', E'\x01a'),
    ('U+0000-U+001F: U+001F', 'a' || chr(31)),
    ('U+007F', 'a' || chr(127)),
    ('U+0080', 'a' || chr(128)),
    ('U+009F', 'a' || chr(159)),
    ('spaces then U+0085', '  ' || chr(133)),
    ('U+00A0 no-break space', chr(160)),
    ('U+00A0 among spaces', '  ' || chr(160) || '  '),
    ('U+200B zero width space', chr(8203)),
    ('U+FEFF byte order mark', chr(65279)),
    ('U+3000 ideographic space', chr(12288)),
    ('all invisible non-control characters',
     (SELECT string_agg(chr(c), '' ORDER BY c)
        FROM unnest(ARRAY[32, 160, 5760, 6158, 8192, 8193, 8194, 8195, 8196, 8197,
                          8198, 8199, 8200, 8201, 8202, 8203, 8204, 8205, 8232,
                          8233, 8239, 8287, 8288, 12288, 65279]) c));

-- every name argument of every function, with %s for the value
CREATE TEMP TABLE name_arg (fn text, stmt text);
INSERT INTO name_arg VALUES
    ('append topic',       $$SELECT outbox.append(%s, 'evt.names.v1', '{}')$$),
    ('append type',        $$SELECT outbox.append('t', %s, '{}')$$),
    ('append_batch topic', $$SELECT outbox.append_batch(%s, 'evt.names.v1', ARRAY['{}'::jsonb])$$),
    ('append_batch type',  $$SELECT outbox.append_batch('t', %s, ARRAY['{}'::jsonb])$$),
    ('claim owner',        $$SELECT outbox.claim(%s)$$),
    ('claim topic',        $$SELECT outbox.claim('w2', %s)$$),
    ('complete owner',     $$SELECT outbox.complete(regress.id(1), %s)$$),
    ('complete_many owner',$$SELECT outbox.complete_many(ARRAY[regress.id(1)], %s)$$),
    ('fail owner',         $$SELECT outbox.fail(regress.id(1), %s, 'boom')$$),
    ('extend owner',       $$SELECT outbox.extend(regress.id(1), %s)$$),
    ('retry_dead_topic topic', $$SELECT outbox.retry_dead_topic(%s)$$),
    ('consume_once consumer',  $$SELECT outbox.consume_once(%s, regress.id(2))$$);

-- the full messages for one argument
SELECT b.label, regress.err(format(a.stmt, quote_nullable(b.val)))
  FROM bad_name b, name_arg a
 WHERE a.fn = 'append topic'
 ORDER BY b.label;

-- every argument gives the SQLSTATE the contract names and its own name in
-- the message (claim's topic may be NULL: all topics)
SELECT a.fn, b.label, regress.err(format(a.stmt, quote_nullable(b.val)))
  FROM bad_name b, name_arg a
 WHERE a.fn <> 'append topic'
   AND b.label IN ('null', 'empty', 'spaces', '201 e-acute (402 bytes)', 'U+0080',
                   'U+00A0 among spaces')
 ORDER BY a.fn, b.label;

-- the same SQLSTATE for every bad value at every argument
SELECT b.label, left(regress.err(format(a.stmt, quote_nullable(b.val))), 5) AS sqlstate,
       count(*) AS arguments
  FROM bad_name b, name_arg a
 WHERE NOT (a.fn = 'claim topic' AND b.val IS NULL)
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- nothing was written by any of them
SELECT regress.state() = :'before' AS unchanged;

-- at the limit, and characters that are not control characters, are fine,
-- also those that show nothing when visible ones stand beside them
SELECT b.label, regress.err(format(a.stmt, quote_nullable(b.val))) AS result
  FROM (VALUES ('200 x', repeat('x', 200)),
               ('200 e-acute (400 bytes)', repeat('é', 200)),
               ('200 emoji (800 bytes)', repeat(U&'\+01F600', 200)),
               ('one character', 'a'),
               ('inner and outer spaces', ' a b '),
               ('U+00A0 between letters', 'a' || chr(160) || 'b'),
               ('U+200B after a letter', 'a' || chr(8203)),
               ('U+FEFF before a letter', chr(65279) || 'a'),
               ('U+3000 and spaces around a letter', chr(12288) || ' x ' || chr(12288)),
               ('punctuation', 'evt.a-b_c:d/e@f#1')) AS b(label, val),
       name_arg a
 WHERE a.fn = 'append topic';
SELECT length(topic) AS chars, octet_length(topic) AS bytes
  FROM outbox.message
 WHERE id <> regress.id(1)
 ORDER BY 1, 2;

-- so are long names for every other argument
SELECT outbox.append('t', repeat('é', 200), '{}') IS NOT NULL AS appended;
SELECT count(*) FROM outbox.append_batch(repeat('é', 200), repeat('é', 200), ARRAY['{}'::jsonb]);
SELECT count(*) FROM outbox.claim(repeat('é', 200), repeat('é', 200));
SELECT outbox.consume_once(repeat('é', 200), regress.id(1));
SELECT outbox.complete(regress.id(1), repeat('é', 200)) AS not_the_owner;
SELECT outbox.extend(regress.id(1), repeat('é', 200)) AS not_the_owner;
SELECT outbox.complete_many(ARRAY[regress.id(1)], repeat('é', 200)) AS not_the_owner;
SELECT outbox.retry_dead_topic(repeat('é', 200));

DROP TABLE bad_name, name_arg;
