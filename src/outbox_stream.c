/*-------------------------------------------------------------------------
 *
 * outbox_stream.c
 *		The stream of a topic: its claim positions in shared memory, the
 *		relations of the stream, and the first position of a transaction's
 *		appends.
 *
 * Every message gets a position (outbox.message.seq) from one sequence
 * when it is appended, and a topic's messages in position order are its
 * stream.  Claims read a topic's fresh messages from the topic's claim
 * position onwards (the index message_stream_idx), so they never walk the
 * messages finished before it, however many of their old row versions a
 * held snapshot keeps in the table and its indexes.
 *
 * How far a position may move is decided elsewhere: outbox_store_position.c
 * moves it below the gap horizon (outbox_gap.c: no append below it is still
 * between taking its position and inserting its row), with a read of every
 * version in the stream that stops at the first message still being
 * appended.  So an append left open in a transaction, or a prepared one,
 * holds the position back until it ends, and a prepared transaction that
 * appended nothing holds nothing back.  This file keeps the positions and
 * gives the appends their first position.
 *
 * The first append of a transaction takes a position for its first message
 * (StreamNoteAppend), so a transaction of one message takes one position,
 * not two; the later messages take theirs from the sequence's default.
 * Every position this backend takes here is remembered as its last: the
 * floor an append records in its gap (StreamFloor, one above it) stays
 * close to the position it is about to take.  No lock of the extension is
 * held while a position is taken: the sequence's own lock may be waited
 * for (a session holding it by LOCK or ALTER SEQUENCE), and that wait is
 * an ordinary one, seen by the deadlock detector and ended by a cancel.
 * Floors start again from 1 when the relation cache says the sequence
 * changed (TRUNCATE ... RESTART IDENTITY, ALTER SEQUENCE ... RESTART, the
 * extension made anew); a setval backwards sends no such word, and while
 * appends run it breaks the order of positions anyway.
 *
 * Positions live in shared memory, one per (database, table, topic), at
 * most outbox.claim_positions of them; the least recently used one that a
 * claim across all topics need not visit makes room for a new one
 * (outbox_stream_across.c), else the least recently used one.  A topic
 * without one is searched from the floor saved for it in
 * outbox.claim_position (outbox_store_saved.c), or from its first message
 * when none is saved, which finds the position again.  After a restart
 * all start that way.
 *
 * Glossary:
 *	position	a value of outbox.message.seq
 *	floor		one above the last position the backend took: positions
 *				only grow, so the next one it takes is at or above it
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "commands/sequence.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_stream.h"
#include "outbox_stream_int.h"

#define STREAM_SHMEM_NAME		"krizaka_outbox stream"
#define STREAM_HASH_NAME		"krizaka_outbox stream positions"

/*
 * outbox.message, its sequence, its key index and the saved claim
 * positions, by name and as last found
 */
#define STREAM_REL_MESSAGE	0
#define STREAM_REL_SEQ		1
#define STREAM_REL_KEY_IDX	2
#define STREAM_REL_SAVED	3
#define STREAM_NRELS		4
static const char *const stream_rel_names[STREAM_NRELS] = {
	"message", "message_seq", "message_key_idx", "claim_position"
};
static Oid	stream_rels[STREAM_NRELS];

StreamShared *stream_shared = NULL;
HTAB	   *stream_positions = NULL;
static bool stream_first_taken = false;	/* this transaction took its first */
static int64 stream_last = 0;	/* the last position this backend took */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void obx_stream_request(void);
static void obx_stream_startup(void);
static void obx_stream_xact(XactEvent event, void *arg);
static void obx_forget_relation(Datum arg, Oid relid);
static void obx_forget_relations(Datum arg, int cacheid, uint32 hashvalue);
static Oid	obx_known_relation(int which);
static Oid	obx_relation(int which, const char *kind);

/* Install the shared memory hooks and the transaction callback. */
void
OutboxStreamInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = obx_stream_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = obx_stream_startup;
	RegisterXactCallback(obx_stream_xact, NULL);
}

/* Reserve the positions' hash and its lock. */
static void
obx_stream_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(add_size(sizeof(StreamShared),
									hash_estimate_size(outbox_claim_positions,
													   sizeof(StreamPosition))));
	RequestNamedLWLockTranche(STREAM_SHMEM_NAME, 1);
}

/* Create or attach to the positions. */
static void
obx_stream_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stream_shared = ShmemInitStruct(STREAM_SHMEM_NAME, sizeof(StreamShared),
									&found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(STREAM_SHMEM_NAME);
		int			i;

		memset(stream_shared, 0, sizeof(StreamShared));
		stream_shared->position_lock = &locks[0].lock;
		stream_shared->max_positions = outbox_claim_positions;
		pg_atomic_init_u32(&stream_shared->across_used, 0);
		for (i = 0; i < STREAM_ACROSS_TABLES; i++)
			pg_atomic_init_u64(&stream_shared->across[i].walker, 0);
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(StreamKey);
	info.entrysize = sizeof(StreamPosition);
	stream_positions = ShmemInitHash(STREAM_HASH_NAME,
									 stream_shared->max_positions,
									 stream_shared->max_positions,
									 &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * At the end of a transaction, and at its PREPARE, the next one takes its
 * first position anew.
 */
static void
obx_stream_xact(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			stream_first_taken = false;
			break;
		default:
			break;
	}
}

/*
 * Whether the tables are those of 1.2 or later: outbox.message has its
 * positions (a database not yet updated from 1.0 or 1.1 has not).
 */
bool
StreamSchema(void)
{
	return OidIsValid(obx_known_relation(STREAM_REL_SEQ));
}

/* outbox.message, as last found by name; InvalidOid when it is missing */
Oid
StreamMessageRelid(void)
{
	return obx_known_relation(STREAM_REL_MESSAGE);
}

/* outbox.message_key_idx, as last found by name; InvalidOid when it is missing */
Oid
StreamKeyIndexRelid(void)
{
	return obx_known_relation(STREAM_REL_KEY_IDX);
}

/* Whether the tables are those of 1.5 or later: outbox.claim_position exists */
bool
StreamSavedSchema(void)
{
	return OidIsValid(obx_known_relation(STREAM_REL_SAVED));
}

/*
 * Whether claims can keep positions: the shared memory exists and the
 * tables have positions.
 */
bool
StreamAvailable(void)
{
	return stream_shared != NULL && stream_positions != NULL && StreamSchema();
}

/*
 * Forget the relations looked up by name when the relation cache drops one
 * of them (or everything), or a schema changes.
 */
static void
obx_forget_relation(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < STREAM_NRELS; i++)
		if (relid == InvalidOid || relid == stream_rels[i])
		{
			memset(stream_rels, 0, sizeof(stream_rels));
			stream_last = 0;	/* the sequence may have restarted */
		}
}

static void
obx_forget_relations(Datum arg, int cacheid, uint32 hashvalue)
{
	memset(stream_rels, 0, sizeof(stream_rels));
	stream_last = 0;
}

/*
 * The OID of outbox.message, outbox.message_seq, message_key_idx or
 * outbox.claim_position (which), looked up by name once and kept until an invalidation;
 * InvalidOid when missing (which is not kept: the next call looks again).
 */
static Oid
obx_known_relation(int which)
{
	static bool callbacks = false;
	Oid			nsp;

	if (OidIsValid(stream_rels[which]))
		return stream_rels[which];
	if (!callbacks)
	{
		CacheRegisterRelcacheCallback(obx_forget_relation, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, obx_forget_relations,
									  (Datum) 0);
		callbacks = true;
	}
	nsp = get_namespace_oid("outbox", true);
	if (OidIsValid(nsp))
		stream_rels[which] = get_relname_relid(stream_rel_names[which], nsp);
	return stream_rels[which];
}

/* The OID of outbox.<name>, a relation the extension made. */
static Oid
obx_relation(int which, const char *kind)
{
	const char *name = stream_rel_names[which];
	Oid			nsp;
	Oid			relid = obx_known_relation(which);

	if (OidIsValid(relid))
		return relid;
	nsp = get_namespace_oid("outbox", false);
	relid = get_relname_relid(name, nsp);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s outbox.%s does not exist", kind, name),
				 errhint("Update the extension: ALTER EXTENSION krizaka_outbox UPDATE.")));
	return relid;
}

/*
 * Before the first append of this transaction: take a position for its
 * first message (so a transaction of one message takes one position, not
 * two) and return it; 0 when this is not the first append, or claims keep
 * no positions here (the message then takes the next position from the
 * sequence, when its table has positions).  A transaction that cannot
 * write skips it (the append fails with PostgreSQL's own error).  No lock
 * is held while the position is taken (see the head of this file).
 */
int64
StreamNoteAppend(void)
{
	int64		first;

	if (stream_first_taken || !StreamAvailable() || XactReadOnly ||
		RecoveryInProgress())
		return 0;
	first = StreamTakePosition();
	stream_first_taken = true;
	return first;
}

/*
 * Take the next position, as the first append of a transaction and a gap
 * horizon (outbox_gap.c) do, and remember it as the last this backend took.
 */
int64
StreamTakePosition(void)
{
	stream_last = nextval_internal(obx_relation(STREAM_REL_SEQ, "sequence"), false);
	return stream_last;
}

/* A floor of the next position this backend takes: positions only grow. */
int64
StreamFloor(void)
{
	return stream_last + 1;
}

/*
 * The hash key of a topic of this database's outbox.message (a table made
 * anew, by DROP and CREATE EXTENSION, has other positions); false when the
 * topic is longer than CheckName allows (never one it let through).
 */
bool
StreamKeyOf(StreamKey *key, text *topic)
{
	int			len = VARSIZE_ANY_EXHDR(topic);

	if (len > STREAM_TOPIC_BYTES)
		return false;
	memset(key, 0, sizeof(StreamKey));
	key->dboid = MyDatabaseId;
	key->relid = obx_relation(STREAM_REL_MESSAGE, "table");
	memcpy(key->topic, VARDATA_ANY(topic), len);
	return true;
}

/*
 * Take the positions' lock in mode and find the position of topic into *p
 * (NULL when none is kept); false, with no lock taken, when there are no
 * shared positions or the topic cannot have one.  The caller releases the
 * lock.
 */
bool
StreamPositionLock(text *topic, LWLockMode mode, StreamPosition **p)
{
	StreamKey	key;

	if (!StreamAvailable() || !StreamKeyOf(&key, topic))
		return false;
	LWLockAcquire(stream_shared->position_lock, mode);
	*p = hash_search(stream_positions, &key, HASH_FIND, NULL);
	return true;
}

/*
 * The claim state of topic into *state: position 0, no hole and version 0
 * when none is kept (searched and moved DT_NOBEGIN: never).
 */
void
StreamPositionGet(text *topic, StreamClaimState *state)
{
	StreamPosition *p;

	memset(state, 0, sizeof(StreamClaimState));
	state->searched = DT_NOBEGIN;
	state->moved = DT_NOBEGIN;
	if (!StreamPositionLock(topic, LW_SHARED, &p))
		return;
	if (p)
	{
		*state = p->state;
		state->notes_seen = pg_atomic_read_u64(&p->notes);
	}
	LWLockRelease(stream_shared->position_lock);
}

/*
 * Keep state as the claim state of topic, if the one kept is still the
 * one it was computed from (state->version; 0: none): of two claims that
 * searched at once, the first to finish wins, and the other's result,
 * computed from what the first replaced, is dropped whole (the holes it
 * found or dropped included).
 */
void
StreamPositionSet(text *topic, const StreamClaimState *state)
{
	StreamKey	key;
	StreamPosition *p;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	if (!StreamAvailable() || !StreamKeyOf(&key, topic))
		return;
	LWLockAcquire(stream_shared->position_lock, LW_EXCLUSIVE);
	p = hash_search(stream_positions, &key, HASH_FIND, NULL);
	if (!p)
	{
		if (state->version != 0)
		{
			/* made room for another meanwhile: search again from the start */
			LWLockRelease(stream_shared->position_lock);
			return;
		}
		if (hash_get_num_entries(stream_positions) >= stream_shared->max_positions)
			StreamMakeRoom();
		p = hash_search(stream_positions, &key, HASH_ENTER_NULL, &found);
		if (!p)
		{
			LWLockRelease(stream_shared->position_lock);
			return;
		}
		memset(&p->state, 0, sizeof(StreamClaimState));
		p->state.moved = now;
		pg_atomic_init_u64(&p->notes, 0);
	}
	else if (p->state.version != state->version)
	{
		LWLockRelease(stream_shared->position_lock);
		return;
	}
	p->used = now;
	p->held = false;
	p->state.searched = now;
	p->state.reached = state->reached;
	p->state.notes_seen = state->notes_seen;
	p->state.key_refused = state->key_refused;
	p->state.key_tried = state->key_tried;
	p->state.saved = state->saved;
	p->state.saved_at = state->saved_at;
	if (state->position != p->state.position ||
		state->nholes != p->state.nholes ||
		memcmp(state->holes, p->state.holes, sizeof(int64) * state->nholes) != 0 ||
		state->nkeys != p->state.nkeys ||
		memcmp(state->keys, p->state.keys, sizeof(StreamPassedKey) * state->nkeys) != 0)
	{
		if (state->position != p->state.position)
			p->state.moved = now;
		p->state.position = state->position;
		p->state.nholes = state->nholes;
		memcpy(p->state.holes, state->holes, sizeof(state->holes));
		p->state.nkeys = state->nkeys;
		memcpy(p->state.keys, state->keys, sizeof(state->keys));
		p->state.version++;
		if (p->state.version == 0)
			p->state.version = 1;
	}
	LWLockRelease(stream_shared->position_lock);
}

/*
 * Publish a backend's hint of topic's claims, unless the one kept comes
 * from a later read from the first entry; only where the topic has a
 * position.
 */
void
StreamHintPut(text *topic, const StreamHint *hint)
{
	StreamPosition *p;

	if (!StreamPositionLock(topic, LW_EXCLUSIVE, &p))
		return;
	if (p && hint->walked >= p->state.hint.walked)
		p->state.hint = *hint;
	LWLockRelease(stream_shared->position_lock);
}

/*
 * The topics of this database's outbox.message whose claims published a
 * hint at or after since, as a List of text: the claim across all topics
 * steps over them in its look for due topics (outbox_store_across.c), and
 * reads them from those hints.
 */
List *
StreamHintedTopics(TimestampTz since)
{
	HASH_SEQ_STATUS status;
	StreamPosition *p;
	Oid			relid;
	List	   *topics = NIL;

	if (!StreamAvailable())
		return NIL;
	relid = obx_relation(STREAM_REL_MESSAGE, "table");
	LWLockAcquire(stream_shared->position_lock, LW_SHARED);
	hash_seq_init(&status, stream_positions);
	while ((p = hash_seq_search(&status)) != NULL)
		if (p->key.dboid == MyDatabaseId && p->key.relid == relid &&
			p->state.hint.set && p->state.hint.walked >= since)
			topics = lappend(topics,
							 cstring_to_text_with_len(p->key.topic,
													  strnlen(p->key.topic, STREAM_TOPIC_BYTES)));
	LWLockRelease(stream_shared->position_lock);
	return topics;
}

/*
 * Remove a position to make room for another: one that a claim across all
 * topics need not visit, the least recently used of those when one look
 * at all positions found them (STREAM_VICTIMS of them are kept for the
 * next calls, each checked again when its turn comes); else the least
 * recently used one, and then those claims walk every topic again
 * (StreamShared.lost).  The lock is held exclusively.
 */
void
StreamMakeRoom(void)
{
	HASH_SEQ_STATUS status;
	StreamPosition *p;
	StreamPosition *oldest = NULL;
	StreamKey	key;

	while (stream_shared->nvictims > 0)
	{
		p = stream_shared->victims[--stream_shared->nvictims];
		/* still a position (of the same key or another), still idle */
		if (hash_search(stream_positions, &p->key, HASH_FIND, NULL) == p &&
			StreamPositionIdle(p))
		{
			key = p->key;
			(void) hash_search(stream_positions, &key, HASH_REMOVE, NULL);
			return;
		}
	}

	hash_seq_init(&status, stream_positions);
	while ((p = hash_seq_search(&status)) != NULL)
	{
		int			n = stream_shared->nvictims;
		int			i;

		if (oldest == NULL || p->used < oldest->used)
			oldest = p;
		if (!StreamPositionIdle(p) ||
			(n == STREAM_VICTIMS && p->used >= stream_shared->victims[0]->used))
			continue;
		/* kept newest first: victims[0] is the most recently used */
		if (n == STREAM_VICTIMS)
		{
			memmove(&stream_shared->victims[0], &stream_shared->victims[1],
					sizeof(StreamPosition *) * (n - 1));
			n--;
		}
		for (i = n; i > 0 && stream_shared->victims[i - 1]->used < p->used; i--)
			stream_shared->victims[i] = stream_shared->victims[i - 1];
		stream_shared->victims[i] = p;
		stream_shared->nvictims = n + 1;
	}
	if (stream_shared->nvictims > 0)
		p = stream_shared->victims[--stream_shared->nvictims];
	else
	{
		p = oldest;
		if (p != NULL)
			stream_shared->lost++;
		stream_shared->none_idle = GetCurrentTimestamp();
	}
	if (p == NULL)
		return;
	key = p->key;
	(void) hash_search(stream_positions, &key, HASH_REMOVE, NULL);
}
