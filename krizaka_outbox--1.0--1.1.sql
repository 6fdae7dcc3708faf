/* krizaka_outbox--1.0--1.1.sql: from 1.0 to 1.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.1'" to load this file. \quit
