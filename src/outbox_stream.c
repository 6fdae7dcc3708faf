/*-------------------------------------------------------------------------
 *
 * outbox_stream.c
 *		The stream of a topic: where claims start reading it, and how far
 *		that start may move while appends are still in progress.
 *
 * Every message gets a position (outbox.message.seq) from one sequence
 * when it is appended, and a topic's messages in position order are its
 * stream.  Claims read a topic's fresh messages from the topic's claim
 * position onwards (the index message_stream_idx), so they never walk the
 * messages finished before it, however many of their old row versions a
 * held snapshot keeps in the table and its indexes.
 *
 * The position is exact, never past a message that can still be claimed:
 * it moves only over messages that are finished or deferred in committed
 * state (outbox_store_claim.c reads that state), and never past the
 * horizon, the first position an append still in progress may commit at.
 * Positions come from a sequence, so an append that took position 10 may
 * commit after one that took 11; the horizon keeps the claim position
 * before 10 until it does.  For the horizon, each backend's first append
 * in a transaction records in its slot, before it takes a position, a
 * floor: a position below the one it is about to take (one above the
 * last position this backend took, positions only grow); then it takes
 * the position and records it instead, until the transaction ends.
 * Computing the horizon takes one more position first, then reads every
 * slot: an append given a position below that one took it before, so its
 * floor was recorded before, and the sequence's buffer lock, which both
 * took in turn, makes the record visible to the reader.  So no append can
 * have been given a position below the horizon without either having
 * finished or being recorded (by its position, or by a floor below it).
 * No lock of the extension is held while a position is taken: the
 * sequence's own lock may be waited for (a session holding it by LOCK or
 * ALTER SEQUENCE), and that wait is an ordinary one, seen by the deadlock
 * detector and ended by a cancel.  Floors start again from 1 when the
 * relation cache says the sequence changed (TRUNCATE ... RESTART
 * IDENTITY, ALTER SEQUENCE ... RESTART, the extension made anew); a
 * setval backwards sends no such word, and while appends run it breaks
 * the order of positions anyway.
 *
 * A prepared transaction (two-phase commit) outlives its backend's
 * transaction: at PREPARE its record moves to the slot of the prepared
 * transaction's own PGPROC, with its xid, and lasts while that xid is in
 * progress.  Every prepared transaction gets such a record, with or without
 * appends, so that one without any (made before a restart, which empties
 * shared memory) is known to be unknown: while one is open in the
 * database, the horizon is 0 and claims read their topics from the start.
 *
 * Positions live in shared memory, one per (database, table, topic), at
 * most STREAM_MAX_POSITIONS of them; the least recently used one makes
 * room for a new one.  A topic without one is read from its first message,
 * which finds the position again.  After a restart all start that way.
 *
 * Glossary:
 *	position	a value of outbox.message.seq
 *	horizon		the first position an append in progress may commit at
 *	record		a backend's slot: its first position of this transaction,
 *				or a floor below it while that position is being taken
 *	floor		one above the last position the backend took: positions
 *				only grow, so the one it is taking is at or above it
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "commands/sequence.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_stream.h"

#define STREAM_SHMEM_NAME		"krizaka_outbox stream"
#define STREAM_HASH_NAME		"krizaka_outbox stream positions"
#define STREAM_MAX_POSITIONS	1024

/*
 * The longest topic: OUTBOX_NAME_MAX_CHARS characters (CheckName) of at
 * most MAX_MULTIBYTE_CHAR_LEN bytes each, 800 bytes.  The key holds its
 * bytes without a terminator (the rest is zeros, and a topic contains no
 * zero byte), so a topic of exactly this length keeps a position too.
 */
#define STREAM_TOPIC_BYTES		(OUTBOX_NAME_MAX_CHARS * MAX_MULTIBYTE_CHAR_LEN)

/* the field of the advisory locks of ordering keys (applications use 1, 2) */
#define STREAM_KEY_LOCK			0x4B4F

typedef struct StreamKey
{
	Oid			dboid;
	Oid			relid;			/* outbox.message of that database */
	char		topic[STREAM_TOPIC_BYTES];
} StreamKey;

typedef struct StreamPosition
{
	StreamKey	key;
	int64		position;
	TimestampTz used;
	TimestampTz searched;		/* when a claim last searched how far it may move */
	TimestampTz moved;			/* when it last moved */
} StreamPosition;

/*
 * One per PGPROC: the first position its transaction took, 0 if none, or
 * while it takes that position a floor below it.
 */
typedef struct StreamRecord
{
	pg_atomic_uint64 first;
	Oid			dboid;
	TransactionId xid;			/* a transaction being prepared, or prepared */
} StreamRecord;

/* the record of a prepared transaction without appends */
#define STREAM_NO_APPEND	PG_INT64_MAX

typedef struct StreamShared
{
	LWLock	   *horizon_lock;	/* the records of prepared transactions */
	LWLock	   *position_lock;	/* the positions' hash */
	int			nrecords;
	StreamRecord records[FLEXIBLE_ARRAY_MEMBER];
} StreamShared;

/* outbox.message and outbox.message_seq, by name and as last found */
#define STREAM_REL_MESSAGE	0
#define STREAM_REL_SEQ		1
#define STREAM_NRELS		2
static const char *const stream_rel_names[STREAM_NRELS] = {"message", "message_seq"};
static Oid	stream_rels[STREAM_NRELS];

static StreamShared *stream_shared = NULL;
static HTAB *stream_positions = NULL;
static bool stream_recorded = false;	/* this transaction has a record */
static int64 stream_last = 0;	/* the last position this backend took */
static TransactionId stream_preparing = InvalidTransactionId;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static int	obx_nrecords(void);
static Size obx_stream_size(void);
static void obx_stream_request(void);
static void obx_stream_startup(void);
static void obx_stream_xact(XactEvent event, void *arg);
static void obx_forget_relation(Datum arg, Oid relid);
static void obx_forget_relations(Datum arg, int cacheid, uint32 hashvalue);
static Oid	obx_known_relation(int which);
static Oid	obx_relation(int which, const char *kind);
static bool obx_key(StreamKey *key, text *topic);
static void obx_make_room(void);
static void obx_record_prepare(void);
static void obx_record_prepared(void);
static bool obx_prepared_known(PGPROC *proc, TransactionId xid);

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

/* One record per PGPROC: backends, auxiliary processes, prepared xacts. */
static int
obx_nrecords(void)
{
	return ObxFirstPreparedProc + max_prepared_xacts;
}

static Size
obx_stream_size(void)
{
	return add_size(offsetof(StreamShared, records),
					mul_size(obx_nrecords(), sizeof(StreamRecord)));
}

/* Reserve the records, the positions' hash and the two locks. */
static void
obx_stream_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(add_size(obx_stream_size(),
									hash_estimate_size(STREAM_MAX_POSITIONS,
													   sizeof(StreamPosition))));
	RequestNamedLWLockTranche(STREAM_SHMEM_NAME, 2);
}

/* Create or attach to the records and the positions. */
static void
obx_stream_startup(void)
{
	HASHCTL		info;
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stream_shared = ShmemInitStruct(STREAM_SHMEM_NAME, obx_stream_size(), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(STREAM_SHMEM_NAME);

		stream_shared->horizon_lock = &locks[0].lock;
		stream_shared->position_lock = &locks[1].lock;
		stream_shared->nrecords = obx_nrecords();
		for (i = 0; i < stream_shared->nrecords; i++)
		{
			pg_atomic_init_u64(&stream_shared->records[i].first, 0);
			stream_shared->records[i].dboid = InvalidOid;
			stream_shared->records[i].xid = InvalidTransactionId;
		}
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(StreamKey);
	info.entrysize = sizeof(StreamPosition);
	stream_positions = ShmemInitHash(STREAM_HASH_NAME,
									 STREAM_MAX_POSITIONS, STREAM_MAX_POSITIONS,
									 &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * At the end of a transaction its record ends (after it became visible or
 * was rolled back); at PREPARE it moves to the prepared transaction.
 */
static void
obx_stream_xact(XactEvent event, void *arg)
{
	/* no catalog access here: the transaction may be over */
	if (stream_shared == NULL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			obx_record_prepare();
			break;
		case XACT_EVENT_PREPARE:
			obx_record_prepared();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (stream_recorded)
			{
				StreamRecord *rec = &stream_shared->records[ObxMyProcNumber];

				pg_atomic_write_u64(&rec->first, 0);
				rec->xid = InvalidTransactionId;
				stream_recorded = false;
			}
			stream_preparing = InvalidTransactionId;
			break;
		default:
			break;
	}
}

/*
 * Before PREPARE: this backend's record names the transaction (a record
 * without appends if it has none), so that from the moment its PGPROC
 * shows it as prepared, a horizon finds its record.
 */
static void
obx_record_prepare(void)
{
	StreamRecord *rec = &stream_shared->records[ObxMyProcNumber];
	TransactionId xid = GetTopTransactionIdIfAny();

	if (!TransactionIdIsValid(xid))
		return;
	LWLockAcquire(stream_shared->horizon_lock, LW_SHARED);
	rec->xid = xid;
	if (!stream_recorded)
	{
		rec->dboid = MyDatabaseId;
		pg_atomic_write_u64(&rec->first, (uint64) STREAM_NO_APPEND);
		stream_recorded = true;
	}
	LWLockRelease(stream_shared->horizon_lock);
	stream_preparing = xid;
}

/* After PREPARE: the record moves to the prepared transaction's PGPROC. */
static void
obx_record_prepared(void)
{
	StreamRecord *own = &stream_shared->records[ObxMyProcNumber];
	StreamRecord *rec;
	PGPROC	   *proc;

	if (!TransactionIdIsValid(stream_preparing))
		return;
	proc = TwoPhaseGetDummyProc(stream_preparing, false);
	rec = &stream_shared->records[ObxProcNumber(proc)];

	LWLockAcquire(stream_shared->horizon_lock, LW_SHARED);
	rec->dboid = own->dboid;
	rec->xid = stream_preparing;
	pg_atomic_write_u64(&rec->first, pg_atomic_read_u64(&own->first));
	pg_atomic_write_u64(&own->first, 0);
	own->xid = InvalidTransactionId;
	LWLockRelease(stream_shared->horizon_lock);
	stream_recorded = false;
	stream_preparing = InvalidTransactionId;
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
 * The OID of outbox.message or outbox.message_seq (which), looked up by
 * name once and kept until an invalidation; InvalidOid when missing (which
 * is not kept: the next call looks again).
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
 * Before the first append of this transaction: record a position taken
 * now, at or below every position its appends will get.  Returns that
 * position, for the first message to take (so a transaction of one
 * message takes one position, not two), or 0 when nothing was recorded:
 * not the first append, or no stream.  A transaction that cannot write
 * skips it (the append fails with PostgreSQL's own error).
 *
 * The floor is recorded before the position is taken, and no lock is
 * held while it is (see the head of this file).  A cancel while the
 * sequence is waited for leaves the floor, which the end of the
 * transaction clears.
 */
int64
StreamNoteAppend(void)
{
	StreamRecord *rec;
	Oid			seq;
	int64		first;

	if (stream_recorded || !StreamAvailable() || XactReadOnly ||
		RecoveryInProgress())
		return 0;
	seq = obx_relation(STREAM_REL_SEQ, "sequence");
	rec = &stream_shared->records[ObxMyProcNumber];

	rec->dboid = MyDatabaseId;
	pg_write_barrier();
	pg_atomic_write_u64(&rec->first, (uint64) (stream_last + 1));
	stream_recorded = true;
	pg_memory_barrier();

	first = nextval_internal(seq, false);

	pg_atomic_write_u64(&rec->first, (uint64) first);
	stream_last = first;
	return first;
}

/*
 * Take the next position, as a horizon does (outbox_gap.c), and remember
 * it as the last this backend took.
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

/* A prepared transaction the horizon must ask about, copied from shmem */
typedef struct StreamPrepared
{
	int			slot;			/* its record's slot; -1 when it has none */
	TransactionId xid;
	int64		first;
} StreamPrepared;

/*
 * The horizon of this database: no position below it belongs to an append
 * in progress now, nor can one be given later.  Messages below it are all
 * visible to a snapshot taken after this returns, or never will be.
 * *taken is the position the horizon itself took: a claim position above
 * it means the sequence was set back.
 *
 * The position is taken with no lock of the extension held, the backends'
 * records are read without any, and the prepared transactions' records are
 * copied under horizon_lock (memory only) and asked about after it is
 * released.
 */
int64
StreamHorizon(int64 *taken)
{
	Oid			seq = obx_relation(STREAM_REL_SEQ, "sequence");
	int			first_prepared = ObxFirstPreparedProc;
	StreamPrepared *prepared;
	int			nprepared = 0;
	int64		horizon;
	int			i;

	horizon = nextval_internal(seq, false);
	stream_last = horizon;
	*taken = horizon;
	pg_memory_barrier();

	for (i = 0; i < first_prepared; i++)
	{
		StreamRecord *rec = &stream_shared->records[i];
		int64		first = (int64) pg_atomic_read_u64(&rec->first);

		if (first == 0)
			continue;
		pg_read_barrier();
		if (rec->dboid == MyDatabaseId && first < horizon)
			horizon = first;
	}
	if (first_prepared >= stream_shared->nrecords)
		return horizon;

	/*
	 * The prepared transactions: those with a record, and those of this
	 * database without one (made before a restart).
	 */
	prepared = palloc(sizeof(StreamPrepared) *
					  (stream_shared->nrecords - first_prepared) * 2);
	LWLockAcquire(stream_shared->horizon_lock, LW_EXCLUSIVE);
	for (i = first_prepared; i < stream_shared->nrecords; i++)
	{
		StreamRecord *rec = &stream_shared->records[i];
		int64		first = (int64) pg_atomic_read_u64(&rec->first);
		PGPROC	   *proc = &ProcGlobal->allProcs[i];
		TransactionId xid = proc->xid;

		if (first != 0)
		{
			prepared[nprepared].slot = i;
			prepared[nprepared].xid = rec->xid;
			prepared[nprepared].first = rec->dboid == MyDatabaseId ? first : 0;
			nprepared++;
		}
		if (TransactionIdIsValid(xid) && proc->databaseId == MyDatabaseId &&
			!obx_prepared_known(proc, xid))
		{
			prepared[nprepared].slot = -1;
			prepared[nprepared].xid = xid;
			prepared[nprepared].first = 0;
			nprepared++;
		}
	}
	LWLockRelease(stream_shared->horizon_lock);

	for (i = 0; i < nprepared; i++)
	{
		StreamPrepared *p = &prepared[i];

		if (TransactionIdIsInProgress(p->xid))
		{
			if (p->slot < 0)
				horizon = 0;	/* unknown: claims read from the start */
			else if (p->first > 0 && p->first < horizon)
				horizon = p->first;
			continue;
		}
		if (p->slot < 0)
			continue;

		/* committed or rolled back: its record ends, unless reused since */
		LWLockAcquire(stream_shared->horizon_lock, LW_EXCLUSIVE);
		if (stream_shared->records[p->slot].xid == p->xid)
		{
			pg_atomic_write_u64(&stream_shared->records[p->slot].first, 0);
			stream_shared->records[p->slot].xid = InvalidTransactionId;
		}
		LWLockRelease(stream_shared->horizon_lock);
	}
	pfree(prepared);
	return horizon;
}

/*
 * Whether the prepared transaction xid (of PGPROC proc) has a record: at
 * its PGPROC's slot, or still at the slot of the backend preparing it.
 */
static bool
obx_prepared_known(PGPROC *proc, TransactionId xid)
{
	int			i;

	if (pg_atomic_read_u64(&stream_shared->records[ObxProcNumber(proc)].first) != 0 &&
		stream_shared->records[ObxProcNumber(proc)].xid == xid)
		return true;
	for (i = 0; i < MaxBackends; i++)
		if (stream_shared->records[i].xid == xid &&
			pg_atomic_read_u64(&stream_shared->records[i].first) != 0)
			return true;
	return false;
}

/*
 * Take the lock of an ordering key of topic until this transaction ends:
 * a transaction that appends to a key waits for the others that did, so
 * positions, taken after the lock, follow the order of their commits.  An
 * advisory lock of this database on a 64-bit hash of the topic and the
 * key, with a field of its own (STREAM_KEY_LOCK) so as not to meet the
 * advisory locks of applications.  Two keys wait for each other only when
 * their 64-bit hashes collide: among a billion keys of a topic, about one
 * pair in 40 (a 32-bit hash of the key paired keys among a few hundred
 * thousand).
 */
void
StreamLockKey(text *topic, text *key)
{
	LOCKTAG		tag;
	uint64		topic_hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(topic),
															  VARSIZE_ANY_EXHDR(topic), 0));
	uint64		hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(key),
														VARSIZE_ANY_EXHDR(key), topic_hash));

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32), (uint32) hash,
						 STREAM_KEY_LOCK);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * The hash key of a topic of this database's outbox.message (a table made
 * anew, by DROP and CREATE EXTENSION, has other positions); false when the
 * topic is longer than CheckName allows (never one it let through).
 */
static bool
obx_key(StreamKey *key, text *topic)
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
 * The claim position of topic, 0 when none is kept; *searched says when it
 * was last searched, and *moved (unless NULL) when it last moved
 * (DT_NOBEGIN: never).
 */
int64
StreamPositionGet(text *topic, TimestampTz *searched, TimestampTz *moved)
{
	StreamKey	key;
	StreamPosition *p;
	int64		position = 0;

	*searched = DT_NOBEGIN;
	if (moved)
		*moved = DT_NOBEGIN;
	if (!StreamAvailable() || !obx_key(&key, topic))
		return 0;
	LWLockAcquire(stream_shared->position_lock, LW_SHARED);
	p = hash_search(stream_positions, &key, HASH_FIND, NULL);
	if (p)
	{
		position = p->position;
		*searched = p->searched;
		if (moved)
			*moved = p->moved;
	}
	LWLockRelease(stream_shared->position_lock);
	return position;
}

/*
 * Keep position as the claim position of topic; with only_forward, only if
 * it is ahead of the one kept (two claims may compute it at once).
 */
void
StreamPositionSet(text *topic, int64 position, bool only_forward)
{
	StreamKey	key;
	StreamPosition *p;
	bool		found;

	if (!StreamAvailable() || !obx_key(&key, topic))
		return;
	LWLockAcquire(stream_shared->position_lock, LW_EXCLUSIVE);
	p = hash_search(stream_positions, &key, HASH_FIND, NULL);
	if (!p)
	{
		if (hash_get_num_entries(stream_positions) >= STREAM_MAX_POSITIONS)
			obx_make_room();
		p = hash_search(stream_positions, &key, HASH_ENTER_NULL, &found);
		if (!p)
		{
			LWLockRelease(stream_shared->position_lock);
			return;
		}
		p->position = position;
		p->moved = GetCurrentTimestamp();
	}
	p->used = p->searched = GetCurrentTimestamp();
	if ((!only_forward || position > p->position) && position != p->position)
	{
		p->position = position;
		p->moved = p->used;
	}
	LWLockRelease(stream_shared->position_lock);
}

/* Remove the least recently used position; the lock is held exclusively. */
static void
obx_make_room(void)
{
	HASH_SEQ_STATUS status;
	StreamPosition *p;
	StreamPosition *oldest = NULL;
	StreamKey	key;

	hash_seq_init(&status, stream_positions);
	while ((p = hash_seq_search(&status)) != NULL)
		if (oldest == NULL || p->used < oldest->used)
			oldest = p;
	if (oldest == NULL)
		return;
	key = oldest->key;
	(void) hash_search(stream_positions, &key, HASH_REMOVE, NULL);
}
