/*-------------------------------------------------------------------------
 *
 * outbox_subs_fresh.c
 *		The statements of a named subscription's fresh read
 *		(outbox_store_subs_claim.c): the messages read from the log made
 *		leases, state rows and holes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"

#include "outbox_spi.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/*
 * The fresh read, of messages found committed ($3, ids: looked up by id,
 * see SUBS_LEASE_ROWS) and of appends found in progress (holes: $4
 * positions, $5 ids, $9 keys, $10 available_at), all of them at or after
 * the frontier:
 * $1 sub_id, $2 topic, $6 now, $7 lease end, $8 owner.  A keyed message
 * or hole is blocked when an earlier one of its key is not done: in this
 * read, or in a state row (looked for by key only when the subscription
 * has keyed state rows at all, one probe: most often it has none).  Returns the messages, in position order; the
 * leased ones have a lease owner.
 *
 * With the tables of 1.5, the messages leased at once get no state row:
 * one row of outbox.subscription_lease holds them all, and a row of
 * outbox.subscription_key each key among them (outbox_subs_lease.c).  The
 * others get a state row each: messages not due yet, blocked ones and
 * holes.
 */
#define CLAIM_FRESH_READ(keyrows) \
	"WITH f AS MATERIALIZED (SELECT e.*, e.ordering_key IS NOT NULL AND (" \
	"   pg_catalog.row_number() OVER (PARTITION BY e.ordering_key ORDER BY e.seq)" \
	"    OPERATOR(pg_catalog.>) 1" \
	"   OR (SELECT EXISTS (SELECT 1 FROM outbox.subscription_state k0" \
	"    WHERE k0.sub_id OPERATOR(pg_catalog.=) $1 AND k0.ordering_key IS NOT NULL" \
	"    AND k0.dead_at IS NULL)) AND EXISTS (SELECT 1 FROM outbox.subscription_state k" \
	"    WHERE k.sub_id OPERATOR(pg_catalog.=) $1" \
	"    AND k.ordering_key OPERATOR(pg_catalog.=) e.ordering_key AND k.dead_at IS NULL" \
	"    AND k.seq OPERATOR(pg_catalog.<) e.seq)" keyrows ") AS blocked" \
	"  FROM (SELECT m.id, m.topic, m.event_type, m.payload, m.created_at," \
	"    " SUBS_DUE_AT("m") " AS available_at, m.seq, m.ordering_key, false AS hole" \
	"    FROM outbox.message m" \
	"    WHERE m.id OPERATOR(pg_catalog.=) ANY ($3)" \
	"   UNION ALL" \
	"   SELECT h.id, $2, NULL::pg_catalog.text, NULL::pg_catalog.jsonb," \
	"    NULL::pg_catalog.timestamptz, h.available_at, h.seq," \
	"    h.ordering_key COLLATE pg_catalog.\"C\", true" \
	"   FROM ROWS FROM (pg_catalog.unnest($4::pg_catalog.int8[])," \
	"    pg_catalog.unnest($5::pg_catalog.uuid[]), pg_catalog.unnest($9::pg_catalog.text[])," \
	"    pg_catalog.unnest($10::pg_catalog.timestamptz[]))" \
	"    AS h(seq, id, ordering_key, available_at)) e)," \
	" t AS (SELECT f.*, NOT f.hole AND NOT f.blocked" \
	"  AND f.available_at OPERATOR(pg_catalog.<=) $6 AS take FROM f)," \
	" i AS (INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key," \
	"   available_at, blocked, hole, attempts, leased_until, lease_owner)" \
	"  SELECT $1, t.seq, t.id, t.ordering_key," \
	"   CASE WHEN t.take THEN $7 ELSE t.available_at END, t.blocked, t.hole," \
	"   CASE WHEN t.take THEN 1 ELSE 0 END," \
	"   CASE WHEN t.take THEN $7 END, CASE WHEN t.take THEN $8 END FROM t"

#define CLAIM_FRESH_ARGTYPES \
	{INT4OID, TEXTOID, UUIDARRAYOID, INT8ARRAYOID, UUIDARRAYOID, TIMESTAMPTZOID, \
	 TIMESTAMPTZOID, TEXTOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID}

/* 1.4: a state row for each message read */
SAVED_STATEMENT(stmt_claim_fresh_v14) = {
	CLAIM_FRESH_READ("")
	"  RETURNING seq, attempts, leased_until, lease_owner)"
	" SELECT f.id, f.topic, f.event_type, f.payload, f.created_at, f.available_at,"
	" i.attempts, i.leased_until, i.lease_owner, NULL::pg_catalog.timestamptz,"
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, f.seq, false, f.ordering_key"
	" FROM f JOIN i ON i.seq OPERATOR(pg_catalog.=) f.seq WHERE NOT f.hole ORDER BY f.seq",
	SPI_OK_SELECT, 10, CLAIM_FRESH_ARGTYPES
};

/*
 * 1.5: the lease row of the messages of t leased at once (take), and the
 * rows of the claim from t, with whether each went into the lease row
 * (those that got a state row come from i)
 */
#define CLAIM_FRESH_LEASE_ROW \
	" r AS (INSERT INTO outbox.subscription_lease (sub_id, first_seq, lease_owner," \
	"   leased_until, seqs)" \
	"  SELECT $1, pg_catalog.min(t.seq), $8, $7, pg_catalog.array_agg(t.seq ORDER BY t.seq)" \
	"  FROM t WHERE t.take" \
	"  HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0)"
#define CLAIM_FRESH_ROWS \
	" SELECT t.id, t.topic, t.event_type, t.payload, t.created_at, t.available_at," \
	" COALESCE(i.attempts, 1), CASE WHEN i.seq IS NULL THEN $7 ELSE i.leased_until END," \
	" CASE WHEN i.seq IS NULL THEN $8 ELSE i.lease_owner END, NULL::pg_catalog.timestamptz," \
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, t.seq, false, t.ordering_key," \
	" t.take" \
	" FROM t LEFT JOIN i ON i.seq OPERATOR(pg_catalog.=) t.seq"

/*
 * 1.5: the messages leased at once in one lease row, and a row of
 * outbox.subscription_key for each key whose head is among them; a key
 * with such a row blocks its later messages as a state row would.
 */
SAVED_STATEMENT(stmt_claim_fresh) = {
	CLAIM_FRESH_READ(
		"   OR EXISTS (SELECT 1 FROM outbox.subscription_key kk"
		"    WHERE kk.sub_id OPERATOR(pg_catalog.=) $1"
		"    AND kk.ordering_key OPERATOR(pg_catalog.=) e.ordering_key"
		"    AND kk.seq OPERATOR(pg_catalog.<) e.seq)")
	"  WHERE NOT t.take"
	"  RETURNING seq, attempts, leased_until, lease_owner),"
	CLAIM_FRESH_LEASE_ROW ","
	" kr AS (INSERT INTO outbox.subscription_key (sub_id, ordering_key, seq)"
	"  SELECT $1, t.ordering_key, t.seq FROM t"
	"  WHERE t.take AND t.ordering_key IS NOT NULL)"
	CLAIM_FRESH_ROWS " WHERE NOT t.hole ORDER BY t.seq",
	SPI_OK_SELECT, 10, CLAIM_FRESH_ARGTYPES
};

/*
 * 1.5: the same when the read found no append in progress and no message
 * with an ordering key, the most common read by far: no message is
 * blocked and no key gets a row, so none of the statement that decides
 * them has to be set up and run (with stmt_complete_row_plain, by hand, one
 worker: 0.035 ms of the 0.6 of a complete_and_claim of 50).
 * Returns what stmt_claim_fresh returns, from the same arguments ($2, $4,
 * $5, $9 and $10 unused).
 */
SAVED_STATEMENT(stmt_claim_fresh_plain) = {
	"WITH t AS MATERIALIZED (SELECT m.id, m.topic, m.event_type, m.payload, m.created_at,"
	"   " SUBS_DUE_AT("m") " AS available_at, m.seq, m.ordering_key,"
	"   " SUBS_DUE_AT("m") " OPERATOR(pg_catalog.<=) $6 AS take"
	"  FROM outbox.message m WHERE m.id OPERATOR(pg_catalog.=) ANY ($3)),"
	" i AS (INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key,"
	"   available_at, attempts)"
	"  SELECT $1, t.seq, t.id, t.ordering_key, t.available_at, 0 FROM t WHERE NOT t.take"
	"  RETURNING seq, attempts, leased_until, lease_owner),"
	CLAIM_FRESH_LEASE_ROW
	CLAIM_FRESH_ROWS " ORDER BY t.seq",
	SPI_OK_SELECT, 10, CLAIM_FRESH_ARGTYPES
};

/*
 * The fresh read for the tables of 1.5 (chain) or 1.4, of a read with
 * appends in progress or ordering keys or (plain) of one without: its
 * arguments are as CLAIM_FRESH_READ says, its rows those of the claim
 * (SUBS_CLAIM_COLS), and with 1.5 whether each went into the lease row.
 */
SavedStatement *
SubsFreshRead(bool chain, bool plain)
{
	if (!chain)
		return &stmt_claim_fresh_v14;
	return plain ? &stmt_claim_fresh_plain : &stmt_claim_fresh;
}
