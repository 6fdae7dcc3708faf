/*-------------------------------------------------------------------------
 *
 * outbox_subs_read.c
 *		The read of the log in the claim of a named subscription, under the
 *		subscription's lock: the holes looked at again, then the fresh
 *		messages from the subscription's frontier up to the horizon of
 *		appends still in progress, each given a state row.
 *
 * The frontier (outbox_subs_frontier.c) records each range read: two
 * claimers never read one range of the log, and a range whose claim
 * rolls back is read again.  A claim gives the lock back once its rows are
 * in (SUBS_RELEASE_BEFORE_COMMIT), unless a message it read waits behind
 * an earlier one of its key: then it holds the lock until the transaction
 * ends, so that whoever hands the key over sees its row.  A keyed message
 * whose key another transaction in progress is changing is left for a
 * later claim (outbox_subs_keys.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_stream.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/* at most this many reads of the log per claim (keys and schedules skipped) */
#define SUBS_FRESH_READS	4

/*
 * Whether a claim whose range holds no ordering key lets the next claim of
 * its subscription read on before it commits (see SubsClaimLog): on.
 */
#define SUBS_RELEASE_BEFORE_COMMIT	true

/* at most this many appends in progress passed over by one read of the log */
#define SUBS_MAX_HOLES		1000


/*
 * The fresh read, of messages found committed ($3, ids: looked up by id,
 * see SUBS_LEASE_ROWS) and of appends found in progress (holes: $4
 * positions, $5 ids, $9 keys, $10 available_at), all of them at or after
 * the frontier:
 * $1 sub_id, $2 topic, $6 now, $7 lease end, $8 owner.  A keyed message
 * or hole is blocked when an earlier one of its key is not done: in this
 * read, or in a state row.  Returns the messages, in position order; the
 * leased ones have a lease owner.
 */
SAVED_STATEMENT(stmt_claim_fresh) = {
	"WITH f AS MATERIALIZED (SELECT e.*, e.ordering_key IS NOT NULL AND ("
	"   pg_catalog.row_number() OVER (PARTITION BY e.ordering_key ORDER BY e.seq)"
	"    OPERATOR(pg_catalog.>) 1"
	"   OR EXISTS (SELECT 1 FROM outbox.subscription_state k"
	"    WHERE k.sub_id OPERATOR(pg_catalog.=) $1"
	"    AND k.ordering_key OPERATOR(pg_catalog.=) e.ordering_key AND k.dead_at IS NULL"
	"    AND k.seq OPERATOR(pg_catalog.<) e.seq)) AS blocked"
	"  FROM (SELECT m.id, m.topic, m.event_type, m.payload, m.created_at, m.available_at,"
	"    m.seq, m.ordering_key, false AS hole FROM outbox.message m"
	"    WHERE m.id OPERATOR(pg_catalog.=) ANY ($3)"
	"   UNION ALL"
	"   SELECT h.id, $2, NULL::pg_catalog.text, NULL::pg_catalog.jsonb,"
	"    NULL::pg_catalog.timestamptz, h.available_at, h.seq,"
	"    h.ordering_key COLLATE pg_catalog.\"C\", true"
	"   FROM ROWS FROM (pg_catalog.unnest($4::pg_catalog.int8[]),"
	"    pg_catalog.unnest($5::pg_catalog.uuid[]), pg_catalog.unnest($9::pg_catalog.text[]),"
	"    pg_catalog.unnest($10::pg_catalog.timestamptz[]))"
	"    AS h(seq, id, ordering_key, available_at)) e),"
	" t AS (SELECT f.*, NOT f.hole AND NOT f.blocked"
	"  AND f.available_at OPERATOR(pg_catalog.<=) $6 AS take FROM f),"
	" i AS (INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key,"
	"   available_at, blocked, hole, attempts, leased_until, lease_owner)"
	"  SELECT $1, t.seq, t.id, t.ordering_key,"
	"   CASE WHEN t.take THEN $7 ELSE t.available_at END, t.blocked, t.hole,"
	"   CASE WHEN t.take THEN 1 ELSE 0 END,"
	"   CASE WHEN t.take THEN $7 END, CASE WHEN t.take THEN $8 END FROM t"
	"  RETURNING seq, attempts, leased_until, lease_owner)"
	" SELECT f.id, f.topic, f.event_type, f.payload, f.created_at, f.available_at,"
	" i.attempts, i.leased_until, i.lease_owner, NULL::pg_catalog.timestamptz,"
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, f.seq, false, f.ordering_key"
	" FROM f JOIN i ON i.seq OPERATOR(pg_catalog.=) f.seq WHERE NOT f.hole ORDER BY f.seq",
	SPI_OK_SELECT, 10,
	{INT4OID, TEXTOID, UUIDARRAYOID, INT8ARRAYOID, UUIDARRAYOID, TIMESTAMPTZOID,
	 TIMESTAMPTZOID, TEXTOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID}
};

/* the first holes of a subscription: $1 sub_id, $2 how many, $3 from */
SAVED_STATEMENT(stmt_holes) = {
	"SELECT seq, id FROM outbox.subscription_state"
	" WHERE sub_id OPERATOR(pg_catalog.=) $1 AND hole AND seq OPERATOR(pg_catalog.>=) $3"
	" ORDER BY seq LIMIT $2",
	SPI_OK_SELECT, 3, {INT4OID, INT4OID, INT8OID}
};

/* holes whose append rolled back: $1 sub_id, $2 positions */
SAVED_STATEMENT(stmt_holes_gone) = {
	"WITH c AS (SELECT c.ctid FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND " SUBS_WITHIN("c.seq", "$2")
	"  AND c.seq OPERATOR(pg_catalog.=) ANY ($2) AND c.hole FOR UPDATE SKIP LOCKED)"
	" DELETE FROM outbox.subscription_state x"
	" WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))"
	" RETURNING x.sub_id, x.ordering_key",
	SPI_OK_DELETE_RETURNING, 2, {INT4OID, INT8ARRAYOID}
};

/*
 * Holes whose append committed, handed out like fresh messages: $1
 * sub_id, $2 topic, $3 positions, $4 now, $5 lease end, $6 owner, $7 the
 * ids of their messages (looked up by id, see SUBS_LEASE_ROWS).
 */
SAVED_STATEMENT(stmt_holes_done) = {
	"WITH r AS (SELECT x.seq, m.available_at,"
	"   NOT x.blocked AND m.available_at OPERATOR(pg_catalog.<=) $4 AS take"
	"  FROM outbox.subscription_state x JOIN outbox.message m ON m.id OPERATOR(pg_catalog.=) x.id"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND " SUBS_WITHIN("x.seq", "$3")
	"  AND x.seq OPERATOR(pg_catalog.=) ANY ($3)"
	"  AND m.id OPERATOR(pg_catalog.=) ANY ($7)"
	"  AND x.hole FOR UPDATE OF x SKIP LOCKED),"
	" u AS (UPDATE outbox.subscription_state x SET hole = false,"
	"  available_at = CASE WHEN r.take THEN $5 ELSE r.available_at END,"
	"  attempts = CASE WHEN r.take THEN 1 ELSE 0 END,"
	"  leased_until = CASE WHEN r.take THEN $5 END,"
	"  lease_owner = CASE WHEN r.take THEN $6 END"
	"  FROM r WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.seq OPERATOR(pg_catalog.=) r.seq"
	"  AND " SUBS_WITHIN("x.seq", "$3") " AND x.seq OPERATOR(pg_catalog.=) ANY ($3)"
	"  RETURNING x.id, x.attempts, x.leased_until, x.lease_owner)"
	" SELECT m.id, m.topic, m.event_type, m.payload, m.created_at, m.available_at,"
	" u.attempts, u.leased_until, u.lease_owner, NULL::pg_catalog.timestamptz,"
	" NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, m.seq, false, m.ordering_key"
	" FROM u JOIN outbox.message m ON m.id OPERATOR(pg_catalog.=) u.id"
	" WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT u.id FROM u)) ORDER BY m.seq",
	SPI_OK_SELECT, 7,
	{INT4OID, TEXTOID, INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID,
	 UUIDARRAYOID}
};

/*
 * Look again at the holes of the subscription from position from: hand
 * out those whose append committed (at most want), drop those that rolled
 * back.  Returns how many were leased; *changed says whether any hole was
 * handed out or dropped, *first is the first hole found (PG_INT64_MAX:
 * none).
 */
static int
obx_claim_holes(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
				int want, int64 from, SubsSink *sink, bool *changed,
				int64 *first)
{
	Datum		args[7];
	Datum	   *done;
	Datum	   *done_ids;
	Datum	   *gone;
	Datum	   *ids;
	int64	   *seqs;
	int		   *states;
	int			ndone = 0;
	int			ngone = 0;
	int			n;
	int			i;
	int64		last;

	/*
	 * Every hole (up to SUBS_MAX_HOLES) is looked at, not only the first
	 * want: one that stays open must not hold back those after it.
	 */
	args[0] = sub;
	args[1] = Int32GetDatum(SUBS_MAX_HOLES);
	args[2] = Int64GetDatum(from);
	*first = PG_INT64_MAX;
	n = (int) SpiExecute(&stmt_holes, args, NULL, false, 0);
	if (n == 0)
		return 0;
	seqs = palloc(sizeof(int64) * n);
	states = palloc(sizeof(int) * n);
	done = palloc(sizeof(Datum) * n);
	done_ids = palloc(sizeof(Datum) * n);
	gone = palloc(sizeof(Datum) * n);
	ids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		seqs[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
											  SPI_tuptable->tupdesc, 1, &isnull));
		ids[i] = datumCopy(SPI_getbinval(SPI_tuptable->vals[i],
										 SPI_tuptable->tupdesc, 2, &isnull),
						   false, UUID_LEN);
	}
	*first = seqs[0];
	SubsProbeStream(req->topic, seqs, n, states);
	for (i = 0; i < n; i++)
	{
		if (states[i] == STREAM_COMMITTED && ndone < want)
		{
			done_ids[ndone] = ids[i];
			done[ndone++] = Int64GetDatum(seqs[i]);
		}
		else if (states[i] == STREAM_GONE)
			gone[ngone++] = Int64GetDatum(seqs[i]);
	}
	*changed = ngone > 0 || ndone > 0;
	if (ngone > 0)
	{
		args[1] = SubsArray(gone, NULL, ngone, INT8OID);
		if (SpiExecute(&stmt_holes_gone, args, NULL, false, 0) > 0)
			SubsPromoteReturned(1, 2);
	}
	if (ndone == 0)
		return 0;
	args[1] = PointerGetDatum(req->topic);
	args[2] = SubsArray(done, NULL, ndone, INT8OID);
	/* due by the clock after the probe, as in the fresh read (below) */
	args[3] = TimestampTzGetDatum(Max(req->now, GetCurrentTimestamp()));
	args[4] = TimestampTzGetDatum(lease_end);
	args[5] = PointerGetDatum(req->owner);
	args[6] = SubsArray(done_ids, NULL, ndone, UUIDOID);
	(void) SpiExecute(&stmt_holes_done, args, NULL, false, 0);
	return SubsSinkRows(sink, &last);
}

/* Has one of the n entries an ordering key? */
static bool
obx_any_key(const StreamEntry *entries, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (entries[i].key != NULL)
			return true;
	return false;
}

/*
 * Read the log from the frontier, under the subscription's lock (taken by
 * the caller): the holes first, then up to want messages leased, in at
 * most SUBS_FRESH_READS reads.  The lock is released before the
 * transaction ends unless a message read waits behind an earlier one of
 * its key.  Returns how many were leased; *changer, when none was because
 * the read stopped at a message whose key another transaction is changing
 * (SubsProbeKeys), that transaction.
 */
int
SubsClaimLog(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
			 int want, SubsSink *sink, TransactionId *changer)
{
	Datum		args[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	SubsFrontier f;
	int64		horizon;
	int64		next;
	int			got;
	int			reads;
	bool		keyed = false;
	bool		hold;
	bool		stop = false;
	StreamEntry *entries;
	HoleMark   *mark;
	int64		lowest;
	int64		first;

	args[0] = sub;

	/*
	 * The frontier first: a claim that commits between the two reads is
	 * then either still in progress in the frontier (its range counts for
	 * the mark) or committed before the holes are read (they show its
	 * holes).
	 */
	SubsFrontierRead(&f, DatumGetInt32(sub));
	lowest = SubsFrontierFloor(&f);
	mark = SubsHoleMark(DatumGetInt32(sub));
	got = obx_claim_holes(sub, req, lease_end, want, mark->from, sink, &keyed,
						  &first);
	if (f.nrows > 0 &&
		!(TransactionIdIsValid(mark->changed) &&
		  TransactionIdEquals(mark->changed, GetTopTransactionIdIfAny())))
		mark->from = Max(mark->from, Min(lowest, first));
	if (keyed)
		mark->changed = GetTopTransactionIdIfAny();
	hold = keyed;

	/*
	 * After the lock: below the horizon every append has its row in.  Each
	 * call of GapHorizon takes a new position, so it is called once, not
	 * inside Min, which evaluates the smaller of its arguments twice: a
	 * second horizon, taken later, may lie past f.limit, and the claim
	 * would read on past the range a rolled-back claim left, into ranges
	 * that other claims read.
	 */
	horizon = GapHorizon();
	horizon = Min(horizon, f.limit);
	next = f.start;
	entries = palloc(sizeof(StreamEntry) * (want + SUBS_MAX_HOLES));

	args[1] = PointerGetDatum(req->topic);
	args[5] = TimestampTzGetDatum(req->now);
	args[6] = TimestampTzGetDatum(lease_end);
	args[7] = PointerGetDatum(req->owner);
	for (reads = 0; reads < SUBS_FRESH_READS && got < want && next < horizon && !stop;
		 reads++)
	{
		Datum	   *fresh;
		Datum	   *hseq;
		Datum	   *hid;
		Datum	   *hkey;
		bool	   *hkeynull;
		Datum	   *havail;
		int			nfresh = 0;
		int			nholes = 0;
		int64		end;
		int64		last;
		int			n;
		int			i;

		n = SubsReadStream(req->topic, next, horizon, want - got, SUBS_MAX_HOLES,
						   entries, &end);
		if (n > 0)
		{
			bool		waits;
			int			keep = SubsProbeKeys(DatumGetInt32(sub), entries, n, &waits,
											 changer);
			TransactionId undone = keep > 0 && obx_any_key(entries, keep) ?
				SubsFrontierRolledBack(&f) : InvalidTransactionId;

			/*
			 * Up to a message whose key another transaction is changing;
			 * nothing when a message read has a key and a claim below has
			 * rolled back: its range, read again before anything after it,
			 * may hold earlier messages of that key.
			 */
			if (TransactionIdIsValid(undone))
			{
				keep = 0;
				*changer = undone;
			}
			if (keep < n)
			{
				end = entries[keep].seq;
				n = keep;
				stop = true;
			}
			if (waits)
				hold = true;
		}
		if (n > 0)
		{
			fresh = palloc(sizeof(Datum) * n);
			hseq = palloc(sizeof(Datum) * n);
			hid = palloc(sizeof(Datum) * n);
			hkey = palloc(sizeof(Datum) * n);
			hkeynull = palloc(sizeof(bool) * n);
			havail = palloc(sizeof(Datum) * n);
			for (i = 0; i < n; i++)
			{
				StreamEntry *e = &entries[i];

				if (!e->in_progress)
				{
					fresh[nfresh++] = UUIDPGetDatum(&e->id);
					continue;
				}
				hseq[nholes] = Int64GetDatum(e->seq);
				hid[nholes] = UUIDPGetDatum(&e->id);
				hkey[nholes] = PointerGetDatum(e->key);
				hkeynull[nholes] = e->key == NULL;
				havail[nholes] = TimestampTzGetDatum(e->available_at);
				nholes++;
			}
			args[2] = SubsArray(fresh, NULL, nfresh, UUIDOID);
			args[3] = SubsArray(hseq, NULL, nholes, INT8OID);
			args[4] = SubsArray(hid, NULL, nholes, UUIDOID);
			args[8] = SubsArray(hkey, hkeynull, nholes, TEXTOID);
			args[9] = SubsArray(havail, NULL, nholes, TIMESTAMPTZOID);

			/*
			 * Due is judged by the clock after the read: a message whose
			 * append began after this claim did (its available_at) and
			 * committed before the read is due, and leased now.  Judged
			 * at the claim's start it got a state row to wait in, read
			 * by the next claims through subscription_state_due_idx,
			 * whose entries of leased rows a held snapshot keeps.
			 */
			args[5] = TimestampTzGetDatum(Max(req->now, GetCurrentTimestamp()));
			(void) SpiExecute(&stmt_claim_fresh, args, nulls, false, 0);
			got += SubsSinkRows(sink, &last);
		}
		next = end;
	}
	SubsFrontierAdvance(&f, next, req->now);
	if (!stop || got > 0)
		*changer = InvalidTransactionId;

	/*
	 * Unless a message read waits behind an earlier one of its key, nothing
	 * here is decided against the next claim's range, so the next claim
	 * reads on now, the rows of this claim being in the frontier's chain
	 * and read again if this transaction rolls back.  A keyed message read
	 * is its key's head: a later claim that reads the key's next message
	 * finds this claim's row in progress (SubsProbeKeys) and stops before
	 * it.  A message that waits behind an earlier one must be handed over
	 * when that one is done, by a completion that sees its row: so the lock
	 * is kept until this transaction ends.  (Under load, test
	 * 142_subscriptions_claim_rollback once saw two claims insert a state
	 * row for one position with the lock released early: a claim reading a
	 * rolled-back range again took a second horizon past its limit (above),
	 * and a scan of the frontier took for live a row that a claim had
	 * inserted and deleted, which committed meanwhile; both are fixed, see
	 * SubsFrontierRead.)
	 */
	if (SUBS_RELEASE_BEFORE_COMMIT && !hold && f.chain)
		SubsUnlock(DatumGetInt32(sub));
	return got;
}
