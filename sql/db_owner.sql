--
-- db_owner: in a database owned by a role that is not a superuser, CREATE
-- EXTENSION (run by a superuser) lets that owner hand out the README's
-- grants: USAGE on the schema, EXECUTE on the functions and SELECT on the
-- tables, each with the grant option; PUBLIC still gets nothing
--
-- (left over only by an interrupted earlier run)
SET client_min_messages = warning;
DROP DATABASE IF EXISTS regress_outbox_owned;
DROP ROLE IF EXISTS regress_outbox_owner;
DROP ROLE IF EXISTS regress_outbox_writer;
RESET client_min_messages;

CREATE ROLE regress_outbox_owner NOLOGIN;
CREATE ROLE regress_outbox_writer NOLOGIN;
CREATE DATABASE regress_outbox_owned OWNER regress_outbox_owner TEMPLATE template0;
\c regress_outbox_owned
CREATE EXTENSION krizaka_outbox;

SELECT 'schema outbox' AS object, a.grantee::regrole, a.privilege_type, a.is_grantable
  FROM pg_namespace n, aclexplode(n.nspacl) AS a
 WHERE n.nspname = 'outbox' AND a.grantee <> n.nspowner
UNION ALL
SELECT c.oid::regclass::text, a.grantee::regrole, a.privilege_type, a.is_grantable
  FROM pg_class c, aclexplode(c.relacl) AS a
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r' AND a.grantee <> c.relowner
UNION ALL
SELECT p.oid::regprocedure::text, a.grantee::regrole, a.privilege_type, a.is_grantable
  FROM pg_proc p, aclexplode(p.proacl) AS a
 WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee <> p.proowner
 ORDER BY 1, 2, 3;

-- the owner hands out the writer's part of the recipe, and the writer can
-- append without any right on the table
SET ROLE regress_outbox_owner;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_writer;
GRANT EXECUTE ON FUNCTION outbox.append(text, text, jsonb, uuid, timestamptz, text) TO regress_outbox_writer;
SET ROLE regress_outbox_writer;
SELECT outbox.append('t', 'evt.owner.v1', '{}', '00000000-0000-7000-8000-000000000001');
SELECT count(*) FROM outbox.message;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT id, topic FROM outbox.message;

\c contrib_regression
DROP DATABASE regress_outbox_owned;
DROP ROLE regress_outbox_owner, regress_outbox_writer;
