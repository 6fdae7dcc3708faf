/*-------------------------------------------------------------------------
 *
 * outbox_store_across.c
 *		The claim across all topics (claim(owner) without a topic) of the
 *		tables of 1.2 and later: the topics that have messages, each with
 *		its claim position, and the statement that claims from all of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox_claim_int.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_store_routes.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/*
 * A claim across all topics with one topic to claim is a claim of that
 * topic (outbox_store_claim.c).  With several, it runs in rounds of two
 * statements.  The first reads candidates without locks: the topics and
 * their claim positions
 * come as the arrays $1, $7 and $8 (from obx_stream_topics), and it takes
 * the first $3 of each topic's deferred and fresh due messages and keeps
 * the $3 oldest of them all.  The second locks the first of those that no
 * other claim holds (SKIP LOCKED) and leases them.  Locking per topic would
 * lock a batch in every topic, so concurrent claims across all topics
 * share the candidates: a round that finds them all held by claims in
 * flight, or taken by claims that committed after it read them, leases
 * few or none while more due messages lie beyond.  So a round that comes
 * out short with as many candidates as it asked for is followed by one
 * that reads ACROSS_WIDEN times as many, with a new snapshot, up to
 * ACROSS_CANDIDATES_MAX (see ClaimAcrossReach): four workers claiming 50
 * across four topics came back empty while thousands were due, and a
 * pull loop that sleeps on an empty claim stalled with a backlog.  Claims
 * of one topic lock as they read and need no second round.
 *
 * The passed keys of the topics (see outbox_store_position.c) come as the
 * two-dimensional arrays $9 (keys) and $10 (their froms), a row per topic
 * as long as the most passed keys one topic has, padded with '' and 0 (no
 * ordering key is empty), or empty when no topic has one.  As in the claim
 * of one topic, the read from the position leaves their messages out, and
 * their heads are candidates too.  The key rule is checked from the
 * topic's floor (the lowest of its position and holes, whose positions
 * this claim does not get), and from a passed key's from when that is
 * lower.
 *
 * Each topic's deferred messages are read from where this backend's claims
 * of it left off (the arrays $11 and $12, see outbox_claim_hint.c), so a
 * held snapshot does not make every claim pass the row versions of the
 * deferred messages completed before it.
 */
#define ACROSS_CANDIDATES		4	/* batches read by the first round */
#define ACROSS_WIDEN			4	/* each round after reads so many times more */
#define ACROSS_CANDIDATES_MAX	4096

/* the passed keys of topic t, and their froms */
#define ACROSS_PASSED \
	"ROWS FROM (pg_catalog.unnest($9[t.n:t.n]), pg_catalog.unnest($10[t.n:t.n])) AS e(key, lower)"
#define ACROSS_KEY_LOWER(a) \
	"LEAST(t.floor, (SELECT pg_catalog.min(e.lower) FROM " ACROSS_PASSED \
	" WHERE e.key OPERATOR(pg_catalog.=) " a ".ordering_key))"

/* the heads of topic t's passed keys, when any topic has some */
#define ACROSS_PASSED_PART \
	"   UNION ALL" \
	"   (SELECT h.ctid, h.available_at, h.id FROM " ACROSS_PASSED ", LATERAL (" \
	"    SELECT o.ctid, o.topic, o.ordering_key, o.seq, o.available_at, o.leased_until, o.id" \
	"    FROM outbox.message o WHERE o.topic OPERATOR(pg_catalog.=) t.topic" \
	"    AND o.ordering_key OPERATOR(pg_catalog.=) e.key AND o.ordering_key IS NOT NULL" \
	"    AND o.seq OPERATOR(pg_catalog.>=) e.lower AND NOT o.deferred AND " STREAM_PENDING("o") \
	"    ORDER BY o.seq LIMIT 1) h" \
	"    WHERE e.key OPERATOR(pg_catalog.<>) '' AND h.available_at OPERATOR(pg_catalog.<=) $2" \
	"    AND (h.leased_until IS NULL OR h.leased_until OPERATOR(pg_catalog.<=) $2)" \
	KEY_HEAD_AT("h", "t.topic", "LEAST(e.lower, t.floor)", "NULL::pg_catalog.int8[]") ")"

#define ACROSS_CANDIDATES_OF(passed) { \
	"SELECT ARRAY(" \
	"  SELECT x.ctid FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($7)," \
	"   pg_catalog.unnest($8), pg_catalog.unnest($11), pg_catalog.unnest($12))" \
	"   WITH ORDINALITY AS t(topic, pos, floor, hint_at, hint_id, n)," \
	"  LATERAL (" \
	"   (SELECT o.ctid, o.available_at, o.id FROM outbox.message o" \
	STREAM_DEFERRED_DUE("o", "t.topic", ACROSS_KEY_LOWER("o"), "NULL::pg_catalog.int8[]") \
	"    AND (o.available_at, o.id) OPERATOR(pg_catalog.>=) (t.hint_at, t.hint_id)" \
	"    ORDER BY o.available_at, o.id LIMIT $3)" \
	passed \
	"   UNION ALL" \
	"   (SELECT o.ctid, o.available_at, o.id FROM outbox.message o" \
	STREAM_FRESH_DUE("o", "t.topic", "t.pos", "t.floor", "NULL::pg_catalog.int8[]") \
	"    AND (o.ordering_key IS NULL OR o.ordering_key OPERATOR(pg_catalog.<>) ALL ($9[t.n:t.n]))" \
	"    ORDER BY o.seq LIMIT $3)) x" \
	"  ORDER BY x.available_at, x.id LIMIT $3)", \
	SPI_OK_SELECT, \
	12, {TEXTARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID, INT8ARRAYOID, \
		 INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID, UUIDARRAYOID} }

/* [1]: when a topic has passed keys (as in outbox_store_claim.c) */
SAVED_STATEMENTS(stmt_across_candidates, 2) = {
	ACROSS_CANDIDATES_OF(""), ACROSS_CANDIDATES_OF(ACROSS_PASSED_PART)
};

/*
 * $1 the candidates (tid[]): the first $3 due ones that no other claim
 * holds, leased with $2 and $4 to $6 as a claim of one topic does
 */
SAVED_STATEMENT(stmt_claim_across) = {
	"WITH " CLAIM_UPDATE_BY("ctid")
	" SELECT c.ctid FROM outbox.message c"
	" WHERE c.ctid OPERATOR(pg_catalog.=) ANY ($1) AND " CLAIM_DUE("c")
	" ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED"
	")) RETURNING m.*) SELECT * FROM claimed ORDER BY available_at, id",
	SPI_OK_SELECT,
	6, {TIDARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID}
};

/*
 * The topics that have messages, skipping backwards through the stream
 * index: each step lands on the newest message of the topic before, which
 * purge has not deleted, so the walk reads one entry per topic however
 * many deleted rows a held snapshot keeps in the index.
 */
#define STREAM_TOPICS \
	"WITH RECURSIVE topics(topic) AS (" \
	" (SELECT s.topic FROM outbox.message s ORDER BY s.topic DESC, s.seq DESC LIMIT 1)" \
	" UNION ALL" \
	" SELECT (SELECT s.topic FROM outbox.message s" \
	"  WHERE s.topic OPERATOR(pg_catalog.<) t.topic" \
	"  ORDER BY s.topic DESC, s.seq DESC LIMIT 1)" \
	" FROM topics t WHERE t.topic IS NOT NULL)" \
	" SELECT t.topic FROM topics t WHERE t.topic IS NOT NULL"

/*
 * The topics whose claim positions may have work ($1), those whose first
 * deferred message (the first entry of message_deferred_idx) is due by
 * $2, and the topics $3 that this backend's claims follow a hint of
 * (outbox_claim_hint.c; a claim reads each of them from its hint, or from
 * its first entry once a second), skipping through that index: one entry
 * per other topic with deferred messages.  The topics $3 are not looked
 * at but stepped over, between two bounded searches: under a held
 * snapshot the first entry of a topic lies behind every deferred message
 * completed since the snapshot was taken, and a claim across all topics
 * passed them all at each look (a retried backlog drained at half the rate
 * of the claim of its topic).
 */
#define STREAM_DUE_NEXT(bound) \
	"(SELECT s.topic, s.available_at FROM outbox.message s" \
	" WHERE s.deferred AND s.dead_at IS NULL AND s.topic OPERATOR(pg_catalog.>) d.topic" \
	bound " ORDER BY s.topic, s.available_at, s.id LIMIT 1)"
#define STREAM_DUE_TOPICS \
	"WITH RECURSIVE d(topic, at, hinted) AS (" \
	" SELECT ''::pg_catalog.text, NULL::pg_catalog.timestamptz, true" \
	" UNION ALL" \
	" SELECT n.topic, n.at, n.hinted FROM d CROSS JOIN LATERAL (" \
	"  SELECT pg_catalog.min(h.topic) AS topic FROM pg_catalog.unnest($3::pg_catalog.text[]) h(topic)" \
	"  WHERE h.topic OPERATOR(pg_catalog.>) d.topic) nh CROSS JOIN LATERAL (" \
	"  SELECT e.topic, e.available_at AS at, false AS hinted FROM (" \
	STREAM_DUE_NEXT(" AND nh.topic IS NULL") " UNION ALL " \
	STREAM_DUE_NEXT(" AND s.topic OPERATOR(pg_catalog.<) nh.topic") ") e" \
	"  UNION ALL SELECT nh.topic, NULL, true WHERE nh.topic IS NOT NULL" \
	"  ORDER BY 3 LIMIT 1) n)" \
	" SELECT t.topic FROM (SELECT d.topic FROM d WHERE d.topic OPERATOR(pg_catalog.<>) ''" \
	"  AND (d.hinted OR d.at OPERATOR(pg_catalog.<=) $2)" \
	"  UNION SELECT u.topic FROM pg_catalog.unnest($1::pg_catalog.text[]) u(topic)) t" \
	" WHERE true"

/*
 * Not the routed ones: a route's subscription is claimed only by its
 * deliveries, so a claim across all topics never takes its messages.
 */
#define NOT_ROUTED \
	" AND NOT EXISTS (SELECT 1 FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) t.topic)"
/* 1.5: the topics whose default subscription has no route */
#define NOT_ROUTED_V15 \
	" AND NOT EXISTS (SELECT 1 FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) t.topic" \
	" AND r.subscription IS NULL)"

/* [1]: the tables of 1.5 */
SAVED_STATEMENTS(stmt_stream_topics, 2) = {
	{STREAM_TOPICS NOT_ROUTED, SPI_OK_SELECT, 0, {InvalidOid}},
	{STREAM_TOPICS NOT_ROUTED_V15, SPI_OK_SELECT, 0, {InvalidOid}}
};
SAVED_STATEMENTS(stmt_due_topics, 2) = {
	{STREAM_DUE_TOPICS NOT_ROUTED, SPI_OK_SELECT, 3, {TEXTARRAYOID, TIMESTAMPTZOID, TEXTARRAYOID}},
	{STREAM_DUE_TOPICS NOT_ROUTED_V15, SPI_OK_SELECT, 3, {TEXTARRAYOID, TIMESTAMPTZOID, TEXTARRAYOID}}
};

/* the topics $1, as stmt_due_topics filters them */
#define GIVEN_TOPICS \
	"SELECT DISTINCT t.topic FROM pg_catalog.unnest($1::pg_catalog.text[]) t(topic) WHERE true"
SAVED_STATEMENTS(stmt_given_topics, 2) = {
	{GIVEN_TOPICS NOT_ROUTED, SPI_OK_SELECT, 1, {TEXTARRAYOID}},
	{GIVEN_TOPICS NOT_ROUTED_V15, SPI_OK_SELECT, 1, {TEXTARRAYOID}}
};

/*
 * The topics this backend's last look for due deferred messages found
 * (stmt_due_topics), and when it looked.  While the backend follows hints
 * (outbox_claim_hint.c) its claims across all topics look once a second
 * and read the topics found then in between: under a held snapshot the
 * look passed, at each topic, every deferred message completed since the
 * snapshot was taken (a retried backlog drained at a tenth of its rate
 * without one).  A topic whose first deferred message falls due meanwhile
 * waits at most that second, as a message behind a hint does.
 */
#define DUE_LOOK_MAX_AGE	USECS_PER_SEC
static text **due_topics;
static int	ndue_topics;
static bool due_kept = false;
static TimestampTz due_looked;

/* stmt_due_topics' result, kept as this backend's last look at now */
static void
obx_keep_due_topics(TimestampTz now)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	int			i;

	for (i = 0; i < ndue_topics; i++)
		pfree(due_topics[i]);
	if (due_topics != NULL)
		pfree(due_topics);
	due_topics = palloc(sizeof(text *) * Max(SPI_processed, 1));
	for (i = 0; i < (int) SPI_processed; i++)
	{
		bool		isnull;

		due_topics[i] = DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[i],
														SPI_tuptable->tupdesc, 1, &isnull));
	}
	ndue_topics = (int) SPI_processed;
	due_kept = true;
	due_looked = now;
	MemoryContextSwitchTo(old);
}

static bool obx_stream_topics(TimestampTz now, Datum *args, bool *any_passed,
							  text **single);
static uint64 obx_list_topics(TimestampTz now, bool *walk, uint64 *lost,
							  Datum **names);

/*
 * The topics a claim across all topics reads, into *names (their number
 * returned): those whose claim positions may have work and those with
 * deferred messages due, or (*walk) every topic that has messages when
 * the positions do not tell (see outbox_stream_across.c), with *lost what
 * StreamAcrossComplete is to be given.
 */
static uint64
obx_list_topics(TimestampTz now, bool *walk, uint64 *lost, Datum **names)
{
	List	   *known;
	uint64		n;
	uint64		i;
	int			v = StoreRoutesPerSubscription() ? 1 : 0;

	*walk = !StreamAcrossTopics(now, &known);
	if (*walk)
	{
		*lost = StreamAcrossBegin();
		n = SpiExecute(&stmt_stream_topics[v], NULL, NULL, false, 0);
	}
	else
	{
		Datum		args[3];
		bool		look = !due_kept || !ClaimHintsHeld() || due_looked > now ||
			now - due_looked >= DUE_LOOK_MAX_AGE;
		Datum	   *elems = palloc(sizeof(Datum) *
								   Max(list_length(known) + (look ? 0 : ndue_topics), 1));
		ListCell   *lc;
		int			k = 0;

		foreach(lc, known)
			elems[k++] = PointerGetDatum(lfirst(lc));
		for (i = 0; !look && i < (uint64) ndue_topics; i++)
			elems[k++] = PointerGetDatum(due_topics[i]);
		args[0] = PointerGetDatum(construct_array(elems, k, TEXTOID, -1, false,
												  TYPALIGN_INT));
		args[1] = TimestampTzGetDatum(now);
		if (look)
		{
			args[2] = ClaimHintTopics(now);
			n = SpiExecute(&stmt_due_topics[v], args, NULL, false, 0);
			obx_keep_due_topics(now);
		}
		else
			n = SpiExecute(&stmt_given_topics[v], args, NULL, false, 0);
	}
	*names = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(*names)[i] = PointerGetDatum(DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[i],
																	   SPI_tuptable->tupdesc,
																	   1, &isnull)));
	}
	SPI_freetuptable(SPI_tuptable);
	return n;
}

/*
 * The topics to claim and their claim states, moved forward first, as the
 * arguments of stmt_claim_stream_any in args: a text[] of the topics
 * ($1), bigint[]s of their positions ($7) and floors ($8), the
 * two-dimensional arrays of their passed keys ($9, $10), and where their
 * deferred messages are read from ($11, $12), allocated in the SPI
 * connection; *any_passed says whether a topic has passed keys.
 * False when there is no topic to claim, or when only one is and no walk
 * of every topic came first: that one into *single, with no arguments (a
 * claim of one topic locks its messages as it reads them, where the claim
 * across all topics reads candidates first, four batches of them, and
 * then locks: twice the reads, which a held snapshot makes dearer).  A
 * walk of every topic marks the claim positions of topics whose default
 * subscription is held, searches all others, and then lets the next claims
 * visit only those with work, until a paused one's pause ends at the
 * latest.
 */
static bool
obx_stream_topics(TimestampTz now, Datum *args, bool *any_passed, text **single)
{
	uint64		lost = 0;
	TimestampTz until = StreamAcrossUntil(now);
	bool		walk;
	Datum	   *names;
	Datum	   *pos;
	Datum	   *flo;
	Datum	   *keys;
	Datum	   *froms;
	Datum		empty;
	int		   *nkeys;
	StreamHint *hints;
	int			width = 0;
	struct SavedFloors *floors;
	int			dims[2];
	int			lbs[2] = {1, 1};
	uint64		n = obx_list_topics(now, &walk, &lost, &names);
	uint64		i;
	uint64		kept;

	/* not the topics whose default subscription was dropped or is paused */
	if (n > 0 && SubsDefaultDropped(NULL))
	{
		for (i = 0, kept = 0; i < n; i++)
		{
			TimestampTz held_until;

			if (SubsDefaultHeld(DatumGetTextPP(names[i]), now, &held_until))
			{
				StreamMarkHeld(DatumGetTextPP(names[i]));
				until = Min(until, held_until);
				continue;
			}
			names[kept++] = names[i];
		}
		n = kept;
	}
	if (n == 1 && !walk)
	{
		*single = DatumGetTextPP(names[0]);
		return false;
	}

	pos = palloc(sizeof(Datum) * Max(n, 1));
	flo = palloc(sizeof(Datum) * Max(n, 1));
	/* the padding of the rows: no ordering key is empty */
	empty = CStringGetTextDatum("");
	keys = palloc(sizeof(Datum) * Max(n, 1) * STREAM_MAX_PASSED_KEYS);
	froms = palloc(sizeof(Datum) * Max(n, 1) * STREAM_MAX_PASSED_KEYS);
	nkeys = palloc(sizeof(int) * Max(n, 1));
	hints = palloc(sizeof(StreamHint) * Max(n, 1));
	/* a walk reads the saved floors at once, not one look-up per topic */
	floors = walk ? StoreSavedFloors() : NULL;
	for (i = 0; i < n; i++)
	{
		StreamClaimState st;
		int64		floor;
		int			k;

		StoreClaimState(DatumGetTextPP(names[i]), now,
						floors ? StoreSavedFloorOf(floors, DatumGetTextPP(names[i])) :
						STORE_SAVED_LOOK, &st);
		StoreClaimKeys(DatumGetTextPP(names[i]), &st,
					   &keys[i * STREAM_MAX_PASSED_KEYS]);
		hints[i] = st.hint;
		pos[i] = Int64GetDatum(st.position);
		floor = st.position;
		for (k = 0; k < st.nholes; k++)
			floor = Min(floor, st.holes[k]);
		flo[i] = Int64GetDatum(floor);
		for (k = 0; k < st.nkeys; k++)
			froms[i * STREAM_MAX_PASSED_KEYS + k] = Int64GetDatum(st.keys[k].from);
		nkeys[i] = st.nkeys;
		width = Max(width, st.nkeys);
	}
	if (walk)
		StreamAcrossComplete(lost, until);
	if (n == 0)
		return false;

	args[0] = PointerGetDatum(construct_array(names, (int) n, TEXTOID,
											  -1, false, TYPALIGN_INT));
	args[6] = ClaimInt8Array(pos, (int) n);
	args[7] = ClaimInt8Array(flo, (int) n);
	ClaimHintArgsAcross(names, hints, (int) n, now, args);
	*any_passed = width > 0;
	if (width == 0)
	{
		args[8] = PointerGetDatum(construct_empty_array(TEXTOID));
		args[9] = PointerGetDatum(construct_empty_array(INT8OID));
		return true;
	}
	/* rows of width keys each, in place */
	for (i = 0; i < n; i++)
	{
		int			k;

		for (k = 0; k < width; k++)
		{
			bool		used = k < nkeys[i];

			keys[i * width + k] = used ? keys[i * STREAM_MAX_PASSED_KEYS + k] : empty;
			froms[i * width + k] = used ? froms[i * STREAM_MAX_PASSED_KEYS + k] :
				Int64GetDatum(0);
		}
	}
	dims[0] = (int) n;
	dims[1] = width;
	args[8] = PointerGetDatum(construct_md_array(keys, NULL, 2, dims, lbs, TEXTOID,
												 -1, false, TYPALIGN_INT));
	args[9] = PointerGetDatum(construct_md_array(froms, NULL, 2, dims, lbs, INT8OID,
												 sizeof(int64), FLOAT8PASSBYVAL,
												 TYPALIGN_DOUBLE));
	return true;
}

/*
 * The claim across all topics, with its arguments $1, $7 to $12 in args
 * (room for 12): the statement that reads its candidates, for
 * ClaimAcrossRound; NULL when no topic is to be claimed, or when one only
 * is, *single (set, else NULL).  Called in an SPI connection.
 */
SavedStatement *
ClaimAcrossPrepare(TimestampTz now, Datum *args, text **single)
{
	bool		passed;

	*single = NULL;
	if (!obx_stream_topics(now, args, &passed, single))
		return NULL;
	return &stmt_across_candidates[passed ? 1 : 0];
}

/*
 * How many candidates round (from 0) of a claim across all topics that
 * wants so many messages reads; 0 when there is no such round.
 */
int
ClaimAcrossReach(int wanted, int round)
{
	int64		reach = (int64) wanted * ACROSS_CANDIDATES;

	for (; round > 0; round--)
	{
		if (reach >= ACROSS_CANDIDATES_MAX)
			return 0;
		reach = Min(reach * ACROSS_WIDEN, ACROSS_CANDIDATES_MAX);
	}
	return (int) reach;
}

/*
 * One round of a claim across all topics: up to reach candidates read by
 * candidates (from ClaimAcrossPrepare, its arguments in args, with $2 and
 * $4 to $6 of the claim), and up to wanted of them leased, into
 * SPI_tuptable.  Returns the number of candidates read; none leaves no
 * claim's result.  Called in an SPI connection.
 */
int
ClaimAcrossRound(SavedStatement *candidates, Datum *args, int wanted, int reach)
{
	Datum		claim[6];
	ArrayType  *tids;
	bool		isnull;
	int			n;

	args[2] = Int32GetDatum(reach);
	(void) SpiExecute(candidates, args, NULL, false, 0);
	tids = DatumGetArrayTypePCopy(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	n = ArrayGetNItems(ARR_NDIM(tids), ARR_DIMS(tids));
	if (n == 0)
		return 0;

	claim[0] = PointerGetDatum(tids);
	claim[1] = args[1];
	claim[2] = Int32GetDatum(wanted);
	claim[3] = args[3];
	claim[4] = args[4];
	claim[5] = args[5];
	(void) SpiExecute(&stmt_claim_across, claim, NULL, false, 0);
	return n;
}
