/*-------------------------------------------------------------------------
 *
 * outbox_store_position.c
 *		Where a claim of a topic starts reading its stream: the claim
 *		position, moved forward first as far as it may go; and when the
 *		next message of a topic becomes due, read from there.
 *
 * A position moves over the messages finished or deferred in committed
 * state, and never past an append that may still commit below it: not
 * past the gap horizon (no append below it is still between taking its
 * position and inserting its row), and not past the first message still
 * being appended, whose row that read sees (StreamAdvance, which judges
 * every version by the transaction that wrote it).
 * An append left open in a transaction, or a prepared one (also one
 * prepared before a restart), holds the position back until it ends; a
 * prepared transaction that appended nothing holds nothing back.
 *
 * When the library is preloaded, the positions live in shared memory and
 * the gap horizon comes from every backend's slot there (GapHorizon).
 *
 * A leased message holds the position back until it is finished, and
 * every claim meanwhile reads the messages finished after it.  When the
 * position has not moved for STREAM_STUCK_INTERVAL and the message there
 * stays leased for longer still (a lease of an hour, a consumer that
 * extends it, or one that crashed), the claim makes it deferred: it is
 * found by its available_at among the deferred messages from then on, as
 * a failed one is, due again once its lease ends, and once that change
 * commits the position moves past it.  Its lease, attempts and owner are
 * unchanged, and a key's later messages still wait for it.
 *
 * An append that stays in progress (a session idle in its transaction, a
 * prepared transaction) would hold the position back until it ends, and
 * every claim meanwhile would read all that finished after it.  So when
 * the position has stood at a message still being appended for
 * STREAM_STUCK_INTERVAL, the search passes it and keeps its position as a
 * hole (at most STREAM_MAX_HOLES per topic).  Each search looks at the
 * holes again: one rolled back, or finished or deferred, is dropped; one
 * that committed is made deferred, so that claims find it among the
 * deferred messages by its available_at, and is dropped once that change
 * is seen committed.  Until then the claims get the hole with the
 * position, and the check of a keyed candidate looks among the holes for
 * an earlier message of its key too: a message appended to the key after
 * the hole committed is not handed out before the hole's.
 *
 * One ordering key with a long run of pending messages at the position
 * (100,000 appended at once, their head leased or failing) would make
 * every claim read through the run, which only the key's head may leave.
 * So when the search stops at a keyed message and passing its key would
 * move the position over at least STREAM_PASS_MIN_RUN messages of it, the
 * key becomes a passed key of the position (at most
 * STREAM_MAX_PASSED_KEYS) and the position moves on past its messages,
 * then and in every later search.  A passed key keeps from, its first
 * pending fresh message (none of the key is pending and fresh below it):
 * claims take the key's head from there, one probe of message_key_idx,
 * leave the key out of their read from the position, and check a keyed
 * deferred message of it from there.  Each search moves from to the key's
 * first pending fresh message below the position, and drops the key when
 * there is none.  Shared memory keeps only from: the key itself is that
 * message's ordering_key, of any length, which the searches and claims
 * read with one probe of the stream index (StoreClaimKeys).  Should that
 * message be gone (purged once delivered, or deleted by hand), the key is
 * dropped and the position goes back to from, where a read that does not
 * know the key is right; the next search may pass it again.
 *
 * A server that does not preload the library has no shared memory: each
 * backend keeps the positions of the topics it claims itself, and moves
 * one only when no append of the database is between taking a position
 * and inserting its row (GapTryHorizon; else it keeps the one it has).  A
 * backend's first claim of a topic starts from the floor saved for it
 * (outbox_store_saved.c), or reads the topic from its first message kept
 * when none is saved; the ones after step over what finished since.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/* how often a topic's claim position is searched anew */
#define STREAM_SEARCH_INTERVAL	(5 * USECS_PER_SEC / 1000)

/* how long a position held by a leased message waits before deferring it */
#define STREAM_STUCK_INTERVAL	USECS_PER_SEC

/* the fewest messages of a key that a position passes as a passed key */
#define STREAM_PASS_MIN_RUN		128

/* the positions a backend keeps without preloading, at most */
#define LOCAL_MAX_POSITIONS		256

/* the longest topic in bytes (as outbox_stream.c), and its terminator */
#define LOCAL_TOPIC_BYTES		(OUTBOX_NAME_MAX_CHARS * MAX_MULTIBYTE_CHAR_LEN + 1)

typedef struct LocalPosition
{
	char		topic[LOCAL_TOPIC_BYTES];	/* the hash key */
	StreamClaimState state;
} LocalPosition;

static HTAB *local_positions = NULL;
static Oid	local_relid = InvalidOid;	/* the outbox.message they are of */

/*
 * The message at position $2 of topic $1 when it is still pending, fresh,
 * and leased beyond $3: deferred, its lease left as it is.  Skipped when
 * another transaction holds it (its owner completing it, say).
 */
SAVED_STATEMENT(stmt_defer_leased) = {
	"UPDATE outbox.message m SET deferred = true"
	" WHERE m.ctid OPERATOR(pg_catalog.=) (SELECT c.ctid FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND c.seq OPERATOR(pg_catalog.=) $2"
	" AND NOT c.deferred AND " STREAM_PENDING("c")
	" AND c.leased_until OPERATOR(pg_catalog.>) $3"
	" FOR UPDATE SKIP LOCKED)",
	SPI_OK_UPDATE,
	3, {TEXTOID, INT8OID, TIMESTAMPTZOID}
};

/*
 * The messages of the holes $2 of topic $1 that are fresh and not
 * finished: deferred, found from now on by their available_at.  Skipped
 * when another transaction holds one (the next search tries again).
 */
SAVED_STATEMENT(stmt_defer_holes) = {
	"UPDATE outbox.message m SET deferred = true"
	" WHERE m.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND c.seq OPERATOR(pg_catalog.=) ANY ($2)"
	" AND NOT c.deferred AND " STREAM_PENDING("c")
	" FOR UPDATE SKIP LOCKED))",
	SPI_OK_UPDATE,
	2, {TEXTOID, INT8ARRAYOID}
};

/* the ordering keys of the messages at positions $2 of topic $1 */
SAVED_STATEMENT(stmt_passed_keys) = {
	"SELECT c.seq, c.ordering_key FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND c.seq OPERATOR(pg_catalog.=) ANY ($2)"
	" AND c.ordering_key IS NOT NULL",
	SPI_OK_SELECT,
	2, {TEXTOID, INT8ARRAYOID}
};

/*
 * The first message of ordering key $2 in topic $1 that is pending and
 * fresh, from position $3 and below position $4.
 */
SAVED_STATEMENT(stmt_passed_key_from) = {
	"SELECT c.seq FROM outbox.message c"
	" WHERE c.topic OPERATOR(pg_catalog.=) $1 AND c.ordering_key OPERATOR(pg_catalog.=) $2"
	" AND c.ordering_key IS NOT NULL"
	" AND c.seq OPERATOR(pg_catalog.>=) $3 AND c.seq OPERATOR(pg_catalog.<) $4"
	" AND NOT c.deferred AND " STREAM_PENDING("c")
	" ORDER BY c.seq LIMIT 1",
	SPI_OK_SELECT,
	4, {TEXTOID, TEXTOID, INT8OID, INT8OID}
};

/*
 * When the next message of a topic becomes due, in the stream (the tables
 * of 1.2, $1 topic, $2 now): a deferred message's
 * available_at or lease end (their index), or the lease end of one of the
 * first STREAM_NEXT_DUE_WINDOW fresh messages from the claim position $3
 * (0 when the library is not preloaded), where the leases that hold the
 * position back are.  A round
 * of the worker has claimed every fresh message due, so what lies beyond
 * that window is due now or not at all.
 */
#define STREAM_NEXT_DUE_WINDOW "1000"

SAVED_STATEMENT(stmt_next_due_stream) = {
	"SELECT LEAST("
	" (SELECT pg_catalog.min(GREATEST(available_at, leased_until))"
	"  FROM outbox.message"
	"  WHERE deferred AND topic OPERATOR(pg_catalog.=) $1"
	"  AND delivered_at IS NULL AND dead_at IS NULL"
	"  AND GREATEST(available_at, leased_until) OPERATOR(pg_catalog.>) $2),"
	" (SELECT pg_catalog.min(w.due) FILTER (WHERE w.due OPERATOR(pg_catalog.>) $2) FROM"
	"  (SELECT GREATEST(available_at, leased_until) AS due FROM outbox.message"
	"   WHERE topic OPERATOR(pg_catalog.=) $1 AND seq OPERATOR(pg_catalog.>=) $3"
	"   AND NOT deferred AND pg_catalog.num_nulls(delivered_at, dead_at) OPERATOR(pg_catalog.=) 2"
	"   ORDER BY seq LIMIT " STREAM_NEXT_DUE_WINDOW ") w))",
	SPI_OK_SELECT,
	3, {TEXTOID, TIMESTAMPTZOID, INT8OID}
};

/*
 * In the tables of 1.0 and 1.1, through their index of pending messages.
 * When the next message of a topic becomes due: the first one delayed into
 * the future (first entry after now in the due index), or the end of the
 * earliest valid lease (a short range: leased messages are due ones).
 */
SAVED_STATEMENT(stmt_next_due) = {
	"SELECT LEAST("
	" (SELECT pg_catalog.min(available_at) FROM outbox.message"
	"  WHERE topic OPERATOR(pg_catalog.=) $1 AND delivered_at IS NULL AND dead_at IS NULL"
	"  AND available_at OPERATOR(pg_catalog.>) $2),"
	" (SELECT pg_catalog.min(leased_until) FROM outbox.message"
	"  WHERE topic OPERATOR(pg_catalog.=) $1 AND delivered_at IS NULL AND dead_at IS NULL"
	"  AND available_at OPERATOR(pg_catalog.<=) $2 AND leased_until OPERATOR(pg_catalog.>) $2"
	"  AND leased_until OPERATOR(pg_catalog.>) '-infinity'::pg_catalog.timestamptz))",
	SPI_OK_SELECT,
	2, {TEXTOID, TIMESTAMPTZOID}
};

static bool obx_searched_lately(const StreamClaimState *st, TimestampTz now);
static void obx_unstick(text *topic, int64 position, TimestampTz moved,
						TimestampTz now);
static void obx_settle_holes(text *topic, StreamClaimState *st);
static bool obx_key_texts(text *topic, const StreamClaimState *st,
						  text **keys);
static void obx_settle_keys(text *topic, StreamClaimState *st, text **keys);
static int64 obx_pass_key(text *topic, StreamClaimState *st, text **keys,
						  int64 next, int64 horizon, TimestampTz now,
						  bool *open, text **key);
static void obx_search(text *topic, StreamClaimState *st, int64 horizon,
					   TimestampTz now);
static void obx_shared_position(text *topic, TimestampTz now, int64 saved,
								StreamClaimState *st);
static void obx_local_position(text *topic, TimestampTz now, int64 saved,
							   StreamClaimState *st);
static LocalPosition *obx_local_entry(text *topic);
static void obx_saved_position(text *topic, TimestampTz now, int64 saved,
							   StreamClaimState *st);

/*
 * The claim state of topic into *st, its position moved forward first:
 * shared when the library is preloaded, this backend's own otherwise;
 * position 0 (the start of the stream) for the tables of 1.0 and 1.1,
 * which have none.  A position not kept is searched from the floor saved
 * for the topic: saved, when the caller read it already (0: none is), or
 * looked up when saved is STORE_SAVED_LOOK (a walk of every topic reads
 * them all at once, StoreSavedFloors: a look-up per topic made the first
 * walk of 100,000 topics after a restart half as slow again).  Called in an
 * SPI connection.
 */
void
StoreClaimState(text *topic, TimestampTz now, int64 saved, StreamClaimState *st)
{
	memset(st, 0, sizeof(StreamClaimState));
	if (!StreamSchema())
		return;
	PreventCommandIfReadOnly("UPDATE");
	if (StreamAvailable())
		obx_shared_position(topic, now, saved, st);
	else
		obx_local_position(topic, now, saved, st);
}

/*
 * Whether a claim state searched lately may serve a claim at now as it
 * is: what finished since costs a claim little.
 */
static bool
obx_searched_lately(const StreamClaimState *st, TimestampTz now)
{
	return st->position > 0 && st->searched > now - STREAM_SEARCH_INTERVAL &&
		st->searched <= now;
}

/*
 * The position of topic has not moved since moved: if that is long enough
 * ago, defer the message there when it stays leased for long still.
 */
static void
obx_unstick(text *topic, int64 position, TimestampTz moved, TimestampTz now)
{
	Datum		args[3];

	if (moved > now - STREAM_STUCK_INTERVAL)
		return;
	args[0] = PointerGetDatum(topic);
	args[1] = Int64GetDatum(position);
	args[2] = TimestampTzGetDatum(now + STREAM_STUCK_INTERVAL);
	(void) SpiExecute(&stmt_defer_leased, args, NULL, false, 0);
}

/*
 * Look at the holes of st again: drop those rolled back, finished or
 * deferred; defer the messages of those that committed (kept until the
 * change is seen committed).
 */
static void
obx_settle_holes(text *topic, StreamClaimState *st)
{
	int			states[STREAM_MAX_HOLES];
	Datum		due[STREAM_MAX_HOLES];
	int			ndue = 0;
	int			kept = 0;
	int			i;

	if (st->nholes == 0)
		return;
	StreamProbeHoles(topic, st->holes, st->nholes, states);
	for (i = 0; i < st->nholes; i++)
	{
		if (states[i] == HOLE_DONE)
			continue;
		if (states[i] == HOLE_DUE)
			due[ndue++] = Int64GetDatum(st->holes[i]);
		st->holes[kept++] = st->holes[i];
	}
	st->nholes = kept;
	if (ndue > 0)
	{
		Datum		args[2];

		args[0] = PointerGetDatum(topic);
		args[1] = PointerGetDatum(construct_array(due, ndue, INT8OID, sizeof(int64),
												  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		(void) SpiExecute(&stmt_defer_holes, args, NULL, false, 0);
	}
}

/*
 * The ordering keys of the passed keys of st into keys[0..st->nkeys-1]
 * (copies in the current memory context): each is the key of the message
 * at its from.  False when one of those messages is gone; keys[i] is then
 * NULL for it.
 */
static bool
obx_key_texts(text *topic, const StreamClaimState *st, text **keys)
{
	Datum		froms[STREAM_MAX_PASSED_KEYS];
	Datum		args[2];
	bool		all = true;
	uint64		n;
	uint64		r;
	int			i;

	if (st->nkeys == 0)
		return true;
	for (i = 0; i < st->nkeys; i++)
	{
		froms[i] = Int64GetDatum(st->keys[i].from);
		keys[i] = NULL;
	}
	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(construct_array(froms, st->nkeys, INT8OID,
											  sizeof(int64), FLOAT8PASSBYVAL,
											  TYPALIGN_DOUBLE));
	n = SpiExecute(&stmt_passed_keys, args, NULL, false, 0);
	for (r = 0; r < n; r++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		seq = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		Datum		key = SPI_getbinval(tuple, desc, 2, &isnull);

		for (i = 0; i < st->nkeys; i++)
			if (st->keys[i].from == seq && keys[i] == NULL)
				keys[i] = DatumGetTextPCopy(key);
	}
	SPI_freetuptable(SPI_tuptable);
	for (i = 0; i < st->nkeys; i++)
		all &= keys[i] != NULL;
	return all;
}

/*
 * The ordering keys of the passed keys of st, for a claim, as text Datums
 * into keys[0..st->nkeys-1].  Should the message of one of them be gone,
 * st is changed into what a claim that does not know the passed keys
 * reads: from the lowest of the position and the keys' froms, with no
 * passed key (StreamStateFloor).  Called in an SPI connection.
 */
void
StoreClaimKeys(text *topic, StreamClaimState *st, Datum *keys)
{
	text	   *texts[STREAM_MAX_PASSED_KEYS];
	int			i;

	if (!obx_key_texts(topic, st, texts))
	{
		st->position = StreamStateFloor(st);
		st->nkeys = 0;
		return;
	}
	for (i = 0; i < st->nkeys; i++)
		keys[i] = PointerGetDatum(texts[i]);
}

/*
 * Look at the passed keys of st, whose ordering keys are keys, again: each
 * one's from moved to its first pending fresh message below the position;
 * a key with none is dropped, and so is one whose from's message is gone
 * (keys[i] NULL), the position set back to its from.
 */
static void
obx_settle_keys(text *topic, StreamClaimState *st, text **keys)
{
	int			kept = 0;
	int			i;

	for (i = 0; i < st->nkeys; i++)
		if (keys[i] == NULL)
			st->position = Min(st->position, st->keys[i].from);
	for (i = 0; i < st->nkeys; i++)
	{
		Datum		args[4];
		Datum		from;
		bool		isnull;

		if (keys[i] == NULL)
			continue;
		args[0] = PointerGetDatum(topic);
		args[1] = PointerGetDatum(keys[i]);
		args[2] = Int64GetDatum(st->keys[i].from);
		args[3] = Int64GetDatum(st->position);
		if (!SpiRunFirstRow(&stmt_passed_key_from, args, NULL, &from, &isnull, 1) ||
			isnull)
			continue;
		keys[kept] = keys[i];
		st->keys[kept] = st->keys[i];
		st->keys[kept++].from = DatumGetInt64(from);
	}
	if (kept < st->nkeys)
		memset(&st->keys[kept], 0, sizeof(StreamPassedKey) * (st->nkeys - kept));
	st->nkeys = kept;
}

/*
 * The search of st, whose passed keys' ordering keys are keys, stopped at
 * next, a committed pending message of ordering key *key: pass the key
 * when that moves the position over at least STREAM_PASS_MIN_RUN messages
 * of it (or of the keys passed already), and return where the position may
 * go, with *open and *key saying what stands there (as StreamAdvance);
 * next otherwise.  A position found not worth it is tried again after
 * STREAM_STUCK_INTERVAL, should its key's run have grown.
 */
static int64
obx_pass_key(text *topic, StreamClaimState *st, text **keys, int64 next,
			 int64 horizon, TimestampTz now, bool *open, text **key)
{
	int64		nkeyed;
	int64		moved;

	if (st->nkeys >= STREAM_MAX_PASSED_KEYS ||
		(next == st->key_refused && st->key_tried > now - STREAM_STUCK_INTERVAL))
		return next;
	keys[st->nkeys] = *key;
	moved = StreamAdvance(topic, next + 1, horizon, keys, st->nkeys + 1,
						  open, &nkeyed, key);
	if (nkeyed < STREAM_PASS_MIN_RUN)
	{
		st->key_refused = next;
		st->key_tried = now;
		return next;
	}
	memset(&st->keys[st->nkeys], 0, sizeof(StreamPassedKey));
	st->keys[st->nkeys].from = next;
	st->nkeys++;
	return moved;
}

/*
 * Move st forward below horizon, as far as it may go: its holes and passed
 * keys looked at again, then the position moved; where it has stood for
 * STREAM_STUCK_INTERVAL, a message still being appended becomes a hole and
 * the position moves on past it, and one leased for long is deferred; a
 * keyed message where it stops may have its key passed.
 */
static void
obx_search(text *topic, StreamClaimState *st, int64 horizon, TimestampTz now)
{
	text	   *keys[STREAM_MAX_PASSED_KEYS];
	bool		open;
	int64		next;
	int64		nkeyed;
	text	   *key;

	obx_settle_holes(topic, st);
	(void) obx_key_texts(topic, st, keys);
	obx_settle_keys(topic, st, keys);
	next = StreamAdvance(topic, st->position, horizon, keys, st->nkeys,
						 &open, &nkeyed, &key);
	if (next == st->position && next < horizon)
	{
		if (!open)
			obx_unstick(topic, next, st->moved, now);
		else if (st->moved <= now - STREAM_STUCK_INTERVAL &&
				 st->nholes < STREAM_MAX_HOLES)
		{
			st->holes[st->nholes++] = next;
			next = StreamAdvance(topic, next + 1, horizon, keys, st->nkeys,
								 &open, &nkeyed, &key);
		}
	}
	/* pass the keys of the long runs where it stops, one after the other */
	while (next < horizon && !open && key != NULL)
	{
		int64		moved = obx_pass_key(topic, st, keys, next, horizon, now,
										 &open, &key);

		if (moved == next)
			break;
		next = moved;
	}
	if (next != st->position)
	{
		st->position = next;
		st->moved = now;
	}
	st->searched = now;
	st->reached = next >= horizon;
}

/*
 * The shared claim state of topic, moved forward as far as it may go.  The
 * gap horizon is taken before the reads, so every message below it is in
 * the stream index, or never will be.  The search runs at most every
 * STREAM_SEARCH_INTERVAL per topic: claims in between start from the
 * position found last, and step over the few messages finished since.
 */
static void
obx_shared_position(text *topic, TimestampTz now, int64 saved,
					StreamClaimState *st)
{
	int64		horizon;
	int64		taken;

	StreamPositionGet(topic, st);
	if (obx_searched_lately(st, now))
		return;
	if (st->position == 0)
		obx_saved_position(topic, now, saved, st);

	horizon = GapHorizon();
	taken = StreamFloor() - 1;	/* the position GapHorizon took */
	if (st->position > taken)
	{
		/* the sequence was set back (TRUNCATE ... RESTART IDENTITY, setval) */
		st->position = 0;
		st->nholes = 0;
		st->nkeys = 0;
		st->saved = 0;
		st->saved_at = 0;
	}
	else if (st->position > horizon)
	{
		/*
		 * An append is taking a position and the horizon knows only a floor
		 * of it: the position kept is still right, the search waits.
		 */
		return;
	}
	obx_search(topic, st, horizon, now);
	StoreSaveFloor(topic, st, now);
	StreamPositionSet(topic, st);
}

/*
 * A claim state st that keeps no position starts from the floor saved for
 * topic, if any (outbox_store_saved.c; saved as StoreClaimState takes it),
 * as if it had moved there at now; the search that follows saves the
 * floor it finds, if that is higher.
 */
static void
obx_saved_position(text *topic, TimestampTz now, int64 saved,
				   StreamClaimState *st)
{
	int64		floor = saved == STORE_SAVED_LOOK ? StoreSavedFloor(topic) : saved;

	if (floor <= 0)
		return;
	st->position = floor;
	st->moved = now;
	st->saved = floor;
	st->saved_at = 0;
}

/* This backend's claim state of topic, moved forward as far as it may go. */
static void
obx_local_position(text *topic, TimestampTz now, int64 saved,
				   StreamClaimState *st)
{
	LocalPosition *p;
	int64		horizon;

	p = obx_local_entry(topic);
	if (p == NULL)
	{
		memset(st, 0, sizeof(StreamClaimState));
		return;
	}
	if (p->state.position == 0)
		obx_saved_position(topic, now, saved, &p->state);
	/* an append is in its gap: keep the position, search next time */
	if (obx_searched_lately(&p->state, now) || !GapTryHorizon(&horizon))
	{
		*st = p->state;
		return;
	}
	if (p->state.position > horizon)
	{
		/* the sequence was set back */
		p->state.position = 0;
		p->state.nholes = 0;
		p->state.nkeys = 0;
		p->state.saved = 0;
		p->state.saved_at = 0;
	}
	obx_search(topic, &p->state, horizon, now);
	StoreSaveFloor(topic, &p->state, now);
	*st = p->state;
}

/*
 * This backend's entry for topic, made with position 0 when missing; NULL
 * for a topic too long to be one.  A new outbox.message (the extension
 * made anew) forgets them all, and so does a full table.
 */
static LocalPosition *
obx_local_entry(text *topic)
{
	char		key[LOCAL_TOPIC_BYTES];
	int			len = VARSIZE_ANY_EXHDR(topic);
	Oid			relid = StreamMessageRelid();
	LocalPosition *p;
	bool		found;

	if (len >= LOCAL_TOPIC_BYTES)
		return NULL;
	if (local_positions != NULL &&
		(relid != local_relid ||
		 hash_get_num_entries(local_positions) >= LOCAL_MAX_POSITIONS))
	{
		hash_destroy(local_positions);
		local_positions = NULL;
	}
	if (local_positions == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = LOCAL_TOPIC_BYTES;
		ctl.entrysize = sizeof(LocalPosition);
		ctl.hcxt = TopMemoryContext;
		local_positions = hash_create("outbox claim positions", 16, &ctl,
									  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		local_relid = relid;
	}
	memset(key, 0, sizeof(key));
	memcpy(key, VARDATA_ANY(topic), len);
	p = hash_search(local_positions, key, HASH_ENTER, &found);
	if (!found)
	{
		memset(&p->state, 0, sizeof(StreamClaimState));
		p->state.searched = DT_NOBEGIN;
		p->state.moved = GetCurrentTimestamp();
	}
	return p;
}

/*
 * The earliest instant after now at which a message of topic becomes due,
 * or DT_NOEND when none will without another append.
 */
TimestampTz
StoreNextDue(text *topic, TimestampTz now)
{
	Datum		args[3];
	Datum		next;
	bool		isnull;
	bool		stream = StreamSchema();
	StreamClaimState st;

	StreamPositionGet(topic, &st);	/* position 0 when none is kept */
	args[0] = PointerGetDatum(topic);
	args[1] = TimestampTzGetDatum(now);
	args[2] = Int64GetDatum(StreamStateFloor(&st));
	if (!SpiRunFirstRow(stream ? &stmt_next_due_stream : &stmt_next_due,
						args, NULL, &next, &isnull, 1) ||
		isnull)
		return DT_NOEND;
	return DatumGetTimestampTz(next);
}
