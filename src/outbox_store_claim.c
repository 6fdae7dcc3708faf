/*-------------------------------------------------------------------------
 *
 * outbox_store_claim.c
 *		The claims: leasing a batch of due messages of outbox.message, or
 *		claiming and marking it delivered at once for a NOTIFY route.
 *
 * A claim is one UPDATE over the oldest due messages, locked with SKIP
 * LOCKED so that concurrent claims take disjoint rows.  A candidate whose
 * lease expired on its last allowed attempt is marked dead by that UPDATE
 * instead of being leased again, so it is never delivered once more (in
 * the tables of 1.0 and 1.1 a statement before the claim marks them).  The
 * SQL function claim() and delivery go through one claim loop that hands
 * each leased row to a sink (outbox_claim_sink.c).
 *
 * Glossary:
 *	due			neither delivered nor dead, available_at reached, no valid
 *				lease
 *	expired last attempt
 *				a lease that ran out on the message's last allowed attempt:
 *				the message is dead, not due
 *	sink		where a claim puts the rows it leased
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox_claim_int.h"
#include "outbox_claim_sink.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"

/*
 * Before a claim of the tables of 1.0 and 1.1: every message of the
 * topic(s) whose lease expired on its last allowed attempt becomes dead,
 * found among the pending messages (their due index).  The claims of the
 * tables of 1.2 need no such statement: a message leased is due again once
 * its lease ends, and the claim reaches it before any message after it (in
 * the order of the deferred index, or in stream order, where a leased
 * message holds the claim position back), and marks it dead.  A statement
 * over the whole topic would read every deferred message of it (none of
 * its indexes has the leases) before each claim: with 100,000 deferred
 * messages, 45 ms per claim, and a drain of them that slowed with their
 * number.
 *
 * $1 topic, $2 now, $3 max attempts
 */
#define DEAD_MARK_SET \
	"UPDATE outbox.message m SET dead_at = $2, leased_until = NULL," \
	" last_error = " LEASE_EXPIRED_ERROR("$3") " " \
	"WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	" SELECT c.id FROM outbox.message c" \
	" WHERE c.leased_until OPERATOR(pg_catalog.<=) $2" \
	" AND c.leased_until OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz" \
	" AND c.attempts OPERATOR(pg_catalog.>=) $3" \
	" AND c.delivered_at IS NULL AND c.dead_at IS NULL"

SAVED_STATEMENT(stmt_dead_mark_topic) = {
	DEAD_MARK_SET " AND c.topic OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED))",
	SPI_OK_UPDATE,
	3, {TEXTOID, TIMESTAMPTZOID, INT4OID}
};

SAVED_STATEMENT(stmt_dead_mark_any) = {
	DEAD_MARK_SET " FOR UPDATE SKIP LOCKED))",
	SPI_OK_UPDATE,
	3, {TEXTOID, TIMESTAMPTZOID, INT4OID}
};

/* The claim's end: lock the oldest candidates, return the leased rows */
#define CLAIM_END \
	" ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED" \
	")) RETURNING m.*) " \
	"SELECT * FROM claimed ORDER BY available_at, id"

#define CLAIM_ARGTYPES \
	6, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID}

/*
 * The claims of the tables of 1.0 and 1.1, read from their index of
 * pending messages (message_due_topic_idx).
 *
 * A claim across all topics has no index of its own (one would cost every
 * append and every claim an index entry more): it takes the oldest due
 * messages of each topic from the topic's index, the topics found by
 * skipping through that index, keeps twice the batch of the oldest of them
 * all, and locks the first of those that no other claim holds.  So two
 * claims across all topics at once share the work, and a third may come
 * out short; claims of one topic each scale without that limit.
 */
#define CLAIM_TOPICS \
	"topics(topic) AS (" \
	" (SELECT c.topic FROM outbox.message c" \
	"  WHERE c.delivered_at IS NULL AND c.dead_at IS NULL ORDER BY c.topic LIMIT 1)" \
	" UNION ALL" \
	" SELECT (SELECT c.topic FROM outbox.message c" \
	"  WHERE c.topic OPERATOR(pg_catalog.>) t.topic" \
	"  AND c.delivered_at IS NULL AND c.dead_at IS NULL ORDER BY c.topic LIMIT 1)" \
	" FROM topics t WHERE t.topic IS NOT NULL)"

SAVED_STATEMENT(stmt_claim_topic) = {
	"WITH " CLAIM_UPDATE
	" SELECT c.id FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND " CLAIM_DUE("c")
	CLAIM_END,
	SPI_OK_SELECT,
	CLAIM_ARGTYPES
};

SAVED_STATEMENT(stmt_claim_any) = {
	"WITH RECURSIVE " CLAIM_TOPICS ", " CLAIM_UPDATE
	" SELECT c.id FROM outbox.message c"
	" WHERE c.id OPERATOR(pg_catalog.=) ANY (ARRAY("
	"  SELECT x.id FROM topics t, LATERAL ("
	"   SELECT o.id, o.available_at FROM outbox.message o"
	"   WHERE o.topic OPERATOR(pg_catalog.=) t.topic AND" CLAIM_DUE("o")
	"   ORDER BY o.available_at, o.id LIMIT $3 OPERATOR(pg_catalog.*) 2) x"
	"  WHERE t.topic IS NOT NULL"
	"  ORDER BY x.available_at, x.id LIMIT $3 OPERATOR(pg_catalog.*) 2))"
	" AND " CLAIM_DUE("c")
	CLAIM_END,
	SPI_OK_SELECT,
	CLAIM_ARGTYPES
};

/*
 * Claim for a transactional target (NOTIFY): the messages are marked
 * delivered by the claim itself, one write each, because the delivery
 * commits or rolls back with this very transaction.  Expired last attempts
 * are left to the dead-marking statement.
 *
 * $1 topic, $2 now, $3 batch size, $4 owner, $5 max attempts
 */
SAVED_STATEMENT(stmt_claim_delivered) = {
	"WITH claimed AS (UPDATE outbox.message m SET"
	" attempts = m.attempts OPERATOR(pg_catalog.+) 1, lease_owner = $4,"
	" leased_until = NULL, delivered_at = $2, last_error = NULL "
	"WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY("
	" SELECT c.id FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1"
	" AND c.delivered_at IS NULL AND c.dead_at IS NULL"
	" AND c.available_at OPERATOR(pg_catalog.<=) $2"
	" AND (c.leased_until IS NULL OR (c.leased_until OPERATOR(pg_catalog.<=) $2"
	"      AND c.attempts OPERATOR(pg_catalog.<) $5))"
	" ORDER BY c.available_at, c.id LIMIT $3"
	" FOR UPDATE SKIP LOCKED)) "
	"RETURNING m.id, m.topic, m.event_type, m.created_at, m.payload, m.attempts,"
	" m.leased_until, m.available_at) "
	"SELECT id, topic, event_type, created_at, payload, attempts, leased_until, available_at "
	"FROM claimed ORDER BY available_at, id",
	SPI_OK_SELECT,
	5, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID}
};

/*
 * A claim of one topic gets the passed keys of its position (see
 * outbox_store_position.c) as the arrays $9 (the keys) and $10 (from where
 * each one's pending fresh messages are).  Its read from the position
 * leaves their messages out (a long run of them would be read through),
 * and a keyed message of alias a is checked for the key rule from its
 * key's from when the key is passed, from the position otherwise.
 */
#define NOT_PASSED_KEY(a) \
	" AND (" a ".ordering_key IS NULL" \
	" OR " a ".ordering_key OPERATOR(pg_catalog.<>) ALL ($9))"
#define KEY_LOWER(a) \
	"COALESCE($10[pg_catalog.array_position($9, " a ".ordering_key)], $7)"

/*
 * The window of a claim of one topic: a batch of its fresh due messages in
 * stream order, locked (alias a, the columns cols).
 */
#define CLAIM_WINDOW(a, cols) \
	"SELECT " cols " FROM outbox.message " a \
	STREAM_FRESH_AT(a, "$1", "$7") NOT_PASSED_KEY(a) \
	" ORDER BY " a ".seq LIMIT $3 FOR UPDATE SKIP LOCKED"

/*
 * The heads of the passed keys: each key's first pending fresh message
 * from its from, read without a lock, and locked (SKIP LOCKED) when it is
 * due and no earlier message of its key is pending; a message that
 * changed meanwhile is left out by the TID scan.
 */
#define CLAIM_PASSED_HEADS \
	"SELECT p.ctid FROM outbox.message p" \
	" WHERE p.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT h.ctid FROM ROWS FROM (pg_catalog.unnest($9), pg_catalog.unnest($10))" \
	"   AS e(key, lower), LATERAL (" \
	"   SELECT c.ctid, c.topic, c.ordering_key, c.seq, c.available_at, c.leased_until" \
	"   FROM outbox.message c WHERE c.topic OPERATOR(pg_catalog.=) $1" \
	"   AND c.ordering_key OPERATOR(pg_catalog.=) e.key AND c.ordering_key IS NOT NULL" \
	"   AND c.seq OPERATOR(pg_catalog.>=) e.lower AND NOT c.deferred AND " STREAM_PENDING("c") \
	"   ORDER BY c.seq LIMIT 1) h" \
	"  WHERE h.available_at OPERATOR(pg_catalog.<=) $2" \
	"  AND (h.leased_until IS NULL OR h.leased_until OPERATOR(pg_catalog.<=) $2)" \
	KEY_HEAD_AT("h", "$1", "e.lower", "$8") "))" \
	" AND NOT p.deferred AND " CLAIM_DUE("p") \
	" FOR UPDATE SKIP LOCKED"

/*
 * The claims of one topic: first the deferred messages that are due, then
 * the fresh ones, together at most a batch.  Neither walks a message
 * finished before the claim position, so the cost of a claim does not
 * depend on how many old row versions a held snapshot keeps.  Each part
 * locks with SKIP LOCKED, and rows are locked only as the outer LIMIT takes
 * them.  The candidates are handed to the UPDATE by ctid (see
 * CLAIM_UPDATE_BY).
 *
 * The fresh messages are locked first and checked for the key rule after
 * (the window w, a batch of them in stream order): a message that a
 * concurrent claim holds is skipped without a probe of message_key_idx,
 * and under several claimers most candidates are such messages.  The
 * non-heads of the window stay locked until the claim's transaction ends,
 * which keeps nobody from anything when it ends with the statement, as no
 * claim may take them meanwhile (a claim inside a longer transaction holds
 * them back until it ends, should their heads complete elsewhere first).
 *
 * Only when the window is full do the messages after it follow (f),
 * checked before they are locked: so a key whose head is held back, with a
 * long run of messages at the front of the stream, costs one window of
 * locks per claim, and the keys behind it are still handed out.  Where the
 * window ends is found by reading it again (e), which meets the rows this
 * claim locked and skips the same others; it is read only when the window
 * held too few heads.  (A common table expression read by both would save
 * that, but materializing it made every claim of a topic without keys
 * slower.)
 */
#define CLAIM_STREAM_CANDIDATES_AS(passed, dflag, fflag) \
	" SELECT x.* FROM (" \
	"  SELECT d.ctid" dflag " FROM (SELECT c.ctid FROM outbox.message c" \
	STREAM_DEFERRED_DUE("c", "$1", KEY_LOWER("c"), "$8") \
	"   AND (c.available_at, c.id) OPERATOR(pg_catalog.>=) ($11, $12)" \
	"   ORDER BY c.available_at, c.id LIMIT $3 FOR UPDATE SKIP LOCKED) d" \
	passed \
	"  UNION ALL" \
	"  SELECT w.ctid" fflag " FROM (" CLAIM_WINDOW("c", "c.ctid, c.topic, c.ordering_key, c.seq") ") w" \
	"   WHERE true" KEY_HEAD_AT("w", "$1", "$7", "$8") \
	"  UNION ALL" \
	"  SELECT f.ctid" fflag " FROM (SELECT c.ctid FROM outbox.message c" \
	STREAM_FRESH_DUE("c", "$1", "$7", "$7", "$8") NOT_PASSED_KEY("c") \
	"   AND c.seq OPERATOR(pg_catalog.>) (SELECT CASE WHEN pg_catalog.count(*) OPERATOR(pg_catalog.=) $3" \
	"    THEN pg_catalog.max(e.seq) END FROM (" CLAIM_WINDOW("e", "e.seq") ") e)" \
	"   ORDER BY c.seq LIMIT $3 FOR UPDATE SKIP LOCKED) f" \
	" ) x LIMIT $3"
#define CLAIM_STREAM_CANDIDATES(passed) \
	CLAIM_STREAM_CANDIDATES_AS(passed, "", "") ")) "

/*
 * The heads of the passed keys among the candidates: only in the claims
 * of a position that has passed keys, as the statements [1] below (the
 * part costs 5-8 % of a fresh drain's time even when it finds nothing).
 */
#define CLAIM_PASSED_PART_AS(fflag) \
	"  UNION ALL" \
	"  SELECT p.ctid" fflag " FROM (" CLAIM_PASSED_HEADS ") p"
#define CLAIM_PASSED_PART CLAIM_PASSED_PART_AS("")

#define CLAIM_STREAM_ARGTYPES \
	12, {TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT4OID, INT8OID, \
		 INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, UUIDOID}

/*
 * $1 topic, $2 now, $3 batch size, $4 owner, $5 lease end, $6 max attempts,
 * $7 position, $8 holes (bigint[]), $9 passed keys (text[]), $10 their
 * froms (bigint[]), $11 and $12 the available_at and id from which the
 * deferred messages are read (outbox_claim_hint.c)
 */
#define CLAIM_STREAM(passed) { \
	"WITH " CLAIM_UPDATE_BY("ctid") CLAIM_STREAM_CANDIDATES(passed) \
	"RETURNING m.*) SELECT * FROM claimed ORDER BY available_at, id", \
	SPI_OK_SELECT, \
	CLAIM_STREAM_ARGTYPES }

SAVED_STATEMENTS(stmt_claim_stream, 2) = {
	CLAIM_STREAM(""), CLAIM_STREAM(CLAIM_PASSED_PART)
};

/*
 * The same for a transactional target: marked delivered at once, or dead
 * when the lease of its last allowed attempt expired ($5 is not used).
 * The candidates come with whether they were read as deferred messages
 * (was), returned as the column deferred, which the UPDATE sets to false:
 * so the claim leaves a hint for its topic's deferred messages as a lease
 * does (outbox_claim_hint.c).  They are joined by ctid (a TID scan per
 * candidate), all of them locked by the candidates' read.
 */
#define CLAIM_STREAM_DELIVERED(passed) { \
	"WITH k AS MATERIALIZED (" \
	CLAIM_STREAM_CANDIDATES_AS(passed, ", true AS was", ", false") ")," \
	" claimed AS (UPDATE outbox.message m SET" \
	" attempts = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN m.attempts ELSE m.attempts OPERATOR(pg_catalog.+) 1 END," \
	" lease_owner = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN m.lease_owner ELSE $4 END," \
	" leased_until = NULL, deferred = false," \
	" delivered_at = CASE WHEN " CLAIM_EXPIRED_LAST " THEN NULL ELSE $2 END," \
	" dead_at = CASE WHEN " CLAIM_EXPIRED_LAST " THEN $2 END," \
	" last_error = CASE WHEN " CLAIM_EXPIRED_LAST \
	"   THEN " LEASE_EXPIRED_ERROR("$6") " END " \
	"FROM k WHERE m.ctid OPERATOR(pg_catalog.=) k.ctid " \
	"RETURNING m.id, m.topic, m.event_type, m.created_at, m.payload, m.attempts," \
	" m.leased_until, m.dead_at, m.available_at, k.was) " \
	"SELECT id, topic, event_type, created_at, payload, attempts, leased_until," \
	" dead_at, available_at, was AS deferred FROM claimed ORDER BY available_at, id", \
	SPI_OK_SELECT, \
	CLAIM_STREAM_ARGTYPES }

SAVED_STATEMENTS(stmt_claim_stream_delivered, 2) = {
	CLAIM_STREAM_DELIVERED(""), CLAIM_STREAM_DELIVERED(CLAIM_PASSED_PART_AS(", false"))
};

static int	obx_position(text *topic, TimestampTz now, Datum *args, StreamHint *hint);
static int	obx_claim(const ClaimRequest *req, ClaimSink *sink);

/*
 * The claim state of topic as the arguments $7 to $10 of a claim of one
 * topic, args[6..9] (the arrays allocated in the SPI connection), and the
 * hint its claims published into *hint (if not NULL).  Returns which of the
 * claim statements serves it: 1 when it has passed keys.
 */
static int
obx_position(text *topic, TimestampTz now, Datum *args, StreamHint *hint)
{
	StreamClaimState st;
	Datum		elems[Max(STREAM_MAX_HOLES, STREAM_MAX_PASSED_KEYS)];
	Datum		keys[STREAM_MAX_PASSED_KEYS];
	int			i;

	StoreClaimState(topic, now, STORE_SAVED_LOOK, &st);
	if (hint != NULL)
		*hint = st.hint;
	StoreClaimKeys(topic, &st, keys);
	args[6] = Int64GetDatum(st.position);
	for (i = 0; i < st.nholes; i++)
		elems[i] = Int64GetDatum(st.holes[i]);
	args[7] = ClaimInt8Array(elems, st.nholes);
	for (i = 0; i < st.nkeys; i++)
		elems[i] = Int64GetDatum(st.keys[i].from);
	args[8] = PointerGetDatum(construct_array(keys, st.nkeys, TEXTOID, -1, false,
											  TYPALIGN_INT));
	args[9] = ClaimInt8Array(elems, st.nkeys);
	return st.nkeys > 0 ? 1 : 0;
}

/*
 * Lease up to req->batch_size due messages, oldest first, handing each to
 * sink.  Candidates that turn out dead do not count against the batch: the
 * claim goes on with the remainder until it has a full batch or nothing is
 * due.  A claim across all topics also goes on, reading further, when its
 * candidates were held by other claims (see outbox_store_across.c).
 * Returns the number of leased messages.
 */
static int
obx_claim(const ClaimRequest *req, ClaimSink *sink)
{
	bool		stream = StreamSchema();
	SavedStatement *claim = NULL;
	Datum		args[12];
	char		nulls[12] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			leased = 0;
	int			round = 0;
	bool		hinted = false;
	text	   *topic = req->topic;
	ClaimHintFound found = {0};

	args[0] = req->topic ? PointerGetDatum(req->topic) : (Datum) 0;
	nulls[0] = req->topic ? ' ' : 'n';
	args[1] = TimestampTzGetDatum(req->now);
	args[3] = PointerGetDatum(req->owner);
	args[4] = TimestampTzGetDatum(req->now +
								  (int64) req->lease_seconds * USECS_PER_SEC);
	args[5] = Int32GetDatum(req->max_attempts);

	SpiConnect();

	/* across all topics when only one has work: the claim of that one */
	if (stream && topic == NULL)
	{
		claim = ClaimAcrossPrepare(req->now, args, &topic);
		if (claim == NULL && topic == NULL)
		{
			SpiFinish();
			return 0;
		}
		nulls[0] = ' ';
		found.across = topic == NULL;
	}
	if (stream && topic != NULL)
	{
		StreamHint	shared;

		args[0] = PointerGetDatum(topic);
		claim = &stmt_claim_stream[obx_position(topic, req->now, args, &shared)];
		hinted = ClaimHintArgs(topic, &shared, req->now, args);
	}
	else if (!stream)
	{
		/* first, the expired last attempts of the topic(s) */
		claim = req->topic ? &stmt_claim_topic : &stmt_claim_any;
		args[2] = args[5];
		(void) SpiExecute(req->topic ? &stmt_dead_mark_topic : &stmt_dead_mark_any,
						  args, nulls, false, 0);
	}

	for (;;)
	{
		int			dead = 0;
		int			wanted = req->batch_size - leased;
		int			reach = 0;
		int			candidates = 0;

		args[2] = Int32GetDatum(wanted);
		if (found.across)
		{
			reach = ClaimAcrossReach(wanted, round);
			candidates = ClaimAcrossRound(claim, args, wanted, reach);
		}
		else
			(void) SpiExecute(claim, args, nulls, false, 0);
		if (!found.across || candidates > 0)
			leased += ClaimSinkRows(sink, NUM_CLAIM_COLS, &dead, stream ? &found : NULL);
		if (stream && topic != NULL)
			ClaimHintNote(topic, req->now, hinted, wanted, &found);
		else if (stream)
			ClaimHintNoteAcross(req->now, &found);

		/* stop when the batch is full */
		if (leased >= req->batch_size)
			break;
		/* the dead ones do not count: again, for the remainder */
		if (dead > 0)
			continue;

		/*
		 * Across all topics, candidates held or taken by other claims: read
		 * further, unless the round read every due message there was
		 */
		if (found.across && candidates == reach && ClaimAcrossReach(wanted, round + 1) > 0)
		{
			round++;
			continue;
		}
		break;
	}
	SpiFinish();
	return leased;
}

/*
 * Lease up to req->batch_size due messages, oldest first, into store, whose
 * descriptor tupdesc is the row type of outbox.message.  Returns the number
 * leased.
 */
int
StoreClaimToTuplestore(const ClaimRequest *req, TupleDesc tupdesc,
					   Tuplestorestate *store)
{
	ClaimSink	sink;

	ClaimSinkTuplestore(&sink, tupdesc, store);
	return obx_claim(req, &sink);
}

/*
 * Lease up to req->batch_size due messages, oldest first, onto *messages as
 * ClaimedMessages allocated in the caller's memory context.  Returns the
 * number leased.
 */
int
StoreClaimMessages(const ClaimRequest *req, List **messages)
{
	ClaimSink	sink;

	ClaimSinkList(&sink, messages);
	return obx_claim(req, &sink);
}

/*
 * Claim a batch of req->topic for a transactional target and mark it
 * delivered in the same statement; the messages go onto *messages, oldest
 * first.  The caller delivers them in this transaction, and takes back with
 * StoreUndeliver any it could not.  Returns the number claimed.
 */
int
StoreClaimDelivered(const ClaimRequest *req, List **messages)
{
	ClaimSink	sink;
	Datum		args[12];
	int			dead = 0;
	int			n;

	Assert(req->topic != NULL);
	args[0] = PointerGetDatum(req->topic);
	args[1] = TimestampTzGetDatum(req->now);

	ClaimSinkList(&sink, messages);
	SpiConnect();
	if (StreamSchema())
	{
		int			passed;
		StreamHint	shared;
		bool		hinted;
		ClaimHintFound found = {0};

		args[3] = PointerGetDatum(req->owner);
		args[4] = TimestampTzGetDatum(req->now);
		args[5] = Int32GetDatum(req->max_attempts);
		passed = obx_position(req->topic, req->now, args, &shared);
		hinted = ClaimHintArgs(req->topic, &shared, req->now, args);

		/* candidates that turn out dead do not count, as in obx_claim */
		n = 0;
		do
		{
			int			wanted = req->batch_size - n;

			dead = 0;
			args[2] = Int32GetDatum(wanted);
			(void) SpiExecute(&stmt_claim_stream_delivered[passed], args, NULL, false, 0);
			n += ClaimSinkRows(&sink, NUM_CLAIM_COLS, &dead, &found);
			ClaimHintNote(req->topic, req->now, hinted, wanted, &found);
		} while (dead > 0 && n < req->batch_size);
	}
	else
	{
		args[2] = Int32GetDatum(req->max_attempts);
		(void) SpiExecute(&stmt_dead_mark_topic, args, NULL, false, 0);

		args[2] = Int32GetDatum(req->batch_size);
		args[3] = PointerGetDatum(req->owner);
		args[4] = Int32GetDatum(req->max_attempts);
		(void) SpiExecute(&stmt_claim_delivered, args, NULL, false, 0);
		n = ClaimSinkRows(&sink, COL_DEAD_AT, &dead, NULL);
	}
	SpiFinish();
	return n;
}
