--
-- guc: the outbox.* settings, their defaults, ranges and SHOW format
--

-- defaults, printed as plain numbers (no units)
SHOW outbox.batch_size;
SHOW outbox.lease_seconds;
SHOW outbox.max_attempts;
SHOW outbox.backoff_seconds;
SHOW outbox.backoff_max_seconds;
SHOW outbox.retention_days;

-- what the catalog says about each: type, unit, range, default, context
SELECT name, setting, unit, vartype, min_val, max_val, boot_val, context
  FROM pg_settings
 WHERE name IN ('outbox.batch_size', 'outbox.lease_seconds', 'outbox.max_attempts',
                'outbox.backoff_seconds', 'outbox.backoff_max_seconds',
                'outbox.retention_days')
 ORDER BY name;

-- the limits of every range are accepted ...
SET outbox.batch_size = 1;
SHOW outbox.batch_size;
SET outbox.batch_size = 500;
SHOW outbox.batch_size;
SET outbox.lease_seconds = 10;
SHOW outbox.lease_seconds;
SET outbox.lease_seconds = 3600;
SHOW outbox.lease_seconds;
SET outbox.max_attempts = 1;
SHOW outbox.max_attempts;
SET outbox.max_attempts = 50;
SHOW outbox.max_attempts;
SET outbox.backoff_seconds = 1;
SHOW outbox.backoff_seconds;
SET outbox.backoff_seconds = 3600;
SHOW outbox.backoff_seconds;
SET outbox.backoff_max_seconds = 1;
SHOW outbox.backoff_max_seconds;
SET outbox.backoff_max_seconds = 86400;
SHOW outbox.backoff_max_seconds;
SET outbox.retention_days = 1;
SHOW outbox.retention_days;
SET outbox.retention_days = 3650;
SHOW outbox.retention_days;
RESET ALL;
SET outbox.batch_size = 20;

-- ... and one step outside is rejected by the GUC machinery (22023)
SELECT v.stmt, regress.err(v.stmt)
  FROM (VALUES ('SET outbox.batch_size = 0'),
               ('SET outbox.batch_size = 501'),
               ('SET outbox.lease_seconds = 9'),
               ('SET outbox.lease_seconds = 3601'),
               ('SET outbox.max_attempts = 0'),
               ('SET outbox.max_attempts = 51'),
               ('SET outbox.backoff_seconds = 0'),
               ('SET outbox.backoff_seconds = 3601'),
               ('SET outbox.backoff_max_seconds = 0'),
               ('SET outbox.backoff_max_seconds = 86401'),
               ('SET outbox.retention_days = 0'),
               ('SET outbox.retention_days = 3651'),
               ('SET outbox.lease_seconds = ''1min'''),
               ('SET outbox.batch_size = ''many''')) AS v(stmt);

-- a rejected SET leaves the value as it was
SHOW outbox.batch_size;
RESET outbox.batch_size;

-- the prefix is reserved: unknown outbox.* names are rejected
SELECT regress.err('SET outbox.batchsize = 10');
SELECT regress.err('SET outbox.foo = ''bar''');
SELECT regress.err($$SELECT set_config('outbox.nope', '1', false)$$);

-- per transaction, per session, per role and per database
BEGIN;
SET LOCAL outbox.lease_seconds = 120;
SHOW outbox.lease_seconds;
COMMIT;
SHOW outbox.lease_seconds;
SELECT set_config('outbox.max_attempts', '3', false);
SHOW outbox.max_attempts;
RESET outbox.max_attempts;
SHOW outbox.max_attempts;

CREATE ROLE regress_outbox_guc;
ALTER ROLE regress_outbox_guc SET outbox.batch_size = 7;
SELECT regress.err('ALTER ROLE regress_outbox_guc SET outbox.batch_size = 0');
SELECT regress.err('ALTER ROLE regress_outbox_guc SET outbox.unknown = 1');
SELECT rs.setconfig
  FROM pg_db_role_setting rs
 WHERE rs.setrole = 'regress_outbox_guc'::regrole;
DROP ROLE regress_outbox_guc;

DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET outbox.retention_days = 30', current_database());
END
$$;
SELECT c.setting
  FROM pg_db_role_setting rs
  JOIN pg_database d ON d.oid = rs.setdatabase,
       unnest(rs.setconfig) AS c(setting)
 WHERE d.datname = current_database() AND rs.setrole = 0
   AND c.setting LIKE 'outbox.%';
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET outbox.retention_days', current_database());
END
$$;
SELECT count(*) AS outbox_settings_left
  FROM pg_db_role_setting rs
  JOIN pg_database d ON d.oid = rs.setdatabase
 WHERE d.datname = current_database() AND rs.setconfig::text LIKE '%outbox.%';
