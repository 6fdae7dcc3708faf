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
#include "utils/timestamp.h"

#include "outbox_claim_int.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_store_routes.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/*
 * A claim across all topics: the topics and their claim positions come as
 * the arrays $1, $7 and $8 (from obx_stream_topics).  It takes the first
 * ACROSS_CANDIDATES batches of each topic's deferred and fresh due
 * messages, keeps as many of the oldest of them all, and locks the first
 * of those that no other claim holds.  The candidates are read without
 * locks (locking them per topic would lock a batch in every topic), so
 * claims across all topics at once share them: up to ACROSS_CANDIDATES
 * such claims each get a full batch, and one more may come out short (with
 * two batches of candidates, 4 workers drained a topic in claims of 31 on
 * average); claims of one topic each scale without that limit.
 */
#define ACROSS_CANDIDATES "4"

static SavedStatement stmt_claim_stream_any = {
	"WITH " CLAIM_UPDATE_BY("ctid")
	" SELECT c.ctid FROM outbox.message c"
	" WHERE c.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	"  SELECT x.ctid FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($7),"
	"   pg_catalog.unnest($8)) AS t(topic, pos, floor),"
	"  LATERAL ("
	"   (SELECT o.ctid, o.available_at, o.id FROM outbox.message o"
	STREAM_DEFERRED_DUE("o", "t.topic", "t.floor", "NULL::pg_catalog.int8[]")
	"    ORDER BY o.available_at, o.id LIMIT $3 OPERATOR(pg_catalog.*) " ACROSS_CANDIDATES ")"
	"   UNION ALL"
	"   (SELECT o.ctid, o.available_at, o.id FROM outbox.message o"
	STREAM_FRESH_DUE("o", "t.topic", "t.pos", "t.floor", "NULL::pg_catalog.int8[]")
	"    ORDER BY o.seq LIMIT $3 OPERATOR(pg_catalog.*) " ACROSS_CANDIDATES ")) x"
	"  ORDER BY x.available_at, x.id LIMIT $3 OPERATOR(pg_catalog.*) " ACROSS_CANDIDATES "))"
	" AND " CLAIM_DUE("c")
	" ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED"
	")) RETURNING m.*) SELECT * FROM claimed ORDER BY available_at, id",
	SPI_OK_SELECT,
	8, {TEXTARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID, INT8ARRAYOID,
		INT8ARRAYOID}
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
 * Not the routed ones: a route's subscription is claimed only by its
 * deliveries, so a claim across all topics never takes its messages.
 */
static SavedStatement stmt_stream_topics = {
	STREAM_TOPICS
	" AND NOT EXISTS (SELECT 1 FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) t.topic)",
	SPI_OK_SELECT,
	0, {InvalidOid}
};

/* 1.5: the topics whose default subscription has no route */
static SavedStatement stmt_stream_topics_v15 = {
	STREAM_TOPICS
	" AND NOT EXISTS (SELECT 1 FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) t.topic"
	" AND r.subscription IS NULL)",
	SPI_OK_SELECT,
	0, {InvalidOid}
};

static bool obx_stream_topics(TimestampTz now, Datum *topics, Datum *positions,
							  Datum *floors);

/*
 * The topics that have messages and their claim positions, moved forward
 * first, as a text[] in *topics and bigint[]s in *positions and *floors
 * (their key floors), allocated in the SPI connection.  False when
 * outbox.message is empty.
 */
static bool
obx_stream_topics(TimestampTz now, Datum *topics, Datum *positions,
				  Datum *floors)
{
	uint64		n = SpiExecute(StoreRoutesPerSubscription() ? &stmt_stream_topics_v15 :
							   &stmt_stream_topics, NULL, NULL, false, 0);
	SPITupleTable *tuptable = SPI_tuptable;
	Datum	   *names;
	Datum	   *pos;
	Datum	   *flo;
	uint64		i;
	uint64		kept;

	if (n == 0)
	{
		SPI_freetuptable(tuptable);
		return false;
	}
	names = palloc(sizeof(Datum) * n);
	pos = palloc(sizeof(Datum) * n);
	flo = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		names[i] = PointerGetDatum(DatumGetTextPCopy(SPI_getbinval(tuptable->vals[i],
																	tuptable->tupdesc,
																	1, &isnull)));
	}
	SPI_freetuptable(tuptable);

	/* not the topics whose default subscription was dropped or is paused */
	if (SubsDefaultDropped(NULL))
	{
		for (i = 0, kept = 0; i < n; i++)
			if (!SubsDefaultHeld(DatumGetTextPP(names[i]), now, NULL))
				names[kept++] = names[i];
		n = kept;
	}
	if (n == 0)
		return false;

	for (i = 0; i < n; i++)
	{
		StreamClaimState st;
		int64		floor;
		int			h;

		/* this claim knows no passed key: it reads from the first of them */
		StoreClaimState(DatumGetTextPP(names[i]), now, &st);
		floor = StreamStateFloor(&st);
		pos[i] = Int64GetDatum(floor);
		for (h = 0; h < st.nholes; h++)
			floor = Min(floor, st.holes[h]);
		flo[i] = Int64GetDatum(floor);
	}

	*topics = PointerGetDatum(construct_array(names, (int) n, TEXTOID,
											  -1, false, TYPALIGN_INT));
	*positions = ClaimInt8Array(pos, (int) n);
	*floors = ClaimInt8Array(flo, (int) n);
	return true;
}

/*
 * The claim across all topics, with its arguments $1 (the topics), $7
 * (their positions) and $8 (their key floors) in args; NULL when no topic
 * is to be claimed.  Called in an SPI connection.
 */
SavedStatement *
ClaimAcrossPrepare(TimestampTz now, Datum *args)
{
	if (!obx_stream_topics(now, &args[0], &args[6], &args[7]))
		return NULL;
	return &stmt_claim_stream_any;
}
