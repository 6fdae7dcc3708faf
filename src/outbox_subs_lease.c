/*-------------------------------------------------------------------------
 *
 * outbox_subs_lease.c
 *		Leases by range: the fresh messages that a claim of a named
 *		subscription leases at once (outbox_store_subs_claim.c) are kept as
 *		one row of outbox.subscription_lease for each read of the log, not
 *		as a state row each.  Here: their completion, and their turning into
 *		state rows for everything else.
 *
 * A claim of a batch of fresh messages so writes one row, and the
 * completion of the batch deletes it: under a held snapshot, which keeps
 * every row version written since, a message costs its subscription a
 * share of one row, not a state row inserted and deleted with four index
 * entries.  The head of an ordering key among them also gets a row of
 * outbox.subscription_key, which blocks the key's later messages as its
 * state row would, and goes with its lease.  A failure, an extended or
 * released lease and a lease that ran out are rare, and the code that
 * handles them knows state rows: the leases of the row concerned become
 * state rows first, as the claim would have written them (attempt 1,
 * leased by the row's owner until its lease's end), and the row goes with
 * its keys' rows.  So a message is in a lease row or in a state row, never
 * both, and a state row's rules hold for it from then on.
 *
 * A row is found from a message by the message's position: the row of its
 * subscription with the greatest first_seq not after it, whose seqs
 * holds it (the reads of a subscription's log never overlap).  The
 * completion in the session whose claim wrote the row goes to it by its
 * key (outbox_subs_memo.c).  A completion changes a key's row under the
 * key's lock (outbox_subs_keylock.c), and unblocks the key's next state
 * row when it has one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox_spi.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/*
 * The lease rows that owner $3 holds on the messages $1 (uuid[]), in the
 * subscriptions named $2: their keys, the positions of those messages and
 * their ordering keys.  The rows are read as one range of each
 * subscription's, from the row that may hold the first message to the
 * last message (a batch is in one row, or in a few written side by side),
 * not looked up per message: 50 descents of the index took 0.15 ms of a
 * completion from another session.  Their ctids (row) let the statements
 * that delete or change them find them again without an index: joined by
 * their keys, plans made on empty tables read another index of the table
 * whole, and under a held snapshot every row deleted since.  The messages
 * are looked up by their ids in a subquery of their own for the same
 * reason: joined to the subscriptions by topic, a plan made while the log
 * was empty read the log's index of positions whole.
 */
#define LEASES_OF_IDS \
	"li AS MATERIALIZED (SELECT s.sub_id, m.seq," \
	"  m.ordering_key COLLATE pg_catalog.\"C\" AS key" \
	"  FROM (SELECT m.topic, m.seq, m.ordering_key FROM outbox.message m" \
	"   WHERE m.id OPERATOR(pg_catalog.=) ANY ($1)" SUBPLAN_FENCE ") m" \
	"  JOIN outbox.subscription s ON s.topic OPERATOR(pg_catalog.=) m.topic" \
	"   AND s.name OPERATOR(pg_catalog.=) $2)," \
	" lr AS MATERIALIZED (SELECT y.ctid, y.sub_id, y.first_seq, y.seqs" \
	"  FROM (SELECT li.sub_id, pg_catalog.min(li.seq) AS lo, pg_catalog.max(li.seq) AS hi" \
	"   FROM li GROUP BY li.sub_id) b, outbox.subscription_lease y" \
	"  WHERE y.sub_id OPERATOR(pg_catalog.=) b.sub_id" \
	"  AND y.sub_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT DISTINCT li.sub_id FROM li))" \
	"  AND y.first_seq OPERATOR(pg_catalog.<=) (SELECT pg_catalog.max(li.seq) FROM li)" \
	"  AND y.first_seq OPERATOR(pg_catalog.<=) b.hi" \
	"  AND y.first_seq OPERATOR(pg_catalog.>=) COALESCE((SELECT z.first_seq" \
	"   FROM outbox.subscription_lease z WHERE z.sub_id OPERATOR(pg_catalog.=) b.sub_id" \
	"   AND z.first_seq OPERATOR(pg_catalog.<=) b.lo ORDER BY z.first_seq DESC LIMIT 1), b.lo)" \
	"  AND y.lease_owner OPERATOR(pg_catalog.=) $3)," \
	" c AS MATERIALIZED (SELECT lr.ctid AS row, lr.sub_id, lr.first_seq, li.seq, li.key" \
	"  FROM lr JOIN li ON li.sub_id OPERATOR(pg_catalog.=) lr.sub_id" \
	"   AND li.seq OPERATOR(pg_catalog.=) ANY (lr.seqs))"

/*
 * The rows of the keys (sub_id, key, seq) in rel whose heads a completion
 * took out of their lease rows go; with each, whether the key has state
 * rows, one of which moves up then (SubsPromoteKeys).
 */
#define KEYS_DONE(rel, cond, more) \
	" kd AS (DELETE FROM outbox.subscription_key y USING " rel \
	"  WHERE y.sub_id OPERATOR(pg_catalog.=) w.sub_id" \
	"  AND y.ordering_key OPERATOR(pg_catalog.=) w.key" \
	"  AND y.ordering_key OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT w.key FROM " rel \
	"   WHERE w.key IS NOT NULL))" \
	"  AND y.seq OPERATOR(pg_catalog.=) w.seq AND " cond \
	"  RETURNING y.sub_id, y.ordering_key, " more " AS more)"

/* whether the key of y has state rows */
#define KEY_HAS_STATE \
	"EXISTS (SELECT 1 FROM outbox.subscription_state z" \
	" WHERE z.sub_id OPERATOR(pg_catalog.=) y.sub_id" \
	" AND z.ordering_key OPERATOR(pg_catalog.=) y.ordering_key AND z.dead_at IS NULL" \
	SUBPLAN_FENCE ")"

#define KEYS_TO_PROMOTE \
	" (SELECT pg_catalog.array_agg(kd.sub_id) FROM kd WHERE kd.more)," \
	" (SELECT pg_catalog.array_agg(kd.ordering_key) FROM kd WHERE kd.more)"

/*
 * Complete: a row whose every message is completed goes, the others keep
 * the rest.  Of the messages without a key ($4 false) or with one ($4
 * true, their keys' locks held).  Returns how many messages were
 * completed; the subscriptions and keys of the keyed ones left (when $4 is
 * false); those of the keys to promote.
 */
SAVED_STATEMENT(stmt_complete) = {
	"WITH " LEASES_OF_IDS ","
	" w AS (SELECT * FROM c WHERE (c.key IS NOT NULL) OPERATOR(pg_catalog.=) $4),"
	" g AS (SELECT w.row, w.sub_id, w.first_seq, pg_catalog.array_agg(w.seq) AS done"
	"  FROM w GROUP BY w.row, w.sub_id, w.first_seq),"
	" d AS (DELETE FROM outbox.subscription_lease x USING g"
	"  WHERE x.ctid OPERATOR(pg_catalog.=) g.row"
	"  AND x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq),"
	" u AS (UPDATE outbox.subscription_lease x SET seqs = ARRAY("
	"   SELECT q.seq FROM pg_catalog.unnest(x.seqs) AS q(seq)"
	"   WHERE q.seq OPERATOR(pg_catalog.<>) ALL (g.done) ORDER BY q.seq)"
	"  FROM g WHERE x.ctid OPERATOR(pg_catalog.=) g.row"
	"  AND x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND NOT x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq),"
	" o AS (SELECT w.* FROM w WHERE (w.sub_id, w.first_seq) IN"
	"  (SELECT d.sub_id, d.first_seq FROM d UNION ALL SELECT u.sub_id, u.first_seq FROM u)),"
	KEYS_DONE("o AS w", "$4", KEY_HAS_STATE)
	" SELECT (SELECT pg_catalog.count(*) FROM o),"
	" (SELECT pg_catalog.array_agg(c.sub_id) FROM c WHERE c.key IS NOT NULL AND NOT $4),"
	" (SELECT pg_catalog.array_agg(c.key) FROM c WHERE c.key IS NOT NULL AND NOT $4),"
	KEYS_TO_PROMOTE,
	SPI_OK_SELECT, 4, {UUIDARRAYOID, TEXTOID, TEXTOID, BOOLOID}
};

/*
 * Complete the messages at the positions $4 (their keys $7, NULL for
 * none; their locks held) of the lease row ($1, $2) that owner $3 holds
 * until $6, in the subscription named $5: as stmt_complete, for one row
 * known.  Returns how many were completed, whether the row went, and the
 * subscriptions and keys to promote; no row when there is no such row.
 * The keys are looked for among the state rows only when the subscription
 * has keyed state rows at all (one probe), most often not.  The row, locked
 * in c, is deleted or updated by its ctid: with the statistics of an empty
 * table the planner read another index of the table whole for it, and
 * under a held snapshot a completion took 10 ms after three minutes.
 */
#define COMPLETE_ROW \
	"WITH c AS MATERIALIZED (SELECT x.ctid, x.sub_id, x.first_seq, x.seqs AS held," \
	"  x.seqs OPERATOR(pg_catalog.<@) $4 AS whole," \
	"  (SELECT pg_catalog.count(DISTINCT q.seq) FROM pg_catalog.unnest($4) AS q(seq)" \
	"   WHERE q.seq OPERATOR(pg_catalog.=) ANY (x.seqs)) AS n" \
	"  FROM outbox.subscription_lease x, outbox.subscription s" \
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.first_seq OPERATOR(pg_catalog.=) $2" \
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3 AND x.leased_until OPERATOR(pg_catalog.=) $6" \
	"  AND s.sub_id OPERATOR(pg_catalog.=) x.sub_id AND s.name OPERATOR(pg_catalog.=) $5" \
	"  FOR UPDATE OF x)," \
	" d AS (DELETE FROM outbox.subscription_lease x" \
	"  WHERE x.ctid OPERATOR(pg_catalog.=) (SELECT c.ctid FROM c WHERE c.whole))," \
	" u AS (UPDATE outbox.subscription_lease x SET seqs = ARRAY(" \
	"   SELECT q.seq FROM pg_catalog.unnest(x.seqs) AS q(seq)" \
	"   WHERE q.seq OPERATOR(pg_catalog.<>) ALL ($4) ORDER BY q.seq)" \
	"  WHERE x.ctid OPERATOR(pg_catalog.=)" \
	"   (SELECT c.ctid FROM c WHERE NOT c.whole AND c.n OPERATOR(pg_catalog.>) 0))"
#define COMPLETE_ROW_TYPES \
	{INT4OID, INT8OID, TEXTOID, INT8ARRAYOID, TEXTOID, TIMESTAMPTZOID, TEXTARRAYOID}

SAVED_STATEMENT(stmt_complete_row) = {
	COMPLETE_ROW ","
	" kd AS (DELETE FROM outbox.subscription_key y USING c"
	"  WHERE y.sub_id OPERATOR(pg_catalog.=) c.sub_id"
	"  AND y.ordering_key OPERATOR(pg_catalog.=) ANY ($7 COLLATE pg_catalog.\"C\")"
	"  AND y.seq OPERATOR(pg_catalog.=) ANY ($4) AND y.seq OPERATOR(pg_catalog.=) ANY (c.held)"
	"  RETURNING y.sub_id, y.ordering_key,"
	"  (SELECT EXISTS (SELECT 1 FROM outbox.subscription_state z"
	"    WHERE z.sub_id OPERATOR(pg_catalog.=) $1 AND z.ordering_key IS NOT NULL"
	"    AND z.dead_at IS NULL)) AND " KEY_HAS_STATE " AS more)"
	" SELECT c.n, c.whole," KEYS_TO_PROMOTE " FROM c",
	SPI_OK_SELECT, 7, COMPLETE_ROW_TYPES
};

/* the same for messages without a key: no key to look at ($7 unused) */
SAVED_STATEMENT(stmt_complete_row_plain) = {
	COMPLETE_ROW
	" SELECT c.n, c.whole, NULL::pg_catalog.int4[], NULL::pg_catalog.text[] FROM c",
	SPI_OK_SELECT, 7, COMPLETE_ROW_TYPES
};

/*
 * The leases of the rows deleted (the CTE l) become state rows, with the
 * messages' ids and keys from the log, each looked up by its position
 * (a join let a plan made on an empty log read its index whole); the rows
 * of their keys go (the state rows hold the keys now).  Returns the
 * positions.
 */
#define LEASES_TO_STATE \
	" i AS (INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key," \
	"  available_at, blocked, hole, attempts, leased_until, lease_owner)" \
	" SELECT l.sub_id, m.seq, m.id, m.ordering_key, l.leased_until, false, false, 1," \
	"  l.leased_until, l.lease_owner" \
	" FROM l JOIN outbox.subscription s ON s.sub_id OPERATOR(pg_catalog.=) l.sub_id" \
	" CROSS JOIN LATERAL pg_catalog.unnest(l.seqs) AS q(seq)" \
	" CROSS JOIN LATERAL (SELECT m.seq, m.id, m.ordering_key FROM outbox.message m" \
	"  WHERE m.topic OPERATOR(pg_catalog.=) s.topic" \
	"  AND m.seq OPERATOR(pg_catalog.=) q.seq LIMIT 1) m" \
	" RETURNING sub_id, seq, ordering_key AS key)," \
	KEYS_DONE("i AS w", "w.key IS NOT NULL", "false") \
	" SELECT i.seq FROM i"

/* the rows that owner $3 holds on the messages $1 of subscriptions $2 */
SAVED_STATEMENT(stmt_to_state) = {
	"WITH " LEASES_OF_IDS ","
	" l AS (DELETE FROM outbox.subscription_lease x"
	"  USING (SELECT DISTINCT c.row, c.sub_id, c.first_seq FROM c) g"
	"  WHERE x.ctid OPERATOR(pg_catalog.=) g.row"
	"  AND x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs),"
	LEASES_TO_STATE,
	SPI_OK_SELECT, 3, {UUIDARRAYOID, TEXTOID, TEXTOID}
};

/*
 * The rows of subscription $1 whose lease ended at or before $2 and after
 * $3 (leases that ended before were seen by an earlier look), but not
 * those another transaction holds now: a completion, which a later look
 * sees through.
 */
SAVED_STATEMENT(stmt_expired_to_state) = {
	"WITH l AS (DELETE FROM outbox.subscription_lease x"
	"  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	"   SELECT y.ctid FROM outbox.subscription_lease y"
	"   WHERE y.leased_until OPERATOR(pg_catalog.<=) $2"
	"   AND y.leased_until OPERATOR(pg_catalog.>) $3"
	"   AND y.sub_id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED))"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs),"
	LEASES_TO_STATE,
	SPI_OK_SELECT, 3, {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* Is outbox.subscription_lease there (the tables of 1.5)? */
bool
SubsLeaseRows(void)
{
	return SubsHasTable("subscription_lease");
}

static int
obx_uuid_cmp(const void *a, const void *b)
{
	return memcmp(a, b, UUID_LEN);
}

/*
 * The ids of the n messages ids (a uuid[]) that are not among the ids in
 * column col of SPI_tuptable, as a uuid[]: those a completion looks up in
 * the lease rows after the state rows completed the others.
 */
Datum
SubsLeaseIdsLeft(Datum ids, int n, int col)
{
	uint64		ndone = SPI_processed;
	pg_uuid_t  *done = palloc(sizeof(pg_uuid_t) * Max(ndone, 1));
	Datum	   *elems;
	bool	   *nulls;
	Datum	   *left = palloc(sizeof(Datum) * Max(n, 1));
	int			nelems;
	int			nleft = 0;
	uint64		i;
	int			j;

	for (i = 0; i < ndone; i++)
	{
		bool		isnull;

		done[i] = *DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i],
											   SPI_tuptable->tupdesc, col, &isnull));
	}
	qsort(done, ndone, sizeof(pg_uuid_t), obx_uuid_cmp);
	deconstruct_array(DatumGetArrayTypeP(ids), UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &elems, &nulls, &nelems);
	for (j = 0; j < nelems; j++)
		if (!nulls[j] &&
			bsearch(DatumGetUUIDP(elems[j]), done, ndone, sizeof(pg_uuid_t),
					obx_uuid_cmp) == NULL)
			left[nleft++] = elems[j];
	return PointerGetDatum(construct_array(left, nleft, UUIDOID, UUID_LEN, false,
										   TYPALIGN_CHAR));
}

/*
 * The keys that row 0 of SPI_tuptable gives as arrays in columns subcol
 * (int4[], their subscriptions) and keycol (text[]; NULL: none), added to
 * set.
 */
static void
obx_key_arrays(int subcol, int keycol, SubsKeySet *set)
{
	bool		subnull;
	bool		keynull;
	Datum		subs = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, subcol,
									 &subnull);
	Datum		keys = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, keycol,
									 &keynull);
	Datum	   *s;
	Datum	   *k;
	int			ns;
	int			nk;
	int			i;

	if (subnull || keynull)
		return;
	deconstruct_array(DatumGetArrayTypeP(subs), INT4OID, 4, true, TYPALIGN_INT,
					  &s, NULL, &ns);
	deconstruct_array(DatumGetArrayTypeP(keys), TEXTOID, -1, false, TYPALIGN_INT,
					  &k, NULL, &nk);
	for (i = 0; i < Min(ns, nk); i++)
	{
		if (set->n == set->size)
		{
			set->size = Max(16, set->size * 2);
			set->subs = set->subs == NULL ? palloc(sizeof(Datum) * set->size) :
				repalloc(set->subs, sizeof(Datum) * set->size);
			set->keys = set->keys == NULL ? palloc(sizeof(Datum) * set->size) :
				repalloc(set->keys, sizeof(Datum) * set->size);
		}
		set->subs[set->n] = s[i];
		set->keys[set->n] = k[i];
		set->n++;
	}
}

/* the ids (a uuid[]; (Datum) 0: the one id one) as Datums */
static int
obx_ids(Datum ids, pg_uuid_t *one, Datum **elems, bool **nulls)
{
	int			n;

	if (ids != (Datum) 0)
	{
		deconstruct_array(DatumGetArrayTypeP(ids), UUIDOID, UUID_LEN, false,
						  TYPALIGN_CHAR, elems, nulls, &n);
		return n;
	}
	*elems = palloc(sizeof(Datum));
	*nulls = palloc0(sizeof(bool));
	(*elems)[0] = UUIDPGetDatum(one);
	return 1;
}

/*
 * The keys among the messages ids (a uuid[]; (Datum) 0: the one id one)
 * that the lease rows this backend remembers of owner hold, with their
 * subscriptions: a completion takes their locks with those of its state
 * rows, before it changes anything.  Returns how many.
 */
int
SubsLeaseKeys(Datum ids, pg_uuid_t *one, text *owner, Datum **subs, Datum **keys)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems = obx_ids(ids, one, &elems, &nulls);
	bool	   *known = palloc0(sizeof(bool) * Max(nelems, 1));
	LeaseGroup *groups;
	int			ngroups;
	int			n = 0;
	int			k;

	ngroups = SubsMemoGroups(elems, nulls, known, nelems, owner, &groups);
	*subs = palloc(sizeof(Datum) * Max(nelems, 1));
	*keys = palloc(sizeof(Datum) * Max(nelems, 1));
	for (k = 0; k < ngroups; k++)
	{
		int			i;

		for (i = 0; i < groups[k].n; i++)
		{
			if (groups[k].keynulls[i])
				continue;
			(*subs)[n] = Int32GetDatum(groups[k].sub);
			(*keys)[n] = groups[k].keys[i];
			n++;
		}
	}
	return n;
}

/*
 * Complete the messages of group g (their keys' locks held): how many were
 * completed, or -1 when the row is not there as remembered (no longer, or
 * not of subscription name).  The keys to unblock go to promote.
 */
static int64
obx_group_complete(const LeaseGroup *g, text *owner, text *name, SubsKeySet *promote)
{
	Datum		args[7];
	bool		isnull;
	bool		keyed = false;
	int64		done;
	int			i;

	for (i = 0; i < g->n; i++)
		keyed |= !g->keynulls[i];
	args[0] = Int32GetDatum(g->sub);
	args[1] = Int64GetDatum(g->first_seq);
	args[2] = PointerGetDatum(owner);
	args[3] = SubsArray(g->seqs, NULL, g->n, INT8OID);
	args[4] = PointerGetDatum(name);
	args[5] = TimestampTzGetDatum(g->until);
	args[6] = SubsArray(g->keys, g->keynulls, g->n, TEXTOID);
	if (SpiExecute(keyed ? &stmt_complete_row : &stmt_complete_row_plain,
				   args, NULL, false, 0) == 0)
	{
		SubsMemoForget(g);
		return -1;
	}
	done = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									   1, &isnull));
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
								   &isnull)))
		SubsMemoForget(g);
	obx_key_arrays(3, 4, promote);
	return done;
}

/*
 * stmt_complete: the messages ids (a uuid[]) looked up, those without a
 * key, then, their keys' locks taken, those with one.  The keys to
 * unblock go to promote.
 */
static int64
obx_lookup_complete(Datum ids, text *owner, text *name, SubsKeySet *promote)
{
	Datum		args[4];
	bool		isnull;
	SubsKeySet	keyed = {0};
	int64		done;

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	args[3] = BoolGetDatum(false);
	if (SpiExecute(&stmt_complete, args, NULL, false, 1) == 0)
		return 0;
	done = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
									   &isnull));
	obx_key_arrays(2, 3, &keyed);
	if (keyed.n == 0)
		return done;
	SubsKeyLockMany(keyed.n, keyed.subs, keyed.keys);
	args[3] = BoolGetDatum(true);
	if (SpiExecute(&stmt_complete, args, NULL, false, 1) > 0)
	{
		done += DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											1, &isnull));
		obx_key_arrays(4, 5, promote);
	}
	return done;
}

/*
 * Complete the messages ids (a uuid[]) that owner leased by range in the
 * subscriptions named name (the keys of those this backend remembers
 * locked already, SubsLeaseKeys): those of rows this backend remembers
 * through their rows, the others by look-up.  Returns how many; the keys
 * whose next state row is to be unblocked go to promote.  Runs inside the
 * caller's SPI connection.
 */
int64
SubsLeaseComplete(Datum ids, text *owner, text *name, SubsKeySet *promote)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems = obx_ids(ids, NULL, &elems, &nulls);
	bool	   *known = palloc0(sizeof(bool) * Max(nelems, 1));
	LeaseGroup *groups;
	int			ngroups;
	Datum	   *left;
	int			nleft = 0;
	int64		done = 0;
	int			k;
	int			j;

	ngroups = SubsMemoGroups(elems, nulls, known, nelems, owner, &groups);
	for (k = 0; k < ngroups; k++)
	{
		int64		r = obx_group_complete(&groups[k], owner, name, promote);

		/* a row not there as remembered: its messages are looked up below */
		if (r < 0)
			continue;
		done += r;
		for (j = 0; j < groups[k].n; j++)
			known[groups[k].at[j]] = true;
	}
	left = palloc(sizeof(Datum) * Max(nelems, 1));
	for (j = 0; j < nelems; j++)
		if (!nulls[j] && !known[j])
			left[nleft++] = elems[j];
	if (nleft > 0)
		done += obx_lookup_complete(PointerGetDatum(construct_array(left, nleft, UUIDOID,
																	UUID_LEN, false,
																	TYPALIGN_CHAR)),
									owner, name, promote);
	return done;
}

/*
 * The leases by range that owner holds on ids (a uuid[]) in the
 * subscriptions named name become state rows, with those of the other
 * messages of their rows.  Returns how many state rows were written.
 * Runs inside the caller's SPI connection.
 */
int64
SubsLeaseToState(Datum ids, text *owner, text *name)
{
	Datum		args[3];

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	return (int64) SpiExecute(&stmt_to_state, args, NULL, false, 0);
}

/*
 * The leases by range of subscription sub that ended at or before now and
 * after low become state rows: their lease ran out, and the claim's look
 * for leases that ran out takes them over or makes them dead.  Returns how
 * many.  Runs inside the caller's SPI connection.
 */
int64
SubsLeaseExpiredToState(int32 sub, TimestampTz now, TimestampTz low)
{
	Datum		args[3];

	args[0] = Int32GetDatum(sub);
	args[1] = TimestampTzGetDatum(now);
	args[2] = TimestampTzGetDatum(low);
	return (int64) SpiExecute(&stmt_expired_to_state, args, NULL, false, 0);
}
