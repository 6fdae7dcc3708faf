/*-------------------------------------------------------------------------
 *
 * outbox_store_saved.c
 *		The claim positions saved in outbox.claim_position (1.5): where the
 *		search of a topic's position starts when none is kept, after a
 *		restart, for a position that made room for another's, and in each
 *		backend of a server that does not preload the library.  Without
 *		them, such a search read the topic from its first message kept.
 *
 * What is saved is a floor: the lowest of a position, its holes and the
 * first messages of its passed keys (outbox_store_position.c).  Below it
 * every message is finished or deferred in committed state, and stays so:
 * a message that leaves the stream never comes back to it (a failed,
 * revived or undelivered message is deferred).  So a saved floor may lag,
 * never lead: a search from it reads only what finished since it was
 * saved.  A floor above the sequence's next value (the sequence set back)
 * is dropped by the search as a position kept would be.
 *
 * A search saves its floor at most once per SAVE_INTERVAL per topic, in
 * the claim's transaction, under an advisory lock of the topic's hash that
 * it only tries and keeps until the transaction ends: two claims never
 * wait for each other's save (a claim whose transaction stays open keeps
 * the others from saving that topic until it ends), and a claim that rolls
 * back takes its save with it; a transaction makes at most SAVES_PER_XACT
 * saves.  A claim of a topic looks its floor up when it has no position; a
 * walk of every topic (outbox_store_across.c) reads them all at once.  The
 * tables of 1.4 and before have no such table: nothing is read or saved
 * there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"

/* how often a topic's floor is saved at most */
#define SAVE_INTERVAL	USECS_PER_SEC

/* the field of the advisory locks of saves (applications use 1, 2) */
#define SAVE_LOCK_FIELD	0x4B53

/*
 * The most saves one transaction makes, so that a claim across all topics
 * that searches thousands of them does not fill the lock table with their
 * locks; the others are saved by later claims.
 */
#define SAVES_PER_XACT	8

SAVED_STATEMENT(stmt_saved_read) = {
	"SELECT position FROM outbox.claim_position"
	" WHERE topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_SELECT,
	1, {TEXTOID}
};

/* read whole, for a walk of every topic: the planner scans it as it likes */
SAVED_STATEMENT(stmt_saved_all) = {
	"SELECT topic, position FROM outbox.claim_position",
	SPI_OK_SELECT,
	0, {InvalidOid},
	OBX_SCANS_ANY
};

SAVED_STATEMENT(stmt_saved_write) = {
	"INSERT INTO outbox.claim_position AS p (topic, position, saved_at)"
	" VALUES ($1, $2, $3) ON CONFLICT (topic) DO UPDATE"
	" SET position = excluded.position, saved_at = excluded.saved_at",
	SPI_OK_INSERT,
	3, {TEXTOID, INT8OID, TIMESTAMPTZOID}
};

/*
 * The floors saved for every topic, for a walk of every topic: by the
 * 64-bit hash of the topic, with the topic to compare; two topics of one
 * hash both count as having none.
 */
typedef struct SavedFloor
{
	uint64		hash;			/* the hash key */
	text	   *topic;
	int64		floor;			/* 0: none, or two topics of this hash */
} SavedFloor;

struct SavedFloors
{
	HTAB	   *byhash;
};

/* the saves of this transaction, each holding its lock until the end */
static int	saves_in_xact = 0;
static bool callback = false;

static uint64 obx_topic_hash(text *topic);

static void
obx_saved_xact(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
		saves_in_xact = 0;
}

/*
 * The floor saved for topic, 0 when none is (or there is no table).
 * Called in an SPI connection.
 */
int64
StoreSavedFloor(text *topic)
{
	Datum		args[1];
	Datum		floor;
	bool		isnull;

	if (!StreamSavedSchema())
		return 0;
	args[0] = PointerGetDatum(topic);
	if (!SpiRunFirstRow(&stmt_saved_read, args, NULL, &floor, &isnull, 1) || isnull)
		return 0;
	return DatumGetInt64(floor);
}

/*
 * Save the floor of st, topic's claim state just searched at now, unless
 * it saved one within SAVE_INTERVAL, the floor has not moved since, or
 * another transaction is saving the topic's.  Called in an SPI connection.
 */
void
StoreSaveFloor(text *topic, StreamClaimState *st, TimestampTz now)
{
	int64		floor = StreamStateFloor(st);
	uint64		hash;
	LOCKTAG		tag;
	Datum		args[3];
	int			i;

	for (i = 0; i < st->nholes; i++)
		floor = Min(floor, st->holes[i]);
	if (floor <= st->saved || st->saved_at > now - SAVE_INTERVAL ||
		saves_in_xact >= SAVES_PER_XACT || !StreamSavedSchema())
		return;
	if (!callback)
	{
		RegisterXactCallback(obx_saved_xact, NULL);
		callback = true;
	}
	hash = obx_topic_hash(topic);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, SAVE_LOCK_FIELD);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return;
	args[0] = PointerGetDatum(topic);
	args[1] = Int64GetDatum(floor);
	args[2] = TimestampTzGetDatum(now);
	saves_in_xact++;
	(void) SpiExecute(&stmt_saved_write, args, NULL, false, 0);
	st->saved = floor;
	st->saved_at = now;
}

static uint64
obx_topic_hash(text *topic)
{
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(topic),
							   VARSIZE_ANY_EXHDR(topic), 0);
}

/*
 * Every floor saved, read at once, in the current memory context; NULL
 * when there is no table.  Called in an SPI connection.
 */
struct SavedFloors *
StoreSavedFloors(void)
{
	struct SavedFloors *floors;
	HASHCTL		ctl;
	uint64		n;
	uint64		r;

	if (!StreamSavedSchema())
		return NULL;
	n = SpiExecute(&stmt_saved_all, NULL, NULL, false, 0);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(SavedFloor);
	ctl.hcxt = CurrentMemoryContext;
	floors = palloc(sizeof(struct SavedFloors));
	floors->byhash = hash_create("outbox saved floors", Max(n, 16), &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (r = 0; r < n; r++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		text	   *topic = DatumGetTextPCopy(SPI_getbinval(tuple, desc, 1, &isnull));
		int64		floor = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));
		uint64		hash = obx_topic_hash(topic);
		SavedFloor *e;
		bool		found;

		e = hash_search(floors->byhash, &hash, HASH_ENTER, &found);
		if (found)
		{
			e->floor = 0;
			continue;
		}
		e->topic = topic;
		e->floor = floor;
	}
	SPI_freetuptable(SPI_tuptable);
	return floors;
}

/* The floor of topic among floors (StoreSavedFloors); 0 when none is saved */
int64
StoreSavedFloorOf(struct SavedFloors *floors, text *topic)
{
	uint64		hash = obx_topic_hash(topic);
	SavedFloor *e = hash_search(floors->byhash, &hash, HASH_FIND, NULL);

	if (e == NULL || e->floor == 0 ||
		VARSIZE_ANY_EXHDR(e->topic) != VARSIZE_ANY_EXHDR(topic) ||
		memcmp(VARDATA_ANY(e->topic), VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic)) != 0)
		return 0;
	return e->floor;
}
