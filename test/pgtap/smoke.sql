BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS krizaka_outbox;
SELECT plan(1);
SELECT has_table('outbox', 'message', 'outbox.message exists');
SELECT * FROM finish();
ROLLBACK;
