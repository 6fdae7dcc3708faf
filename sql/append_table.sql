--
-- append_table: a new message is written straight into outbox.message while
-- the table is as the extension made it, and through INSERT when an
-- operator changed it (triggers, columns, constraints, indexes, row
-- security).  Either way the row, its index entries and the errors are the
-- ones an INSERT gives, and a change takes effect at the next append.
--
SELECT regress.reset();
CREATE EXTENSION amcheck;

-- every index of outbox.message holds an entry for every row it should
CREATE FUNCTION regress.indexes_complete() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    ix regclass;
    n integer := 0;
BEGIN
    FOR ix IN SELECT indexrelid::regclass FROM pg_catalog.pg_index
               WHERE indrelid = 'outbox.message'::regclass ORDER BY 1 LOOP
        PERFORM public.bt_index_check(ix, true);
        n := n + 1;
    END LOOP;
    RETURN n || ' indexes complete';
END
$$;

-- SQLSTATE and message only (the detail of a refused row shows its
-- generated id)
CREATE FUNCTION regress.err_msg(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- messages of every shape: each is in the indexes whose predicate it meets
SELECT outbox.append('shapes', 'evt.a.v1', '1') IS NOT NULL AS plain;
SELECT outbox.append('shapes', 'evt.a.v1', '2', NULL, now() + interval '1 hour') IS NOT NULL AS deferred;
SELECT outbox.append('shapes', 'evt.a.v1', '3', NULL, NULL, 'k1') IS NOT NULL AS keyed;
SELECT outbox.append('shapes', 'evt.a.v1', '4', NULL, now() + interval '1 hour', 'k1') IS NOT NULL AS keyed_deferred;
SELECT payload, deferred, ordering_key, attempts,
       leased_until, lease_owner, delivered_at, dead_at, last_error
  FROM outbox.message ORDER BY seq;
SELECT count(DISTINCT seq) AS positions FROM outbox.message;
SELECT regress.indexes_complete();
-- append_batch writes each message the same way, in array order, one
-- position after the other
SELECT count(*) FROM outbox.append_batch('batch', 'evt.a.v1', ARRAY['1', '2', '3']::jsonb[]);
SELECT count(*) FROM outbox.append_batch('batch', 'evt.a.v1', ARRAY['4', '5']::jsonb[], 'k2');
SELECT payload, deferred, ordering_key, attempts, available_at >= created_at AS available
  FROM outbox.message WHERE topic = 'batch' ORDER BY seq;
SELECT bool_and(id_order = seq_order) AS ids_in_position_order
  FROM (SELECT row_number() OVER (ORDER BY id) AS id_order,
               row_number() OVER (ORDER BY seq) AS seq_order
          FROM outbox.message WHERE topic = 'batch') s;
SELECT regress.indexes_complete();

-- the next statement of the transaction sees the row, and a rolled-back
-- savepoint takes it away again
BEGIN;
SELECT outbox.append('tx', 'evt.a.v1', '1') IS NOT NULL AS appended;
SELECT count(*) FROM outbox.message WHERE topic = 'tx';
SAVEPOINT s;
SELECT outbox.append('tx', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT count(*) FROM outbox.message WHERE topic = 'tx';
ROLLBACK TO s;
SELECT count(*) FROM outbox.message WHERE topic = 'tx';
COMMIT;
-- several in one statement, and a function that reads its own append
SELECT count(*) FROM (SELECT outbox.append('tx', 'evt.b.v1', pg_catalog.to_jsonb(g))
                        FROM generate_series(1, 3) g) s;
DO $$
BEGIN
    PERFORM outbox.append('tx', 'evt.c.v1', '7');
    IF (SELECT count(*) FROM outbox.message WHERE event_type = 'evt.c.v1') <> 1 THEN
        RAISE 'the append is not seen by the next statement';
    END IF;
END
$$;
SELECT event_type, count(*) FROM outbox.message WHERE topic = 'tx' GROUP BY 1 ORDER BY 1;

-- a large payload is stored out of line and read back whole
SELECT pg_catalog.jsonb_build_object('s', string_agg(md5(g::text), '' ORDER BY g)) AS big
  FROM generate_series(1, 20000) g \gset
SELECT outbox.append('big', 'evt.big.v1', :'big') IS NOT NULL AS appended;
SELECT payload = :'big'::jsonb AS same
  FROM outbox.message WHERE topic = 'big';

-- a transaction that may not write gets INSERT's error, and a rolled-back
-- append leaves nothing
BEGIN READ ONLY;
SELECT regress.err($$SELECT outbox.append('ro', 'evt.a.v1', '1')$$);
ROLLBACK;
BEGIN;
SELECT outbox.append('rb', 'evt.a.v1', '1') IS NOT NULL AS appended;
ROLLBACK;
SELECT count(*) FROM outbox.message WHERE topic IN ('ro', 'rb');
SELECT regress.indexes_complete();

-- a trigger runs for every append while it exists
CREATE TABLE regress.seen (id uuid, seq bigint);
CREATE FUNCTION regress.note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress.seen VALUES (NEW.id, NEW.seq);
    RETURN NEW;
END
$$;
CREATE TRIGGER note AFTER INSERT ON outbox.message
    FOR EACH ROW EXECUTE FUNCTION regress.note();
SELECT outbox.append('trg', 'evt.a.v1', '1') AS trg_id \gset
SELECT s.id = :'trg_id' AS noted, s.seq = m.seq AS same_position
  FROM regress.seen s JOIN outbox.message m USING (id);
SELECT count(*) FROM outbox.append_batch('trg', 'evt.b.v1', ARRAY['1', '2']::jsonb[]);
SELECT count(*) AS noted, bool_and(s.seq = m.seq) AS same_position
  FROM regress.seen s JOIN outbox.message m USING (id) WHERE m.event_type = 'evt.b.v1';
DROP TRIGGER note ON outbox.message;
SELECT outbox.append('trg', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT count(*) FROM outbox.append_batch('trg', 'evt.b.v1', ARRAY['3']::jsonb[]);
SELECT count(*) AS noted FROM regress.seen;
DROP TABLE regress.seen;
DROP FUNCTION regress.note();

-- columns an operator adds take their defaults, evaluated for each row
ALTER TABLE outbox.message ADD COLUMN tenant text DEFAULT 'acme',
                           ADD COLUMN note text,
                           ADD COLUMN stamp timestamptz DEFAULT clock_timestamp();
SELECT outbox.append('cols', 'evt.a.v1', '1') IS NOT NULL AS appended;
ALTER TABLE outbox.message ALTER COLUMN tenant SET DEFAULT 'globex';
SELECT outbox.append('cols', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT payload, tenant, note, stamp > created_at AS stamped
  FROM outbox.message WHERE topic = 'cols' ORDER BY seq;
SELECT count(DISTINCT stamp) AS stamps FROM outbox.message WHERE topic = 'cols';
-- a claim returns rows of the table as it is now
SELECT payload, tenant, attempts FROM outbox.claim('w', 'cols', 1);

-- a NOT NULL column the append does not fill: the append fails as the
-- INSERT does, and changes nothing
UPDATE outbox.message SET note = 'filled';
ALTER TABLE outbox.message ALTER COLUMN note SET NOT NULL;
SELECT regress.state() AS before \gset
SELECT regress.err_msg($$SELECT outbox.append('cols', 'evt.a.v1', '3')$$);
SELECT regress.state() = :'before' AS unchanged;
ALTER TABLE outbox.message ALTER COLUMN note DROP NOT NULL;

-- a CHECK constraint (for new rows only): a row that meets it is appended,
-- one that does not gets the INSERT's error; a constraint that is NULL
-- passes
ALTER TABLE outbox.message ADD CONSTRAINT small_payload CHECK (pg_column_size(payload) < 100) NOT VALID,
                           ADD CONSTRAINT no_empty_key CHECK (ordering_key <> '');
SELECT outbox.append('cols', 'evt.a.v1', '4') IS NOT NULL AS appended;
SELECT regress.state() AS before \gset
SELECT regress.err_msg(format('SELECT outbox.append(%L, %L, %L)', 'cols', 'evt.a.v1', :'big'));
SELECT regress.state() = :'before' AS unchanged;
-- in a batch, the refused message may be the first or a later one: the
-- batch fails whole
SELECT regress.err_msg(format('SELECT outbox.append_batch(%L, %L, ARRAY[%L, %L]::jsonb[])',
                              'cols', 'evt.a.v1', :'big', '5'));
SELECT regress.err_msg(format('SELECT outbox.append_batch(%L, %L, ARRAY[%L, %L, %L]::jsonb[])',
                              'cols', 'evt.a.v1', '5', '6', :'big'));
SELECT regress.state() = :'before' AS unchanged;
ALTER TABLE outbox.message DROP CONSTRAINT small_payload, DROP CONSTRAINT no_empty_key;

-- dropped again: the dropped columns stay in the row layout, empty
ALTER TABLE outbox.message DROP COLUMN tenant, DROP COLUMN note, DROP COLUMN stamp;
SELECT outbox.append('cols', 'evt.a.v1', '5') AS cols_id \gset
SELECT payload, deferred, attempts FROM outbox.message WHERE id = :'cols_id';
-- claims, and the claim that completes a batch, still return whole rows
SELECT payload, attempts, lease_owner FROM outbox.claim('w', 'cols', 2);
SELECT payload, attempts, lease_owner
  FROM outbox.complete_and_claim(ARRAY(SELECT id FROM outbox.message
                                        WHERE topic = 'cols' AND payload IN ('2', '4')),
                                  'w', 'cols', 1);
SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL) AS delivered FROM outbox.message
 WHERE topic = 'cols';
SELECT regress.indexes_complete();

-- a column of a domain without default gets the domain's NULL, which the
-- domain refuses
SELECT regress.reset();
CREATE DOMAIN regress.present AS text NOT NULL;
ALTER TABLE outbox.message ADD COLUMN origin regress.present;
SELECT regress.err_msg($$SELECT outbox.append('dom', 'evt.a.v1', '1')$$);
ALTER TABLE outbox.message DROP COLUMN origin;
DROP DOMAIN regress.present;

-- a column of another type: the INSERT converts, or refuses
ALTER TABLE outbox.message ALTER COLUMN event_type TYPE varchar(12);
SELECT outbox.append('typ', 'evt.a.v1', '1') IS NOT NULL AS appended;
SELECT regress.err_msg($$SELECT outbox.append('typ', 'evt.much.longer.v1', '2')$$);
ALTER TABLE outbox.message ALTER COLUMN event_type TYPE text;
SELECT event_type, pg_typeof(event_type) FROM outbox.message WHERE topic = 'typ';

-- indexes an operator adds: full, partial, on an expression, unique; and
-- one made inside the transaction that appends
CREATE INDEX message_type_idx ON outbox.message (event_type);
CREATE INDEX message_big_idx ON outbox.message (topic) WHERE event_type = 'evt.big.v1';
CREATE INDEX message_lower_idx ON outbox.message (lower(event_type));
SELECT outbox.append('ix', 'evt.a.v1', '1') IS NOT NULL AS appended;
SELECT outbox.append('ix', 'evt.big.v1', :'big') IS NOT NULL AS appended;
SELECT regress.indexes_complete();
DROP INDEX outbox.message_lower_idx;
SELECT outbox.append('ix', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT outbox.append('ix', 'evt.big.v1', :'big') IS NOT NULL AS appended;
SELECT regress.indexes_complete();
CREATE UNIQUE INDEX message_once_idx ON outbox.message (topic, event_type) WHERE topic = 'once';
SELECT outbox.append('once', 'evt.a.v1', '1') IS NOT NULL AS appended;
SELECT regress.err($$SELECT outbox.append('once', 'evt.a.v1', '2')$$);
SELECT count(*) FROM outbox.message WHERE topic = 'once';
BEGIN;
SELECT outbox.append('ix', 'evt.tx.v1', '1') IS NOT NULL AS appended;
CREATE INDEX message_tx_idx ON outbox.message (event_type, seq);
SELECT outbox.append('ix', 'evt.tx.v1', '2') IS NOT NULL AS appended;
COMMIT;
SELECT regress.indexes_complete();
SET enable_seqscan = off;
SELECT payload FROM outbox.message WHERE event_type = 'evt.tx.v1' ORDER BY seq;
RESET enable_seqscan;
DROP INDEX outbox.message_type_idx, outbox.message_big_idx, outbox.message_once_idx,
           outbox.message_tx_idx;
SELECT regress.indexes_complete();

-- row security on: the owner's INSERT, which it bypasses
ALTER TABLE outbox.message ENABLE ROW LEVEL SECURITY;
SELECT outbox.append('rls', 'evt.a.v1', '1') IS NOT NULL AS appended;
ALTER TABLE outbox.message DISABLE ROW LEVEL SECURITY;
SELECT count(*) FROM outbox.message WHERE topic = 'rls';

-- a default or CHECK that calls a function: replacing the function takes
-- effect at the next append (the direct insert keeps them compiled)
CREATE FUNCTION regress.tag() RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'v1'$$;
CREATE FUNCTION regress.tag_ok(t text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$SELECT true$$;
ALTER TABLE outbox.message ADD COLUMN tag text DEFAULT regress.tag(),
    ADD CONSTRAINT message_tag_check CHECK (regress.tag_ok(topic));
SELECT outbox.append('fn', 'evt.a.v1', '1') IS NOT NULL AS appended;
CREATE OR REPLACE FUNCTION regress.tag() RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'v2'$$;
SELECT outbox.append('fn', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT payload, tag FROM outbox.message WHERE topic = 'fn' ORDER BY seq;
CREATE OR REPLACE FUNCTION regress.tag_ok(t text) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$SELECT t <> 'fn'$$;
SELECT regress.err_msg($$SELECT outbox.append('fn', 'evt.a.v1', '3')$$);
SELECT count(*) FROM outbox.message WHERE topic = 'fn';
ALTER TABLE outbox.message DROP COLUMN tag, DROP CONSTRAINT message_tag_check;
DROP FUNCTION regress.tag(), regress.tag_ok(text);

-- outbox.message attached as a partition: the partition constraint holds
-- for appended rows as it does for an INSERT
CREATE TABLE regress.all_messages (LIKE outbox.message) PARTITION BY LIST (topic);
DELETE FROM outbox.message WHERE topic NOT IN ('part');
SELECT outbox.append('part', 'evt.a.v1', '1') IS NOT NULL AS appended;
ALTER TABLE regress.all_messages ATTACH PARTITION outbox.message FOR VALUES IN ('part');
SELECT outbox.append('part', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT regress.err_msg($$SELECT outbox.append('other', 'evt.a.v1', '3')$$);
ALTER TABLE regress.all_messages DETACH PARTITION outbox.message;
DROP TABLE regress.all_messages;
SELECT topic, payload FROM outbox.message WHERE topic IN ('part', 'other') ORDER BY seq;
SELECT outbox.append('other', 'evt.a.v1', '4') IS NOT NULL AS appended;

SELECT regress.reset();
DROP FUNCTION regress.indexes_complete();
DROP FUNCTION regress.err_msg(text);
DROP EXTENSION amcheck;
