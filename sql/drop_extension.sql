--
-- drop_extension: what DROP EXTENSION leaves behind: nothing.  The install
-- script creates the schema outbox as a member of the extension, so it goes
-- with everything in it; an existing schema named outbox is refused.
--
SELECT regress.reset();
SELECT outbox.append('t', 'evt.drop.v1', '{}', regress.id(1));
SELECT outbox.consume_once('c', regress.id(1));

-- before: the schema is a member, like everything in it
SELECT count(*) AS schema_is_member
  FROM pg_depend
 WHERE classid = 'pg_namespace'::regclass AND objid = 'outbox'::regnamespace AND deptype = 'e';

DROP EXTENSION krizaka_outbox;

SELECT count(*) AS extension_rows FROM pg_extension WHERE extname = 'krizaka_outbox';
SELECT count(*) AS schema_left FROM pg_namespace WHERE nspname = 'outbox';
-- nothing is left anywhere else
SELECT count(*) AS left_elsewhere
  FROM pg_class c
 WHERE c.relname IN ('message', 'processed', 'message_pkey', 'processed_pkey',
                     'message_due_idx', 'message_due_topic_idx');
-- the loaded library still defines the settings
SHOW outbox.lease_seconds;

-- installing again makes a new schema; the data is gone
CREATE EXTENSION krizaka_outbox;
SELECT extversion, extrelocatable, extnamespace::regnamespace FROM pg_extension WHERE extname = 'krizaka_outbox';
SELECT count(*) AS messages FROM outbox.message;
SELECT count(*) AS markers FROM outbox.processed;

-- an existing schema named outbox is refused, whoever owns it
DROP EXTENSION krizaka_outbox;
CREATE SCHEMA outbox;
SELECT regress.err('CREATE EXTENSION krizaka_outbox');
SELECT count(*) AS objects_in_the_existing_schema FROM pg_class WHERE relnamespace = 'outbox'::regnamespace;
DROP SCHEMA outbox;
CREATE EXTENSION krizaka_outbox;
SELECT nspname FROM pg_namespace WHERE nspname = 'outbox';

-- the extension lives in schema outbox only (recorded in pg_catalog, like pg_cron)
DROP EXTENSION krizaka_outbox;
CREATE SCHEMA elsewhere;
SELECT regress.err('CREATE EXTENSION krizaka_outbox SCHEMA elsewhere');
SELECT count(*) AS created_in_elsewhere FROM pg_proc WHERE pronamespace = 'elsewhere'::regnamespace;
DROP SCHEMA elsewhere;
CREATE EXTENSION krizaka_outbox;
SELECT regress.err('ALTER EXTENSION krizaka_outbox SET SCHEMA public');

-- a user's object that depends on the tables holds DROP EXTENSION back
CREATE VIEW public.pending AS SELECT id FROM outbox.message WHERE delivered_at IS NULL;
SELECT regress.err('DROP EXTENSION krizaka_outbox');
DROP VIEW public.pending;
