/* krizaka_outbox--1.4--1.5.sql: from version 1.4 to 1.5 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.5'" to load this file. \quit

/*
 * The claims of a named subscription no longer take turns until they
 * commit: a claim that reads no ordering key lets the next one read on as
 * soon as its rows are in.  Each claim records the range of the log it
 * read, [from_seq, next_seq), so that the range of a claim that rolls
 * back, passed meanwhile by the claims after it, is read again.  The row
 * each subscription has now is where it starts from: from_seq NULL.
 */
ALTER TABLE outbox.subscription_frontier ADD COLUMN from_seq bigint;

COMMENT ON TABLE outbox.subscription_frontier IS
    'The ranges of the log each named subscription has read, [from_seq, next_seq); its newest row is the read frontier.';
