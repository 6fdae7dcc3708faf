/*-------------------------------------------------------------------------
 *
 * outbox_store.c
 *		The statements that write and read outbox.message and
 *		outbox.processed, except the claims (outbox_store_claim.c) and
 *		purge (outbox_store_purge.c).
 *
 * The SQL-callable functions (outbox_api.c), drain_once and the background
 * worker all go through here, so a rule (who may complete, what is due, how
 * a failure is retried) is written exactly once.  Each statement is a
 * SavedStatement run through outbox_spi.c, which also says under which
 * planner settings they run.  All names are schema-qualified, operators
 * included, so no search_path can change what a statement does.
 *
 * Callers pass the wall-clock time of the call ("now") so that one call uses
 * one instant for leases, backoff and timestamps, whatever the transaction's
 * start time.
 *
 * Glossary:
 *	owner		the lease owner, the name a claimer gives and must repeat
 *	marker		a row of outbox.processed, left by consume_once
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_backoff.h"
#include "outbox_spi.h"
#include "outbox_store.h"
#include "outbox_stream.h"
#include "outbox_subs.h"

/* The ownership test shared by complete, fail, extend and release */
#define LEASE_HELD_BY_OWNER \
	"lease_owner OPERATOR(pg_catalog.=) $2 AND leased_until IS NOT NULL " \
	"AND delivered_at IS NULL AND dead_at IS NULL"

/*
 * Statements that write the columns of 1.2 (deferred) come in two
 * versions, [1] for the tables of 1.2 and [0] for those of 1.0 and 1.1, so
 * that a database not yet updated with ALTER EXTENSION keeps working with
 * this library (obx_v).  Both take the same parameters.
 */
/* The columns an append writes, from the parameters of obx_append_args */
#define APPEND_INSERT(v) \
	"INSERT INTO outbox.message (id, topic, event_type, payload, created_at, available_at" \
	v ") "

#define APPEND_ARGTYPES \
	9, {UUIDOID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, TEXTOID, INT8OID}

/*
 * The columns of 1.2: $9 is the position that StreamNoteAppend took for
 * this transaction's first message, which takes it; the others take the
 * next one from the sequence, as the column's default would.
 */
#define APPEND_COLUMNS_12 ", deferred, ordering_key, seq"
#define APPEND_VALUES_12 ", $7, $8, COALESCE($9," \
	" pg_catalog.nextval('outbox.message_seq'::pg_catalog.regclass))"

/* A new id cannot conflict: no ON CONFLICT, no speculative insertion */
#define APPEND_NEW(v, p) { \
	APPEND_INSERT(v) "VALUES ($1, $2, $3, $4, $5, $6" p ")", \
	SPI_OK_INSERT, APPEND_ARGTYPES, OBX_SCANS_ANY }
SAVED_STATEMENTS(stmt_append_new, 2) = {
	APPEND_NEW("", ""), APPEND_NEW(APPEND_COLUMNS_12, APPEND_VALUES_12)
};

#define APPEND_ID(v, p) { \
	APPEND_INSERT(v) "VALUES ($1, $2, $3, $4, $5, $6" p ") ON CONFLICT (id) DO NOTHING", \
	SPI_OK_INSERT, APPEND_ARGTYPES, OBX_SCANS_ANY }
SAVED_STATEMENTS(stmt_append, 2) = {
	APPEND_ID("", ""), APPEND_ID(APPEND_COLUMNS_12, APPEND_VALUES_12)
};

/*
 * Whether the stored message of an id has the topic, type and payload of a
 * repeat, and its ordering key (the tables of 1.0 and 1.1 have none).
 */
#define APPEND_SAME(key) { \
	"SELECT topic OPERATOR(pg_catalog.=) $2 AND event_type OPERATOR(pg_catalog.=) $3" \
	" AND payload OPERATOR(pg_catalog.=) $4, " key " " \
	"FROM outbox.message WHERE id OPERATOR(pg_catalog.=) $1", \
	SPI_OK_SELECT, \
	4, {UUIDOID, TEXTOID, TEXTOID, JSONBOID} }
SAVED_STATEMENTS(stmt_append_same, 2) = {
	APPEND_SAME("NULL::pg_catalog.text"), APPEND_SAME("ordering_key")
};

#define APPEND_BATCH(v, p) { \
	APPEND_INSERT(v) "SELECT u.id, $2, $3, u.payload, $5, $6" p " " \
	"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($4)) WITH ORDINALITY AS u(id, payload, n) " \
	"ORDER BY u.n", \
	SPI_OK_INSERT, \
	7, {UUIDARRAYOID, TEXTOID, TEXTOID, JSONBARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID} }
SAVED_STATEMENTS(stmt_append_batch, 2) = {
	APPEND_BATCH("", ""), APPEND_BATCH(", deferred, ordering_key", ", false, $7")
};

/*
 * Completion sets deferred to false in the tables of 1.2, so that a
 * delivered message leaves the deferred indexes; for a fresh message the
 * value does not change, and the update stays HOT (no index names
 * delivered_at, leased_until or last_error).  A delivered message has no
 * last_error: the error of an earlier attempt is cleared, so that
 * last_error IS NOT NULL means "failing now" (the server log keeps every
 * failed attempt).
 */
#define COMPLETE(v, which, type) { \
	"UPDATE outbox.message SET delivered_at = $3, leased_until = NULL," \
	" last_error = NULL" v " " \
	"WHERE id OPERATOR(pg_catalog.=) " which " AND " LEASE_HELD_BY_OWNER, \
	SPI_OK_UPDATE, \
	3, {type, TEXTOID, TIMESTAMPTZOID} }
SAVED_STATEMENTS(stmt_complete, 2) = {
	COMPLETE("", "$1", UUIDOID), COMPLETE(", deferred = false", "$1", UUIDOID)
};
SAVED_STATEMENTS(stmt_complete_many, 2) = {
	COMPLETE("", "ANY ($1)", UUIDARRAYOID),
	COMPLETE(", deferred = false", "ANY ($1)", UUIDARRAYOID)
};

SAVED_STATEMENT(stmt_fail_lock) = {
	"SELECT attempts FROM outbox.message "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND " LEASE_HELD_BY_OWNER " FOR UPDATE",
	SPI_OK_SELECT,
	2, {UUIDOID, TEXTOID}
};

/* $3 is the next available_at (NULL when dead), $4 dead_at (NULL unless dead) */
#define FAIL_UPDATE(v) { \
	"UPDATE outbox.message SET leased_until = NULL, last_error = $2," \
	" available_at = COALESCE($3, available_at), dead_at = $4" v " " \
	"WHERE id OPERATOR(pg_catalog.=) $1", \
	SPI_OK_UPDATE, \
	4, {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID} }
SAVED_STATEMENTS(stmt_fail_update, 2) = {
	FAIL_UPDATE(""), FAIL_UPDATE(", deferred = true")
};

SAVED_STATEMENT(stmt_extend) = {
	"UPDATE outbox.message SET leased_until = $3 "
	"WHERE id OPERATOR(pg_catalog.=) $1 AND " LEASE_HELD_BY_OWNER,
	SPI_OK_UPDATE,
	3, {UUIDOID, TEXTOID, TIMESTAMPTZOID}
};

/* Give back leases not used: the attempt did not happen */
SAVED_STATEMENT(stmt_release) = {
	"UPDATE outbox.message SET leased_until = NULL,"
	" attempts = pg_catalog.int4larger(attempts OPERATOR(pg_catalog.-) 1, 0) "
	"WHERE id OPERATOR(pg_catalog.=) ANY ($1) AND " LEASE_HELD_BY_OWNER,
	SPI_OK_UPDATE,
	2, {UUIDARRAYOID, TEXTOID}
};

/*
 * Take back a delivery of StoreClaimDelivered that could not be made.  The
 * message may lie before the claim position: in the tables of 1.2 it
 * becomes deferred, so that claims find it by its index.
 */
#define UNDELIVER(v) { \
	"UPDATE outbox.message SET delivered_at = NULL, leased_until = $3" v " " \
	"WHERE id OPERATOR(pg_catalog.=) $1 AND lease_owner OPERATOR(pg_catalog.=) $2" \
	" AND delivered_at IS NOT NULL", \
	SPI_OK_UPDATE, \
	3, {UUIDOID, TEXTOID, TIMESTAMPTZOID} }
SAVED_STATEMENTS(stmt_undeliver, 2) = {
	UNDELIVER(""), UNDELIVER(", deferred = true")
};

/* Revive: $2 is the new available_at */
#define RETRY_DEAD(v, which, type) { \
	"UPDATE outbox.message SET dead_at = NULL, attempts = 0, available_at = $2," \
	" leased_until = NULL" v " " \
	"WHERE " which " OPERATOR(pg_catalog.=) $1 AND dead_at IS NOT NULL AND delivered_at IS NULL", \
	SPI_OK_UPDATE, \
	2, {type, TIMESTAMPTZOID} }
SAVED_STATEMENTS(stmt_retry_dead, 2) = {
	RETRY_DEAD("", "id", UUIDOID), RETRY_DEAD(", deferred = true", "id", UUIDOID)
};
SAVED_STATEMENTS(stmt_retry_dead_topic, 2) = {
	RETRY_DEAD("", "topic", TEXTOID), RETRY_DEAD(", deferred = true", "topic", TEXTOID)
};

SAVED_STATEMENT(stmt_consume_once) = {
	"INSERT INTO outbox.processed (consumer, message_id, processed_at) "
	"VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING",
	SPI_OK_INSERT,
	3, {TEXTOID, UUIDOID, TIMESTAMPTZOID},
	OBX_SCANS_ANY
};

SAVED_STATEMENT(stmt_envelope_by_id) = {
	"SELECT id, event_type, created_at, payload FROM outbox.message "
	"WHERE id OPERATOR(pg_catalog.=) $1",
	SPI_OK_SELECT,
	1, {UUIDOID}
};

static int	obx_v(void);
static int64 obx_append_begin(text *topic, text *ordering_key);
static void obx_append_args(Datum *args, char *nulls, text *topic,
							text *event_type, Jsonb *payload, pg_uuid_t *id,
							TimestampTz available_at, bool deferred,
							text *ordering_key);
static void obx_append_row(Datum *args, char *nulls, text *topic,
						   text *event_type, Datum payload, Datum id,
						   TimestampTz available_at, bool deferred,
						   text *ordering_key, int64 position);

/* Which version of the two-version statements the tables need: 1 for 1.2. */
static int
obx_v(void)
{
	return StreamSchema() ? 1 : 0;
}

/*
 * Before an append: with an ordering key, wait for every other transaction
 * that appended to the key to end, so that the key's messages take their
 * positions in the order their transactions commit; then open the append's
 * gap (GapBegin) and, for the transaction's first message, take its
 * position (StreamNoteAppend).  Returns that position, or 0.
 */
static int64
obx_append_begin(text *topic, text *ordering_key)
{
	StreamNoteTopic(topic);		/* for claims across all topics, at commit */
	KeyLockTake(topic, ordering_key);	/* until the row is in: KeyLockRelease */
	GapBegin();					/* until the row is in: GapEnd */
	return StreamNoteAppend();
}

/*
 * The parameters of the single-message appends; deferred when the caller
 * gave an available_at still ahead (see the deferred column).
 */
static void
obx_append_args(Datum *args, char *nulls, text *topic, text *event_type,
				Jsonb *payload, pg_uuid_t *id, TimestampTz available_at,
				bool deferred, text *ordering_key)
{
	int64		position = obx_append_begin(topic, ordering_key);

	obx_append_row(args, nulls, topic, event_type, JsonbPGetDatum(payload),
				   UUIDPGetDatum(id), available_at, deferred, ordering_key,
				   position);
}

/*
 * The parameters of one message, at position (0: the next one from the
 * sequence).
 */
static void
obx_append_row(Datum *args, char *nulls, text *topic, text *event_type,
			   Datum payload, Datum id, TimestampTz available_at,
			   bool deferred, text *ordering_key, int64 position)
{
	memset(nulls, ' ', APPEND_NCOLUMNS);
	args[0] = id;
	args[1] = PointerGetDatum(topic);
	args[2] = PointerGetDatum(event_type);
	args[3] = payload;
	args[4] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	args[5] = TimestampTzGetDatum(available_at);
	args[6] = BoolGetDatum(deferred);
	args[7] = PointerGetDatum(ordering_key);
	nulls[7] = ordering_key ? ' ' : 'n';
	args[8] = Int64GetDatum(position);
	nulls[8] = position > 0 ? ' ' : 'n';
}

/* Are two ordering keys (NULL: none) the same, byte for byte? */
static bool
obx_same_key(text *a, text *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * Insert one message with an id the caller chose, which may exist already:
 * a repeat with the same content and ordering key is accepted (idempotent
 * append), the same id with other content or another key is an error.  A
 * repeat under another key would leave the message in the order of the
 * first key while the caller counts on the second, so it is not taken as a
 * repeat.  The stored message is read only when the insert found the id.
 *
 * ON CONFLICT DO NOTHING waits for a concurrent insert of the same id, so
 * two open transactions appending the same message end with one row and no
 * error.  If the conflicting row disappears before it can be compared (a
 * concurrent purge), the insert is simply tried again.
 */
void
StoreAppend(text *topic, text *event_type, Jsonb *payload, pg_uuid_t *id,
			TimestampTz available_at, bool deferred, text *ordering_key)
{
	Datum		args[9];
	char		nulls[9];
	int			tries;

	obx_append_args(args, nulls, topic, event_type, payload, id, available_at,
					deferred, ordering_key);

	SpiConnect();
	for (tries = 0;; tries++)
	{
		bool		isnull;
		Datum		same;
		Datum		stored;
		text	   *stored_key;

		if (SpiExecute(&stmt_append[obx_v()], args, nulls, false, 0) == 1)
			break;

		/* the id exists: an idempotent repeat, or a conflict */
		if (SpiExecute(&stmt_append_same[obx_v()], args, NULL, false, 1) == 0)
		{
			if (tries < 3)
				continue;
			elog(ERROR, "message %s vanished during append",
				 DatumGetCString(DirectFunctionCall1(uuid_out, args[0])));
		}
		same = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
							 &isnull);
		if (isnull || !DatumGetBool(same))
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("message \"%s\" already exists with a different topic, type or payload",
							DatumGetCString(DirectFunctionCall1(uuid_out, args[0]))),
					 errdetail("Appending an existing id again is accepted only with the same topic, type, payload and ordering key."),
					 errhint("Use a new id for a new event.")));
		stored = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
							   &isnull);
		stored_key = isnull ? NULL : DatumGetTextPP(stored);
		if (!obx_same_key(stored_key, ordering_key))
		{
			const char *idtext = DatumGetCString(DirectFunctionCall1(uuid_out, args[0]));

			if (stored_key == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_UNIQUE_VIOLATION),
						 errmsg("message \"%s\" already exists with a different ordering key", idtext),
						 errdetail("The stored message has no ordering key."),
						 errhint("Use a new id for a new event.")));
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("message \"%s\" already exists with a different ordering key", idtext),
					 errdetail("The stored message has ordering key \"%s\".",
							   text_to_cstring(stored_key)),
					 errhint("Use a new id for a new event.")));
		}
		break;
	}
	SpiFinish();
	GapEnd();
	KeyLockRelease();
}

/*
 * Insert one message whose id was just generated, so cannot conflict:
 * directly into the table (outbox_store_append.c), or by the saved INSERT
 * when the table needs the executor.
 */
void
StoreAppendNew(text *topic, text *event_type, Jsonb *payload, pg_uuid_t *id,
			   TimestampTz available_at, bool deferred, text *ordering_key)
{
	Datum		args[APPEND_NCOLUMNS];
	char		nulls[APPEND_NCOLUMNS];

	obx_append_args(args, nulls, topic, event_type, payload, id, available_at,
					deferred, ordering_key);
	if (!AppendDirect(args, nulls))
		(void) SpiRun(&stmt_append_new[obx_v()], args, nulls);
	GapEnd();
	KeyLockRelease();
}

/*
 * Insert one message per element of payloads, with the ids given in ids
 * (uuid[] of the same length), in array order, with ordering_key (or none).
 * The ids were just generated, so each message goes in as StoreAppendNew's
 * does: directly, the first one at the position the transaction took.
 * When the table needs the executor, the saved INSERT … SELECT writes them
 * all (or, from the second message on, the single INSERT writes that one,
 * or raises the error of a row a constraint refuses).
 */
void
StoreAppendBatch(text *topic, text *event_type, ArrayType *ids,
				 ArrayType *payloads, TimestampTz available_at,
				 text *ordering_key)
{
	Datum		args[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int64		position = obx_append_begin(topic, ordering_key);
	Datum	   *idv;
	Datum	   *payloadv;
	int			nids;
	int			npayloads;
	int			i;

	deconstruct_array(ids, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &idv, NULL, &nids);
	deconstruct_array(payloads, JSONBOID, -1, false, TYPALIGN_INT,
					  &payloadv, NULL, &npayloads);
	Assert(nids == npayloads);
	for (i = 0; i < nids; i++)
	{
		Datum		row[APPEND_NCOLUMNS];
		char		rownulls[APPEND_NCOLUMNS];

		obx_append_row(row, rownulls, topic, event_type, payloadv[i], idv[i],
					   available_at, false, ordering_key,
					   i == 0 ? position : 0);
		if (AppendDirect(row, rownulls))
			continue;
		if (i == 0)
			break;				/* all of them by the INSERT … SELECT */
		(void) SpiRun(&stmt_append_new[obx_v()], row, rownulls);
	}
	if (i == nids)
	{
		GapEnd();
		KeyLockRelease();
		return;
	}

	args[0] = PointerGetDatum(ids);
	args[1] = PointerGetDatum(topic);
	args[2] = PointerGetDatum(event_type);
	args[3] = PointerGetDatum(payloads);
	args[4] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	args[5] = TimestampTzGetDatum(available_at);
	args[6] = PointerGetDatum(ordering_key);
	nulls[6] = ordering_key ? ' ' : 'n';
	(void) SpiRun(&stmt_append_batch[obx_v()], args, nulls);
	GapEnd();
	KeyLockRelease();
}

/* Mark delivered the message id if owner holds it; false when it does not. */
bool
StoreComplete(pg_uuid_t *id, text *owner, TimestampTz now)
{
	Datum		args[3];

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(owner);
	args[2] = TimestampTzGetDatum(now);
	return SpiRun(&stmt_complete[obx_v()], args, NULL) > 0;
}

/*
 * Mark delivered the messages of ids (a uuid[]) that owner holds.  Returns
 * the number marked.
 */
int64
StoreCompleteMany(ArrayType *ids, text *owner, TimestampTz now)
{
	Datum		args[3];

	args[0] = PointerGetDatum(ids);
	args[1] = PointerGetDatum(owner);
	args[2] = TimestampTzGetDatum(now);
	return (int64) SpiRun(&stmt_complete_many[obx_v()], args, NULL);
}

/*
 * Record a failed delivery by the lease owner.  The lease ends; the message
 * waits for its backoff delay, or is dead when it used its last attempt.
 * Returns false, changing nothing, when owner does not hold the message.
 */
bool
StoreFail(pg_uuid_t *id, text *owner, text *error, TimestampTz now)
{
	return StoreFailAt(id, owner, error, now, 0, false);
}

/*
 * StoreFail, with the time of the next attempt given (retry_at; 0: the
 * backoff's), or the message dead at once (dead).  A retry is never later
 * than outbox.backoff_max_seconds from now, and a message that used its
 * last attempt is dead whatever retry_at says.
 */
bool
StoreFailAt(pg_uuid_t *id, text *owner, text *error, TimestampTz now,
			TimestampTz retry_at, bool dead)
{
	Datum		args[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;
	int32		attempts;

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(owner);

	SpiConnect();
	if (SpiExecute(&stmt_fail_lock, args, NULL, false, 1) == 0)
	{
		SpiFinish();
		return false;
	}
	attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));

	args[1] = PointerGetDatum(error);
	if (attempts >= outbox_max_attempts || dead)
	{
		nulls[2] = 'n';
		args[3] = TimestampTzGetDatum(now);
	}
	else
	{
		int64		delay = BackoffDelaySeconds(attempts, outbox_backoff_seconds,
												outbox_backoff_max_seconds);
		TimestampTz next = now + delay * USECS_PER_SEC;

		if (retry_at != 0)
			next = Max(now, Min(retry_at, now +
								(int64) outbox_backoff_max_seconds * USECS_PER_SEC));
		args[2] = TimestampTzGetDatum(next);
		nulls[3] = 'n';
	}
	(void) SpiExecute(&stmt_fail_update[obx_v()], args, nulls, false, 0);
	SpiFinish();

	/*
	 * last_error keeps the latest failure only, and a later delivery clears
	 * it: the server log keeps each failed attempt.
	 */
	ereport(LOG,
			(errmsg("outbox message %s failed attempt %d of %d: %s",
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id))),
					attempts, outbox_max_attempts, text_to_cstring(error)),
			 errhidestmt(true)));
	return true;
}

/* Push the lease that owner holds on id to now + lease_seconds. */
bool
StoreExtend(pg_uuid_t *id, text *owner, int lease_seconds, TimestampTz now)
{
	Datum		args[3];

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(owner);
	args[2] = TimestampTzGetDatum(now + (int64) lease_seconds * USECS_PER_SEC);
	return SpiRun(&stmt_extend, args, NULL) > 0;
}

/*
 * Give back the leases owner holds on ids (a uuid[]) without counting the
 * attempt: the messages are due again at once.  Returns how many were
 * released.
 */
int64
StoreRelease(ArrayType *ids, text *owner)
{
	Datum		args[2];

	args[0] = PointerGetDatum(ids);
	args[1] = PointerGetDatum(owner);
	return (int64) SpiRun(&stmt_release, args, NULL);
}

/*
 * Take back the delivery of a message claimed by StoreClaimDelivered that
 * could not be delivered: it is leased to owner until lease_end again, so
 * that StoreFail can record the failure.
 */
void
StoreUndeliver(pg_uuid_t *id, text *owner, TimestampTz lease_end)
{
	Datum		args[3];

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(owner);
	args[2] = TimestampTzGetDatum(lease_end);
	(void) SpiRun(&stmt_undeliver[obx_v()], args, NULL);
}

/* Revive the dead message id, due at now; false when it is not dead. */
bool
StoreRetryDead(pg_uuid_t *id, TimestampTz now)
{
	Datum		args[2];

	args[0] = UUIDPGetDatum(id);
	args[1] = TimestampTzGetDatum(now);
	return SpiRun(&stmt_retry_dead[obx_v()], args, NULL) > 0;
}

/* Revive every dead message of topic, due at now.  Returns how many. */
int64
StoreRetryDeadTopic(text *topic, TimestampTz now)
{
	Datum		args[2];

	args[0] = PointerGetDatum(topic);
	args[1] = TimestampTzGetDatum(now);
	return (int64) SpiRun(&stmt_retry_dead_topic[obx_v()], args, NULL);
}

/*
 * Record that consumer processed message_id.  Returns true when the marker
 * is new.  A concurrent call for the same pair waits for this transaction:
 * it gets false if this one commits and true if it rolls back.
 */
bool
StoreConsumeOnce(text *consumer, pg_uuid_t *message_id, TimestampTz now)
{
	Datum		args[3];

	args[0] = PointerGetDatum(consumer);
	args[1] = UUIDPGetDatum(message_id);
	args[2] = TimestampTzGetDatum(now);
	return SpiRun(&stmt_consume_once, args, NULL) == 1;
}

/*
 * Read the columns of the message id that its envelope is made of into
 * *row, in the caller's memory context.  False when there is no such
 * message.
 */
bool
StoreEnvelopeById(pg_uuid_t *id, EnvelopeRow *row)
{
	Datum		args[1];
	Datum		cols[4];
	bool		nulls[4];

	args[0] = UUIDPGetDatum(id);
	if (!SpiRunFirstRow(&stmt_envelope_by_id, args, NULL, cols, nulls,
						lengthof(cols)))
		return false;

	/* every one of these columns is NOT NULL */
	memcpy(&row->id, DatumGetUUIDP(cols[0]), sizeof(pg_uuid_t));
	row->event_type = DatumGetTextPP(cols[1]);
	row->created_at = DatumGetTimestampTz(cols[2]);
	row->payload = DatumGetJsonbP(cols[3]);
	return true;
}
