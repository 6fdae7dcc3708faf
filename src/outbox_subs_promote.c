/*-------------------------------------------------------------------------
 *
 * outbox_subs_promote.c
 *		The promotion of a named subscription's ordering keys: when a key's
 *		head leaves (completed, made dead, a hole whose append rolled back),
 *		the key's next state row is unblocked, to be handed out by the due
 *		read.
 *
 * A key's head is its first state row that is not dead, or with the tables
 * of 1.5 the message a row of outbox.subscription_key holds (leased by
 * range, outbox_subs_lease.c); the rows after it are blocked.  Whoever
 * promotes holds the keys' locks (outbox_subs_keylock.c), taken before the
 * head left, so no claim adds a row to the key in between.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "outbox_spi.h"
#include "outbox_subs.h"

/*
 * Each key's first row that is not dead, unblocked: unless (with the tables
 * of 1.5, keyrows) the key's head is leased by range before it, the key's
 * row then holding the key (a hole of the key that rolled back, say, comes
 * here while its head is leased so).  The rows are found by their ids
 * (the index of ids takes them as one array), then checked pair by pair
 * against p in a subplan.  Joined to p, or looked up by their
 * subscriptions and positions as arrays, plans made on empty tables read
 * every state row of the subscription: the primary key by its first
 * column, or the index of ids whole.  The checks are by key columns,
 * which a concurrent update of the row does not change, so the row is
 * still found when the update waits for it; not by ctid.
 */
#define PROMOTE(keyrows) { \
	"WITH p AS MATERIALIZED (SELECT h.sub_id, h.seq, h.id" \
	"  FROM (SELECT DISTINCT k.sub_id, k.key" \
	"   FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int4[])," \
	"    pg_catalog.unnest($2::pg_catalog.text[])) AS k(sub_id, key)) k" \
	"  CROSS JOIN LATERAL (SELECT y.sub_id, y.seq, y.id, y.blocked" \
	"   FROM outbox.subscription_state y" \
	"   WHERE y.sub_id OPERATOR(pg_catalog.=) k.sub_id" \
	"   AND y.ordering_key OPERATOR(pg_catalog.=) (k.key COLLATE pg_catalog.\"C\")" \
	"   AND y.dead_at IS NULL ORDER BY y.seq LIMIT 1) h" \
	"  WHERE h.blocked" keyrows ")" \
	" UPDATE outbox.subscription_state x SET blocked = false" \
	" WHERE x.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT p.id FROM p))" \
	" AND EXISTS (SELECT 1 FROM p WHERE p.sub_id OPERATOR(pg_catalog.=) x.sub_id" \
	"  AND p.seq OPERATOR(pg_catalog.=) x.seq" SUBPLAN_FENCE ")", \
	SPI_OK_UPDATE, 2, {INT4ARRAYOID, TEXTARRAYOID} }
SAVED_STATEMENT(stmt_promote_v14) = PROMOTE("");
SAVED_STATEMENT(stmt_promote) = PROMOTE(
	"  AND NOT EXISTS (SELECT 1 FROM outbox.subscription_key kk"
	"   WHERE kk.ordering_key OPERATOR(pg_catalog.=) (k.key COLLATE pg_catalog.\"C\")"
	"   AND kk.sub_id OPERATOR(pg_catalog.=) h.sub_id AND kk.seq OPERATOR(pg_catalog.<) h.seq"
	SUBPLAN_FENCE ")");

/*
 * Unblock the next message of each key (keys[i] of subscription
 * sub_ids[i]) whose head left; the caller holds the keys' locks, taken
 * before their head left.  Runs inside the caller's SPI connection.
 */
void
SubsPromoteKeys(int nkeys, Datum *sub_ids, Datum *keys)
{
	Datum		args[2];

	if (nkeys == 0)
		return;
	args[0] = PointerGetDatum(construct_array(sub_ids, nkeys, INT4OID, 4, true,
											  TYPALIGN_INT));
	args[1] = PointerGetDatum(construct_array(keys, nkeys, TEXTOID, -1, false,
											  TYPALIGN_INT));
	(void) SpiExecute(SubsLeaseRows() ? &stmt_promote : &stmt_promote_v14, args, NULL,
					  false, 0);
}

/*
 * The rows of SPI_tuptable whose columns subcol and keycol are a sub_id and
 * an ordering key (or NULL): unblock what follows each key.  With morecol
 * (not 0), only the keys of the rows whose boolean in that column is true.
 */
void
SubsPromoteReturned(int subcol, int keycol, int morecol)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		n = SPI_processed;
	Datum	   *subs = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *keys = palloc(sizeof(Datum) * Max(n, 1));
	int			nkeys = 0;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		bool		subnull;
		bool		keynull;
		Datum		sub = SPI_getbinval(tt->vals[i], tt->tupdesc, subcol, &subnull);
		Datum		key = SPI_getbinval(tt->vals[i], tt->tupdesc, keycol, &keynull);

		if (subnull || keynull)
			continue;
		if (morecol != 0)
		{
			bool		morenull;

			if (!DatumGetBool(SPI_getbinval(tt->vals[i], tt->tupdesc, morecol,
											&morenull)) || morenull)
				continue;
		}
		subs[nkeys] = sub;
		keys[nkeys] = PointerGetDatum(DatumGetTextPCopy(key));
		nkeys++;
	}
	SubsPromoteKeys(nkeys, subs, keys);
}
