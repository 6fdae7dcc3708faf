--
-- statements: every saved statement of the library prepares and plans on
-- the tables of some version of the extension (the library serves a
-- database from 1.0 on until ALTER EXTENSION ... UPDATE), under the planner
-- settings its runs use, and there reads no whole table (a sequential
-- scan) unless it asks for the planner's own choice, nor makes a bitmap
-- scan where it asks for index scans only.  obx_saved_statements() is not
-- part of the extension's SQL: the test declares it, in a database of its
-- own where the extension goes through every version.
--
\set regress_db :DBNAME
CREATE DATABASE regress_statements;
\c regress_statements
SET client_min_messages = warning;
CREATE FUNCTION saved_statements()
RETURNS TABLE (statement text, scans text, seq_scans text[], bitmap_scans text[],
               hashed_subplans integer, full_index_scans text[], error text)
AS 'krizaka_outbox', 'obx_saved_statements' LANGUAGE C STRICT;
CREATE TABLE checked (version text, statement text, scans text, seq_scans text[],
                      bitmap_scans text[], hashed_subplans integer, full_index_scans text[],
                      error text);

CREATE EXTENSION krizaka_outbox VERSION '1.0';
INSERT INTO checked SELECT '1.0', * FROM saved_statements();
ALTER EXTENSION krizaka_outbox UPDATE TO '1.1';
INSERT INTO checked SELECT '1.1', * FROM saved_statements();
ALTER EXTENSION krizaka_outbox UPDATE TO '1.2';
INSERT INTO checked SELECT '1.2', * FROM saved_statements();
ALTER EXTENSION krizaka_outbox UPDATE TO '1.3';
INSERT INTO checked SELECT '1.3', * FROM saved_statements();
ALTER EXTENSION krizaka_outbox UPDATE TO '1.4';
INSERT INTO checked SELECT '1.4', * FROM saved_statements();
ALTER EXTENSION krizaka_outbox UPDATE TO '1.5';
INSERT INTO checked SELECT '1.5', * FROM saved_statements();

-- each statement listed once per version
SELECT count(DISTINCT statement) > 100 AS listed,
       count(*) = 6 * count(DISTINCT statement) AS each_once_per_version
  FROM checked;

-- how many prepare on the tables of each version (the others are written
-- for the tables of other versions)
SELECT version, count(*) FILTER (WHERE error IS NULL) AS prepared, count(*) AS listed
  FROM checked GROUP BY version ORDER BY version;

-- none that no version's tables can prepare, or plan without a scan it
-- does not ask for
SELECT statement, string_agg(version || ': ' || coalesce(error,
         'sequential ' || seq_scans::text || ', bitmap ' || bitmap_scans::text), '; '
         ORDER BY version)
  FROM checked
 GROUP BY statement
HAVING NOT bool_or(error IS NULL
                   AND (scans = 'any' OR cardinality(seq_scans) = 0)
                   AND (scans <> 'index' OR cardinality(bitmap_scans) = 0))
 ORDER BY statement;

-- the statements that ask for the planner's own choice read small tables
-- whole at most (the routes, the subscriptions, a sequence, the saved
-- claim positions), never the messages, the markers or a subscription's
-- state and frontier
SELECT statement, seq_scans, bitmap_scans FROM checked
 WHERE version = '1.5' AND error IS NULL AND scans = 'any'
   AND NOT (seq_scans || bitmap_scans) <@ ARRAY['routes', 'subscription', 'message_seq', 'claim_position']
 ORDER BY statement;

-- nor one that asks for index scans with a subplan that reads its whole
-- relation into a hash table, or that the planner could turn into one:
-- it chooses between the two forms by cost alone, from PostgreSQL 18 on
-- regardless of enable_seqscan, and on tables whose statistics say they
-- are empty the whole read wins
SELECT statement, string_agg(version, ', ' ORDER BY version) AS versions
  FROM checked
 WHERE error IS NULL AND scans <> 'any' AND hashed_subplans > 0
 GROUP BY statement ORDER BY statement;

-- nor one that asks for index scans and reads an index whole (an index
-- scan without a condition) where the statistics of its tables say they
-- are empty, as they say after a vacuum of an emptied table: a join then
-- starts from the table, and under a held snapshot each run reads the
-- entries of every row deleted since (in a named subscription's completion,
-- 0.05 ms at first, 10 ms after three minutes).  The routes and the
-- subscriptions are small tables of settings.  None of those listed runs
-- for each message: the walks of the topics read one entry at each step
-- (an index's order with a LIMIT 1); purge's deletion of what every
-- subscription is done with and the expiry of a lagging subscription join
-- outbox.message, whose statistics say it is empty only until its first
-- analyze (autovacuum's thresholds on it are low), by a key of another
-- index; unsubscribe's deletions take all of a subscription's rows.
VACUUM;
INSERT INTO checked SELECT '1.5 vacuumed', * FROM saved_statements();
SELECT statement, full_index_scans FROM checked
 WHERE version = '1.5 vacuumed' AND error IS NULL AND scans <> 'any'
   AND NOT full_index_scans <@ ARRAY['routes', 'subscription']
 ORDER BY statement;

-- only a superuser may run it
CREATE ROLE regress_statements_nobody;
SET ROLE regress_statements_nobody;
SELECT count(*) FROM saved_statements();
RESET ROLE;
DROP ROLE regress_statements_nobody;

\c :regress_db
DROP DATABASE regress_statements;
