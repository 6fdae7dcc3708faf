--
-- drop_extension: what DROP EXTENSION leaves behind.  The schema outbox is
-- created by CREATE EXTENSION from the control file and is not a member of
-- the extension, so it stays, empty; everything else goes.
--
SELECT regress.reset();
SELECT outbox.append('t', 'evt.drop.v1', '{}', regress.id(1));
SELECT outbox.consume_once('c', regress.id(1));

-- before: the schema is not a member, everything in it is
SELECT count(*) AS schema_is_member
  FROM pg_depend
 WHERE classid = 'pg_namespace'::regclass AND objid = 'outbox'::regnamespace AND deptype = 'e';

DROP EXTENSION krizaka_outbox;

SELECT count(*) AS extension_rows FROM pg_extension WHERE extname = 'krizaka_outbox';
SELECT nspname, nspowner::regrole AS owner, nspacl
  FROM pg_namespace WHERE nspname = 'outbox';
-- nothing is left in it
SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'outbox'::regnamespace) AS relations,
       (SELECT count(*) FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace) AS functions,
       (SELECT count(*) FROM pg_type WHERE typnamespace = 'outbox'::regnamespace) AS types,
       (SELECT count(*) FROM pg_operator WHERE oprnamespace = 'outbox'::regnamespace) AS operators,
       (SELECT count(*) FROM pg_depend WHERE refobjid = 'outbox'::regnamespace) AS dependents;
-- nor anywhere else
SELECT count(*) AS left_elsewhere
  FROM pg_class c
 WHERE c.relname IN ('message', 'processed', 'message_pkey', 'processed_pkey',
                     'message_due_idx', 'message_due_topic_idx');
-- the loaded library still defines the settings
SHOW outbox.lease_seconds;

-- installing again reuses the schema; the data is gone
CREATE EXTENSION krizaka_outbox;
SELECT extversion, extrelocatable, extnamespace::regnamespace FROM pg_extension WHERE extname = 'krizaka_outbox';
SELECT count(*) AS messages FROM outbox.message;
SELECT count(*) AS markers FROM outbox.processed;

-- without the schema, CREATE EXTENSION makes it again
DROP EXTENSION krizaka_outbox;
DROP SCHEMA outbox;
CREATE EXTENSION krizaka_outbox;
SELECT nspname FROM pg_namespace WHERE nspname = 'outbox';

-- the extension lives in schema outbox only
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
