/*-------------------------------------------------------------------------
 *
 * outbox_api.c
 *		The SQL-callable functions of the core API: append, claim, complete,
 *		fail, extend, retry_dead, purge, consume_once and the envelope.
 *
 * Each function checks every argument first (outbox_validate.c), reads the
 * wall clock once, and hands the work to the store (outbox_store.c).  A call
 * that fails a check has run no statement and changed nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_uuid.h"

PG_FUNCTION_INFO_V1(outbox_append);
PG_FUNCTION_INFO_V1(outbox_append_batch);
PG_FUNCTION_INFO_V1(outbox_claim);
PG_FUNCTION_INFO_V1(outbox_complete);
PG_FUNCTION_INFO_V1(outbox_complete_many);
PG_FUNCTION_INFO_V1(outbox_fail);
PG_FUNCTION_INFO_V1(outbox_extend);
PG_FUNCTION_INFO_V1(outbox_retry_dead);
PG_FUNCTION_INFO_V1(outbox_retry_dead_topic);
PG_FUNCTION_INFO_V1(outbox_purge);
PG_FUNCTION_INFO_V1(outbox_consume_once);
PG_FUNCTION_INFO_V1(outbox_envelope);
PG_FUNCTION_INFO_V1(outbox_envelope_by_id);

static ArrayType *obx_check_array(Datum value, bool isnull, const char *what,
								  Oid elemtype, int *nelems, Datum **elems);
static pg_uuid_t *obx_check_uuid(FunctionCallInfo fcinfo, int argno,
								 const char *what);
static TimestampTz obx_purge_horizon(TimestampTz now, Interval *older);

/* A uuid argument that must not be NULL. */
static pg_uuid_t *
obx_check_uuid(FunctionCallInfo fcinfo, int argno, const char *what)
{
	CheckNotNull(PG_ARGISNULL(argno), what);
	return PG_GETARG_UUID_P(argno);
}

/*
 * A one-dimensional array argument without NULL elements; sets the element
 * count and the elements.
 */
static ArrayType *
obx_check_array(Datum value, bool isnull, const char *what, Oid elemtype,
				int *nelems, Datum **elems)
{
	ArrayType  *arr;
	bool	   *nulls;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			i;

	CheckNotNull(isnull, what);
	arr = DatumGetArrayTypeP(value);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign,
					  elems, &nulls, nelems);
	for (i = 0; i < *nelems; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", what),
					 errdetail("Element %d is null.", i + 1)));
	return arr;
}

/* A timestamp to wait for: must be finite. */
static TimestampTz
obx_check_available_at(FunctionCallInfo fcinfo, int argno, TimestampTz now)
{
	TimestampTz ts;

	if (PG_ARGISNULL(argno))
		return now;
	ts = PG_GETARG_TIMESTAMPTZ(argno);
	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("available_at must be a finite timestamp"),
				 errhint("Pass NULL to make the message available at once.")));
	return ts;
}

/*
 * outbox.append(topic, type, payload, id, available_at) returns uuid
 *
 * Appends a message in the caller's transaction; with a given id, a repeat
 * with the same content is a no-op that returns the id.
 */
Datum
outbox_append(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *type = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "type");
	Jsonb	   *payload;
	pg_uuid_t  *id;
	bool		is_new = PG_ARGISNULL(3);
	TimestampTz available_at;

	CheckNotNull(PG_ARGISNULL(2), "payload");
	payload = PG_GETARG_JSONB_P(2);
	available_at = obx_check_available_at(fcinfo, 4, now);

	if (is_new)
	{
		id = palloc(sizeof(pg_uuid_t));
		GenerateUuidV7(id);
	}
	else
		id = PG_GETARG_UUID_P(3);

	StoreAppend(topic, type, payload, id, is_new, available_at);
	WakeWorkerForTopic(topic);
	PG_RETURN_UUID_P(id);
}

/*
 * outbox.append_batch(topic, type, payloads jsonb[]) returns setof uuid
 *
 * One message per element, in array order, with increasing new ids.
 */
Datum
outbox_append_batch(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *type = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "type");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *payloads;
	Datum	   *elems;
	Datum	   *ids;
	int			n;
	int			i;

	payloads = obx_check_array(PG_GETARG_DATUM(2), PG_ARGISNULL(2), "payloads",
							   JSONBOID, &n, &elems);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (n == 0)
		PG_RETURN_NULL();

	ids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

		GenerateUuidV7(id);
		ids[i] = UUIDPGetDatum(id);
	}

	StoreAppendBatch(topic, type,
					 PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN,
													 false, TYPALIGN_CHAR)),
					 PointerGetDatum(payloads), now);
	WakeWorkerForTopic(topic);

	for (i = 0; i < n; i++)
	{
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &ids[i], &isnull);
	}
	PG_RETURN_NULL();
}

/*
 * outbox.claim(owner, topic, batch_size, lease_seconds) returns setof
 * outbox.message
 */
Datum
outbox_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ClaimRequest req;

	req.now = GetCurrentTimestamp();
	req.owner = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "owner");
	req.topic = PG_ARGISNULL(1) ? NULL :
		CheckName(PG_GETARG_DATUM(1), false, "topic");
	req.batch_size = CheckBatchSize(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	req.lease_seconds = CheckLeaseSeconds(PG_GETARG_DATUM(3), PG_ARGISNULL(3));
	req.max_attempts = outbox_max_attempts;

	InitMaterializedSRF(fcinfo, 0);
	StoreClaim(&req, rsinfo->setDesc, rsinfo->setResult, NULL);
	PG_RETURN_NULL();
}

/* outbox.complete(id, owner) returns boolean */
Datum
outbox_complete(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = obx_check_uuid(fcinfo, 0, "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");

	PG_RETURN_BOOL(StoreComplete(UUIDPGetDatum(id), false, owner, now) > 0);
}

/* outbox.complete_many(ids, owner) returns integer */
Datum
outbox_complete_many(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	ArrayType  *ids;
	text	   *owner;
	Datum	   *elems;
	int			n;

	ids = obx_check_array(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "ids", UUIDOID,
						  &n, &elems);
	owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	if (n == 0)
		PG_RETURN_INT32(0);

	PG_RETURN_INT32((int32) StoreComplete(PointerGetDatum(ids), true, owner, now));
}

/* outbox.fail(id, owner, error) returns boolean */
Datum
outbox_fail(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = obx_check_uuid(fcinfo, 0, "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	text	   *error;

	CheckNotNull(PG_ARGISNULL(2), "error");
	error = PG_GETARG_TEXT_PP(2);
	if (VARSIZE_ANY_EXHDR(error) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("error must not be empty"),
				 errhint("Pass the text of the failure, so that an operator can tell why the delivery failed.")));
	error = ClipErrorText(VARDATA_ANY(error), VARSIZE_ANY_EXHDR(error));

	PG_RETURN_BOOL(StoreFail(id, owner, error, now));
}

/* outbox.extend(id, owner, lease_seconds) returns boolean */
Datum
outbox_extend(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = obx_check_uuid(fcinfo, 0, "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	int			lease = CheckLeaseSeconds(PG_GETARG_DATUM(2), PG_ARGISNULL(2));

	PG_RETURN_BOOL(StoreExtend(id, owner, lease, now));
}

/* outbox.retry_dead(id) returns boolean */
Datum
outbox_retry_dead(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = obx_check_uuid(fcinfo, 0, "id");

	if (StoreRetryDead(id, NULL, now) == 0)
		PG_RETURN_BOOL(false);
	WakeWorkerAtCommit();
	PG_RETURN_BOOL(true);
}

/* outbox.retry_dead_topic(topic) returns bigint */
Datum
outbox_retry_dead_topic(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");

	int64		revived = StoreRetryDead(NULL, topic, now);

	if (revived > 0)
		WakeWorkerAtCommit();
	PG_RETURN_INT64(revived);
}

/*
 * now - older_than, as PostgreSQL computes it (months by the calendar).  An
 * interval is negative when it is with months counted as 30 days, a rule
 * that does not depend on today's date; such an interval is refused.  A
 * horizon before the earliest timestamp keeps everything (DT_NOBEGIN), and
 * one that the calendar puts after now (say '1 mon -30 days' at the end of
 * a long month) is now.  The subtraction runs in a subtransaction because
 * PostgreSQL reports its overflow only as an error; purge is rare enough
 * for that.
 */
static TimestampTz
obx_purge_horizon(TimestampTz now, Interval *older)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile TimestampTz horizon = 0;
	double		span;

	span = (double) older->time +
		((double) older->day + (double) older->month * DAYS_PER_MONTH) *
		(double) USECS_PER_DAY;
	if (span < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative"),
				 errhint("Pass an interval such as '7 days', or NULL for %s.",
						 "outbox.retention_days")));

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		horizon = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
														  TimestampTzGetDatum(now),
														  PointerGetDatum(older)));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_DATETIME_VALUE_OUT_OF_RANGE)
			ReThrowError(edata);
		FreeErrorData(edata);
		horizon = DT_NOBEGIN;	/* a positive span beyond the range */
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;

	return Min(horizon, now);
}

/*
 * outbox.purge(older_than, max_rows) returns bigint
 *
 * The horizon is now - older_than (default outbox.retention_days days).  A
 * horizon beyond the range of timestamps keeps everything.
 */
Datum
outbox_purge(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz horizon;
	int64		max_rows = -1;

	if (PG_ARGISNULL(0))
		horizon = now - (int64) outbox_retention_days * USECS_PER_DAY;
	else
		horizon = obx_purge_horizon(now, PG_GETARG_INTERVAL_P(0));

	if (!PG_ARGISNULL(1))
	{
		max_rows = PG_GETARG_INT64(1);
		if (max_rows < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_rows " INT64_FORMAT " is out of range", max_rows),
					 errdetail("max_rows must be at least 1, or NULL to purge every finished message.")));
	}

	PG_RETURN_INT64(StorePurge(horizon, max_rows));
}

/* outbox.consume_once(consumer, message_id) returns boolean */
Datum
outbox_consume_once(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *consumer = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "consumer");
	pg_uuid_t  *message_id = obx_check_uuid(fcinfo, 1, "message_id");

	PG_RETURN_BOOL(StoreConsumeOnce(consumer, message_id, now));
}

/* outbox.envelope(m outbox.message) returns jsonb */
Datum
outbox_envelope(PG_FUNCTION_ARGS)
{
	HeapTupleHeader row;
	static const char *const cols[] = {"id", "event_type", "created_at", "payload"};
	Datum		v[4];
	int			i;

	CheckNotNull(PG_ARGISNULL(0), "message");
	row = PG_GETARG_HEAPTUPLEHEADER(0);
	for (i = 0; i < lengthof(cols); i++)
	{
		bool		isnull;

		v[i] = GetAttributeByName(row, cols[i], &isnull);
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("message %s must not be null", cols[i])));
	}

	PG_RETURN_JSONB_P(BuildEnvelope(DatumGetUUIDP(v[0]), DatumGetTextPP(v[1]),
									DatumGetTimestampTz(v[2]),
									DatumGetJsonbP(v[3])));
}

/* outbox.envelope_by_id(id) returns jsonb, NULL when there is no such message */
Datum
outbox_envelope_by_id(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *id = obx_check_uuid(fcinfo, 0, "id");
	Jsonb	   *env = StoreEnvelopeById(id);

	if (env == NULL)
		PG_RETURN_NULL();
	PG_RETURN_JSONB_P(env);
}
