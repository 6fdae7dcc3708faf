--
-- trigger_settings: the planner settings the saved statements are planned
-- under do not reach an operator's trigger on outbox.message, which runs
-- under its caller's (a PL/pgSQL trigger would keep plans made under
-- them).  The search path a trigger sees is the pinned one of the
-- SECURITY DEFINER functions, as for any function declared with SET
-- search_path: it runs as the table's owner.
--
SELECT regress.reset();
CREATE TABLE regress.seen (op text, search_path text, enable_seqscan text,
                           enable_bitmapscan text, jit text);
CREATE FUNCTION regress.note_settings() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress.seen
    VALUES (TG_OP, current_setting('search_path'), current_setting('enable_seqscan'),
            current_setting('enable_bitmapscan'), current_setting('jit'));
    RETURN NEW;
END
$$;
CREATE TRIGGER note_settings BEFORE INSERT OR UPDATE ON outbox.message
    FOR EACH ROW EXECUTE FUNCTION regress.note_settings();

SET jit = on;
SET enable_seqscan = on;
SET enable_bitmapscan = on;
SELECT outbox.append('trig', 'evt.a.v1', '1') IS NOT NULL AS appended;
SELECT count(*) AS claimed FROM outbox.claim('w', 'trig', 10);
SELECT outbox.complete_many(ARRAY(SELECT id FROM outbox.message WHERE topic = 'trig'), 'w');
SELECT op, search_path, enable_seqscan, enable_bitmapscan, jit FROM regress.seen ORDER BY op;
-- and the caller's own settings are as they were
SELECT current_setting('enable_seqscan') AS enable_seqscan,
       current_setting('enable_bitmapscan') AS enable_bitmapscan,
       current_setting('jit') AS jit;

-- the same with the planner settings off in the caller: the trigger sees
-- them off, and the statements still run
TRUNCATE regress.seen;
SET jit = off;
SET enable_seqscan = off;
SELECT outbox.append('trig', 'evt.a.v1', '2') IS NOT NULL AS appended;
SELECT count(*) AS claimed FROM outbox.claim('w', 'trig', 10);
SELECT op, search_path, enable_seqscan, enable_bitmapscan, jit FROM regress.seen ORDER BY op;

RESET jit;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TRIGGER note_settings ON outbox.message;
DROP FUNCTION regress.note_settings();
DROP TABLE regress.seen;
SELECT regress.reset();
