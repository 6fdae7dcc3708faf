/* krizaka_outbox--1.1--1.2.sql: from 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION krizaka_outbox UPDATE TO '1.2'" to load this file. \quit
